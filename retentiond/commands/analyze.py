"""`retentiond analyze`: argument parsing only; pyspark is imported when the command runs.

The same arguments work under ``spark-submit`` (``python -m retentiond.analytics`` is the
module's entry point), where the master comes from ``spark-submit --master``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from datetime import UTC, date, datetime, timedelta

from retentiond.commands.common import EXIT_NO_RECORDS, EXIT_NO_SPARK
from retentiond.journal.ship import MIXED_DIR, layout_dir

RECORD_TYPES = ("deletion", "round", "round_summary")  # what the job reads (analytics.job)
# Where the shipped layouts (journal.ship) keep those records: layout 1, a directory per type;
# layout 2, v2/; layout 3, the two families the job reads under v3/ (v3/other is not read).
LAYOUT_DIRS = (
    *RECORD_TYPES,
    MIXED_DIR,
    *sorted({layout_dir(3, t) for t in RECORD_TYPES}),  # v3/deletions, v3/rounds
)
_RELATIVE = re.compile(r"(\d{1,4})d")
MISSING = (
    "error: `retentiond analyze` needs the optional Spark dependencies: "
    "install retentiond[spark] (pip install 'retentiond[spark]') and Java 17+"
)
NO_JAVA = (
    "error: `retentiond analyze` runs Spark, which needs Java 17+: install it, or set "
    "JAVA_HOME to an installed one (no java on the PATH and no JAVA_HOME)"
)


def since_date(text: str, today: date | None = None) -> str:
    """``--since``: a date (``2024-05-01``) or a number of days back (``30d``)."""
    m = _RELATIVE.fullmatch(text)
    if m:
        today = today or datetime.now(UTC).date()
        return (today - timedelta(days=int(m.group(1)))).isoformat()
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a date (YYYY-MM-DD) nor a number of days (e.g. 30d)"
        ) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input",
        required=True,
        help="the ship target: <input>/v3/<family>/dt=.../... (and v2/, <type>/)",
    )
    p.add_argument("--output", required=True, help="where the Parquet tables are written")
    p.add_argument(
        "--master",
        help="Spark master URL (spark://, yarn, k8s://, local[N]); default: the one "
        "spark-submit passes, else an embedded local[*]",
    )
    p.add_argument(
        "--since", type=since_date, help="only records from this day on: YYYY-MM-DD or Nd"
    )
    p.add_argument(
        "--report",
        help="directory for report.md, report.html and the charts (default <output>/report; "
        "required when --output is not a local path)",
    )


def java_missing() -> bool:
    """No Java for Spark's gateway: neither ``$JAVA_HOME/bin/java`` nor ``java`` on the PATH
    (what Spark's launcher looks for). Under ``spark-submit`` the JVM is already running."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    home = os.environ.get("JAVA_HOME")
    if home:
        return not os.access(os.path.join(home, "bin", "java"), os.X_OK)
    return shutil.which("java") is None


def local_input_problem(path: str) -> str | None:
    """Why a local ``--input`` cannot hold records (None: it may, or it is not local).

    Checked before Spark starts, which takes seconds and, on a missing path, prints Java
    stack traces: a directory that is not there, or one with no file under any of the
    record types the job reads.
    """
    if "://" in path and not path.startswith("file://"):
        return None  # hdfs://, s3a://...: the job asks the file system itself
    root = path.removeprefix("file://")
    if not os.path.isdir(root):
        return f"{root}: no such directory"
    for kind in LAYOUT_DIRS:
        for _dirpath, _dirs, files in os.walk(os.path.join(root, kind)):
            if any(not f.startswith((".", "_")) for f in files):  # Spark skips hidden files
                return None
    return f"{root}: no shipped records (nothing under {', '.join(LAYOUT_DIRS)})"


def cmd_analyze(args: argparse.Namespace) -> int:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print(MISSING, file=sys.stderr)
        return EXIT_NO_SPARK
    if java_missing():
        print(NO_JAVA, file=sys.stderr)
        return EXIT_NO_SPARK
    problem = local_input_problem(args.input)
    if problem is not None:
        print(f"error: --input {problem}; no report written", file=sys.stderr)
        return EXIT_NO_RECORDS
    from retentiond.analytics.job import run

    return run(args)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "analyze",
        help="fleet analysis of shipped journals with Spark (needs retentiond[spark])",
    )
    add_arguments(p)
    p.set_defaults(func=cmd_analyze)


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m retentiond.analytics`` and ``spark-submit``."""
    parser = argparse.ArgumentParser(
        prog="retentiond-analyze", description="Fleet analysis of shipped retentiond journals."
    )
    add_arguments(parser)
    return cmd_analyze(parser.parse_args(argv))
