"""The console entry point: parse, configure logging, dispatch. Nothing imports this module;
the commands live in ``retentiond.commands``.

Exit codes (also in the README):
  0  success (an empty plan is success)
  1  internal error
  2  usage error
  3  configuration invalid: nothing was deleted
  4  store error: a store path could not be read or measured; nothing was deleted
  5  the round ran but some planned deletions did not happen (re-check or unlink failed)
  6  the journal could not be opened: nothing was deleted
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    import sys

    from retentiond.commands import build_parser
    from retentiond.observe.logging import configure

    entry = argv is None  # called as the process's entry point (console script, -m)
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv)  # only the named command's group is imported
    args = parser.parse_args(argv)
    fmt = args.log_format
    configure(json=None if fmt == "auto" else fmt == "json", level=args.log_level)
    try:
        code = args.func(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    except KeyboardInterrupt:
        return 130
    if entry and getattr(args, "exit_without_teardown", None):
        _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    """End the process once its output is flushed, without freeing what it built.

    A read-only command that built a large result (``plan`` on a 100k-queue store: 300k+
    records and the scan cache) would otherwise spend a tenth of its run freeing them object
    by object at exit. It has nothing else to finish: no file is open for writing, and logs go
    to stderr. Only for the process's own entry point, never when ``main`` is called with an
    argument list (tests call it in-process).
    """
    import os
    import sys

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        return  # a closed pipe: let the interpreter end as usual and report it
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
