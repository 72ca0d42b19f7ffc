"""retentiond: frees disk on broker stores exactly as the broker's own cleaner would."""

import importlib
import sys
import types

__version__ = "0.1.0"


class _AsyncioOnUse(types.ModuleType):
    """What structlog's modules hold as ``asyncio``: the real module, imported on first use.

    ``structlog.stdlib`` and ``structlog._native`` import ``asyncio`` at import time only for
    their async logging methods, which nothing here calls. Importing it (with ``ssl``,
    ``socket``, ``subprocess`` and ``concurrent.futures`` behind it) was about a fifth of every
    command's start-up: 20-30 ms on a 2-vCPU host. Any attribute asked of this stand-in imports
    the real ``asyncio`` (as the stand-in is in ``sys.modules`` only during structlog's own
    import, that is the ordinary import) and answers from it; any other module importing
    ``asyncio`` gets the real one.
    """

    def __getattr__(self, name: str) -> object:
        if sys.modules.get("asyncio") is self:
            del sys.modules["asyncio"]
        real = importlib.import_module("asyncio")
        return getattr(real, name)


def _import_structlog_without_rich() -> None:
    """Import structlog once, without the optional ``rich`` it picks up when installed, and
    without ``asyncio`` until something uses it (``_AsyncioOnUse``).

    ``structlog.dev`` imports ``rich`` at import time if it can, only to offer its traceback
    formatter; we never use it (``format_exc_info`` renders exceptions before the renderer).
    Installed beside us (``import-linter`` pulls it into a dev venv), it cost every process
    about 70 ms of start-up and 4 MB of resident memory, and made a daemon's figures depend
    on which unrelated packages the host has. ``rich`` is blocked for that one import only;
    anything imported later can still use it.
    """
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    stand_in = None
    if "asyncio" not in sys.modules:
        stand_in = sys.modules["asyncio"] = _AsyncioOnUse("asyncio")
    sys.modules["rich"] = None  # type: ignore[assignment]  # makes `import rich` fail
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]
        if stand_in is not None and sys.modules.get("asyncio") is stand_in:
            del sys.modules["asyncio"]


_import_structlog_without_rich()
