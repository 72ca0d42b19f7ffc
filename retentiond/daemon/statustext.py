"""The daemon's status document rendered for people: `retentiond status` and systemd STATUS=.

Works on the JSON document (not on live objects) so the client renders exactly what
`status --json` would print, and a test can feed it a hand-written document. The store kind's
lines come from its voice (``engine.kind.KindVoice``): the daemon passes its own kind's, a
client finds it by the ``store_kind`` the document names.
"""

from __future__ import annotations

from typing import Any

from retentiond.engine.kind import KindVoice
from retentiond.kinds import DEFAULT_VOICE, VOICES, voice_named
from retentiond.text.units import human_age, human_bytes


def _ago(now_ms: int, then_ms: object) -> str:
    if not isinstance(then_ms, int):
        return "never"
    return f"{human_age(now_ms - then_ms)} ago"


def _in(now_ms: int, then_ms: object) -> str:
    if not isinstance(then_ms, int):
        return "not scheduled"
    return "now" if then_ms <= now_ms else f"in {human_age(then_ms - now_ms)}"


def deleted_text(counts: dict[str, Any] | None) -> str:
    """``commitlog 3 (192.0 KiB), consumequeue 0, index 1 (5.4 KiB)`` from round counts."""
    parts = []
    for kind, c in (counts or {}).items():
        files = c.get("files", 0)
        parts.append(f"{kind} {files}" + (f" ({human_bytes(c.get('bytes'))})" if files else ""))
    return ", ".join(parts) or "nothing"


def _deleted(last: dict[str, Any] | None) -> str:
    return deleted_text(last.get("deleted")) if last else "nothing yet"


def _files_deleted(last: dict[str, Any] | None) -> tuple[int, int]:
    counts = (last or {}).get("deleted") or {}
    return (
        sum(c.get("files", 0) for c in counts.values()),
        sum(c.get("bytes", 0) for c in counts.values()),
    )


def _voice(doc: dict[str, Any], voice: KindVoice | None) -> KindVoice:
    return voice or voice_named(doc.get("store_kind")) or DEFAULT_VOICE


def summary_line(doc: dict[str, Any], voice: KindVoice | None = None) -> str:
    """One line for systemd's STATUS= (shown by `systemctl status`); ``voice``: the store
    kind's (default: the one the document names)."""
    rounds = doc["rounds"]
    last = rounds.get("last")
    files, size = _files_deleted(last)
    parts = [f"{rounds['count']} rounds"]
    if last:
        parts.append(f"last deleted {files} files ({human_bytes(size)})")
    parts += _voice(doc, voice).summary_parts(doc)
    if doc.get("manual_rounds_left"):
        parts.append(f"manual rounds left {doc['manual_rounds_left']}")
    if rounds.get("last_error"):
        parts.append(f"error: {rounds['last_error']}")
    for name, endpoint in (doc.get("endpoints") or {}).items():
        if endpoint and not endpoint.get("up"):
            parts.append(f"{name} listener down, re-creating")
    return "; ".join(parts)


def render(doc: dict[str, Any], voice: KindVoice | None = None) -> str:
    """`retentiond status`; ``voice``: the store kind's (default: the one the document names)."""
    now = int(doc["now_ms"])
    cfg = doc["config"]
    rounds = doc["rounds"]
    missed = rounds["missed"]
    reloads = cfg["reloads"]
    state = "ready" if doc.get("ready") else "NOT READY (the store has not been read yet)"
    if doc.get("dry_run"):
        state += ", DRY RUN (nothing is deleted)"
    lines = [
        f"retentiond for {doc['broker']} (cluster {doc['cluster']}), pid {doc['pid']}, "
        f"up {human_age(now - int(doc['started_ms']))}, {state}",
        f"config    {cfg['path']}",
        f"          version {cfg['version']}, hash {cfg['hash']}; reloads: "
        f"{reloads['applied']} applied, {reloads['unchanged']} unchanged, "
        f"{reloads['refused']} refused",
    ]
    last_reload = cfg.get("last_reload")
    if last_reload:
        lines.append(
            f"          last reload {_ago(now, last_reload['time_ms'])} "
            f"({last_reload['trigger']}): {last_reload['outcome']}"
        )
        for item in [*last_reload.get("changes", []), *last_reload.get("problems", [])]:
            lines.append(f"            {item}")
    if doc.get("settings_pending"):
        lines.append("          new settings take effect at the next round")
    lines.append(f"store     {doc['store']}")
    last = rounds.get("last")
    running = rounds.get("running_since_ms")
    lines += [
        f"rounds    {rounds['count']} done ({rounds['failed']} failed), every "
        f"{rounds['interval_ms'] / 1000:g}s; last {_ago(now, (last or {}).get('time_ms'))}"
        + (f", took {last['duration_ms'] / 1000:.2f}s" if last else "")
        + (f"; running for {human_age(now - running)}" if running else "")
        + f"; next {_in(now, rounds.get('next_ms'))}",
        f"          last deleted: {_deleted(last)}"
        + (f"; {last['failures']} not deleted" if last and last.get("failures") else ""),
        f"          missed runs: {missed['total']} (coalesced {missed['coalesced']}, skipped "
        f"while a round ran {missed['overlap']}, misfired {missed['misfire']})",
    ]
    if rounds.get("last_error"):
        lines.append(f"          ERROR: {rounds['last_error']}")
    manual = doc.get("manual_rounds_left", 0)
    manual_line = f"manual    {f'{manual} manual rounds left' if manual else 'none requested'}" + (
        " (starts with the next round)" if doc.get("manual_requested") else ""
    )
    lines += _voice(doc, voice).status_lines(doc, manual_line)
    lines.append(risk_line(doc.get("groups_at_risk"), now))
    hung = doc.get("hung_files") or []
    if not hung:
        lines.append("hung      none")
    for i, h in enumerate(hung):
        lines.append(
            f"{'hung' if i == 0 else '':<10}{h['file']} (failing for "
            f"{human_age(now - h['first_attempt_ms'])}: {h.get('error')})"
        )
    lines += _safety_lines(doc.get("safety"), now)
    lines += endpoint_lines(doc.get("endpoints"))
    return "\n".join(lines)


