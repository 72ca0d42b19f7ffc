"""`retentiond plan`'s text and JSON say exactly what the plan holds, file by file.

The renderers take shortcuts for speed (queue files behind a stop are counted and encoded per
queue, never as a ``Decision`` each). These tests hold them to the plain forms: the text to
``plain_text`` below (one ``Decision`` per file, the way the renderer was first written), the
JSON to ``json.dumps(plan.as_dict(), indent=2)`` (dicts made by ``Decision.as_dict``), on
real stores with deletions, unreadable and foreign files, and store errors, and on plans made
by hand in the shapes a real store rarely shows.
"""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest

from retentiond.engine.decision import Decision
from retentiond.engine.identity import FileIdentity
from retentiond.kinds.rocketmq.plan import CommitLogPlan, Plan, QueueDecision, QueuesPlan
from retentiond.kinds.rocketmq.report import render_plan
from retentiond.kinds.rocketmq.triggers import DiskState, Triggers
from retentiond.reasons import SCHEMA_VERSION, Kind, Reason, Verdict
from retentiond.text import jsonstream
from retentiond.text.units import human_age, human_bytes, human_time
from tests.conftest import expired_spec, make_store, run_cli

# ---- the plain forms ----------------------------------------------------------------------


def _plain_rows(decisions: Iterable[Decision], now_ms: int) -> list[tuple[str, ...]]:
    rows = []
    for d in decisions:
        size = d.identity.size if d.identity else None
        age = now_ms - d.identity.mtime_ms if d.identity else None
        rows.append((d.path, human_bytes(size), human_age(age), str(d.verdict), str(d.reason)))
    return rows


def _plain_table(rows: list[tuple[str, ...]], when: bool = False) -> list[str]:
    header = ("FILE", "SIZE", "AGE", "VERDICT", "REASON", *(("WHEN",) if when else ()))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    if when:
        widths[-1] = 0  # the last column is text, not padded
    fmt = "  ".join(
        f"{{:{'<' if i == 0 or (when and i == 5) else '>'}{w or ''}}}" for i, w in enumerate(widths)
    )
    return [fmt.format(*header).rstrip(), *(fmt.format(*r).rstrip() for r in rows)]


def _plain_when(plan: Plan, d: Decision) -> str:
    cl = plan.commitlog
    if d.reason is Reason.NEWEST_FILE:
        return "never while newest"
    if d.reason is Reason.NOT_TIME_TO_DELETE and cl.next_window_ms is not None:
        return f"next window {human_time(cl.next_window_ms, cl.zone)}"
    if d.identity is None or cl.reserved_ms is None:
        return "-"
    expires = d.identity.mtime_ms + cl.reserved_ms
    return ("expired " if plan.now_ms >= expires else "expires ") + human_time(expires, cl.zone)


def _plain_commitlog(plan: Plan) -> list[str]:
    cl = plan.commitlog
    parts = []
    if cl.reserved_ms is not None:
        parts.append(f"fileReservedTime {human_age(cl.reserved_ms)}")
    if cl.next_window_ms is not None:
        parts.append(f"next delete window {human_time(cl.next_window_ms, cl.zone)}")
    rows = [
        (*row, _plain_when(plan, d))
        for row, d in zip(_plain_rows(cl.decisions, plan.now_ms), cl.decisions, strict=True)
    ]
    head = f"CommitLog ({'; '.join(parts)})" if parts else "CommitLog"
    return [head, *_plain_table(rows, when=True)]


def _by_queue(queues: Iterable[QueueDecision]) -> list[QueueDecision]:
    return sorted(queues, key=lambda qd: (qd.topic, qd.queue_id))


