"""Steady traffic's runner: a session's open-loop calls, thousands in flight, on one thread.

A traffic run makes its calls at the instants of an arrival schedule fixed in advance
(:func:`arrival_schedule`: seeded Poisson or even spacing), each call through the session's
whole policy and concurrently with the calls still in flight. A call spends nearly all its
time sleeping (waiting for the dependency's answer, backing off), so a thread per call would
spend thousands of threads on sleeping; instead every call of one run is a cooperative caller
(a greenlet) of one :class:`PacedClock` on the run's one thread.

:class:`PacedClock` is the engine's :class:`~labs.engine.clock.VirtualClock` with its
scheduler paced to the wall clock: before it runs the next due entry (an arrival, or a call
waking from a sleep) it really sleeps until that instant, and ``now()`` is wall time. The
engine code is the same blocking code a burst runs (a breaker check, one round trip to the
dependency, a sleep); its sleeps hand the thread to the next due caller, its Redis round
trips (sub-millisecond) briefly hold it. Wall time because breaker timestamps live in Redis
and are shared with bursts and other processes (``runtime.CLOCK``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from labs.engine import VirtualClock

#: Calls per second and seconds a traffic run may have.
RATE_RANGE = (1, 20)
DURATION_RANGE = (1, 300)
ARRIVALS = ("poisson", "even")


def arrival_schedule(rate: int, duration_s: int, arrivals: str, seed: int) -> list[float]:
    """The instants (seconds from the start, ascending, all below ``duration_s``) at which a
    run's calls arrive: ``even`` spaces ``rate x duration_s`` calls ``1/rate`` apart;
    ``poisson`` draws exponential gaps of mean ``1/rate`` from a generator seeded by
    ``seed`` (the same seed, the same schedule)."""
    if arrivals == "even":
        return [i / rate for i in range(rate * duration_s)]
    rng = random.Random(f"traffic:{seed}")
    out: list[float] = []
    t = rng.expovariate(rate)
    while t < duration_s:
        out.append(t)
        t += rng.expovariate(rate)
    return out


class PacedClock(VirtualClock):
    """A :class:`~labs.engine.clock.VirtualClock` whose scheduler waits for the wall clock
    (``time.time()``) to reach each entry's time before running it; ``now()`` is wall time.

    Cooperative callers sleep on it as on any virtual clock (their thread runs the next due
    caller meanwhile); blocking work between two sleeps holds the thread, so it must be
    short (a Redis round trip is).
    """

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        super().__init__(start=wall(), backend="greenlet")

    def now(self) -> float:
        wall = self._wall()
        if wall > self._now:
            self._now = wall
        return self._now

    def sleep(self, seconds: float) -> None:
        self.now()  # sleep from the real now, not from the last entry's instant
        super().sleep(seconds)

    def _step(self) -> bool:
        if self._queue:
            delay = self._queue[0][0] - self._wall()
            if delay > 0:
                time.sleep(delay)
        stepped = super()._step()
        self.now()
        return stepped