def risk_line(risks: list[dict[str, Any]] | None, now: int) -> str:
    """The groups with unread messages in files the configuration will delete, the most at
    risk first (``groups_at_risk``), and when the first of their files goes."""
    if risks is None:
        return "at risk   unknown (no consumer progress read)"
    if not risks:
        return "at risk   no group has unread messages in files that will be deleted"
    parts = []
    for r in risks:
        when = r.get("first_loss_ms")
        first = (
            ""
            if when is None
            else (", the first goes now" if when <= now else f", the first goes {_in(now, when)}")
        )
        parts.append(f"{r['group']} {r['messages']} unread{first}")
    return "at risk   " + "; ".join(parts)


def endpoint_lines(endpoints: dict[str, Any] | None) -> list[str]:
    """The control socket and /metrics: up or being re-created, restarts, failed clients."""
    lines = []
    for name, e in (endpoints or {}).items():
        if not e:
            lines.append(f"{name:<10}not serving")
            continue
        errors = ", ".join(f"{k} {v}" for k, v in sorted(e.get("errors", {}).items()))
        text = "up" if e.get("up") else f"down, re-creating ({e.get('last_error')})"
        if e.get("restarts"):
            text += f", re-created {e['restarts']} times"
        lines.append(f"{name:<10}{text}; failed clients: {errors or 'none'}")
    return lines


def _share(used: object, limit: object, limit_name: str) -> str:
    if not isinstance(used, int):
        return "unreadable"
    if not isinstance(limit, int) or limit <= 0:
        return f"{used:,} ({limit_name}: unknown or unlimited)"
    return f"{used:,} ({100 * used / limit:.1f} % of {limit_name} {limit:,})"


def owner_lines(owner: dict[str, Any], now: int) -> list[str]:
    """The broker process beside us (engine.proc.owner): who it is and how near its limits."""
    p = owner.get("process")
    if not p:
        return []
    voice = voice_named(p.get("type"))
    kind = f"{voice.product} broker" if voice is not None else ""
    products = " or ".join(v.product for v in VOICES)
    who = f"{kind} ({p['main_class']})" if kind else f"NOT a {products} broker"
    started = p.get("start_time_s")
    up = f", up {human_age(now - int(started * 1000))}" if isinstance(started, int | float) else ""
    maps = _share(p.get("memory_maps"), owner.get("vm_max_map_count"), "vm.max_map_count")
    fds = _share(p.get("open_fds"), p.get("max_fds"), "RLIMIT_NOFILE")
    lines = [
        f"          {who}: {p.get('name') or '?'} as {p.get('user') or '?'}{up}, "
        f"RSS {human_bytes(p.get('rss_bytes'))}",
        f"          maps {maps}; descriptors {fds}",
    ]
    if not kind:
        lines.append(f"          command: {p.get('command')}")
    if p.get("unreadable"):
        lines.append(f"          cannot read: {', '.join(p['unreadable'])}")
    return lines


def _safety_lines(safety: dict[str, Any] | None, now: int) -> list[str]:
    """Owner broker, bytes waiting for release, held files, fault counters (engine.cleaner)."""
    if not safety:
        return []
    owner = safety.get("owner") or {}
    running = owner.get("running")
    state = {True: "running", False: "not running", None: "unknown"}[running]
    pids = ", ".join(str(p) for p in owner.get("pids") or [])
    lines = [f"broker    {state}" + (f" (pid {pids})" if pids else "")]
    if safety.get("proc_view_complete") is False:
        lines[-1] += "; NOT every process is visible: files anyone holds count as held"
    lines += owner_lines(owner, now)
    release = safety.get("pending_release") or {}
    lines.append(
        f"release   {release.get('files', 0)} deleted files still held, "
        f"{human_bytes(release.get('bytes', 0))} not free yet"
    )
    held = safety.get("held_files") or []
    for h in held:
        lines.append(
            f"held      {h['file']} by {h.get('holders') or 'unseen processes'}, first attempt "
            f"{human_age(now - h['first_attempt_ms'])} ago"
        )
    if (safety.get("held_count") or 0) > len(held):
        lines.append(f"held      ... and {safety['held_count'] - len(held)} more")
    for r in safety.get("unlink_refused") or []:
        lines.append(
            f"refused   {r['file']}: {r.get('errno')} ({r.get('attempts')} attempts), next "
            f"attempt in {human_age(max(0, r['next_attempt_ms'] - now))}"
        )
    refused_shown = len(safety.get("unlink_refused") or [])
    if (safety.get("unlink_refused_count") or 0) > refused_shown:
        lines.append(f"refused   ... and {safety['unlink_refused_count'] - refused_shown} more")
    faults = safety.get("faults") or {}
    shown = {k: v for k, v in faults.items() if v}
    lines.append("faults    " + (", ".join(f"{k} {v}" for k, v in shown.items()) or "none"))
    return lines
