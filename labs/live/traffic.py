"""Steady traffic's arrivals: when a run's calls arrive.

A traffic run makes its calls at the instants of an arrival schedule fixed in advance
(:func:`arrival_schedule`: seeded Poisson or even spacing), each call through the session's
whole policy and concurrently with the calls still in flight. The calls run as cooperative
callers of the worker process's engine hub (:mod:`labs.live.hub`), one thread for every run
and burst of the process: a call spends nearly all its time sleeping, so a thread per call
would spend thousands of threads on sleeping.
"""

from __future__ import annotations

import random

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
