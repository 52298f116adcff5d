"""The guarded client: retries with backoff and a circuit breaker, in either nesting.

``breaker_outside`` (default; ``scenarios/tour.json``): the breaker admits a *call*; inside it the retry loop
makes up to ``max_attempts`` attempts; the breaker counts the call's final result. A
half-open probe gets exactly one attempt.

``retry_outside`` (``scenarios/retry_outside.json``): the retry loop is outside; every *attempt* asks the breaker
first and reports to it. A rejection ends the call (an open breaker is never retried), and
an attempt whose failure opens the breaker ends the call at once, without a useless sleep.
In ``breaker_outside`` too, a call whose retries were admitted while the breaker was closed
checks the breaker before each retry and stops if other callers' results have moved it out
of CLOSED (only with concurrent callers; a sequential burst never sees it).

Classification: a 400 is the caller's fault, so it is not retried and the breaker ignores
it; 503, 500, timeout and 429 are retried and counted. Before each retry the client
computes the sleep (backoff, jitter, Retry-After up to the cap), gives up with
``deadline_exceeded`` if that sleep would end at or past the call's deadline, then withdraws
a retry-budget token (``budget_exhausted`` if none), then sleeps.

Call outcomes: ``success``; ``failure`` (attempts spent, or a non-retryable error);
``rejected_open`` / ``rejected_half_open`` (the breaker refused the call before any attempt);
``budget_exhausted``; ``deadline_exceeded``; and with the settings of
:mod:`labs.engine.routes`: ``rejected_bulkhead`` (the dependency already had the bulkhead's
number of calls in flight; a fast-fail, as the breaker's refusals), ``pool_timeout`` (no
slot of the pool freed within ``pool_wait_ms``) and ``degraded`` (the call failed and the policy's fallback answered it:
never a success).

Hosts, B, the bulkhead, fallbacks and idempotency keys (``routes``): every attempt names its
host, every call its dependency; with B, a bulkhead or a pool wait, a burst is its calls all
arriving at once into a pool of ``concurrency`` slots (the callers), and each call records
how long it waited for one. None of this changes a client whose settings use none of it.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from labs.engine.breaker import Breaker, Outcome, Permit, Rejection
from labs.engine.clock import Clock
from labs.engine.config import Policy
from labs.engine.dependency import AttemptResult, Dependency, FakeDependency
from labs.engine.events import (
    FAST_FAIL_OUTCOMES,
    Event,
    Sink,
    fmt_ms,
    fmt_seconds,
    is_fast_fail,
    null_sink,
)
from labs.engine.retry import (
    Delay,
    RetryBudget,
    counts_against_dependency,
    is_retryable,
    retry_delay,
)
from labs.engine.stores.base import Store

if TYPE_CHECKING:
    from labs.engine.routes import Route

__all__ = ["CALL_OUTCOMES", "BurstResult", "CallResult", "GuardedClient"]

CALL_OUTCOMES = (
    "success",
    "failure",
    *FAST_FAIL_OUTCOMES,
    "budget_exhausted",
    "deadline_exceeded",
    "pool_timeout",
    "degraded",
)
#: How often a call waiting for a pool slot looks again (seconds).
POOL_POLL_S = 0.001


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
            "backoff_ms_total": _r(self.backoff_ms_total),
            "start_ms": _r(self.start_ms),
            "end_ms": _r(self.end_ms),
            "wall_ms": _r(self.wall_ms),
            **self.extra,
        }


def _r(x: float) -> float:
    """Round to the microsecond, so float noise does not leak into JSON."""
    return round(x, 3)


def _attempt_data(answer: AttemptResult) -> dict[str, Any]:
    """An attempt event's data: the Retry-After hint and what the dependency added."""
    data = {"retry_after_ms": answer.retry_after_ms} if answer.retry_after_ms else {}
    if answer.data:
        data.update(answer.data)
    return data


def _label(route: Route) -> dict[str, Any]:
    """An event's dependency label when the session has two dependencies."""
    return {"dependency": route.name} if route.name else {}


def _whose(route: Route) -> str:
    """``dependency B `` / ``dependency A `` when there are two, else nothing."""
    return f"dependency {route.name.upper()} " if route.name else ""


