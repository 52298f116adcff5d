"""The shared dependency as a lab page and the storm panel show it: status, a session's
window, the headline tiles.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# --- the shared dependency, as a student's lab page sees it ---------------------------------

#: A queue wait p99 at or above this (ms) in the last complete second counts as overloaded.
OVERLOAD_WAIT_MS = 250
#: The per-second counters a lab page gets: the class's totals, never anyone's identity.
SHARED_PAGE_FIELDS = (
    "second", "offered", "calls", "retries", "ok", "calls_ok", "error", "shed", "skipped",
    "limited", "timeout", "wait_p99_ms",
)  # fmt: skip


def shared_status(seconds: Sequence[dict[str, Any]], model: dict[str, Any], now_us: int) -> dict:
    """The shared dependency's state for a student: ``triggered`` while a trigger runs (by
    the model's clock); else ``overloaded`` when, in the last complete second, an attempt was
    shed, skipped (it could not start before its deadline), rate-limited (429) or timed out
    at its client, or the
    queue wait p99 was at least :data:`OVERLOAD_WAIT_MS`; else ``healthy``. With the reason
    in words."""
    trigger = model.get("trigger")
    if trigger and trigger["from_us"] <= now_us < trigger["until_us"]:
        left = (trigger["until_us"] - now_us) / 1e6
        return {"state": "triggered", "reason": f"{trigger['kind']} trigger, {left:.0f} s left"}
    last = now_us // 1_000_000 - 1
    second = next((s for s in seconds if s["second"] == last), None)
    if second is not None:
        refused = second["shed"] + second["skipped"]
        limited = second.get("limited", 0)
        p99 = second.get("wait_p99_ms")
        if refused or limited or second["timeout"]:
            parts = []
            if refused:
                parts.append(f"{refused} shed")
            if limited:
                parts.append(f"{limited} rate-limited (429)")
            if second["timeout"]:
                parts.append(f"{second['timeout']} timed out")
            return {"state": "overloaded", "reason": " and ".join(parts) + " in the last second"}
        if p99 is not None and p99 >= OVERLOAD_WAIT_MS:
            return {"state": "overloaded", "reason": f"queue wait p99 {p99:g} ms"}
    return {"state": "healthy", "reason": "answering within its capacity"}


def shared_page_message(recent: dict[str, Any]) -> dict[str, Any]:
    """What a lab page in ``shared`` mode gets each second (``labs.selectors.storm.storm_now``):
    the class's per-second totals (:data:`SHARED_PAGE_FIELDS`), the capacity, the latest
    trigger's span and the state (:func:`shared_status`). No session or student is named:
    the page works out its own share from its own journal rows."""
    model = recent["model"]
    trigger = model.get("trigger")
    return {
        "type": "shared",
        "active": True,
        "now": recent["now"],
        "seconds": [{k: s[k] for k in SHARED_PAGE_FIELDS} for s in recent["seconds"]],
        "capacity_per_s": model["capacity_per_s"],
        "trigger": (
            {"kind": trigger["kind"], "from_s": trigger["from_s"], "until_s": trigger["until_s"]}
            if trigger
            else None
        ),
        **shared_status(recent["seconds"], model, recent["now_us"]),
    }


# --- the class's live numbers: one session's window, the panel's headline -------------------

#: Complete seconds over which a session's retry ratio, rate and share are measured: the
#: panel's table, the student's card and the students export all use this window.
SESSION_WINDOW_S = 5
#: The retry budget the panel measures against (retries per attempt).
RETRY_BUDGET = 0.1
#: Complete seconds the headline tiles average over.
HEADLINE_SECONDS = 3
#: Seconds before a trigger whose goodput is the healthy baseline.
BASELINE_SECONDS = 10
#: Goodput back to this share of the baseline (with retries within budget) is recovered.
RECOVERED_GOODPUT = 0.9
#: Seconds without a single attempt that end a run of traffic (a new start is a new run).
RUN_GAP_S = 5


def offered_load_text(sessions: int, rate: int, capacity_per_s: float) -> str:
    """What a class-wide Start traffic will offer, against the capacity, before it starts:
    ``31 sessions x 5 calls/s = 155 calls/s, capacity 200 attempts/s`` (static/js/storm.js
    writes the same sentence as the form's numbers change)."""
    noun = "session" if sessions == 1 else "sessions"
    offered = sessions * rate
    over = ": over capacity before any trigger" if offered > capacity_per_s else ""
    return (
        f"{sessions} {noun} x {rate} calls/s = {offered} calls/s, "
        f"capacity {round(capacity_per_s)} attempts/s{over}"
    )


def session_window(
    own: Sequence[dict[str, Any]], class_offered: int, window_s: int = SESSION_WINDOW_S
) -> dict[str, Any]:
    """One session's figures over complete seconds, from its own per-second counters in
    Redis (``RedisSharedModel.session_seconds``) and the class's offered attempts over the
    same seconds: attempts, retries, their ratio, attempts per second, calls refused by its
    breaker, the latest breaker state seen (None when it made no call) and its share of the
    class's load. The one computation behind the panel's table, the card and the export."""
    attempts = sum(r["offered"] for r in own)
    retries = sum(r["retries"] for r in own)
    state = next((r["state"] for r in reversed(own) if r.get("state")), None)
    return {
        "attempts": attempts,
        "retries": retries,
        "retry_ratio": round(retries / attempts, 4) if attempts else None,
        "attempts_per_s": round(attempts / window_s, 2),
        "fast": sum(r["fast"] for r in own),
        "ok": sum(r["ok"] for r in own),
        "failed": sum(
            r["error"] + r["shed"] + r["skipped"] + r.get("limited", 0) + r["timeout"] for r in own
        ),
        "state": state,
        "share": round(attempts / class_offered, 4) if class_offered else None,
        "class_offered": class_offered,
    }


def student_rows(
    sessions: Sequence[dict[str, Any]], window: dict[str, Any], now: int
) -> list[dict[str, Any]]:
    """The panel's per-student table at ``now``: every session (``storm_sessions``) with its
    figures over the window's complete seconds (:func:`session_window` of the ``window`` a
    read with sessions returns). Rows carry ``now`` so a page can tell which second they
    describe."""
    window_s = window["last"] - window["first"] + 1
    out = []
    for s in sessions:
        own = window["sessions"].get(s["session"], [])
        figures = session_window(own, window["class_offered"], window_s)
        out.append(
            {
                **s,
                "now": now,
                "attempts": figures["attempts"],
                "retries": figures["retries"],
                "attempts_per_s": figures["attempts_per_s"],
                "retry_ratio": figures["retry_ratio"] or 0.0,
                "state": figures["state"] or "idle",
                "fast": figures["fast"],
                "share": figures["share"] or 0.0,
            }
        )
    return out


def session_card(mine: dict[str, Any], window_s: int = SESSION_WINDOW_S) -> dict[str, Any]:
    """A lab page's own part of the shared message (``mine``): its per-second rows for the
    strip chart's share row and its figures over the last ``window_s`` complete seconds
    (:func:`session_window`) for its card."""
    rows = mine["seconds"]
    return {
        "now": mine["now"],
        "seconds": [
            {k: r[k] for k in ("second", "offered", "retries", "fast", "state")} for r in rows
        ],
        "window": session_window(rows[-window_s:], mine["class_offered"], window_s),
    }


# --- the edge: the stable line, the vulnerable band and the load's region -------------------

#: The regions of the class's load against its capacity C and the stable line C / (1 + r).
REGIONS = ("stable", "vulnerable", "over_capacity")


def class_retries(sessions: Sequence[dict[str, Any]]) -> int | None:
    """The class's largest retry count r: the most retries a call may make (``max_attempts``
    - 1) among the sessions on the shared dependency (``storm_sessions``' rows, ``mode`` and
    ``max_attempts``); None when no session calls it."""
    counts = [
        max(0, int(s["max_attempts"]) - 1)
        for s in sessions
        if s.get("mode") == "shared" and s.get("max_attempts") is not None
    ]
    return max(counts) if counts else None


def stable_line(capacity_per_s: float | None, retries: int | None) -> float | None:
    """The load (calls/s) below which the class is stable: ``C / (1 + r)``. Every call may
    cost up to 1 + r attempts once a trigger makes attempts fail, so below this line even a
    class retrying everything stays under the capacity and drains the queue a trigger left;
    above it a trigger can sustain itself (docs/experiments.md, "The tipping point"). None
    without a capacity or without a session on the shared dependency (``retries`` None)."""
    if not capacity_per_s or capacity_per_s <= 0 or retries is None:
        return None
    return capacity_per_s / (1 + max(0, retries))


def load_region(
    load_per_s: float | None, capacity_per_s: float | None, retries: int | None
) -> str | None:
    """Where the load is: ``stable`` below the stable line, ``over_capacity`` above the
    capacity, ``vulnerable`` from the line up to the capacity (with no retries the line is
    the capacity, and only a load of exactly the capacity is vulnerable). None when there is
    no load to place or no line to place it against."""
    stable = stable_line(capacity_per_s, retries)
    if load_per_s is None or stable is None:
        return None
    if load_per_s < stable:
        return "stable"
    if load_per_s > capacity_per_s:
        return "over_capacity"
    return "vulnerable"


def storm_edge(
    seconds: Sequence[dict[str, Any]],
    now: int,
    capacity_per_s: float | None,
    retries: int | None,
) -> dict[str, Any]:
    """The edge as the panel shows it: the capacity, the class's largest retry count, the
    stable line, the load (the calls asked of the shared dependency per second, first
    attempts only, over the last ``HEADLINE_SECONDS`` complete seconds before ``now``: the
    same per-second ``calls`` the chart draws) and its region (:func:`load_region`). With no
    attempt in the last ``RUN_GAP_S`` complete seconds there is no load and no region."""
    rows = sorted((r for r in seconds if r["second"] < now), key=lambda r: r["second"])
    active = [r["second"] for r in rows if r["offered"] > 0]
    load = None
    if active and now - 1 - active[-1] < RUN_GAP_S:
        recent = [r for r in rows if r["second"] >= now - HEADLINE_SECONDS]
        load = sum(r["calls"] for r in recent) / HEADLINE_SECONDS
    return {
        "capacity_per_s": capacity_per_s or None,
        "retries": retries,
        "stable_per_s": stable_line(capacity_per_s, retries),
        "load_per_s": load,
        "region": load_region(load, capacity_per_s, retries),
    }


def _run_start(active: list[int], newest: int) -> int:
    """The first second of the run of traffic ending at ``newest`` (no gap of RUN_GAP_S)."""
    start = newest
    for sec in reversed(active):
        if start - sec > RUN_GAP_S:
            break
        start = sec
    return start


def storm_headline(
    seconds: Sequence[dict[str, Any]],
    trigger: dict[str, Any] | None,
    now: int,
    *,
    capacity_per_s: float | None = None,
    retries: int | None = None,
) -> dict[str, Any]:
    """The storm panel's tiles and the recovery clock's state, from the class's per-second
    counters, complete seconds only (before ``now``); ``edge`` is the load's tile and the
    chart's stable line (:func:`storm_edge`, from ``capacity_per_s`` and the class's
    largest retry count ``retries``).

    States: ``no_traffic`` (no attempt in the last RUN_GAP_S complete seconds; nothing else is
    measured), ``healthy``, ``triggered``, ``not_recovered`` (``recovery_s`` counts up from the
    trigger's end) and ``recovered`` (retries within the budget and goodput at RECOVERED_GOODPUT
    of the baseline). Only a trigger overlapping the current run counts. The baseline is the mean
    goodput of the run's BASELINE_SECONDS before the trigger, else the calls asked for per
    second; goodput is None while no call is asked for, not a 0 % that reads as an outage.
    Definitions: docs/live-page.md, "The tiles and the recovery clock".
    """
    rows = sorted((r for r in seconds if r["second"] < now), key=lambda r: r["second"])
    active = [r["second"] for r in rows if r["offered"] > 0]
    out: dict[str, Any] = {
        "state": "no_traffic",
        "amplification": None,
        "retry_ratio": None,
        "goodput_share": None,
        "recovery_s": None,
        "run_start": None,
        "baseline": None,
        "trigger": None,
        "now": now,
        "edge": storm_edge(seconds, now, capacity_per_s, retries),
    }
    if not active or now - 1 - active[-1] >= RUN_GAP_S:
        return out
    run_start = _run_start(active, active[-1])
    run = [r for r in rows if r["second"] >= run_start]
    recent = rows[-HEADLINE_SECONDS:]
    offered = sum(r["offered"] for r in recent)
    calls = sum(r["calls"] for r in recent)
    retries = sum(r["retries"] for r in recent)
    goodput = sum(r["calls_ok"] for r in recent) / len(recent)
    current = trigger if trigger and trigger["until_s"] > run_start else None
    base = None
    if current:
        before = [
            r for r in run
            if current["from_s"] - BASELINE_SECONDS <= r["second"] < current["from_s"]
            and r["calls"] > 0
        ]  # fmt: skip
        if before:
            base = sum(r["calls_ok"] for r in before) / len(before)
    if not base:
        asked = [r for r in run if r["calls"] > 0][-HEADLINE_SECONDS:]
        base = sum(r["calls"] for r in asked) / len(asked) if asked else None
    out.update(
        run_start=run_start,
        baseline=base,
        amplification=offered / calls if calls else None,
        retry_ratio=retries / offered if offered else None,
        goodput_share=goodput / base if base and calls else None,
        state="healthy",
    )
    if current is None:
        return out
    out["trigger"] = {k: current[k] for k in ("kind", "from_s", "until_s")}
    if now < current["until_s"]:
        out["state"] = "triggered"
        out["recovery_s"] = None
        return out
    end = current["until_s"]
    back = next(
        (
            r for r in run
            if r["second"] >= int(end) and r["offered"] > 0
            and r["retries"] / r["offered"] <= RETRY_BUDGET
            and base and r["calls_ok"] >= RECOVERED_GOODPUT * base
        ),
        None,
    )  # fmt: skip
    if back is not None:
        out["state"] = "recovered"
        out["recovery_s"] = max(0, round(back["second"] - end))
    else:
        out["state"] = "not_recovered"
        out["recovery_s"] = max(0, round(now - end))
    return out