def plain_text(plan: Plan, *, all_queue_files: bool = False) -> str:
    """The text plan built from one Decision per file (``QueueDecision.decisions``)."""
    t = plan.commitlog.triggers
    ratio = lambda r: "n/a" if r is None else f"{r:.2f}"  # noqa: E731
    out = [
        f"store {plan.store_root}  config {plan.config_hash}  timezone {plan.timezone} "
        f"(hour {t.hour})  {'manual round' if plan.manual else ''}".rstrip(),
        f"triggers: time_up={t.time_up} usage_exceeds={t.usage_exceeds} manual={t.manual} "
        f"clean_immediately={t.clean_immediately} clean_at_once={t.clean_at_once} "
        f"-> pass {'runs' if t.fired else 'does not run'}",
        f"disk: commitlog(min)={ratio(t.physic_ratio)} consumequeue={ratio(t.logics_ratio)} "
        f"state={t.disk_state}",
    ]
    out += [f"ERROR: {e} (nothing is deleted from this store)" for e in plan.store_errors()]
    out += ["", *_plain_commitlog(plan)]
    lossy = [d for d in plan.commitlog.decisions if d.loss is not None]
    if lossy:
        out += ["", "What the CommitLog deletions lose (consumer progress on disk)"]
        out += [f"  {os.path.basename(d.path)}: {d.loss.summary()}" for d in lossy if d.loss]
    out += [f"PROBLEM: {path}: {text}" for path, text in plan.progress_problems]
    q = plan.queues
    out.append("")
    if not q.examined:
        out.append(
            f"ConsumeQueue/index: not examined ({q.skip_reason or 'minimum offset unknown'}; "
            f"CommitLog min offset {q.min_offset}, last acted on {q.last_min_offset})"
        )
    else:
        every = [d for qd in _by_queue(q.queues) for d in qd.decisions()]
        reasons = Counter(str(d.reason) for d in every)
        summary = ", ".join(f"{k}={v}" for k, v in sorted(reasons.items())) or "nothing examined"
        out.append(
            f"ConsumeQueue (min offset {q.min_offset}): {q.queue_count} queues, "
            f"{q.file_count} files; examined files by reason: {summary}"
        )
        shown = every if all_queue_files else [d for d in every if d.delete]
        if shown:
            out.extend(_plain_table(_plain_rows(shown, plan.now_ms)))
        out += ["", "Index"]
        out.extend(
            _plain_table(_plain_rows(q.index, plan.now_ms)) if q.index else ["(no index files)"]
        )
        out += [f"WARNING: {p}" for p in q.problems]
    if plan.foreign:
        out += ["", f"Foreign entries (never touched): {len(plan.foreign)}"]
        out += [f"  {path}  ({why})" for path, why in plan.foreign[:20]]
        if len(plan.foreign) > 20:
            out.append(f"  ... and {len(plan.foreign) - 20} more (see --json)")
    deletes = [d for d in plan.decisions() if d.delete]
    total = sum(d.identity.size for d in deletes if d.identity)
    out += ["", f"plan: delete {len(deletes)} files, {human_bytes(total)}"]
    return "\n".join(out)


def streamed(plan: Plan, *, all_queue_files: bool = True) -> str:
    out = io.StringIO()
    jsonstream.dump(plan.as_document(all_queue_files=all_queue_files), out)
    return out.getvalue()


def assert_same_output(plan: Plan) -> None:
    for every in (False, True):
        assert render_plan(plan, all_queue_files=every) == plain_text(plan, all_queue_files=every)
        text = streamed(plan, all_queue_files=every)
        plain = plan.as_dict(all_queue_files=every)
        assert json.loads(text) == plain
        assert text == json.dumps(plain, indent=2)
    files = json.loads(streamed(plan))["consumequeue"]["files"]
    assert [f["path"] for f in files] == [
        d.path for qd in _by_queue(plan.queues.queues) for d in qd.decisions()
    ]


# ---- real stores --------------------------------------------------------------------------