def _failure_words(result: CallResult, why: str | None) -> str:
    """Why a call failed, in words, for the fallback's explanation."""
    text = result.outcome.replace("_", " ")
    if result.error:
        text += f" (last error {result.error})"
    return f"{text}; {why}" if why else text


def _outcome_counts(calls: list[CallResult]) -> dict[str, int]:
    succeeded = sum(1 for c in calls if c.outcome == "success")
    fast = sum(1 for c in calls if is_fast_fail(c.outcome))
    degraded = sum(1 for c in calls if c.outcome == "degraded")
    return {
        "calls": len(calls),
        "succeeded": succeeded,
        "failed": len(calls) - succeeded - fast - degraded,
        "fast_failed": fast,
        "degraded": degraded,
        "waited_ms": _r(sum((c.extra or {}).get("waited_ms", 0) for c in calls)),
    }


def _extra_sentence(extra: dict[str, Any]) -> str:
    """The burst_end sentence's tail for the settings of labs.engine.routes."""
    parts = []
    if "degraded" in extra:
        parts.append(f"{extra['degraded']} degraded (answered by the fallback)")
    if "wait_ms_total" in extra:
        parts.append(
            f"{fmt_ms(extra['wait_ms_total'])} waiting for a pool slot, "
            f"{extra['rejected_bulkhead']} rejected by the bulkhead, "
            f"{extra['pool_timeout']} gave up waiting"
        )
    for name, counts in extra.get("by_dependency", {}).items():
        parts.append(f"{name.upper()}: {counts['succeeded']}/{counts['calls']} succeeded")
    if "effects" in extra:
        parts.append(
            f"effects applied {extra['effects']['applied']} for {extra['effects']['calls']} calls"
        )
    return "; " + "; ".join(parts) if parts else ""


def _verdict(ok: bool, error: str | None) -> Outcome:
    """What the breaker is told: a 400 says nothing about the dependency's health."""
    if ok:
        return "success"
    return "failure" if counts_against_dependency(error) else "ignored"


