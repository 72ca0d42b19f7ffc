"""The synthetic fleet (``analytics.synth``) in every shipped layout: the same records, filed
where the shipper would file them. Plain Python, no Spark."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from retentiond.analytics.synth import Plan, main, write_fleet
from retentiond.journal.ship import FAMILIES

PLAN = Plan(clusters=2, brokers_per_cluster=1, days=2, rounds_per_day=576, kafka_every=2)


def files(target: Path) -> dict[str, list[bytes]]:
    return {
        str(p.relative_to(target)): gzip.decompress(p.read_bytes()).splitlines(keepends=True)
        for p in sorted(target.rglob("*.jsonl.gz"))
    }


def test_every_layout_holds_the_same_records_where_the_shipper_files_them(tmp_path) -> None:
    written = {
        n: write_fleet(tmp_path / f"l{n}", Plan(**{**PLAN.__dict__, "layout": n}))
        for n in (1, 2, 3)
    }
    assert len(set(written.values())) == 1
    got = {n: files(tmp_path / f"l{n}") for n in (1, 2, 3)}
    lines = {n: Counter(line for v in got[n].values() for line in v) for n in (1, 2, 3)}
    assert lines[1] == lines[2] == lines[3] and sum(lines[3].values()) == written[3]
    types = Counter(json.loads(line)["type"] for line in lines[3].elements())
    assert {"intent", "deletion", "round", "round_summary"} <= set(types)

    for path, content in got[3].items():
        top, family, dt, cluster, broker, _name = path.split("/")
        assert top == "v3" and dt.startswith("dt=")
        assert cluster.startswith("cluster=") and broker.startswith("broker=")
        assert {FAMILIES[json.loads(line)["type"]] for line in content} == {family}
    # per broker and day, a file of each family the job reads, where layout 1 has one per type
    assert {path.split("/")[1] for path in got[3]} == {"deletions", "rounds"}
    assert len(got[3]) < len(got[1]) and len(got[2]) < len(got[3])
    # the same file names as layout 1, under the family's directory
    assert {p.rsplit("/", 1)[1] for p in got[3]} == {p.rsplit("/", 1)[1] for p in got[1]}


def test_an_unknown_layout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one of"):
        write_fleet(tmp_path, Plan(**{**PLAN.__dict__, "layout": 4}))


def test_the_command_writes_layout_3_by_default(tmp_path: Path, capsys) -> None:
    args = ["--clusters", "1", "--brokers", "1", "--days", "1", "--rounds-per-day", "24"]
    assert main([str(tmp_path / "t"), *args]) == 0
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["v3"]
    assert sorted(p.name for p in (tmp_path / "t" / "v3").iterdir()) == ["deletions", "rounds"]
    assert main([str(tmp_path / "t1"), *args, "--layout", "1"]) == 0
    assert "v3" not in {p.name for p in (tmp_path / "t1").iterdir()}
