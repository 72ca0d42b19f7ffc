"""The same deletions before and after: `retentiond plan --json` of two commits, on every
store shape of ``bench_shapes.py``, with the scan cache file a daemon leaves and without one.

    .venv/bin/python bench/check_plans.py --base main [--head HEAD] [--dir DIR] [--shapes ...]

For each shape and for two batch sizes (``deleteFileBatchMax`` 10: the plan deletes 10
CommitLog files and examines every queue; 40: the minimum moves far enough that queue files go
as well), each commit plans the store four ways (its own dry-run round first writes its cache
file), and every file row of the plan (kind, path, verdict, reason, bytes, offsets; not the age,
which depends on the clock) must be the same for both commits, with and without the cache.
The base commit is checked out as a detached worktree beside this one. Exits 1 on any
difference, printing the first few.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_shapes import SHAPES, Shape, prepare
from machine import load, machine

HERE = Path(__file__).resolve().parent.parent
HOURS = ";".join(f"{h:02d}" for h in range(24))
FIELDS = ("kind", "path", "verdict", "reason", "bytes", "start_offset", "end_offset")


def checkout(ref: str, where: Path) -> Path:
    if where.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=HERE, check=False)
        shutil.rmtree(where, ignore_errors=True)
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(where), ref], cwd=HERE,
                   check=True)  # fmt: skip
    return where


def rows(doc: Any) -> list[tuple[object, ...]]:
    """Every file row of a plan document, wherever its sections sit (sorted)."""
    out: list[tuple[object, ...]] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if "path" in x and "verdict" in x:
                out.append(tuple(x.get(k) for k in FIELDS))
                return
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(doc)
    return sorted(out, key=repr)


Rows = list[tuple[object, ...]]


def plans(tree: Path, shape: Shape, name: str, batch: int) -> dict[str, Rows]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    config = shape.config(name, fileReservedTime=1, deleteWhen=HOURS, deleteFileBatchMax=batch,
                          diskMaxUsedSpaceRatio=95)  # fmt: skip
    for stale in shape.cache_files(name):
        stale.unlink()

    def run(*args: str) -> str:
        argv = [sys.executable, "-m", "retentiond", "--log-level", "error", *args,
                "--config", str(config)]  # fmt: skip
        done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"{argv} exited {done.returncode}: {done.stderr[-2000:]}")
        return done.stdout

    got = {"no cache": rows(json.loads(run("plan", "--json")))}
    run("once", "--dry-run")
    assert shape.cache_files(name), f"{tree}: the dry-run round wrote no scan cache file"
    got["cache"] = rows(json.loads(run("plan", "--json")))
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--head", default=None, help="a commit (default: this working tree)")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "retentiond-shapes")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    trees = {"base": checkout(args.base, args.dir / "tree-base")}
    trees["head"] = checkout(args.head, args.dir / "tree-head") if args.head else HERE
    for name, tree in trees.items():
        argv = ["git", "rev-parse", "--short", "HEAD"]
        rev = subprocess.run(argv, cwd=tree, capture_output=True, text=True, check=False)
        rev = rev.stdout.strip()
        print(f"{name}: {rev} ({tree})")
    print(f"machine: {machine()}; load {load()}")
    bad = 0
    try:
        for shape_name in args.shapes.split(","):
            shape = Shape(shape_name, args.dir / shape_name)
            print(f"{shape_name}: {prepare(shape)}", flush=True)
            for batch in (10, 40):
                got = {
                    (who, how): r
                    for who, tree in trees.items()
                    for how, r in plans(tree, shape, f"check-{who}-{batch}", batch).items()
                }
                want = got[("base", "no cache")]
                deletions = sum(1 for r in want if r[2] == "delete")
                by_kind = {k: sum(1 for r in want if r[2] == "delete" and r[0] == k)
                           for k in ("commitlog", "consumequeue", "index")}  # fmt: skip
                same = all(r == want for r in got.values())
                print(f"  deleteFileBatchMax {batch}: {len(want)} files, {deletions} deletions "
                      f"{by_kind}: {'the same' if same else 'DIFFERENT'} for "
                      f"{', '.join(f'{w} {h}' for w, h in got)}", flush=True)  # fmt: skip
                if not same:
                    bad += 1
                    for key, r in got.items():
                        diff = sorted(set(r) ^ set(want), key=repr)[:5]
                        if diff:
                            print(f"    {key}: {len(set(r) ^ set(want))} rows differ, e.g. {diff}")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(args.dir / "tree-base")],
                       cwd=HERE, check=False, capture_output=True)  # fmt: skip
        if args.head:
            subprocess.run(["git", "worktree", "remove", "--force", str(args.dir / "tree-head")],
                           cwd=HERE, check=False, capture_output=True)  # fmt: skip
    print(f"load after: {load()}")
    print("the same deletions on every shape" if not bad else f"{bad} plans DIFFER")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
