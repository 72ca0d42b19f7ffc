"""Fuzz settings: at least 10,000 cases per target (issue 6), no deadline (CI machines vary),
no example database (a fresh CI clone has none, and writing it costs time). Hypothesis costs
well under a millisecond per case, so each target does one cheap thing per case: strategies
are kept flat, valid inputs are built once at import, and one case feeds every decoder.
RETENTIOND_FUZZ_EXAMPLES raises (or, locally, lowers) the count."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("RETENTIOND_FUZZ_EXAMPLES", "10000"))

settings.register_profile(
    "fuzz",
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ = settings.get_profile("fuzz")


def scratch_dir(prefix: str) -> Path:
    """Where cases write their files: memory (/dev/shm) when there is one, so 10,000 writes
    cost microseconds each instead of a disk's journal commits."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))