def test_a_store_with_deletions_bad_files_and_foreign_entries(tmp_path: Path) -> None:
    store = make_store(tmp_path, expired_spec(queues_per_topic=4), deleteFileBatchMax=6)
    queues = sorted(store.generated.queues.items())
    queues[0][1][3].path.write_bytes(os.urandom(30))  # garbage: that queue stops, unreadable
    queues[1][1][0].path.write_bytes(b"")  # empty first file: that queue stops at once
    cq = store.root / "consumequeue"
    (cq / queues[2][0][0] / "notes.txt").write_text("not ours")
    (store.root / "commitlog" / "notes.txt").write_bytes(b"x")
    os.symlink("/etc", cq / "EvilTopic")
    plan = store.cleaner().plan()

    q = plan.queues
    assert q.examined and plan.foreign and q.problems
    reasons = {d.reason for qd in q.queues for d in qd.decisions()}
    assert {
        Reason.BELOW_COMMITLOG_MIN_OFFSET,
        Reason.HOLDS_LIVE_OFFSET,
        Reason.UNREADABLE,
        Reason.AFTER_FIRST_KEPT,
        Reason.NEWEST_FILE,
    } <= reasons
    assert_same_output(plan)


def test_a_store_error_and_a_manual_round(tmp_path: Path) -> None:
    store = make_store(tmp_path, expired_spec())
    (tmp_path / "elsewhere").mkdir()
    for f in (store.root / "commitlog").iterdir():  # an empty mount point: a store error
        f.rename(tmp_path / "elsewhere" / f.name)
    plan = store.cleaner().plan(manual=True)
    assert plan.store_errors() and not plan.queues.examined
    assert_same_output(plan)
    assert "ERROR: " in render_plan(plan)
    for args in ((), ("--json",)):  # the CLI exits 4 (store error) after its whole output
        result = run_cli("plan", "--config", str(store.config), *args)
        assert result.code == 4, result.err
        assert "plan: delete 0 files" in result.out or json.loads(result.out)["errors"]


def test_the_cli_writes_the_same_documents(tmp_path: Path) -> None:
    store = make_store(tmp_path, expired_spec(queues_per_topic=3), deleteFileBatchMax=11)
    (store.root / "commitlog" / "notes.txt").write_text("not ours")

    def cli(*args: str) -> str:
        result = run_cli("plan", "--config", str(store.config), *args)
        assert result.code == 0, result.err
        return result.out

    doc = json.loads(cli("--json"))
    mine = store.cleaner().plan().as_dict()
    for d in (doc, mine):  # the clocks differ: compare all but the times
        d.pop("now_ms")
        d.pop("now")
        for part in ("commitlog", "consumequeue", "index"):
            for f in d[part]["files"]:
                f.pop("age_ms", None)
    assert doc == mine and doc["consumequeue"]["files"] and doc["foreign"]
    text = cli()
    assert "plan: delete " in text and "Foreign entries (never touched): 1" in text
    assert len(cli("--all").splitlines()) > len(text.splitlines())


# ---- plans made by hand -------------------------------------------------------------------

NOW = 1_800_000_000_000


def _ident(size: int, age_ms: int) -> FileIdentity:
    return FileIdentity(ino=7, dev=1, size=size, mtime_ns=(NOW - age_ms) * 1_000_000)


def _cq(directory: str, topic: str, qid: int, name: str, verdict: Verdict, reason: Reason,
        **kw) -> Decision:  # fmt: skip
    return Decision(Kind.CONSUMEQUEUE, f"{directory}/{name}", verdict, reason,
                    start_offset=int(name), topic=topic, queue_id=qid, **kw)  # fmt: skip


def _names(*offsets: int) -> tuple[str, ...]:
    return tuple(f"{o:020d}" for o in offsets)


