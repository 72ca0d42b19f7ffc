"""The console entry point: parse, configure logging, dispatch. Nothing imports this module;
the commands live in ``retentiond.commands``.

Exit codes: the table in the README (and ``retentiond.commands.common``). Two belong here:
an unexpected exception is an internal error (1): one line on stderr naming the file that holds
the traceback; and a closed output pipe (``status | head -0``) ends a command with 141, as a
shell reports a process killed by SIGPIPE, without a traceback. Python ignores SIGPIPE, so a
write to a closed pipe raises BrokenPipeError instead of killing the process; the daemon keeps
it that way (its log on a closed stderr must not kill it).
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    import sys

    from retentiond.commands import build_parser
    from retentiond.commands.common import EXIT_PIPE
    from retentiond.observe.logging import configure

    entry = argv is None  # called as the process's entry point (console script, -m)
    if argv is None:
        argv = sys.argv[1:]
        _return_large_blocks()
    parser = build_parser(argv)  # only the named command's group is imported
    args = parser.parse_args(argv)
    args.process_entry = entry  # a command may leave the process to end without teardown
    fmt = args.log_format
    configure(json=None if fmt == "auto" else fmt == "json", level=args.log_level)
    try:
        code = args.func(args)
        if entry:
            sys.stdout.flush()  # here, so that a closed pipe is seen while it can be handled
    except SystemExit as exc:
        return int(exc.code or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _drop_stdout()
        return EXIT_PIPE
    except Exception as exc:  # a bug: one line, and the traceback kept in a file
        return _internal_error(args.command, exc)
    if entry and getattr(args, "exit_without_teardown", None):
        _exit_now(code)
    return code


# glibc's M_MMAP_THRESHOLD (mallopt's parameter number).
_M_MMAP_THRESHOLD = -3
_LARGE_BLOCK = 128 * 1024  # glibc's default threshold


def _return_large_blocks() -> None:
    """Keep blocks of 128 KiB and more in mappings of their own, given back to the system as
    soon as they are freed. glibc otherwise raises that threshold to the size of the largest
    such block freed so far, and serves the later ones from its heap, which keeps their pages
    once freed: the tables of the 100k-entry dictionaries and the arrays of a large store's
    scan, built and dropped as a daemon starts, then stay in its resident size (measured on
    25,000 topics x 4 queues: 98 MB at the end of a restart's start-up scan instead of 95).
    Nothing to do where the C library has no ``mallopt``."""
    import contextlib
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, _LARGE_BLOCK)


def _drop_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's final flush of what is still buffered
    would raise again (and print "Exception ignored") on the closed pipe."""
    import os
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _internal_error(command: str, exc: BaseException) -> int:
    """Write the traceback to a file (``$STATE_DIRECTORY`` under systemd, else the temporary
    directory) and say in one line what failed and where the traceback is."""
    import os
    import sys
    import tempfile
    import time
    import traceback

    from retentiond.commands.common import EXIT_INTERNAL

    text = "".join(traceback.format_exception(exc))
    where = None
    for directory in (os.environ.get("STATE_DIRECTORY", "").split(":")[0], tempfile.gettempdir()):
        if not directory:
            continue
        path = os.path.join(
            directory,
            f"retentiond-{command}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.traceback",
        )
        try:
            with open(path, "x", encoding="utf-8") as fh:
                fh.write(text)
        except OSError:
            continue
        where = f"the traceback is in {path}"
        break
    summary = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    try:
        print(
            f"retentiond {command}: internal error ({summary}); "
            + (where or "no file could take the traceback, so it follows"),
            file=sys.stderr,
        )
        if where is None:
            print(text, file=sys.stderr, end="")
    except OSError:
        pass
    return EXIT_INTERNAL


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
