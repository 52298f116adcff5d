"""Typed events: everything the engine does is told to an injected sink, one event at a time.

A sink is any callable taking an :class:`Event`. The engine never buffers or filters: the
Django side journals and broadcasts each event, the CLI collects them, tests assert on them.
With concurrent callers on a :class:`~labs.engine.clock.SystemClock` the sink may be called
from several threads at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "EVENT_KINDS",
    "FAST_FAIL_OUTCOMES",
    "Event",
    "EventList",
    "Sink",
    "fmt_ms",
    "fmt_seconds",
    "is_fast_fail",
    "null_sink",
]

#: Every ``Event.kind`` the engine emits.
EVENT_KINDS = (
    "burst_start",
    "attempt",
    "sleep",
    "call_result",
    "rejected",
    "budget_exhausted",
    "deadline_exceeded",
    "transition",
    "burst_end",
)

#: Call outcomes that are fast-fails: the call was refused at once, before any attempt, so
#: the dependency was not touched: by the breaker (``rejected_<reason>`` of its Rejection) or
#: by the bulkhead (``rejected_bulkhead``: the dependency already had its calls in flight).
FAST_FAIL_OUTCOMES = ("rejected_open", "rejected_half_open", "rejected_bulkhead")


def is_fast_fail(outcome: str | None) -> bool:
    """Whether a call outcome is a fast-fail (one of :data:`FAST_FAIL_OUTCOMES`)."""
    return outcome in FAST_FAIL_OUTCOMES


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened, with a sentence a student can read (``explain``).

    ``at_ms`` is the clock's time (milliseconds) when it happened. Fields that do not apply
    to a kind are None; ``data`` carries kind-specific extras (JSON-serialisable).
    """

    kind: str
    at_ms: float
    explain: str
    call: int | None = None
    burst: int | None = None
    attempt: int | None = None
    outcome: str | None = None
    error: str | None = None
    latency_ms: float | None = None
    backoff_ms: float | None = None
    state_from: str | None = None
    state_to: str | None = None
    reason: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (all fields, None where they do not apply)."""
        return {
            "kind": self.kind,
            "at_ms": self.at_ms,
            "call": self.call,
            "burst": self.burst,
            "attempt": self.attempt,
            "outcome": self.outcome,
            "error": self.error,
            "latency_ms": self.latency_ms,
            "backoff_ms": self.backoff_ms,
            "state_from": self.state_from,
            "state_to": self.state_to,
            "reason": self.reason,
            "explain": self.explain,
            "data": dict(self.data),
        }


Sink = Callable[[Event], None]


def null_sink(event: Event) -> None:
    """A sink that drops everything."""


class EventList(list[Event]):
    """A sink that keeps every event in order (``list.append`` is atomic, so thread-safe)."""

    def __call__(self, event: Event) -> None:
        self.append(event)

    def of_kind(self, kind: str) -> list[Event]:
        """The events of one kind, in order."""
        return [e for e in self if e.kind == kind]


def fmt_ms(ms: float) -> str:
    """``5`` -> ``"5 ms"``, ``37.25`` -> ``"37.2 ms"``: whole milliseconds shown without decimals."""
    if ms == int(ms):
        return f"{int(ms)} ms"
    return f"{ms:.1f} ms"


def fmt_seconds(ms: float) -> str:
    """Milliseconds as seconds with one decimal: ``1400`` -> ``"1.4 s"``."""
    return f"{ms / 1000:.1f} s"
