"""Every kind of journal row, in one registry: its label, its tone, whether it ends a run, and
how it changes a burst's or a session's call counts.

The call counts have one vocabulary (:data:`CALL_COUNTS`) and one rule (:func:`delta`), used by
the burst result, the traffic summary, the dashboard's SQL (:func:`count_filter`), the exports
and the page's script (:func:`count_rules`, sent to the page as JSON).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from labs.engine.events import EVENT_KINDS, FAST_FAIL_OUTCOMES


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of journal row.

    ``counts``: "call" (a call's result: one call, and one of succeeded, degraded, fast_failed
    or failed by its outcome), "attempt" (one more of attempts_total) or "" (no count).
    ``tone``: the row's colour on a page, one of :data:`TONES`; a call's and an attempt's
    come from their outcome (:func:`tone`).
    """

    name: str
    label: str
    counts: str = ""
    ends_run: bool = False
    tone: str = "note"


#: A journal row's tones (its CSS modifier ``tone-<tone>``): ok, bad, fast (refused at once),
#: degraded (answered by a fallback), wait, state (the breaker or the session changed) or note.
TONES = ("ok", "bad", "fast", "degraded", "wait", "state", "note")


#: The call counts, in the order the pages show them.
CALL_COUNTS = ("calls", "succeeded", "degraded", "fast_failed", "failed", "attempts_total")

#: Every kind, in the order a burst writes them, then the session's own.
KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("burst_queued", "burst queued"),
        Kind("burst_start", "burst start"),
        Kind("attempt", "attempt", counts="attempt"),
        Kind("sleep", "backoff", tone="wait"),
        Kind("call_result", "call", counts="call"),
        Kind("rejected", "fast-fail", tone="fast"),
        Kind("budget_exhausted", "budget", tone="fast"),
        Kind("deadline_exceeded", "deadline", tone="fast"),
        Kind("transition", "breaker", tone="state"),
        Kind("burst_end", "burst end", ends_run=True),
        Kind("burst_interrupted", "interrupted", ends_run=True, tone="bad"),
        Kind("burst_failed", "burst failed", ends_run=True, tone="bad"),
        Kind("state_restored", "restored", tone="state"),
        Kind("dependency_set", "dependency"),
        Kind("fault_injected", "fault"),
        Kind("fault_restored", "fault ended"),
        Kind("policy_set", "policy"),
        Kind("breaker_forced", "breaker", tone="state"),
        Kind("session_reset", "reset", tone="state"),
        Kind("scenario_assigned", "scenario"),
        Kind("shared_set", "shared dependency"),
        Kind("shared_trigger", "trigger"),
        Kind("shared_restored", "store restarted"),
        Kind("chain_set", "chain"),
        Kind("traffic_start", "traffic"),
        Kind("traffic_end", "traffic end"),
        Kind("prediction_submitted", "prediction"),
        Kind("journal_lost", "rows lost"),
    )
}

assert set(EVENT_KINDS) <= set(KINDS), "every engine event is a journal kind"

#: The kinds a run of steady traffic writes (the engine's events): with no burst, a page gets
#: them counted by the second, not row by row (labs.journal.seconds).
PER_SECOND_KINDS = frozenset(EVENT_KINDS)


def per_second(kind: str | None, burst_id: int | None) -> bool:
    """Whether a row is counted by the second (a steady-traffic engine event) rather than
    pushed on its own (a burst's rows, and everything a person or the lab itself did)."""
    return burst_id is None and kind in PER_SECOND_KINDS


#: The kinds that end a burst (its last row).
BURST_END_KINDS = tuple(name for name, k in KINDS.items() if k.ends_run)

#: For a model field's ``choices``.
CHOICES = [(name, k.label) for name, k in KINDS.items()]


class UnknownKind(ValueError):
    """A journal row of a kind the registry does not know."""


def check(kinds: Iterable[str]) -> None:
    """Raise :class:`UnknownKind` naming the first kind the registry does not know."""
    for kind in kinds:
        if kind not in KINDS:
            raise UnknownKind(f"unknown journal kind {kind!r}: add it to labs/journal/kinds.py")


def label(kind: str | None) -> str:
    known = KINDS.get(kind or "")
    return known.label if known else (kind or "").replace("_", " ")


def tone(kind: str | None, outcome: str | None) -> str:
    """A row's tone: an attempt's is ok or bad by its answer, a call's follows the count its
    outcome adds to, any other kind's is the registry's (note for a kind it does not know)."""
    known = KINDS.get(kind or "")
    if known is None:
        return "note"
    if known.counts == "attempt":
        return "ok" if outcome == "ok" else "bad"
    if known.counts == "call":
        return _CALL_TONES[call_count(outcome)]
    return known.tone


_CALL_TONES = {"succeeded": "ok", "degraded": "degraded", "fast_failed": "fast", "failed": "bad"}


def call_count(outcome: str | None) -> str:
    """Which of succeeded, degraded (answered by a fallback), fast_failed or failed a call's
    outcome counts as."""
    if outcome == "success":
        return "succeeded"
    if outcome == "degraded":
        return "degraded"
    return "fast_failed" if outcome in FAST_FAIL_OUTCOMES else "failed"


def delta(kind: str, outcome: str | None) -> dict[str, int]:
    """What one row adds to the call counts."""
    counts = KINDS[kind].counts if kind in KINDS else ""
    if counts == "call":
        return {"calls": 1, call_count(outcome): 1}
    if counts == "attempt":
        return {"attempts_total": 1}
    return {}


def zero() -> dict[str, int]:
    return dict.fromkeys(CALL_COUNTS, 0)


def count_calls(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The call counts of journal rows (mappings with ``kind`` and ``outcome``)."""
    total = zero()
    for row in rows:
        for name, n in delta(row["kind"], row.get("outcome")).items():
            total[name] += n
    return total


def count_outcomes(outcomes: Mapping[str, int], attempts: int = 0) -> dict[str, int]:
    """The call counts of call outcomes counted apart (outcome: number of calls)."""
    total = zero()
    for outcome, n in outcomes.items():
        total["calls"] += n
        total[call_count(outcome)] += n
    total["attempts_total"] = attempts
    return total


def count_filter(name: str) -> dict[str, Any]:
    """Keyword filters on ``JournalEvent`` selecting the rows that add one to count ``name``
    (for the dashboard's SQL)."""
    calls = [k for k, v in KINDS.items() if v.counts == "call"]
    attempts = [k for k, v in KINDS.items() if v.counts == "attempt"]
    if name == "calls":
        return {"kind__in": calls}
    if name == "attempts_total":
        return {"kind__in": attempts}
    if name == "succeeded":
        return {"kind__in": calls, "outcome": "success"}
    if name == "degraded":
        return {"kind__in": calls, "outcome": "degraded"}
    if name == "fast_failed":
        return {"kind__in": calls, "outcome__in": FAST_FAIL_OUTCOMES}
    raise ValueError(f"{name!r} is counted by elimination (calls minus the others)")


def count_rules() -> dict[str, Any]:
    """The same rules as data, for the page's script (``window.failureLab.countDelta``)."""
    return {
        "calls": [k for k, v in KINDS.items() if v.counts == "call"],
        "attempts_total": [k for k, v in KINDS.items() if v.counts == "attempt"],
        "fast_fail_outcomes": list(FAST_FAIL_OUTCOMES),
        "counts": list(CALL_COUNTS),
        "per_second_kinds": sorted(PER_SECOND_KINDS),
    }
