"""What a guarded call and a burst end with: :class:`CallResult`, :class:`BurstResult` and
the list of call outcomes. Plain data, so pages, exports and tests read a burst without the
client that ran it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labs.engine.events import FAST_FAIL_OUTCOMES, is_fast_fail

__all__ = ["CALL_OUTCOMES", "BurstResult", "CallResult", "outcome_counts", "round_ms"]

CALL_OUTCOMES = (
    "success",
    "failure",
    *FAST_FAIL_OUTCOMES,
    "budget_exhausted",
    "deadline_exceeded",
    "pool_timeout",
    "degraded",
)


@dataclass(frozen=True, slots=True)
class CallResult:
    """One call: how many attempts it made, how it ended, how long it slept between them."""

    call: int
    burst: int | None
    attempts: int
    outcome: str
    backoff_ms: float
    start_ms: float
    end_ms: float
    error: str | None = None
    probe: bool = False
    #: What the settings of labs.engine.routes add (dependency, waited_ms, effects, fallback).
    extra: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "call": self.call,
            "burst": self.burst,
            "attempts": self.attempts,
            "outcome": self.outcome,
            "backoff_ms": self.backoff_ms,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "error": self.error,
            "probe": self.probe,
        }


@dataclass(frozen=True)
class BurstResult:
    """A burst of calls; ``calls`` sorted by call number."""

    calls: list[CallResult]
    wall_ms: float
    start_ms: float
    end_ms: float
    burst: int | None = None
    concurrency: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def succeeded(self) -> int:
        """Calls that succeeded."""
        return sum(1 for c in self.calls if c.outcome == "success")

    @property
    def fast_failed(self) -> int:
        """Calls the breaker refused before any attempt."""
        return sum(1 for c in self.calls if is_fast_fail(c.outcome))

    @property
    def degraded(self) -> int:
        """Calls answered by the fallback."""
        return sum(1 for c in self.calls if c.outcome == "degraded")

    @property
    def failed(self) -> int:
        """Calls that did not succeed, were not refused by the breaker and were not answered
        by a fallback."""
        return len(self.calls) - self.succeeded - self.fast_failed - self.degraded

    @property
    def attempts(self) -> list[int]:
        """Attempts per call, in call order."""
        return [c.attempts for c in self.calls]

    @property
    def attempts_total(self) -> int:
        """Attempts that reached the dependency."""
        return sum(self.attempts)

    @property
    def backoff_ms_total(self) -> float:
        """Time spent sleeping between attempts."""
        return sum(c.backoff_ms for c in self.calls)

    def summary(self) -> dict[str, Any]:
        """JSON-serialisable summary (the ``bursts`` entries of the scenario output)."""
        return {
            "burst": self.burst,
            "calls": len(self.calls),
            "call_numbers": [c.call for c in self.calls],
            "concurrency": self.concurrency,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "fast_failed": self.fast_failed,
            "attempts": self.attempts,
            "attempts_total": self.attempts_total,
            "backoff_ms_total": round_ms(self.backoff_ms_total),
            "start_ms": round_ms(self.start_ms),
            "end_ms": round_ms(self.end_ms),
            "wall_ms": round_ms(self.wall_ms),
            **self.extra,
        }


def round_ms(x: float) -> float:
    """Round to the microsecond, so float noise does not leak into JSON."""
    return round(x, 3)


def outcome_counts(calls: list[CallResult]) -> dict[str, int]:
    """A group of calls counted by how they ended (a burst's calls to one dependency)."""
    succeeded = sum(1 for c in calls if c.outcome == "success")
    fast = sum(1 for c in calls if is_fast_fail(c.outcome))
    degraded = sum(1 for c in calls if c.outcome == "degraded")
    return {
        "calls": len(calls),
        "succeeded": succeeded,
        "failed": len(calls) - succeeded - fast - degraded,
        "fast_failed": fast,
        "degraded": degraded,
        "waited_ms": round_ms(sum((c.extra or {}).get("waited_ms", 0) for c in calls)),
    }
