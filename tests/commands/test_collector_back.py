"""One-off commands run without the cyclic collector and turn it back on when they return,
except in a process that ends right away without freeing what it built."""

from __future__ import annotations

import argparse
import gc

from retentiond.commands.common import collector_back


def _args(entry: bool, teardown: object) -> argparse.Namespace:
    args = argparse.Namespace(process_entry=entry)
    if teardown is not None:
        args.exit_without_teardown = teardown
    return args


def test_the_collector_comes_back_unless_the_process_ends_now() -> None:
    was = gc.isenabled()
    try:
        for entry, teardown, back in (
            (False, ("plan",), True),  # main() called in-process (tests)
            (True, None, True),  # the command keeps its teardown
            (True, ("plan",), False),  # the process ends at once: no full pass first
        ):
            gc.disable()
            collector_back(_args(entry, teardown), collecting=True)
            assert gc.isenabled() is back, (entry, teardown)
        gc.disable()
        collector_back(_args(False, None), collecting=False)  # it was off: it stays off
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()