class GuardedClient:
    """Calls ``dependency`` under ``policy``, guarded by ``breaker``; tells ``sink`` everything.

    Thread-safe as long as its parts are (they are, for the engine's stores and clocks):
    :meth:`run_burst` with ``concurrency > 1`` uses ``clock.run_concurrently``.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        breaker: Breaker,
        dependency: Dependency,
        clock: Clock,
        rng: random.Random,
        sink: Sink | None = None,
        store: Store | None = None,
        routes: list[Route] | None = None,
    ) -> None:
        self.policy = policy
        # Hosts, B, bulkhead, fallbacks, keys (labs.engine.routes); None: the plain path.
        self.routes = routes
        self.breaker = breaker
        self.dependency = dependency
        # A dependency that sets ``wants_call_context`` (the shared model) also receives the
        # attempt number and the call's deadline (absolute, on ``clock``).
        self._context = bool(getattr(dependency, "wants_call_context", False))
        # Slow calls (``slow_call_ms``) need each call's duration; else no clock read is spent.
        self._slow = policy.breaker.slow_call_ms is not None
        self.clock = clock
        self.rng = rng
        self.sink = sink if sink is not None else null_sink
        budget_store = store if store is not None else breaker.store
        self.budget = (
            RetryBudget(policy.retry_budget, store=budget_store, clock=clock)
            if policy.retry_budget
            else None
        )

    # -- one call ----------------------------------------------------------------------------

    def call(self, call_no: int, burst: int | None = None) -> CallResult:
        """Make one guarded call; never raises for dependency failures.

        Guarantees: at most ``max_attempts`` attempts (1 for a half-open probe in
        ``breaker_outside``); no attempt while the breaker is open; every sleep at most
        ``backoff_cap_ms`` and ending before the deadline; one ``call_result`` event.
        """
        if self.routes is not None:
            return self._call_routed(call_no, burst, None)
        start = self.clock.now()
        if self.policy.nesting == "breaker_outside":
            permit = self.breaker.allow(
                call=call_no, burst=burst, dependency_step=self._dependency_step()
            )
            if isinstance(permit, Rejection):
                result, why = self._rejected(call_no, burst, start, permit, 0, 0.0)
            else:
                limit = 1 if permit.probe else self.policy.max_attempts
                result, why = self._loop(call_no, burst, start, limit, permit)
                verdict = _verdict(result.outcome == "success", result.error)
                self.breaker.record(
                    permit, verdict, error=result.error, duration_ms=self._since(start),
                    reply=False,
                )  # fmt: skip
        else:
            result, why = self._loop(call_no, burst, start, self.policy.max_attempts, None)
        self._emit_result(result, why)
        return result

    def _loop(
        self,
        call_no: int,
        burst: int | None,
        start: float,
        limit: int,
        outer: Permit | None,
        route: Route | None = None,
        key: str | None = None,
        tally: dict[str, int] | None = None,
    ) -> tuple[CallResult, str | None]:
        """The retry loop; ``outer`` is the breaker's permit for breaker_outside, else None.
        ``route`` (hosts, B, side effects) and ``key`` (the call's idempotency key) only with
        the settings of labs.engine.routes. Returns the result and, for a failure, why the
        loop stopped (for the explanation)."""
        policy = self.policy
        breaker = self.breaker if route is None else route.breaker
        clock = self.clock
        budget = self.budget
        throttled = budget is not None and budget.kind == "grpc"
        verdict: tuple[bool, float] = (True, 0.0)
        if budget is not None and budget.kind != "grpc":
            budget.deposit(reply=False)
        restart = 0  # a server pushback restarts the backoff exponent after it
        deadline = None if policy.deadline_ms is None else start + policy.deadline_ms / 1000
        backoff_total = 0.0
        previous: float | None = None
        attempts = 0
        probe = outer.probe if outer is not None else False
        error: str | None = None
        # The fake dependency's state in the breaker's store: each attempt reaches it in the
        # same store operation as the breaker's look before it (one round trip on Redis).
        fail_left = self._dependency_step() if route is None else None
        for n in range(1, limit + 1):
            permit = outer
            recorder = breaker
            host = 0
            stepped = outer.step if outer is not None and n == 1 else None
            if outer is not None and n > 1:
                # Another caller's result may have moved the breaker while this call was
                # backing off: a retry goes only to a breaker that still reads CLOSED.
                if fail_left is not None:
                    stepped = breaker.step_if_closed(fail_left)
                    moved = stepped is None
                else:
                    moved = breaker.state() != "closed"
            else:
                moved = False
            if moved:
                return self._done(
                    call_no,
                    burst,
                    start,
                    n - 1,
                    "failure",
                    backoff_total,
                    error,
                    probe,
                    "the breaker left CLOSED meanwhile; an open breaker is never retried",
                )
            if outer is None:
                if route is not None and route.host_breakers:
                    allowed, host, recorder = route.admit(call_no, n, burst)
                else:
                    allowed = breaker.allow(call=call_no, burst=burst, dependency_step=fail_left)
                if isinstance(allowed, Rejection):
                    return self._rejected(call_no, burst, start, allowed, attempts, backoff_total)
                permit = allowed
                probe = probe or permit.probe
                stepped = permit.step
            if route is not None and not route.host_breakers:
                host = route.pick(call_no, n)
            attempt_start = self._slow and clock.now()
            if route is not None:
                answer, effect = route.attempt(host, policy.attempt_timeout_ms, key)
                if effect == "applied" and tally is not None:
                    tally["effects"] += 1
                attempts = n
                self._emit_routed_attempt(call_no, burst, n, answer, route, host, effect, key)
            elif self._context:
                answer = self.dependency.attempt(
                    policy.attempt_timeout_ms, attempt=n, deadline=deadline, probe=probe
                )
            elif stepped is not None:
                answer = self.dependency.attempt(policy.attempt_timeout_ms, step=stepped)
            else:
                answer = self.dependency.attempt(policy.attempt_timeout_ms)
            if route is None:
                attempts = n
                self._emit_attempt(call_no, burst, n, answer)
            opened = False
            if outer is None and permit is not None:
                verdict = _verdict(answer.ok, answer.error)
                recorded = recorder.record(
                    permit,
                    verdict,
                    error=answer.error,
                    duration_ms=self._since(attempt_start),
                    reply=not answer.ok,  # a success ends the call: nothing to read
                )
                opened = recorded is not None and recorded.transition == "open"
            if throttled and (answer.ok or is_retryable(answer.error)):
                verdict = budget.observe(answer.ok)  # type: ignore[union-attr]
            if answer.ok:
                return self._done(call_no, burst, start, n, "success", backoff_total, None, probe)
            error = answer.error
            if not is_retryable(error):
                return self._done(
                    call_no,
                    burst,
                    start,
                    n,
                    "failure",
                    backoff_total,
                    error,
                    probe,
                    f"{error} is the caller's fault: not retried",
                )
            if n == limit:
                why = (
                    "a half-open probe gets one attempt"
                    if probe and outer is not None
                    else (f"all {limit} attempts used")
                )
                return self._done(
                    call_no, burst, start, n, "failure", backoff_total, error, probe, why
                )
            if opened and not (route is not None and route.host_breakers and route.many_hosts):
                # (with a breaker per host, the retry moves on to another host)
                return self._done(
                    call_no,
                    burst,
                    start,
                    n,
                    "failure",
                    backoff_total,
                    error,
                    probe,
                    "the breaker opened; an open breaker is never retried",
                )
            pushback = policy.retry_after == "pushback" and bool(answer.retry_after_ms)
            delay = retry_delay(
                policy.jitter,
                n - restart,
                policy.backoff_base_ms,
                policy.backoff_cap_ms,
                self.rng,
                previous,
                None if pushback else answer.retry_after_ms,
            )
            if pushback:
                # gRPC's server pushback: the next attempt waits exactly what the server
                # asked, and the backoff after it starts again from the first step.
                pushed = float(answer.retry_after_ms or 0)
                delay = Delay(
                    pushed,
                    delay.ms,
                    f"server pushback {fmt_ms(pushed)}, exactly; the backoff restarts after it",
                    pushed,
                )
                restart = n
            now = clock.now()
            if deadline is not None and now + delay.ms / 1000 >= deadline:
                self._emit(
                    "deadline_exceeded",
                    call_no,
                    burst,
                    n,
                    f"attempt {n} failed ({error}); sleeping {fmt_ms(delay.ms)} would end at or past "
                    f"the {fmt_ms(policy.deadline_ms or 0)} deadline; giving up",
                    outcome="deadline_exceeded",
                    error=error,
                    backoff_ms=delay.ms,
                    data={
                        "deadline_ms": policy.deadline_ms,
                        "elapsed_ms": _r((now - start) * 1000),
                    },
                )
                return self._done(
                    call_no, burst, start, n, "deadline_exceeded", backoff_total, error, probe
                )
            if budget is not None:
                taken, balance = verdict if throttled else budget.try_withdraw()
                if not taken:
                    self._emit(
                        "budget_exhausted",
                        call_no,
                        burst,
                        n,
                        f"attempt {n} failed ({error}); {budget.refusal(balance)}; not retrying",
                        outcome="budget_exhausted",
                        error=error,
                        data={"tokens": balance},
                    )
                    return self._done(
                        call_no, burst, start, n, "budget_exhausted", backoff_total, error, probe
                    )
            self._emit(
                "sleep",
                call_no,
                burst,
                n,
                f"attempt {n} failed ({error}); sleeping {fmt_ms(_r(delay.ms))} = {delay.formula}",
                error=error,
                backoff_ms=_r(delay.ms),
                data={"formula": delay.formula, "retry_after_ms": delay.retry_after_ms},
            )
            if delay.ms:
                clock.sleep(delay.ms / 1000)
            backoff_total += delay.ms
            previous = delay.ms
        raise AssertionError("unreachable: the loop returns on its last attempt")

    def _dependency_step(self) -> int | None:
        """The fake dependency's flaky count when its state lives in the breaker's store (an
        admission, or a retry's look at the breaker, then carries the attempt's dependency
        step along: one store operation for both, see ``Breaker.allow``), else None."""
        dependency = self.dependency
        if type(dependency) is FakeDependency and dependency.store is self.breaker.store:
            return dependency.fail_left
        return None

    # -- bursts ------------------------------------------------------------------------------

    def run_burst(
        self,
        size: int,
        *,
        concurrency: int = 1,
        first_call: int = 1,
        burst: int | None = None,
    ) -> BurstResult:
        """Make ``size`` calls numbered from ``first_call``, by ``concurrency`` callers that
        each take the next number from a shared counter. Emits ``burst_start``, every call's
        events, then ``burst_end`` (its ``data`` is the summary). Raises ValueError for a
        size or concurrency below 1."""
        if size < 1 or concurrency < 1:
            raise ValueError("size and concurrency must be >= 1")
        start = self.clock.now()
        data: dict[str, Any] = {"size": size, "concurrency": concurrency, "first_call": first_call}
        routes = self.routes
        if routes and routes[0].many_hosts and len(routes[0].host_breakers) > 1:
            # A breaker per host: the dependency-wide one is not asked during this burst (the
            # lab page's timeline then draws the hosts' breakers instead of it).
            data["breakers"] = "host"
        self._emit(
            "burst_start",
            None,
            burst,
            None,
            f"{'burst' if burst is None else f'burst {burst}'} starts: {size} "
            f"call{'s' if size > 1 else ''} by {concurrency} caller{'s' if concurrency > 1 else ''}",
            data=data,
        )
        results: list[CallResult] = []
        if self._pooled:
            results = self._run_pool(size, concurrency, first_call, burst, start)
        elif concurrency == 1:
            results = [self.call(first_call + i, burst) for i in range(size)]
        else:
            lock = threading.Lock()
            numbers = iter(range(first_call, first_call + size))

            def caller() -> list[CallResult]:
                mine = []
                while True:
                    with lock:
                        n = next(numbers, None)
                    if n is None:
                        return mine
                    mine.append(self.call(n, burst))

            for part in self.clock.run_concurrently([caller] * min(concurrency, size)):
                results.extend(part)
            results.sort(key=lambda c: c.call)
        end = self.clock.now()
        outcome = BurstResult(
            calls=results,
            wall_ms=(end - start) * 1000,
            start_ms=start * 1000,
            end_ms=end * 1000,
            burst=burst,
            concurrency=concurrency,
            extra=self._burst_extra(results) if self.routes is not None else {},
        )
        summary = outcome.summary()
        self._emit(
            "burst_end",
            None,
            burst,
            None,
            f"burst ends: {outcome.succeeded}/{size} succeeded, {outcome.failed} failed, "
            f"{outcome.fast_failed} failed fast; {outcome.attempts_total} "
            f"attempt{'s' if outcome.attempts_total != 1 else ''}, "
            f"{fmt_ms(_r(outcome.backoff_ms_total))} of backoff, {fmt_ms(_r(outcome.wall_ms))}"
            f"{_extra_sentence(outcome.extra)}",
            data=summary,
        )
        return outcome

    # -- hosts, B, bulkhead, pool, fallback, keys (labs.engine.routes) -------------------------

    @property
    def _pooled(self) -> bool:
        """Calls go through the pool model (and record their wait for a slot): with a
        bulkhead, a pool wait, or two dependencies sharing the callers."""
        routes = self.routes
        return routes is not None and (self.policy.pooled or len(routes) > 1)

    def _route_of(self, call_no: int) -> Route:
        """Dependency B takes the calls whose number is a multiple of ``b_every``."""
        routes = self.routes
        assert routes is not None
        if len(routes) > 1 and call_no % routes[0].config.b_every == 0:
            return routes[1]
        return routes[0]

    def _call_routed(self, call_no: int, burst: int | None, waited_ms: float | None) -> CallResult:
        route = self._route_of(call_no)
        policy = self.policy
        start = self.clock.now()
        key = f"call-{call_no}" if policy.idempotency_keys else None
        tally = {"effects": 0}
        if not route.enter(policy.bulkhead):
            self._emit(
                "rejected",
                call_no,
                burst,
                None,
                f"rejected: {_whose(route)}already has {policy.bulkhead} call"
                f"{'s' if policy.bulkhead != 1 else ''} in flight (the bulkhead); not called",
                outcome="rejected_bulkhead",
                data={"bulkhead": policy.bulkhead, **_label(route)},
            )
            result, why = self._done(
                call_no, burst, start, 0, "rejected_bulkhead", 0.0, None, False
            )
            return self._finish_routed(route, result, "the bulkhead is full", tally, waited_ms)
        try:
            if policy.nesting == "breaker_outside":
                permit = route.breaker.allow(call=call_no, burst=burst)
                if isinstance(permit, Rejection):
                    result, why = self._rejected(call_no, burst, start, permit, 0, 0.0)
                else:
                    limit = 1 if permit.probe else policy.max_attempts
                    result, why = self._loop(
                        call_no, burst, start, limit, permit, route, key, tally
                    )
                    verdict = _verdict(result.outcome == "success", result.error)
                    route.breaker.record(
                        permit, verdict, error=result.error, duration_ms=self._since(start)
                    )
            else:
                result, why = self._loop(
                    call_no, burst, start, policy.max_attempts, None, route, key, tally
                )
        finally:
            route.leave()
        return self._finish_routed(route, result, why, tally, waited_ms)

    def _finish_routed(
        self,
        route: Route,
        result: CallResult,
        why: str | None,
        tally: dict[str, int],
        waited_ms: float | None,
    ) -> CallResult:
        """Label the call, answer it from the fallback if it failed and one is usable, and
        emit its ``call_result``."""
        policy = self.policy
        extra: dict[str, Any] = _label(route)
        if waited_ms is not None:
            extra["waited_ms"] = _r(waited_ms)
        if route.config.side_effect:
            extra["effects"] = tally["effects"]
        now_us = int(self.clock.now() * 1e6 + 0.5)
        if result.outcome == "success":
            if policy.fallback == "cached":
                route.store.fallback_note(now_us)
        elif policy.fallback is not None:
            fallback: dict[str, Any] = {"kind": policy.fallback, "instead_of": result.outcome}
            usable, note = True, "the default answer"
            if policy.fallback == "cached":
                last = route.store.fallback_last()
                limit = policy.fallback_max_age_ms
                if last is None:
                    usable, note = False, "no cached answer yet (no call has succeeded)"
                else:
                    age = _r((now_us - last) / 1000)
                    fallback["age_ms"] = age
                    usable = age <= limit
                    # under a second in ms: "0.0 s old" would hide that it is fresh
                    aged = fmt_ms(age) if age < 1000 else fmt_seconds(age)
                    note = (
                        f"the cached answer, {aged} old (max age {fmt_seconds(limit)})"
                        if usable
                        else f"the cached answer is {fmt_seconds(age)} old, past the max age "
                        f"{fmt_seconds(limit)}"
                    )
            if usable:
                fallback["why"] = _failure_words(result, why)
                extra["fallback"] = fallback
                result = replace(result, outcome="degraded")
                why = note
            else:
                extra["fallback_unusable"] = note
                if "age_ms" in fallback:  # a cached answer existed, past its max age
                    extra["fallback_expired_ms"] = fallback["age_ms"]
                why = f"{why}; no fallback: {note}" if why else f"no fallback: {note}"
        result = replace(result, extra=extra or None)
        self._emit_result(result, why)
        return result

    def _run_pool(
        self, size: int, concurrency: int, first_call: int, burst: int | None, start: float
    ) -> list[CallResult]:
        """Every call arrives at ``start`` and waits for one of ``concurrency`` slots (the
        callers), in call order; with ``pool_wait_ms`` the calls still waiting then give up
        (``pool_timeout``)."""
        clock = self.clock
        pending = deque(range(first_call, first_call + size))
        lock = threading.Lock()
        results: list[CallResult] = []
        wait = self.policy.pool_wait_ms

        def caller() -> None:
            while True:
                with lock:
                    n = pending.popleft() if pending else None
                if n is None:
                    return
                results.append(self._call_routed(n, burst, (clock.now() - start) * 1000))

        def waiter() -> None:
            assert wait is not None
            limit = start + wait / 1000
            while True:
                with lock:
                    now = clock.now()
                    late = None
                    if pending and now >= limit - 1e-9:
                        late = list(pending)
                        pending.clear()
                    elif not pending:
                        return
                if late is not None:
                    for n in late:
                        results.append(self._pool_timeout(n, burst, start, concurrency))
                    return
                clock.sleep(min(POOL_POLL_S, limit - now))

        callers = [caller] * min(concurrency, size) + ([waiter] if wait is not None else [])
        clock.run_concurrently(callers)
        results.sort(key=lambda c: c.call)
        return results

    def _pool_timeout(
        self, call_no: int, burst: int | None, arrived: float, slots: int
    ) -> CallResult:
        route = self._route_of(call_no)
        waited = (self.clock.now() - arrived) * 1000
        self._emit(
            "rejected",
            call_no,
            burst,
            None,
            f"call {call_no} waited {fmt_ms(_r(waited))} for a free slot of the pool "
            f"({slots} slot{'s' if slots != 1 else ''}, all busy) and gave up; "
            f"{_whose(route)}not called",
            outcome="pool_timeout",
            data={"waited_ms": _r(waited), **_label(route)},
        )
        result, _ = self._done(call_no, burst, arrived, 0, "pool_timeout", 0.0, None, False)
        return self._finish_routed(
            route, result, f"no slot of the pool freed within {fmt_ms(_r(waited))}",
            {"effects": 0}, waited,
        )  # fmt: skip

    def _burst_extra(self, calls: list[CallResult]) -> dict[str, Any]:
        """What a burst's summary adds for the settings of labs.engine.routes (only what is
        configured, so a plain burst's summary is unchanged)."""
        routes = self.routes or []
        policy = self.policy
        extra: dict[str, Any] = {}
        if policy.fallback is not None:
            extra["degraded"] = sum(1 for c in calls if c.outcome == "degraded")
        if self._pooled:
            extra["wait_ms_total"] = _r(sum((c.extra or {}).get("waited_ms", 0) for c in calls))
            extra["rejected_bulkhead"] = sum(1 for c in calls if c.outcome == "rejected_bulkhead")
            extra["pool_timeout"] = sum(1 for c in calls if c.outcome == "pool_timeout")
        if len(routes) > 1:
            by: dict[str, dict[str, int]] = {}
            for route in routes:
                mine = [c for c in calls if (c.extra or {}).get("dependency") == route.name]
                by[str(route.name)] = _outcome_counts(mine)
            extra["by_dependency"] = by
        if any(r.config.side_effect for r in routes):
            extra["effects"] = {
                "applied": sum((c.extra or {}).get("effects", 0) for c in calls),
                "calls": len(calls),
            }
        return extra

    def _emit_routed_attempt(
        self,
        call: int,
        burst: int | None,
        n: int,
        answer: AttemptResult,
        route: Route,
        host: int,
        effect: str | None,
        key: str | None,
    ) -> None:
        took = fmt_ms(answer.latency_ms)
        where = f"{_whose(route)}" + (f"host {host}, " if route.many_hosts else "")
        head = f"call {call}, attempt {n}: {where}"
        if answer.ok:
            explain = f"{head}ok after {took}"
        else:
            hint = (
                f", Retry-After {fmt_ms(_r(answer.retry_after_ms))}"
                if answer.retry_after_ms
                else ""
            )
            explain = f"{head}{answer.error} after {took}{hint}"
        data = _attempt_data(answer)
        data.update(_label(route))
        if route.many_hosts:
            data["host"] = host
        if route.config.side_effect:
            kind = route.config.side_effect
            if effect == "applied":
                explain += f"; {kind} applied" + (
                    " (the work was done; the client stopped waiting)" if not answer.ok else ""
                )
            elif effect == "duplicate":
                explain += f"; {kind} not applied again: key {key} was seen before"
            data["effect"] = effect
            if key is not None:
                data["key"] = key
        self._emit(
            "attempt",
            call,
            burst,
            n,
            explain,
            outcome="ok" if answer.ok else "error",
            error=answer.error,
            latency_ms=answer.latency_ms,
            data=data,
        )

    # -- events ------------------------------------------------------------------------------

    def _emit(
        self,
        kind: str,
        call: int | None,
        burst: int | None,
        attempt: int | None,
        explain: str,
        **fields: Any,
    ) -> None:
        self.sink(
            Event(
                kind=kind,
                at_ms=self.clock.now() * 1000,
                explain=explain,
                call=call,
                burst=burst,
                attempt=attempt,
                **fields,
            )
        )

    def _emit_attempt(self, call: int, burst: int | None, n: int, answer: AttemptResult) -> None:
        took = fmt_ms(answer.latency_ms)
        if answer.ok:
            explain = f"call {call}, attempt {n}: ok after {took}"
        else:
            hint = (
                f", Retry-After {fmt_ms(_r(answer.retry_after_ms))}"
                if answer.retry_after_ms
                else ""
            )
            explain = f"call {call}, attempt {n}: {answer.error} after {took}{hint}"
        self._emit(
            "attempt",
            call,
            burst,
            n,
            explain,
            outcome="ok" if answer.ok else "error",
            error=answer.error,
            latency_ms=answer.latency_ms,
            data=_attempt_data(answer),
        )

    def _rejected(
        self,
        call: int,
        burst: int | None,
        start: float,
        rejection: Rejection,
        attempts: int,
        backoff: float,
    ) -> tuple[CallResult, str | None]:
        if attempts:
            # retry_outside: the breaker stopped a call that had already made attempts.
            self._emit(
                "rejected",
                call,
                burst,
                attempts + 1,
                rejection.explain,
                outcome=f"rejected_{rejection.reason}",
                data={"retry_in_ms": rejection.retry_in_ms},
            )
            return self._done(
                call,
                burst,
                start,
                attempts,
                "failure",
                backoff,
                None,
                False,
                f"the breaker refused attempt {attempts + 1}",
            )
        outcome = f"rejected_{rejection.reason}"
        if self._context and self.routes is None:
            # the shared model counts the session's refused calls beside its attempts
            self.dependency.refused(rejection.reason)  # type: ignore[attr-defined]
        self._emit(
            "rejected",
            call,
            burst,
            None,
            rejection.explain,
            outcome=outcome,
            data={"retry_in_ms": rejection.retry_in_ms},
        )
        return self._done(call, burst, start, 0, outcome, 0.0, None, False)

    def _done(
        self,
        call: int,
        burst: int | None,
        start: float,
        attempts: int,
        outcome: str,
        backoff: float,
        error: str | None,
        probe: bool,
        why: str | None = None,
    ) -> tuple[CallResult, str | None]:
        result = CallResult(
            call=call,
            burst=burst,
            attempts=attempts,
            outcome=outcome,
            backoff_ms=_r(backoff),
            start_ms=_r(start * 1000),
            end_ms=_r(self.clock.now() * 1000),
            error=error,
            probe=probe,
        )
        return result, why

    def _since(self, start: float | bool) -> float | None:
        """Milliseconds since ``start`` when slow calls are counted, else None."""
        if not self._slow:
            return None
        return (self.clock.now() - float(start)) * 1000

    def _emit_result(self, result: CallResult, why: str | None) -> None:
        if result.outcome == "success":
            tail = f"after {result.attempts} attempt{'s' if result.attempts != 1 else ''}"
            if result.backoff_ms:
                tail += f", {fmt_ms(result.backoff_ms)} of backoff"
            explain = f"call {result.call}: success {tail}"
            if result.probe:
                explain += " (half-open probe)"
        elif is_fast_fail(result.outcome):
            explain = f"call {result.call}: {result.outcome.replace('_', ' ')} in 0 attempts"
            if why:  # only with the settings of labs.engine.routes: no usable fallback
                explain += f"; {why}"
        elif result.outcome == "degraded":
            fallback = (result.extra or {}).get("fallback", {})
            explain = (
                f"call {result.call}: degraded, answered by {why} instead of "
                f"{fallback.get('why', 'an error')}"
            )
        elif result.attempts == 0 and why:
            explain = f"call {result.call}: {result.outcome.replace('_', ' ')} in 0 attempts; {why}"
        else:
            explain = (
                f"call {result.call}: {result.outcome.replace('_', ' ')} after "
                f"{result.attempts} attempt{'s' if result.attempts != 1 else ''}"
            )
            if result.error:
                explain += f" (last error {result.error})"
            if why:
                explain += f"; {why}"
        self._emit(
            "call_result",
            result.call,
            result.burst,
            result.attempts or None,
            explain,
            outcome=result.outcome,
            error=result.error,
            backoff_ms=result.backoff_ms,
            data={
                "start_ms": result.start_ms,
                "end_ms": result.end_ms,
                "probe": result.probe,
                "attempts": result.attempts,
                **(result.extra or {}),
            },
        )
