"""`retentiond journal` over real journals: two real rounds (`once`) on a generated store, the
first one's records shipped (`ship --flush`) to a target directory before the second, so the
answer needs both the shipped and the local journal."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.conftest import make_store, records, run_cli

ZONE = "Asia/Tokyo"


@dataclass
class Shipped:
    config: Path
    journal: Path
    target: Path
    first: list[dict[str, Any]]  # every record of the first round (shipped since)
    second: list[dict[str, Any]]  # every record of the second round (local)

    def all(self, *types: str) -> list[dict[str, Any]]:
        return [r for r in self.first + self.second if r["type"] in types]

    def journal_cli(self, *args: str):
        return run_cli("journal", "--config", str(self.config), *args)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Shipped:
    tmp = tmp_path_factory.mktemp("journal")
    target = tmp / "fleet"
    target.mkdir()
    # deleteFileBatchMax 6: the 11 expired CommitLog files take two rounds.
    store = make_store(
        tmp,
        deleteFileBatchMax=6,
        retentiond={"ship": {"target": str(target)}, "timezone": ZONE},
    )
    assert run_cli("once", "--config", str(store.config)).code == 0
    first = records(store.journal)
    shipping = run_cli("ship", "--config", str(store.config), "--flush")
    assert shipping.code == 0, shipping.err
    assert records(store.journal) == []  # everything of the first round is shipped
    assert run_cli("once", "--config", str(store.config)).code == 0
    second = records(store.journal)
    assert first and second
    return Shipped(store.config, store.journal, target, first, second)


def _json_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def test_deletions_local_and_shipped_oldest_last(shipped: Shipped) -> None:
    result = shipped.journal_cli("--json")
    assert result.code == 0, result.err
    got = _json_lines(result.out)
    want = shipped.all("deletion")
    assert sorted(r["id"] for r in got) == sorted(r["id"] for r in want)
    assert {r["id"]: r for r in got} == {r["id"]: r for r in want}  # records as journaled
    times = [r["time_ms"] for r in got]
    assert times == sorted(times)
    first_ids = {r["id"] for r in shipped.first if r["type"] == "deletion"}
    assert {r["id"] for r in got[: len(first_ids)]} == first_ids  # the shipped round first

    # --local: only what is still in the local journal
    local = _json_lines(shipped.journal_cli("--json", "--local").out)
    assert {r["id"] for r in local} == {r["id"] for r in shipped.second if r["type"] == "deletion"}


def test_the_table_in_the_configured_zone(shipped: Shipped) -> None:
    result = shipped.journal_cli()
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    header, rows, total = lines[0], lines[1:-1], lines[-1]
    assert header.split()[:2] == ["TIME", f"({ZONE})"]
    for column in ("KIND", "REASON", "SIZE", "AGE", "FORCED", "FILE"):
        assert column in header
    assert "TYPE" not in header  # one record type: no column for it
    assert "LOSES" not in header  # no record says what it lost
    deletions = shipped.all("deletion")
    assert len(rows) == len(deletions)
    assert total.startswith(f"{len(deletions)} deletions, ")
    for record in deletions:
        [row] = [r for r in rows if r.endswith(" " + record["file"])]
        when = datetime.fromtimestamp(record["time_ms"] / 1000, ZoneInfo(ZONE))
        assert row.startswith(when.strftime("%Y-%m-%d %H:%M:%S"))
        assert f" {record['kind']} " in row and f" {record['reason']} " in row
        assert " no " in row  # not forced


@pytest.mark.parametrize(
    ("args", "keep"),
    [
        (["--kind", "commitlog"], lambda r: r["kind"] == "commitlog"),
        (["--kind", "index,consumequeue"], lambda r: r["kind"] in ("index", "consumequeue")),
        (["--reason", "expired"], lambda r: r["reason"] == "expired"),
        (["--file", "TopicTest/1/"], lambda r: "/TopicTest/1/" in r["file"]),
        (["--file", "*/commitlog/*"], lambda r: "/commitlog/" in r["file"]),
        (
            ["--file", "00000000000000006*"],  # a glob on the name: 4 files in each queue
            lambda r: r["kind"] == "consumequeue" and Path(r["file"]).name >= "00000000000000006",
        ),
        (["--since", "1h"], lambda r: True),
        (["--since", "2000-01-01", "--until", "2999-12-31T23:00+09:00"], lambda r: True),
        (["--since", "2999-01-01"], lambda r: False),
        (["--until", "2000-01-01T00:00Z"], lambda r: False),
    ],
)
def test_filters(shipped: Shipped, args: list[str], keep) -> None:
    result = shipped.journal_cli("--json", *args)
    assert result.code == 0, result.err  # an empty result is success
    want = {r["id"] for r in shipped.all("deletion") if keep(r)}
    assert {r["id"] for r in _json_lines(result.out)} == want
    if not want:
        assert "no deletion records match" in result.err


def test_a_window_between_the_two_rounds(shipped: Shipped) -> None:
    """--since/--until at a millisecond boundary: since included, until excluded."""
    second = [r for r in shipped.second if r["type"] == "deletion"]
    start = min(r["time_ms"] for r in second)
    iso = datetime.fromtimestamp(start / 1000, ZoneInfo(ZONE)).isoformat(timespec="milliseconds")
    since = _json_lines(shipped.journal_cli("--json", "--since", iso).out)
    assert {r["id"] for r in since} == {
        r["id"] for r in shipped.all("deletion") if r["time_ms"] >= start
    }
    until = _json_lines(shipped.journal_cli("--json", "--until", iso).out)
    assert {r["id"] for r in until} == {
        r["id"] for r in shipped.all("deletion") if r["time_ms"] < start
    }


def test_other_record_types(shipped: Shipped) -> None:
    rounds = _json_lines(shipped.journal_cli("--json", "--type", "round").out)
    assert len(rounds) == 2 and all(r["type"] == "round" for r in rounds)
    every = _json_lines(shipped.journal_cli("--json", "--type", "all").out)
    assert len(every) == len(shipped.first) + len(shipped.second)
    # within one millisecond an intent comes before its deletion
    position = {(r["type"], r.get("id")): i for i, r in enumerate(every)}
    for r in shipped.all("deletion"):
        assert position[("intent", r["id"])] < position[("deletion", r["id"])]
    table = shipped.journal_cli("--type", "round,deletion")
    assert table.code == 0
    assert "TYPE" in table.out.splitlines()[0]
    assert sum(" round: " in line for line in table.out.splitlines()) == 2


def test_a_record_both_shipped_and_local_shows_once(shipped: Shipped, tmp_path: Path) -> None:
    """A shipping pass that died between its rename and the local delete leaves a segment's
    records in both places."""
    copy = tmp_path / "copy"
    copy.mkdir()
    config = copy / "broker.yaml"
    journal = copy / "journal"
    journal.mkdir()
    for path in sorted(shipped.journal.iterdir()):
        (journal / path.name).write_bytes(path.read_bytes())
    lines = b"".join(
        gzip.decompress(p.read_bytes()) for p in sorted(shipped.target.rglob("*.jsonl.gz"))
    )
    (journal / "journal-000000000000.jsonl").write_bytes(lines)
    config.write_text(shipped.config.read_text().replace(str(shipped.journal), str(journal)))
    result = run_cli("journal", "--config", str(config), "--json", "--type", "all")
    assert result.code == 0, result.err
    assert len(_json_lines(result.out)) == len(shipped.first) + len(shipped.second)


def test_an_unreadable_shipped_file_is_exit_6_after_what_could_be_read(
    shipped: Shipped, tmp_path: Path
) -> None:
    target = tmp_path / "fleet"
    for path in shipped.target.rglob("*"):
        dest = target / path.relative_to(shipped.target)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(path.read_bytes())
    [broken] = list((target / "v3" / "deletions").rglob("*.jsonl.gz"))
    broken.write_bytes(broken.read_bytes()[:40])  # a truncated gzip stream
    config = tmp_path / "broker.yaml"
    config.write_text(shipped.config.read_text().replace(str(shipped.target), str(target)))
    result = run_cli("journal", "--config", str(config), "--json")
    assert result.code == 6
    assert str(broken) in result.err
    local = {r["id"] for r in shipped.second if r["type"] == "deletion"}
    assert local <= {r["id"] for r in _json_lines(result.out)}


def test_exit_codes(shipped: Shipped, tmp_path: Path) -> None:
    text = shipped.config.read_text()
    # the journal directory is a regular file: the journal cannot be used
    not_a_dir = tmp_path / "journal-file"
    not_a_dir.write_text("")
    config = tmp_path / "broker.yaml"
    config.write_text(text.replace(str(shipped.journal), str(not_a_dir)))
    result = run_cli("journal", "--config", str(config), "--local")
    assert result.code == 6 and str(not_a_dir) in result.err
    # no journal yet: nothing journaled, an empty answer
    config.write_text(text.replace(str(shipped.journal), str(tmp_path / "none")))
    result = run_cli("journal", "--config", str(config), "--local")
    assert result.code == 0 and "no deletion records match" in result.err
    # usage
    assert shipped.journal_cli("--since", "yesterday").code == 2
    assert shipped.journal_cli("--type", "deletions").code == 2
    # a configuration wrong in itself
    config.write_text(text + "fileReservedTime: -1\n")
    assert run_cli("journal", "--config", str(config)).code == 3
