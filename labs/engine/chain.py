"""Chains of services: each tier answers a call by calling the next tier through its own
guarded client, and the last tier calls the leaf.

A service in tier k puts :class:`NextTier` where its guarded client expects a dependency:
each attempt hands one call to a service of tier k+1 (round robin over that tier), waits for
it at most the attempt timeout on the clock (the callee goes on when the caller stops
waiting, as a real server does) and answers ok when the callee's call succeeded, ``503``
when it failed, ``timeout`` when the wait ended first. So a tier retries the next exactly as
it would retry a failing server, and with ``A`` attempts at every tier one call at the front
becomes up to ``A^T`` attempts at the leaf. :class:`Counted` wraps any tier's dependency to
count the calls entering the tier and the attempts leaving it (the amplification).

:func:`validate_chain` checks a layout: tiers numbered from 1 with no gap, at most
:data:`MAX_TIERS`, no service twice (a service in two tiers would call itself).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from labs.engine.clock import Clock
from labs.engine.dependency import AttemptResult
from labs.engine.outcomes import CallResult
from labs.engine.validate import Problem

__all__ = ["MAX_TIERS", "MIN_TIERS", "Counted", "NextTier", "Service", "validate_chain"]

#: A chain has between 2 and 6 tiers (6 tiers of 3 attempts already reach 729 leaf hits).
MIN_TIERS = 2
MAX_TIERS = 6
#: A call's outcome that answers its caller: the call got an answer (a fallback's included).
ANSWERED = frozenset({"success", "degraded"})


class Service(Protocol):
    """One service of a tier: answers a call from ``parent`` (who called: the caller's
    service, call and attempt) with the call its own guarded client made."""

    name: str

    def handle(self, parent: dict[str, Any]) -> CallResult: ...


class NextTier:
    """The next tier's services as one dependency (see the module docstring).

    ``caller`` names the calling service in ``parent`` (``{"service", "call", "attempt"}``,
    what the callee's journal shows); ``AttemptResult.data`` names the callee and its call.
    """

    wants_call_context = True

    def __init__(self, services: Sequence[Service], *, clock: Clock, caller: str = "") -> None:
        if not services:
            raise ValueError("a tier needs at least one service")
        self.services = list(services)
        self.clock = clock
        self.caller = caller
        self._turn = 0

    def refused(self, reason: str) -> None:
        """The caller's breaker refused a call: nothing reaches the next tier."""

    def attempt(
        self,
        timeout_ms: float | None = None,
        *,
        attempt: int = 1,
        deadline: float | None = None,
        probe: bool = False,
        call: int | None = None,
    ) -> AttemptResult:
        """Hand one call to the next service in turn and wait for its answer (at most
        ``timeout_ms``; ``deadline`` and ``probe`` are the caller's, not passed on)."""
        service = self.services[self._turn % len(self.services)]
        self._turn += 1
        parent = {"service": self.caller, "call": call, "attempt": attempt}
        start = self.clock.now()
        run_within: Callable[..., Any] | None = getattr(self.clock, "run_within", None)
        if run_within is None:  # a clock without callers (SystemClock): wait to the end
            result, done, error = service.handle(parent), True, None
        else:
            task = run_within(lambda: service.handle(parent), _seconds(timeout_ms))
            result, done, error = task.result, task.done, task.error
        took = (self.clock.now() - start) * 1000
        data: dict[str, Any] = {"service": service.name}
        if not done:
            return AttemptResult(False, "timeout", took, data=data)
        if error is not None or result is None:
            return AttemptResult(False, "500", took, data=data)
        data["call"] = result.call
        if result.outcome in ANSWERED:
            return AttemptResult(True, None, took, data=data, processed=True)
        return AttemptResult(False, "503", took, data=data)


def _seconds(timeout_ms: float | None) -> float | None:
    return None if timeout_ms is None else timeout_ms / 1000


class Counted:
    """A tier's dependency, counted: ``count(tier, "in")`` for each call entering the tier
    (its first attempt, or a call its breaker refused) and ``count(tier, "out")`` for each
    attempt leaving it; with ``entry`` (the service a user's request enters the chain at,
    whatever its tier) also ``count(tier, "req")`` for each of its calls. Passes the call
    context through to ``inner``. ``extra`` adds to a burst's summary (the guarded client
    asks :meth:`burst_extra` at the burst's end): the chain's figures for the burst, such as
    the attempts that reached the leaf."""

    wants_call_context = True

    def __init__(
        self,
        inner: Any,
        *,
        tier: int,
        count: Callable[[int, str], None],
        extra: Callable[[], dict[str, Any]] | None = None,
        entry: bool = False,
    ) -> None:
        self.inner = inner
        self.tier = tier
        self.count = count
        self.extra = extra
        self.entry = entry
        self._context = bool(getattr(inner, "wants_call_context", False))

    def burst_extra(self) -> dict[str, Any]:
        """What the chain adds to a burst's summary (empty without ``extra``)."""
        return self.extra() if self.extra is not None else {}

    def refused(self, reason: str) -> None:
        self._entered()
        if self._context:
            self.inner.refused(reason)

    def attempt(self, timeout_ms: float | None = None, **context: Any) -> AttemptResult:
        if context.get("attempt", 1) == 1:
            self._entered()
        self.count(self.tier, "out")
        if self._context:
            return self.inner.attempt(timeout_ms, **context)  # type: ignore[no-any-return]
        return self.inner.attempt(timeout_ms)  # type: ignore[no-any-return]

    def _entered(self) -> None:
        self.count(self.tier, "in")
        if self.entry:
            self.count(self.tier, "req")


def validate_chain(tiers: Sequence[Sequence[str]]) -> list[Problem]:
    """Problems with a layout (``tiers[0]`` is tier 1's services, front first), each naming
    the field and what is allowed; empty when it is a chain."""
    problems: list[Problem] = []
    depth = len(tiers)
    if not MIN_TIERS <= depth <= MAX_TIERS:
        problems.append(Problem(
            "tiers", f"must be between {MIN_TIERS} and {MAX_TIERS} tiers (got {depth})",
            label="Tiers",
        ))  # fmt: skip
    for number, services in enumerate(tiers, start=1):
        if not services:
            problems.append(Problem(
                f"tiers.{number}",
                f"tier {number} has no service: the tier in front of it would have nobody "
                "to call; every tier needs at least one",
                label=f"Tier {number}",
            ))  # fmt: skip
    seen: dict[str, int] = {}
    for number, services in enumerate(tiers, start=1):
        for name in services:
            if name in seen:
                problems.append(Problem(
                    f"tiers.{number}",
                    f"{name} is in tier {seen[name]} and tier {number}: the chain would loop "
                    "(a service would end up calling itself); put each service in one tier",
                    label=f"Tier {number}",
                ))  # fmt: skip
            else:
                seen[name] = number
    return problems
