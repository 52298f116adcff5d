"""Burst history, replay and compare: event rows, timelines and diff tables."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from html import escape as _escape
from typing import Any

from django.utils.safestring import SafeString, mark_safe

from labs.engine.replay import diff_rows
from labs.journal.rows import kind_label, row_tone

# --- replay and compare ----------------------------------------------------------------------


def burst_event_rows(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One burst's events (journal payloads, or a replay's engine events as dicts) as the
    replay page lists them, oldest first: time from the burst's start, kind, tone and the
    explanation sentence."""
    items = list(events)
    times = [_event_ms(e) for e in items]
    t0 = next((t for e, t in zip(items, times, strict=True) if e.get("kind") == "burst_start"), 0)
    t0 = t0 if t0 is not None else (min((t for t in times if t is not None), default=0))
    return [
        {
            "n": i,
            "kind": e.get("kind") or "",
            "kind_label": kind_label(e.get("kind")),
            "tone": row_tone(e),
            "t_ms": round((t or t0) - t0, 1),
            "message": e.get("message") or e.get("explain") or "",
        }
        for i, (e, t) in enumerate(zip(items, times, strict=True), 1)
    ]


def replay_rows_html(rows: Iterable[dict[str, Any]]) -> SafeString:
    """The ``<li>`` of each :func:`burst_event_rows` row, escaped, in one string: a replay
    lists a hundred or more rows, and a template partial per row would be most of a what-if
    answer's time (docs/scaling.md, "Figures behind the code")."""
    return mark_safe(  # noqa: S308 - every value below is escaped
        "".join(
            f'<li class="journal-row tone-{_escape(r["tone"])}" data-kind="{_escape(r["kind"])}">'
            f'<span class="j-time">+{r["t_ms"]} ms</span> '
            f'<span class="j-kind">{_escape(str(r["kind_label"]))}</span> '
            f'<span class="j-msg">{_escape(r["message"])}</span></li>'
            for r in rows
        )
    )


def _event_ms(event: dict[str, Any]) -> float | None:
    value = event.get("t_ms", event.get("at_ms"))
    return float(value) if value is not None else None


def _burst_span(events: list[dict[str, Any]]) -> tuple[float, float]:
    """(start, end) in the events' own clock's ms: the first burst_start, the last burst_end
    (a scenario run has several bursts)."""
    times = [t for t in (_event_ms(e) for e in events) if t is not None]
    start = next((_event_ms(e) for e in events if e.get("kind") == "burst_start"), None)
    ends = [_event_ms(e) for e in events if e.get("kind") == "burst_end"]
    end = ends[-1] if ends else None
    start = start if start is not None else min(times, default=0.0)
    end = end if end is not None else max(times, default=start)
    return start, end


#: What a timeline chart reads of an event (static/js/lab/timeline.js), and of its data.
_TIMELINE_FIELDS = ("kind", "call", "burst", "attempt", "outcome", "error", "latency_ms",
                    "backoff_ms", "state_from", "state_to")  # fmt: skip
_TIMELINE_DATA = ("host", "probe", "breakers", "first_call", "size", "dependency")


def _timeline_event(seq: int, event: dict[str, Any], start: float) -> dict[str, Any]:
    """One event as the timeline chart reads it: ``t`` in ms from the run's start."""
    item = {key: event[key] for key in _TIMELINE_FIELDS if event.get(key) is not None}
    data = event.get("data") or {}
    item |= {"seq": seq, "t": round((_event_ms(event) or start) - start, 3),
             "data": {key: data[key] for key in _TIMELINE_DATA if data.get(key) is not None}}  # fmt: skip
    return item


