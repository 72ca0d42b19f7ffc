"""Where the journal lives when the configuration does not say: off the store's filesystem.

A journal on the store's filesystem fills up exactly when the cleaner is needed most. The
default is therefore the first of these that is *not* on a filesystem the store uses, or the
first of them when all are:

1. ``$STATE_DIRECTORY/journal`` (systemd's ``StateDirectory=``), else
   ``/var/lib/retentiond/journal``;
2. ``$LOGS_DIRECTORY/journal`` (systemd's ``LogsDirectory=``), else
   ``/var/log/retentiond/journal`` — ``/var/log`` is often a filesystem of its own.

A candidate counts only if it exists or its nearest existing parent is writable, so the choice
does not depend on creating directories we could not use. The decision is a pure function of
the filesystem layout, so it is stable from one start to the next (reconciliation and
shipping must find the same directory again). A journal that still shares the store's
filesystem works: on a full disk its records are held in memory (see ``journal.spool``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

STATE_DEFAULT = Path("/var/lib/retentiond/journal")
LOGS_DEFAULT = Path("/var/log/retentiond/journal")


def _device(path: Path) -> int | None:
    """st_dev of ``path`` or of its nearest existing ancestor."""
    for p in (path, *path.parents):
        try:
            return os.stat(p).st_dev
        except OSError:
            continue
    return None


def _usable(path: Path) -> bool:
    if path.is_dir():
        return os.access(path, os.W_OK | os.X_OK)
    for p in path.parents:
        if p.exists():
            return p.is_dir() and os.access(p, os.W_OK | os.X_OK)
    return False


def store_devices(store_dirs: Iterable[str | Path]) -> set[int]:
    """The filesystems a store's directories live on."""
    devices = set()
    for p in store_dirs:
        dev = _device(Path(p))
        if dev is not None:
            devices.add(dev)
    return devices


def candidates(env: dict[str, str] | None = None) -> list[Path]:
    env = dict(os.environ) if env is None else env
    state = env.get("STATE_DIRECTORY")
    logs = env.get("LOGS_DIRECTORY")
    return [
        Path(state.split(":")[0]) / "journal" if state else STATE_DEFAULT,
        Path(logs.split(":")[0]) / "journal" if logs else LOGS_DEFAULT,
    ]


def choose(options: Iterable[Path], store_devs: set[int]) -> Path:
    """The first usable option off the store's filesystems; else the first option."""
    options = list(options)
    for p in options:
        dev = _device(p)
        if dev is not None and dev not in store_devs and _usable(p):
            return p
    return options[0]


def default_journal_dir(
    store_dirs: Iterable[str | Path], env: dict[str, str] | None = None
) -> Path:
    return choose(candidates(env), store_devices(store_dirs))


def shares_store_filesystem(journal_dir: Path, store_dirs: Iterable[str | Path]) -> bool:
    dev = _device(Path(journal_dir))
    return dev is not None and dev in store_devices(store_dirs)


def unusable(directory: Path) -> str | None:
    """Why the journal could not be opened in ``directory`` (None: it could), found without
    creating anything: the directory, if it exists, must be a writable directory; else its
    nearest existing ancestor must be one (the journal creates the rest)."""
    try:
        st = os.stat(directory)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as exc:
        return f"cannot be examined: {exc.strerror or exc}"
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            return "is not a directory"
        if not os.access(directory, os.W_OK | os.X_OK):
            return "is not writable"
        return None
    for parent in directory.parents:
        try:
            st = os.stat(parent)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            return f"cannot be created: {parent}: {exc.strerror or exc}"
        if not stat.S_ISDIR(st.st_mode):
            return f"cannot be created: {parent} is not a directory"
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"cannot be created: {parent} is not writable"
        return None
    return "cannot be created: no existing parent directory"
