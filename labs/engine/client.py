"""The guarded client: retries with backoff and a circuit breaker, in either nesting.

``breaker_outside`` (default): the breaker admits a call and the retry loop runs inside it;
``retry_outside``: every attempt asks the breaker first. A 400 is the caller's fault (not
retried, ignored by the breaker); 503, 500, timeouts and 429 are retried and counted. A
retry whose sleep would reach the call's deadline is not made; each retry costs a budget
token. Hosts, dependency B, the bulkhead and fallbacks (:mod:`labs.engine.routes`) change
nothing for a client that uses none of them. docs/engine.md, "Both nestings", the outcomes."""

from __future__ import annotations

import random
import threading
from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import labs.engine.narrate as narrate
from labs.engine.breaker import Breaker, Outcome, Permit, Rejection
from labs.engine.clock import Clock
from labs.engine.config import Policy
from labs.engine.dependency import AttemptResult, Dependency, FakeDependency
from labs.engine.events import Event, Sink, fmt_ms, null_sink
from labs.engine.outcomes import (
    CALL_OUTCOMES,
    BurstResult,
    CallResult,
    outcome_counts,
    round_ms,
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

#: How often a call waiting for a pool slot looks again (seconds).
POOL_POLL_S = 0.001

#: How a call ends: its result and, for a failure, why the loop stopped (for the explanation).
Ending = tuple[CallResult, str | None]


def _verdict(ok: bool, error: str | None) -> Outcome:
    """What the breaker is told: a 400 says nothing about the dependency's health."""
    if ok:
        return "success"
    return "failure" if counts_against_dependency(error) else "ignored"


@dataclass(slots=True)
class _Call:
    """One call in flight through the retry loop: what it was given, what it has spent, and
    the breaker's answer for its current attempt."""

    call_no: int
    burst: int | None
    start: float
    limit: int
    #: The breaker's permit for the whole call (breaker_outside), else None.
    outer: Permit | None
    deadline: float | None
    #: The fake dependency's flaky count when it lives in the breaker's store, else None.
    fail_left: int | None
    route: Route | None = None
    key: str | None = None
    tally: dict[str, int] | None = None
    probe: bool = False
    error: str | None = None
    backoff_total: float = 0.0
    previous: float | None = None
    #: A server pushback restarts the backoff exponent after it.
    restart: int = 0
    #: The gRPC throttle's last answer (allowed, tokens).
    verdict: tuple[bool, float] = (True, 0.0)
    # -- the current attempt
    permit: Permit | None = None
    recorder: Any = None
    host: int = 0
    stepped: Any = None
    #: Whether the attempt's failure opened the breaker (retry_outside).
    opened: bool = False


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
        # A dependency that sets ``wants_call_context`` (the shared model, the next tier of a
        # chain) also receives the attempt and call numbers and the call's deadline (absolute,
        # on ``clock``).
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
                result, why = self._loop(self._new_call(call_no, burst, start, limit, permit))
                verdict = _verdict(result.outcome == "success", result.error)
                self.breaker.record(
                    permit, verdict, error=result.error, duration_ms=self._since(start),
                    reply=False,
                )  # fmt: skip
        else:
            limit = self.policy.max_attempts
            result, why = self._loop(self._new_call(call_no, burst, start, limit, None))
        self._emit_result(result, why)
        return result

    def _new_call(
        self,
        call_no: int,
        burst: int | None,
        start: float,
        limit: int,
        outer: Permit | None,
        route: Route | None = None,
    ) -> _Call:
        """A call about to enter the retry loop, its deadline set from ``start``."""
        deadline_ms = self.policy.deadline_ms
        return _Call(
            call_no=call_no,
            burst=burst,
            start=start,
            limit=limit,
            outer=outer,
            deadline=None if deadline_ms is None else start + deadline_ms / 1000,
            fail_left=None,
            route=route,
            probe=outer.probe if outer is not None else False,
        )

    def _loop(self, c: _Call) -> Ending:
        """The retry loop: up to ``c.limit`` attempts, each admitted, made, recorded and
        judged; between two of them a pause that the deadline and the retry budget may
        refuse. Returns the call's result and, for a failure, why the loop stopped."""
        budget = self.budget
        if budget is not None and budget.kind != "grpc":
            budget.deposit(reply=False)
        # The fake dependency's state in the breaker's store: each attempt reaches it in the
        # same store operation as the breaker's look before it (one round trip on Redis).
        c.fail_left = self._dependency_step() if c.route is None else None
        for n in range(1, c.limit + 1):
            ending = self._admit(c, n)
            if ending is not None:
                return ending
            answer = self._attempt(c, n)
            ending = self._judge(c, n, answer)
            if ending is not None:
                return ending
            ending = self._pause(c, n, answer)
            if ending is not None:
                return ending
        raise AssertionError("unreachable: the loop returns on its last attempt")

    def _admit(self, c: _Call, n: int) -> Ending | None:
        """Ask the breaker whether attempt ``n`` may go (each attempt in retry_outside; a
        retry in breaker_outside only checks that the breaker still reads CLOSED). Sets the
        attempt's permit, recorder, host and dependency step; returns an ending if refused."""
        outer, route = c.outer, c.route
        breaker = self.breaker if route is None else route.breaker
        c.permit, c.recorder, c.host = outer, breaker, 0
        c.stepped = outer.step if outer is not None and n == 1 else None
        if outer is not None and n > 1:
            # Another caller's result may have moved the breaker while this call was
            # backing off: a retry goes only to a breaker that still reads CLOSED.
            if c.fail_left is not None:
                c.stepped = breaker.step_if_closed(c.fail_left)
                moved = c.stepped is None
            else:
                moved = breaker.state() != "closed"
            if moved:
                why = "the breaker left CLOSED meanwhile; an open breaker is never retried"
                return self._stop(c, n - 1, "failure", why)
        if outer is None:
            if route is not None and route.host_breakers:
                allowed, c.host, c.recorder = route.admit(c.call_no, n, c.burst)
            else:
                allowed = breaker.allow(call=c.call_no, burst=c.burst, dependency_step=c.fail_left)
            if isinstance(allowed, Rejection):
                return self._rejected(c.call_no, c.burst, c.start, allowed, n - 1, c.backoff_total)
            c.permit = allowed
            c.probe = c.probe or allowed.probe
            c.stepped = allowed.step
        if route is not None and not route.host_breakers:
            c.host = route.pick(c.call_no, n)
        return None

    def _attempt(self, c: _Call, n: int) -> AttemptResult:
        """Make attempt ``n``, tell the sink, and report it to the breaker that admitted it
        (retry_outside); a gRPC throttle observes it too."""
        policy, route = self.policy, c.route
        attempt_start = self._slow and self.clock.now()
        if route is not None:
            answer, effect = route.attempt(c.host, policy.attempt_timeout_ms, c.key)
            if effect == "applied" and c.tally is not None:
                c.tally["effects"] += 1
            self._emit_routed_attempt(c, n, answer, effect)
        else:
            if self._context:
                answer = self.dependency.attempt(
                    policy.attempt_timeout_ms,
                    attempt=n,
                    deadline=c.deadline,
                    probe=c.probe,
                    call=c.call_no,
                )
            elif c.stepped is not None:
                answer = self.dependency.attempt(policy.attempt_timeout_ms, step=c.stepped)
            else:
                answer = self.dependency.attempt(policy.attempt_timeout_ms)
            self._emit_attempt(c.call_no, c.burst, n, answer)
        c.opened = False
        if c.outer is None and c.permit is not None:
            recorded = c.recorder.record(
                c.permit,
                _verdict(answer.ok, answer.error),
                error=answer.error,
                duration_ms=self._since(attempt_start),
                reply=not answer.ok,  # a success ends the call: nothing to read
            )
            c.opened = recorded is not None and recorded.transition == "open"
        budget = self.budget
        throttled = budget is not None and budget.kind == "grpc"
        if throttled and (answer.ok or is_retryable(answer.error)):
            c.verdict = budget.observe(answer.ok)
        return answer

    def _judge(self, c: _Call, n: int, answer: AttemptResult) -> Ending | None:
        """After attempt ``n``: the call ends on a success, a caller's error, its last
        attempt, or a breaker that the attempt opened; else None (a retry may follow)."""
        if answer.ok:
            return self._done(
                c.call_no, c.burst, c.start, n, "success", c.backoff_total, None, c.probe
            )
        c.error = error = answer.error
        if not is_retryable(error):
            return self._stop(c, n, "failure", f"{error} is the caller's fault: not retried")
        if n == c.limit:
            probe_only = c.probe and c.outer is not None
            why = "a half-open probe gets one attempt" if probe_only else f"all {n} attempts used"
            return self._stop(c, n, "failure", why)
        route = c.route
        if c.opened and not (route is not None and route.host_breakers and route.many_hosts):
            # (with a breaker per host, the retry moves on to another host)
            why = "the breaker opened; an open breaker is never retried"
            return self._stop(c, n, "failure", why)
        return None

    def _pause(self, c: _Call, n: int, answer: AttemptResult) -> Ending | None:
        """The pause before attempt ``n + 1``: computed, refused if it would end past the
        deadline or if the retry budget has no token, else slept."""
        policy, budget, error = self.policy, self.budget, c.error
        delay = self._delay(c, n, answer)
        now = self.clock.now()
        if c.deadline is not None and now + delay.ms / 1000 >= c.deadline:
            self._emit(
                "deadline_exceeded", c.call_no, c.burst, n,
                narrate.deadline(n, error, delay, policy.deadline_ms or 0),
                outcome="deadline_exceeded", error=error, backoff_ms=delay.ms,
                data={
                    "deadline_ms": policy.deadline_ms,
                    "elapsed_ms": round_ms((now - c.start) * 1000),
                },
            )  # fmt: skip
            return self._stop(c, n, "deadline_exceeded")
        if budget is not None:
            taken, balance = c.verdict if budget.kind == "grpc" else budget.try_withdraw()
            if not taken:
                self._emit(
                    "budget_exhausted", c.call_no, c.burst, n,
                    f"attempt {n} failed ({error}); {budget.refusal(balance)}; not retrying",
                    outcome="budget_exhausted", error=error, data={"tokens": balance},
                )  # fmt: skip
                return self._stop(c, n, "budget_exhausted")
        self._emit(
            "sleep", c.call_no, c.burst, n, narrate.sleep(n, error, delay),
            error=error, backoff_ms=round_ms(delay.ms),
            data={"formula": delay.formula, "retry_after_ms": delay.retry_after_ms},
        )  # fmt: skip
        if delay.ms:
            self.clock.sleep(delay.ms / 1000)
        c.backoff_total += delay.ms
        c.previous = delay.ms
        return None

    def _delay(self, c: _Call, n: int, answer: AttemptResult) -> Delay:
        """How long to wait after attempt ``n``: the backoff formula, or the server's
        pushback exactly (gRPC), after which the backoff starts again from its first step."""
        policy = self.policy
        pushback = policy.retry_after == "pushback" and bool(answer.retry_after_ms)
        delay = retry_delay(
            policy.jitter,
            n - c.restart,
            policy.backoff_base_ms,
            policy.backoff_cap_ms,
            self.rng,
            c.previous,
            None if pushback else answer.retry_after_ms,
        )
        if not pushback:
            return delay
        pushed = float(answer.retry_after_ms or 0)
        c.restart = n
        formula = f"server pushback {fmt_ms(pushed)}, exactly; the backoff restarts after it"
        return Delay(pushed, delay.ms, formula, pushed)

    def _stop(self, c: _Call, attempts: int, outcome: str, why: str | None = None) -> Ending:
        """End ``c`` after ``attempts`` attempts with its last error."""
        return self._done(
            c.call_no, c.burst, c.start, attempts, outcome, c.backoff_total, c.error, c.probe, why
        )

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
        text = narrate.burst_start(size, concurrency, burst)
        self._emit("burst_start", None, burst, None, text, data=data)
        if self._pooled:
            results = self._run_pool(size, concurrency, first_call, burst, start)
        else:
            results = self._run_callers(size, concurrency, first_call, burst)
        end = self.clock.now()
        extra = self._burst_extra(results) if self.routes is not None else {}
        chained = getattr(self.dependency, "burst_extra", None)  # a chain's figures
        if chained is not None:
            extra.update(chained())
        outcome = BurstResult(
            calls=results,
            wall_ms=(end - start) * 1000,
            start_ms=start * 1000,
            end_ms=end * 1000,
            burst=burst,
            concurrency=concurrency,
            extra=extra,
        )
        summary = outcome.summary()
        self._emit("burst_end", None, burst, None, narrate.burst_end(outcome, size), data=summary)
        return outcome

    def _run_callers(
        self, size: int, concurrency: int, first_call: int, burst: int | None
    ) -> list[CallResult]:
        """``concurrency`` callers each take the next call number until none is left; the
        results in call order."""
        if concurrency == 1:
            return [self.call(first_call + i, burst) for i in range(size)]
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

        results: list[CallResult] = []
        for part in self.clock.run_concurrently([caller] * min(concurrency, size)):
            results.extend(part)
        results.sort(key=lambda c: c.call)
        return results

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
        """One call with the settings of labs.engine.routes: through the bulkhead, then the
        same retry loop with the route's breaker, hosts and idempotency key."""
        route = self._route_of(call_no)
        policy = self.policy
        start = self.clock.now()
        tally = {"effects": 0}
        if not route.enter(policy.bulkhead):
            self._emit(
                "rejected", call_no, burst, None, narrate.bulkhead(route, policy.bulkhead),
                outcome="rejected_bulkhead",
                data={"bulkhead": policy.bulkhead, **narrate.label(route)},
            )  # fmt: skip
            result, why = self._done(
                call_no, burst, start, 0, "rejected_bulkhead", 0.0, None, False
            )
            return self._finish_routed(route, result, "the bulkhead is full", tally, waited_ms)
        try:
            outer = policy.nesting == "breaker_outside"
            permit = route.breaker.allow(call=call_no, burst=burst) if outer else None
            if isinstance(permit, Rejection):
                result, why = self._rejected(call_no, burst, start, permit, 0, 0.0)
            else:
                limit = 1 if permit is not None and permit.probe else policy.max_attempts
                c = self._new_call(call_no, burst, start, limit, permit, route)
                c.key = f"call-{call_no}" if policy.idempotency_keys else None
                c.tally = tally
                result, why = self._loop(c)
                if permit is not None:
                    verdict = _verdict(result.outcome == "success", result.error)
                    route.breaker.record(
                        permit, verdict, error=result.error, duration_ms=self._since(start)
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
        extra: dict[str, Any] = narrate.label(route)
        if waited_ms is not None:
            extra["waited_ms"] = round_ms(waited_ms)
        if route.config.side_effect:
            extra["effects"] = tally["effects"]
        now_us = int(self.clock.now() * 1e6 + 0.5)
        if result.outcome == "success":
            if policy.fallback == "cached":
                route.store.fallback_note(now_us)
        elif policy.fallback is not None:
            result, why = self._fallback(route, result, why, extra, now_us)
        result = replace(result, extra=extra or None)
        self._emit_result(result, why)
        return result

    def _fallback(
        self, route: Route, result: CallResult, why: str | None, extra: dict, now_us: int
    ) -> Ending:
        """A failed call answered by the policy's fallback (``degraded``) when one is usable:
        the default answer, or a cached one younger than its max age. Fills ``extra``."""
        policy = self.policy
        fallback: dict[str, Any] = {"kind": policy.fallback, "instead_of": result.outcome}
        usable, note = True, "the default answer"
        if policy.fallback == "cached":
            last = route.store.fallback_last()
            limit = policy.fallback_max_age_ms
            if last is None:
                usable, note = False, "no cached answer yet (no call has succeeded)"
            else:
                age = round_ms((now_us - last) / 1000)
                fallback["age_ms"] = age
                usable = age <= limit
                note = narrate.cached_answer(age, limit, usable)
        if usable:
            fallback["why"] = narrate.failure_words(result, why)
            extra["fallback"] = fallback
            return replace(result, outcome="degraded"), note
        extra["fallback_unusable"] = note
        if "age_ms" in fallback:  # a cached answer existed, past its max age
            extra["fallback_expired_ms"] = fallback["age_ms"]
        return result, (f"{why}; no fallback: {note}" if why else f"no fallback: {note}")

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
        """A call that gave up waiting for a pool slot: rejected, never attempted."""
        route = self._route_of(call_no)
        waited = (self.clock.now() - arrived) * 1000
        self._emit(
            "rejected", call_no, burst, None,
            narrate.pool_timeout(call_no, waited, slots, route),
            outcome="pool_timeout",
            data={"waited_ms": round_ms(waited), **narrate.label(route)},
        )  # fmt: skip
        result, _ = self._done(call_no, burst, arrived, 0, "pool_timeout", 0.0, None, False)
        return self._finish_routed(
            route, result, f"no slot of the pool freed within {fmt_ms(round_ms(waited))}",
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
            waited = sum((c.extra or {}).get("waited_ms", 0) for c in calls)
            extra["wait_ms_total"] = round_ms(waited)
            extra["rejected_bulkhead"] = sum(1 for c in calls if c.outcome == "rejected_bulkhead")
            extra["pool_timeout"] = sum(1 for c in calls if c.outcome == "pool_timeout")
        if len(routes) > 1:
            by: dict[str, dict[str, int]] = {}
            for route in routes:
                mine = [c for c in calls if (c.extra or {}).get("dependency") == route.name]
                by[str(route.name)] = outcome_counts(mine)
            extra["by_dependency"] = by
        if any(r.config.side_effect for r in routes):
            extra["effects"] = {
                "applied": sum((c.extra or {}).get("effects", 0) for c in calls),
                "calls": len(calls),
            }
        return extra

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
        self._emit(
            "attempt", call, burst, n, narrate.attempt(call, n, answer),
            outcome="ok" if answer.ok else "error", error=answer.error,
            latency_ms=answer.latency_ms, data=narrate.attempt_data(answer),
        )  # fmt: skip

    def _emit_routed_attempt(
        self, c: _Call, n: int, answer: AttemptResult, effect: str | None
    ) -> None:
        """An attempt event naming the dependency, the host and the side effect."""
        route, host, key = c.route, c.host, c.key
        assert route is not None
        where = narrate.whose(route) + (f"host {host}, " if route.many_hosts else "")
        explain = narrate.attempt(c.call_no, n, answer, where)
        data = narrate.attempt_data(answer)
        data.update(narrate.label(route))
        if route.many_hosts:
            data["host"] = host
        if route.config.side_effect:
            explain += narrate.effect(route.config.side_effect, effect, answer.ok, key)
            data["effect"] = effect
            if key is not None:
                data["key"] = key
        self._emit(
            "attempt", c.call_no, c.burst, n, explain,
            outcome="ok" if answer.ok else "error", error=answer.error,
            latency_ms=answer.latency_ms, data=data,
        )  # fmt: skip

    def _rejected(
        self,
        call: int,
        burst: int | None,
        start: float,
        rejection: Rejection,
        attempts: int,
        backoff: float,
    ) -> Ending:
        """A call the breaker refused: before any attempt (a fast-fail), or in retry_outside
        before a retry (a failure after the attempts it made)."""
        if attempts:
            self._emit(
                "rejected", call, burst, attempts + 1, rejection.explain,
                outcome=f"rejected_{rejection.reason}",
                data={"retry_in_ms": rejection.retry_in_ms},
            )  # fmt: skip
            why = f"the breaker refused attempt {attempts + 1}"
            return self._done(call, burst, start, attempts, "failure", backoff, None, False, why)
        outcome = f"rejected_{rejection.reason}"
        if self._context and self.routes is None:
            # the shared model counts the session's refused calls beside its attempts
            self.dependency.refused(rejection.reason)  # type: ignore[attr-defined]
        self._emit(
            "rejected", call, burst, None, rejection.explain,
            outcome=outcome, data={"retry_in_ms": rejection.retry_in_ms},
        )  # fmt: skip
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
    ) -> Ending:
        """The call's result, ended now."""
        result = CallResult(
            call=call,
            burst=burst,
            attempts=attempts,
            outcome=outcome,
            backoff_ms=round_ms(backoff),
            start_ms=round_ms(start * 1000),
            end_ms=round_ms(self.clock.now() * 1000),
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
        self._emit(
            "call_result", result.call, result.burst, result.attempts or None,
            narrate.call_result(result, why),
            outcome=result.outcome, error=result.error, backoff_ms=result.backoff_ms,
            data={
                "start_ms": result.start_ms,
                "end_ms": result.end_ms,
                "probe": result.probe,
                "attempts": result.attempts,
                **(result.extra or {}),
            },
        )  # fmt: skip