def hand_plan(*, examined: bool = True, foreign: int = 3) -> Plan:
    odd = '/st\u00f6re/consumequeue/T"\u00fcb\\x\u2603'
    plain = "/store/consumequeue/Plain"
    triggers = Triggers(True, False, False, False, False, 0.5, None, DiskState.OK, 4)
    cl = (
        Decision(Kind.COMMITLOG, "/store/commitlog/00000000000000000000", Verdict.DELETE,
                 Reason.EXPIRED, _ident(1024, 90_000_000), 0, 1024),
        Decision(Kind.COMMITLOG, "/store/commitlog/00000000000000001024", Verdict.KEEP,
                 Reason.NEWEST_FILE, _ident(1024, 5_000), 1024, 2048, detail="new\nline"),
    )  # fmt: skip
    queues = (
        # deleted files, a stop that holds a live offset, three files behind it
        QueueDecision("T\"\u00fcb\\x\u2603", 0, f"{odd}/0", _names(0, 40, 80, 120, 160, 200), (
            _cq(f"{odd}/0", "T\"\u00fcb\\x\u2603", 0, _names(0)[0], Verdict.DELETE,
                Reason.BELOW_COMMITLOG_MIN_OFFSET, identity=_ident(40, 7_200_000), end_offset=9),
        ), _cq(f"{odd}/0", "T\"\u00fcb\\x\u2603", 0, _names(40)[0], Verdict.KEEP,
               Reason.HOLDS_LIVE_OFFSET, identity=_ident(40, 60_000), end_offset=99)),
        # an unreadable stop with its detail, and no identity
        QueueDecision("Plain", 12, f"{plain}/12", _names(0, 40), (),
                      _cq(f"{plain}/12", "Plain", 12, _names(0)[0], Verdict.KEEP,
                          Reason.UNREADABLE, detail="short read: 3 of 20 bytes")),
        # everything but the newest deleted, no stop
        QueueDecision("Plain", 3, f"{plain}/3", _names(0, 40, 80), tuple(
            _cq(f"{plain}/3", "Plain", 3, n, Verdict.DELETE, Reason.BELOW_COMMITLOG_MIN_OFFSET,
                identity=_ident(40, 3_000_000 + i), end_offset=5 + i)
            for i, n in enumerate(_names(0, 40))
        ), None),
        # a held stop: its reason says why (holds put it there)
        QueueDecision("Plain", 4, f"{plain}/4", _names(0, 40), (),
                      _cq(f"{plain}/4", "Plain", 4, _names(0)[0], Verdict.KEEP,
                          Reason.HELD_BY_OTHER_PROCESS, identity=_ident(40, 1), end_offset=3)),
    )  # fmt: skip
    index = (
        Decision(Kind.INDEX, "/store/index/20240101000000000", Verdict.DELETE,
                 Reason.BELOW_COMMITLOG_MIN_OFFSET, _ident(400, 86_400_000 * 3), 0, 50),
        Decision(Kind.INDEX, "/store/index/20240102000000000", Verdict.KEEP, Reason.NEWEST_FILE,
                 _ident(400, 1_000)),
    )  # fmt: skip
    qp = (
        QueuesPlan(1024, 0, True, queues, queue_count=9, file_count=19, index=index,
                   problems=("Plain/12/00000000000000000000: short read",))
        if examined
        else QueuesPlan(1024, 1024, False, skip_reason=Reason.MIN_OFFSET_UNCHANGED)
    )  # fmt: skip
    return Plan(
        now_ms=NOW, timezone="Asia/Shanghai", config_hash="abc123", store_root="/st\u00f6re",
        commitlog=CommitLogPlan(triggers, cl, 0, 1024), queues=qp,
        foreign=tuple((f"/store/commitlog/junk{i}", "name_not_in_naming_scheme")
                      for i in range(foreign)),
        errors=("/store/x: \u00e9chec",), manual=True,
    )  # fmt: skip


@pytest.mark.parametrize(
    "plan",
    [hand_plan(), hand_plan(foreign=25), hand_plan(examined=False, foreign=0)],
    ids=["examined", "many-foreign", "not-examined"],
)
def test_hand_made_plans_render_as_their_plain_forms(plan: Plan) -> None:
    assert_same_output(plan)
    text = json.loads(streamed(plan))
    assert text["schema_version"] == SCHEMA_VERSION and text["type"] == "plan"
    assert text["kind"] == "rocketmq"


def test_queue_rows_come_in_queue_order_however_the_batches_fall(monkeypatch) -> None:
    from retentiond.kinds.rocketmq import plan as plan_module

    monkeypatch.setattr(plan_module, "_BATCH", 2)  # a piece every second queue
    assert_same_output(hand_plan())
