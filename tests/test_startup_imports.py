"""structlog's `asyncio` is imported when first used, not when retentiond starts
(`retentiond/__init__.py`): the stand-in must hand out the real module's attributes, and
any other importer must get the real module."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import retentiond
import structlog.stdlib
assert "asyncio" not in sys.modules, "asyncio imported at start-up"
import asyncio
assert type(asyncio).__name__ == "module" and asyncio.__spec__ is not None, asyncio
assert structlog.stdlib.asyncio.get_running_loop is asyncio.get_running_loop
async def main():
    await structlog.get_logger().ainfo("async logging works")
asyncio.run(main())
print("ok")
"""


def test_asyncio_is_imported_on_first_use_and_is_the_real_module() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr
