"""Consumer progress as the broker leaves it on disk (``shared/spec/consumers.md`` §A).

Read every round, beside the files the round judges: ``config/consumerOffset.json`` (falling
back to its ``.bak`` when the main file is torn, as the broker's ``ConfigManager.load`` does),
``config/subscriptionGroup.json`` (which groups exist and may consume), ``config/delayOffset.json``
(the schedule topic's levels), the transaction system group's offsets (half messages), and the
timer store's checkpoint ``config/timercheck`` with every pending unit of ``timerlog/``.

The broker writes these with fastjson 1.x, whose integer map keys are *unquoted*
(``{0:250,1:250}``): no strict JSON parser accepts that, so ``parse_fastjson`` quotes them
first. Nothing here raises on bad data: a missing file is "progress unknown", a corrupt one a
problem line; what is unknown is never read as "consumed".
"""

from __future__ import annotations

import json
import os
import re
import struct
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from retentiond.engine.loss import Progress

CONSUMER_OFFSET = "consumerOffset.json"
LMQ_CONSUMER_OFFSET = "lmqConsumerOffset.json"
SUBSCRIPTION_GROUP = "subscriptionGroup.json"
DELAY_OFFSET = "delayOffset.json"
TIMER_CHECK = "timercheck"

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_GROUP = "CID_RMQ_SYS_TRANS"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TIMER_TOPIC = "rmq_sys_wheel_timer"

# A key position (after "{" or ","), a bare integer, then ":"; strings are matched first and
# left alone, so a "{0:" inside a string value is never touched.
_BARE_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)')
# The same for the broker's own output (no blank around a key), without a Python call per
# key: string literals split off, then a literal quote inserted after each "{" or "," that a
# bare integer and ":" follow, and before each ":" a digit precedes (outside a string only a
# bare key has that). A key written otherwise leaves the text unparsable: the exact way then.
_STRING = re.compile(r'("(?:[^"\\]|\\.)*")')
_OPEN_KEY = re.compile(r"\{(?=-?\d+:)")
_NEXT_KEY = re.compile(r",(?=-?\d+:)")
_KEY_COLON = re.compile(r"(?<=\d):")


class FastjsonError(ValueError):
    pass


def _quote(m: re.Match[str]) -> str:
    if m.group(1) is None:
        return m.group(0)
    return f'{m.group(1)}"{m.group(2)}"{m.group(3)}'


def _fast_quote(text: str) -> str:
    parts = _STRING.split(text)
    parts[::2] = [
        _KEY_COLON.sub('":', _NEXT_KEY.sub(',"', _OPEN_KEY.sub('{"', p))) for p in parts[::2]
    ]
    return "".join(parts)


def parse_fastjson(text: str) -> object:
    """A fastjson 1.x document: JSON whose integer map keys may be bare (``{0:250}``)."""
    try:
        return json.loads(_fast_quote(text))
    except (json.JSONDecodeError, RecursionError):
        pass
    try:
        return json.loads(_BARE_KEY.sub(_quote, text))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise FastjsonError(str(exc)) from None


@dataclass(frozen=True)
class ConfigFile:
    """One fastjson config file as the broker would load it."""

    doc: Mapping[str, object] | None  # None: nothing usable (missing, or corrupt without .bak)
    progress: Progress  # KNOWN (main or .bak read), UNKNOWN (neither there), CORRUPT
    problem: str | None = None  # a line for the plan when not simply read


