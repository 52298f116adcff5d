"""The fake dependency: answers each attempt according to its mode, after its latency.

Modes: ``healthy``; ``flaky`` (fail the next ``fail_count`` attempts,
then heal); ``down``; ``slow`` (answers, but after ``latency_ms``, meant to exceed the
client's ``attempt_timeout_ms``); ``error_rate`` (each attempt fails with probability
``rate``, drawn from the seeded rng); ``outage`` (down for ``down_for_ms`` from when it was
set, then healthy); ``rate_limited`` (429 with ``Retry-After`` = the time left, for
``retry_after_ms`` from the first attempt that reaches it after it was set, then healthy:
the limit trips on the caller's first request, so a lesson's window starts with the burst
that meets it, however long the student read before running it); ``script`` (``outcomes`` in order,
one per attempt, then healthy); ``shared`` (the class's shared dependency: the lab puts a
:class:`~labs.engine.shared.SharedDependency` in its place, and this fake answers as healthy);
``server`` (the student's own server with a queue: the shared model with ``server``'s settings,
for this caller alone, :func:`~labs.engine.shared.private_server`; this fake answers as healthy).
Failures carry the kind ``error`` (503 by default).

Its state (flaky counter, start time, script position) lives in the store, next to the
breaker, so it carries across bursts and across worker processes. Each attempt is one store
operation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Protocol

from labs.engine.clock import Clock
from labs.engine.config import DependencyConfig
from labs.engine.stores.base import Store

__all__ = ["AttemptResult", "Dependency", "FakeDependency"]


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """One attempt's answer. ``error`` is None when ``ok``, else 503, 500, timeout, 429 or
    400; ``retry_after_ms`` accompanies a 429; ``latency_ms`` is how long the attempt took;
    ``data`` is what the dependency adds for the journal (the shared model's decision);
    ``processed`` says the dependency did the work (its answer was ok), even when the caller
    gave up first: a side effect is applied once per processed attempt."""

    ok: bool
    error: str | None
    latency_ms: float
    retry_after_ms: float | None = None
    data: dict[str, Any] | None = None
    processed: bool = False


class Dependency(Protocol):
    """What the guarded client calls: one attempt, given the client's attempt timeout.

    An implementation that sets ``wants_call_context = True`` is called as
    ``attempt(timeout_ms, attempt=n, deadline=at, probe=p, call=c)`` instead (the attempt
    number within the call, the call's deadline as an absolute time on the client's clock, or
    None, whether it is the breaker's half-open probe, and the call's number), and ``refused(reason)`` for a call the
    breaker refused before any attempt.
    """

    def attempt(self, timeout_ms: float | None = None) -> AttemptResult: ...


class FakeDependency:
    """A dependency whose behaviour is set by a :class:`DependencyConfig`.

    ``attempt()`` reaches the dependency's state in the store, sleeps the latency on
    ``clock`` (or the attempt timeout, if shorter) and answers. The answer is decided after
    the latency, at the clock's time of the answer.
    """

    def __init__(
        self,
        config: DependencyConfig,
        *,
        store: Store,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.rng = rng
        self._fail_left = config.fail_count if config.mode == "flaky" else 0

    def arm(self) -> None:
        """Write the mode's fresh state: flaky counter = N, start time = now, position 0.

        A rate limit's start time is left to its first attempt (armed at -1, which the
        store's ``dependency_step`` replaces with the time of the attempt). Called when the
        dependency is (re)set; without it, the first attempt arms lazily.
        """
        now_us = int(self.clock.now() * 1e6 + 0.5)
        started = -1 if self.config.mode == "rate_limited" else now_us
        self.store.dependency_arm(self._fail_left, started)

    @property
    def fail_left(self) -> int:
        """The flaky count the store's state is armed with (0 unless ``flaky``)."""
        return self._fail_left

    def attempt(
        self, timeout_ms: float | None = None, *, step: tuple[int, int, int] | None = None
    ) -> AttemptResult:
        """One attempt: it reaches the dependency (one store operation: the flaky counter,
        the script position), the latency passes, and the answer is decided at the time of
        the answer (an outage or a rate limit may have ended meanwhile).

        ``step`` is the store's ``dependency_step`` reply when the caller already made it
        (together with the breaker's admission: ``Breaker.allow(dependency_step=...)``,
        one round trip for both on Redis); the attempt then makes no store operation.

        With ``timeout_ms`` shorter than the latency, the caller gives up after
        ``timeout_ms`` and the answer is a ``timeout`` (the request still reached the
        dependency, so a flaky counter is consumed).
        """
        cfg = self.config
        latency = cfg.latency_ms
        timed_out = timeout_ms is not None and latency > timeout_ms
        took = timeout_ms if timed_out and timeout_ms is not None else latency
        if step is None:
            step = self.store.dependency_step(self._fail_left, int(self.clock.now() * 1e6 + 0.5))
        if took:
            self.clock.sleep(took / 1000)
        now_us = int(self.clock.now() * 1e6 + 0.5)
        left, started_us, position = step
        error, retry_after = self._answer(left, started_us, position, now_us)
        if timed_out:
            # the work may still have been done: the caller only stopped waiting for it
            return AttemptResult(False, "timeout", took, processed=error is None)
        if error is None:
            return AttemptResult(True, None, took, processed=True)
        return AttemptResult(False, error, took, retry_after)

    def _answer(
        self, left: int, started_us: int, position: int, now_us: int
    ) -> tuple[str | None, float | None]:
        cfg = self.config
        mode = cfg.mode
        error = cfg.error
        if mode in ("healthy", "slow", "shared", "server"):
            # shared, server: the engine calls a shared model instead; alone, they answer ok
            return None, None
        if mode == "flaky":
            return (error, self._hint(error)) if left > 0 else (None, None)
        if mode == "down":
            return error, self._hint(error)
        if mode == "error_rate":
            return (error, self._hint(error)) if self.rng.random() < cfg.rate else (None, None)
        if mode == "outage":
            down = now_us < started_us + cfg.down_for_ms * 1000
            return (error, self._hint(error)) if down else (None, None)
        if mode == "rate_limited":
            left_ms = (started_us + cfg.retry_after_ms * 1000 - now_us) / 1000
            return ("429", left_ms) if left_ms > 0 else (None, None)
        # script
        if position < len(cfg.outcomes):
            planned = cfg.outcomes[position]
            if planned == "ok":
                return None, None
            kind = error if planned == "fail" else planned
            return kind, self._hint(kind)
        return None, None

    def _hint(self, error: str) -> float | None:
        """Retry-After for a 429 outside rate_limited mode: ``retry_after_ms`` if set."""
        if error == "429" and self.config.retry_after_ms > 0:
            return float(self.config.retry_after_ms)
        return None
