"""What a file was when it was planned, so that the unlink can tell it is still that file.

Every store kind records a ``FileIdentity`` for each file it plans to delete; the executor
compares it with a fresh ``stat`` just before the unlink, and a held-file record compares it to
tell a new file under an old name from the one first attempted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """Enough to tell, just before an unlink, that the file is still the one we decided on."""

    ino: int
    dev: int
    size: int
    mtime_ns: int

    @property
    def mtime_ms(self) -> int:
        # java.io.File.lastModified(): milliseconds, truncated (spec §4.18)
        return self.mtime_ns // 1_000_000


def identity_of(st: os.stat_result) -> FileIdentity:
    return FileIdentity(st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)