def _read_text(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise FastjsonError(f"not UTF-8: {exc.reason}") from None


def read_config_file(path: Path) -> ConfigFile:
    """``path`` parsed, else its ``.bak`` (the previous generation), as ConfigManager.load.

    An empty or unparsable main file is torn (the broker truncates and rewrites in place);
    the ``.bak`` then holds the last good generation, and the plan says it was used.
    """
    bak = path.with_name(path.name + ".bak")
    why: str | None = None
    try:
        text = _read_text(path)
        if text is None:
            why = "missing"
        elif not text.strip():
            why = "empty (torn write)"
        else:
            doc = parse_fastjson(text)
            if isinstance(doc, dict):
                return ConfigFile(doc, Progress.KNOWN)
            why = "not a JSON object"
    except (OSError, FastjsonError) as exc:
        why = f"unreadable ({exc})"
    try:
        text = _read_text(bak)
        if text is not None and text.strip():
            doc = parse_fastjson(text)
            if isinstance(doc, dict):
                return ConfigFile(
                    doc, Progress.KNOWN, f"{path.name} {why}: read {bak.name} instead"
                )
            bak_why = "not a JSON object"
        else:
            bak_why = "missing" if text is None else "empty"
    except (OSError, FastjsonError) as exc:
        bak_why = f"unreadable ({exc})"
    if why == "missing" and bak_why == "missing":
        return ConfigFile(None, Progress.UNKNOWN, f"{path.name} missing: progress unknown")
    return ConfigFile(
        None,
        Progress.CORRUPT,
        f"{path.name} {why} and {bak.name} {bak_why}: progress unknown",
    )


def is_directory_name(name: str) -> bool:
    """Whether ``name`` can name one directory (a topic's under ``consumequeue/``, a retry
    topic's after its group): not empty, not "." nor "..", no "/" and no NUL. A topic named
    otherwise has no queues of its own; reading it would reach other directories or fail."""
    return name not in ("", ".", "..") and "/" not in name and "\x00" not in name


def _int_map(raw: object) -> dict[int, int] | None:
    if not isinstance(raw, dict):
        return None
    if all(type(v) is int for v in raw.values()):  # the usual map: one pass, no checks per item
        try:
            return {int(k): v for k, v in raw.items()}
        except ValueError:
            return None
    out: dict[int, int] = {}
    for k, v in raw.items():
        try:
            key = int(k)
        except ValueError:
            return None
        if isinstance(v, bool) or not isinstance(v, int | str):
            return None
        try:
            out[key] = int(v)  # RocksDB exports write longs past 2^53 as strings
        except ValueError:
            return None
    return out


@dataclass(frozen=True)
class TimerProgress:
    last_read_time_ms: int
    last_timer_queue_offset: int
    # CommitLog offsets of the timerlog units still pending (slot time >= lastReadTimeMs),
    # sorted, so a file's count is two bisections.
    pending_phy: array[int] = field(default_factory=lambda: array("q"))


@dataclass(frozen=True)
class ConsumerProgress:
    """What the broker's config files say of who still needs what."""

    progress: Progress
    # topic -> group -> queue id -> next logical index to consume
    offsets: Mapping[str, Mapping[str, Mapping[int, int]]] = field(default_factory=dict)
    # group -> consumeEnable; None: subscriptionGroup.json not read (all taken as enabled)
    enabled: Mapping[str, bool] | None = None
    delay: Mapping[int, int] | None = None  # level (1-based) -> first undelivered index
    timer: TimerProgress | None = None
    problems: tuple[tuple[str, str], ...] = ()  # (path, text)

    def group_offsets(self, group: str, topic: str) -> Mapping[int, int] | None:
        return self.offsets.get(topic, {}).get(group)


TIMER_UNIT = struct.Struct(">iqiqiqiiq")  # 52 bytes: size prevPos magic wt delay offPy szPy ...
TIMER_UNIT_SIZE = TIMER_UNIT.size
_BLANK_MAGIC = -875286124  # 0xCBD43194 as an int32
_TIMERCHECK = struct.Struct(">qqqq")


def read_timercheck(path: Path) -> tuple[TimerProgress | None, str | None]:
    try:
        with open(path, "rb") as fh:
            data = fh.read(_TIMERCHECK.size)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    if len(data) < _TIMERCHECK.size:
        return None, f"short ({len(data)} bytes)"
    last_read, _flush_pos, queue_offset, _master = _TIMERCHECK.unpack(data)
    return TimerProgress(last_read, queue_offset), None


def pending_timer_units(
    timerlog: Path, last_read_time_ms: int, precision_ms: int
) -> tuple[array[int], list[tuple[str, str]]]:
    """CommitLog offsets of every timerlog unit whose slot time is at or after the
    checkpoint's read time: a full scan of every file, since done and pending units
    interleave (§A.4.3). Stops a file at its blank or unwritten tail."""
    found = array("q")
    problems: list[tuple[str, str]] = []
    try:
        names = sorted(n for n in os.listdir(timerlog) if len(n) == 20 and n.isdigit())
    except FileNotFoundError:
        return found, problems
    except OSError as exc:
        return found, [(str(timerlog), f"unreadable ({exc.strerror}): pending timers unknown")]
    p = max(1, precision_ms)
    for name in names:
        path = timerlog / name
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            problems.append((str(path), f"unreadable ({exc.strerror}): pending timers unknown"))
            continue
        usable = len(data) - len(data) % TIMER_UNIT_SIZE
        for size, _prev, magic, wt, delay, off_py, _sz, _h, _r in TIMER_UNIT.iter_unpack(
            memoryview(data)[:usable]
        ):
            if magic == _BLANK_MAGIC or size != TIMER_UNIT_SIZE or (magic | 0xF) != 0xF:
                break
            t = wt + delay
            if (t // p) * p >= last_read_time_ms:
                found.append(off_py)
    return array("q", sorted(found)), problems


def read_progress(root: Path, timer_precision_ms: int = 1000) -> ConsumerProgress:
    """Every progress file of the store at ``root``; never raises for what is on disk."""
    config = root / "config"
    problems: list[tuple[str, str]] = []
    for rocks in ("rdb", "consumerOffsets"):
        if os.path.exists(config / rocks / "CURRENT"):
            problems.append(
                (str(config / rocks), "offsets kept in RocksDB are not read: progress unknown")
            )
            return ConsumerProgress(Progress.UNKNOWN, problems=tuple(problems))
    main = config / CONSUMER_OFFSET
    lmq = config / LMQ_CONSUMER_OFFSET
    source = lmq if (os.path.exists(lmq) and not os.path.exists(main)) else main
    got = read_config_file(source)
    if got.problem:
        problems.append((str(source), got.problem))
    offsets: dict[str, dict[str, dict[int, int]]] = {}
    state = got.progress
    if got.doc is not None:
        table = got.doc.get("offsetTable", {})
        if not isinstance(table, dict):
            problems.append((str(source), "offsetTable is not an object: progress unknown"))
            state = Progress.CORRUPT
            table = {}
        bad = unnamed = 0
        for key, value in table.items():
            parts = key.split("@")
            while parts and parts[-1] == "":
                parts.pop()  # Java's split drops trailing empty strings
            queues = _int_map(value)
            if len(parts) != 2 or queues is None:
                bad += 1
                continue
            if not all(map(is_directory_name, parts)):
                unnamed += 1
                continue
            offsets.setdefault(parts[0], {})[parts[1]] = queues
        if bad:
            problems.append((str(source), f"{bad} entries not topic@group -> queue offsets"))
        if unnamed:
            problems.append(
                (
                    str(source),
                    f"{unnamed} entries name a topic or group that cannot be a directory name:"
                    " skipped",
                )
            )
    enabled: dict[str, bool] | None = None
    subs = read_config_file(config / SUBSCRIPTION_GROUP)
    if subs.doc is not None:
        table = subs.doc.get("subscriptionGroupTable", {})
        if isinstance(table, dict):
            enabled = {
                str(name): not (isinstance(c, dict) and c.get("consumeEnable") is False)
                for name, c in table.items()
            }
    if subs.problem and (subs.progress is not Progress.UNKNOWN or offsets):
        problems.append(
            (str(config / SUBSCRIPTION_GROUP), subs.problem + " (groups taken as enabled)")
        )
    delay: dict[int, int] | None = None
    if os.path.isdir(root / "consumequeue" / SCHEDULE_TOPIC):
        dly = read_config_file(config / DELAY_OFFSET)
        if dly.doc is not None:
            delay = _int_map(dly.doc.get("offsetTable", {}))
            if delay is None:
                problems.append(
                    (str(config / DELAY_OFFSET), "offsetTable unreadable: delay levels unknown")
                )
        elif dly.problem:
            problems.append((str(config / DELAY_OFFSET), dly.problem + ": delay levels unknown"))
    timer: TimerProgress | None = None
    timerlog = root / "timerlog"
    if os.path.isdir(timerlog) or os.path.isdir(root / "consumequeue" / TIMER_TOPIC):
        cp, why = read_timercheck(config / TIMER_CHECK)
        if cp is None:
            what = why or "missing"
            problems.append((str(config / TIMER_CHECK), f"{what}: pending timers unknown"))
        else:
            units, trouble = pending_timer_units(timerlog, cp.last_read_time_ms, timer_precision_ms)
            problems.extend(trouble)
            timer = TimerProgress(cp.last_read_time_ms, cp.last_timer_queue_offset, units)
    return ConsumerProgress(state, offsets, enabled, delay, timer, tuple(problems))
