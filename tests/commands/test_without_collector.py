"""One-off commands run without the cyclic collector and turn it back on when they return,
except in a process that ends right away without freeing what it built."""

from __future__ import annotations

import argparse
import gc

from retentiond.commands.common import without_collector


def _args(entry: bool) -> argparse.Namespace:
    return argparse.Namespace(process_entry=entry)  # as cli.main sets it


def test_the_collector_comes_back_unless_the_process_ends_now() -> None:
    was = gc.isenabled()
    try:
        for entry, teardown, back in (
            (False, ("plan",), True),  # main() called in-process (tests)
            (True, None, True),  # the command keeps its teardown
            (True, ("plan",), False),  # the process ends at once: no full pass first
        ):
            gc.enable()
            args = _args(entry)
            with without_collector(args):
                assert not gc.isenabled()
                if teardown is not None:  # as the command sets it, inside
                    args.exit_without_teardown = teardown
            assert gc.isenabled() is back, (entry, teardown)
        gc.disable()
        with without_collector(_args(False)):
            pass
        assert not gc.isenabled()  # it was off: it stays off
    finally:
        if was:
            gc.enable()