def replay_timelines(bursts: Sequence[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """The data of several timeline charts drawn on one time axis by the page's script
    (static/js/lab/replay.js), so a replay lines up under the burst it replays: per chart its
    title, attempts, length in ms, the id of its ``json_script`` block and its events.

    ``bursts`` is (title, events) pairs; the events are journal payloads or engine event dicts.
    """
    charts = []
    for number, (title, events) in enumerate(bursts, 1):
        start, end = _burst_span(events)
        drawn = [e for e in events if e.get("call") is not None or e.get("state_to")
                 or str(e.get("kind") or "").startswith("burst_")]  # fmt: skip
        charts.append(
            {
                "title": title,
                "data_id": f"replay-timeline-{number}-data",
                "events": [_timeline_event(seq, e, start) for seq, e in enumerate(drawn, 1)],
                "total_ms": round(end - start, 1),
                "attempts": sum(1 for e in events if e.get("kind") == "attempt"),
            }
        )
    return charts


def diff_table(a: dict[str, float], b: dict[str, float]) -> list[dict[str, Any]]:
    """The diff table of two runs' metrics (:meth:`labs.engine.replay.Replay.metrics`), its
    numbers as text (``+2``, ``-350 ms``), each row with a tone saying which way the change
    went (fewer attempts or failures reads as better)."""
    better_when_lower = {"failed", "attempts", "dependency_hits", "waiting_ms", "total_ms"}
    out = []
    for row in diff_rows(a, b):
        unit = f" {row['unit']}" if row["unit"] else ""

        def num(x):
            return f"{x:g}" if isinstance(x, (int, float)) else str(x)

        delta = row["delta"]
        tone = "same"
        if delta:
            lower = delta < 0
            tone = "better" if lower == (row["key"] in better_when_lower) else "worse"
            if row["key"] == "fast_failed":
                tone = "note"
        out.append(
            {
                "key": row["key"],
                "label": row["label"],
                "a": num(row["a"]) + unit,
                "b": num(row["b"]) + unit,
                "delta": ("+" if delta > 0 else "") + num(delta) + unit,
                "tone": tone,
            }
        )
    return out


#: The comparison presets (labs.engine.replay.PRESETS) in words: each is a change over the
#: scenario's own policy.
PRESET_LABELS = {
    "defaults": "The lesson's own policy, unchanged",
    "no-retries": "No retries: one attempt per call",
    "retries-no-jitter": "Up to 4 attempts, backoff without jitter",
    "full-jitter": "Up to 4 attempts, backoff with full jitter",
    "retry-budget": "Up to 4 attempts within a retry budget (10 % of calls)",
    "threshold-1": "The breaker opens after 1 failure",
    "threshold-5": "The breaker opens after 5 failures",
}


def policy_choice_label(token: str, choices: dict[str, Any]) -> str:
    """The words for a comparison's picked policy (``token``, as the pickers offer it, see
    :func:`labs.selectors.replay.compare_choices`); "a policy written as JSON" for the rest."""
    for group in ("presets", "mine", "bursts"):
        for value, label in choices.get(group, ()):
            if value == token:
                return label
    for title, options in choices.get("steps", ()):
        for value, label in options:
            if value == token:
                return f"{title}: {label}"
    return "a policy written as JSON"


def shared_diff_table(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures of two runs on the shared dependency's model
    (:func:`labs.experiments.metastable.figures_for`) side by side, each row with a tone
    saying which way B went (a quicker recovery, fewer retries and less waste read better)."""

    def recovery(m: dict[str, Any]) -> str:
        return (
            "not within the run" if m["recovery_s"] is None else f"after {m['recovery_s']}\u00a0s"
        )

    def rank(m: dict[str, Any]) -> float:
        return math.inf if m["recovery_s"] is None else m["recovery_s"]

    rows = [
        ("recovery_s", "back to 90 % of the healthy goodput", recovery(a), recovery(b),
         rank(b) - rank(a) if rank(a) != rank(b) else 0),
        ("below_20_s", "goodput under 20 % after the trigger", f"{a['below_20_s']}\u00a0s",
         f"{b['below_20_s']}\u00a0s", b["below_20_s"] - a["below_20_s"]),
        ("retries_per_call", "retries per call", f"{a['retries_per_call']:g}",
         f"{b['retries_per_call']:g}", b["retries_per_call"] - a["retries_per_call"]),
        ("peak_over_baseline", "busiest second's load over the healthy load",
         f"{a['peak_over_baseline']:g}\u00a0x", f"{b['peak_over_baseline']:g}\u00a0x",
         b["peak_over_baseline"] - a["peak_over_baseline"]),
        ("shed", "attempts shed by the queue", f"{a['shed']:,}", f"{b['shed']:,}",
         b["shed"] - a["shed"]),
        ("wasted_ms", "server time spent for callers who had given up",
         f"{a['wasted_ms'] / 1000:.1f}\u00a0s", f"{b['wasted_ms'] / 1000:.1f}\u00a0s",
         b["wasted_ms"] - a["wasted_ms"]),
        ("calls_ok", "calls that succeeded", f"{a['calls_ok']:,}", f"{b['calls_ok']:,}",
         -(b["calls_ok"] - a["calls_ok"])),
    ]  # fmt: skip
    out = []
    for key, label, left, right, worse_by in rows:
        tone = "same" if not worse_by else ("worse" if worse_by > 0 else "better")
        out.append({"key": key, "label": label, "a": left, "b": right, "tone": tone})
    return out


#: How the shared model's trigger reads after "the dependency" (MetastableParams.trigger).
_TRIGGER_WORDS = {"down": "down", "slow": "slow", "capacity": "at reduced capacity"}


def shared_goodput_series(result: dict[str, Any]) -> dict[str, Any]:
    """The shared comparison's goodput chart as the page's script draws it on uPlot
    (static/js/lab/goodput.js), handed over in a ``json_script`` block: calls succeeded per
    second for A and B (``x`` is each second's middle), the healthy baseline, the trigger's
    span and the words of its titles, axes and legend."""
    params = result["params"]
    a, b = result["a"], result["b"]
    return {
        "x": [second + 0.5 for second in range(params.duration_s)],
        "a": list(a["goodput_per_s"]),
        "b": list(b["goodput_per_s"]),
        "baseline": a["baseline_goodput"],
        "duration_s": params.duration_s,
        "trigger": {
            "from_s": params.trigger_at_s,
            "until_s": params.trigger_at_s + params.trigger_s,
            "label": f"trigger: {_TRIGGER_WORDS.get(params.trigger, params.trigger)}",
        },
        "labels": {
            "x": "seconds into the run",
            "y": "calls succeeded / s",
            "second": "second",
            "a": "policy A",
            "b": "policy B",
            "baseline": "healthy rate",
        },
    }


def shared_goodput_summary(result: dict[str, Any]) -> str:
    """The goodput chart in words, for whoever cannot see it: the healthy rate, the trigger,
    and per policy its lowest second from the trigger on and when it was back to 90 % of
    the healthy rate (the figures the chart draws)."""
    params = result["params"]
    start, end = params.trigger_at_s, params.trigger_at_s + params.trigger_s

    def healthy(m: dict[str, Any]) -> str:
        return f"{round(m['baseline_goodput']):,}"

    a, b = result["a"], result["b"]
    before = (
        f"about {healthy(a)} under either policy" if healthy(a) == healthy(b)
        else f"about {healthy(a)} under policy A and {healthy(b)} under policy B"
    )  # fmt: skip

    def after(name: str, m: dict[str, Any]) -> str:
        lowest = min(m["goodput_per_s"][start:], default=0)
        if m["recovery_s"] is None:
            back = (f"not back to 90 % of the healthy rate by the end of the run at "
                    f"{params.duration_s}\u00a0s")  # fmt: skip
        elif m["recovery_s"] == 0:
            back = "back to 90 % of the healthy rate in the first second after the trigger"
        else:
            back = (f"back to 90 % of the healthy rate {m['recovery_s']}\u00a0s after the "
                    f"trigger ended")  # fmt: skip
        return f"Policy {name} fell to {lowest:,} a second and was {back}."

    trigger = _TRIGGER_WORDS.get(params.trigger, params.trigger)
    return (
        f"Calls succeeded per second: before the trigger, {before}. The dependency was "
        f"{trigger} from {start}\u00a0s to {end}\u00a0s. {after('A', a)} {after('B', b)}"
    )


def replay_agreement(real: Sequence[dict[str, Any]], replayed: Sequence[dict[str, Any]]) -> str:
    """A sentence saying whether a same-policy replay made the real burst's attempts per
    call, outcomes and transitions, and where it first differs if not."""

    def calls(events):
        return {
            e.get("call"): (e.get("data") or {}).get("attempts", e.get("attempt")) or 0
            for e in events
            if e.get("kind") == "call_result"
        }, {e.get("call"): e.get("outcome") for e in events if e.get("kind") == "call_result"}

    def transitions(events):
        return [
            (e.get("state_from"), e.get("state_to"), e.get("call"))
            for e in events
            if e.get("kind") == "transition"
        ]

    (real_attempts, real_outcomes), (rep_attempts, rep_outcomes) = calls(real), calls(replayed)
    for call in sorted(set(real_attempts) | set(rep_attempts), key=lambda c: c or 0):
        if real_attempts.get(call) != rep_attempts.get(call):
            return (
                f"Replayed with its own policy, call {call} makes {rep_attempts.get(call)} "
                f"attempt(s) where the real burst made {real_attempts.get(call)}."
            )
        if real_outcomes.get(call) != rep_outcomes.get(call):
            return (
                f"Replayed with its own policy, call {call} ends {rep_outcomes.get(call)} where "
                f"the real burst ended {real_outcomes.get(call)}."
            )
    if transitions(real) != transitions(replayed):
        return "Replayed with its own policy, the breaker changes state at other calls."
    return (
        "Replayed with its own policy, this burst makes the same attempts per call, outcomes "
        "and breaker transitions as it did."
    )
