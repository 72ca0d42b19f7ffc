"""retentiond: frees disk on broker stores exactly as the broker's own cleaner would."""

import sys

__version__ = "0.1.0"


def _import_structlog_without_rich() -> None:
    """Import structlog once, without the optional ``rich`` it picks up when installed.

    ``structlog.dev`` imports ``rich`` at import time if it can, only to offer its traceback
    formatter; we never use it (``format_exc_info`` renders exceptions before the renderer).
    Installed beside us (``import-linter`` pulls it into a dev venv), it cost every process
    about 70 ms of start-up and 4 MB of resident memory, and made a daemon's figures depend
    on which unrelated packages the host has. ``rich`` is blocked for that one import only;
    anything imported later can still use it.
    """
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]  # makes `import rich` fail
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]


_import_structlog_without_rich()
