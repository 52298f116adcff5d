"""Steady traffic's arrivals: when a run's calls arrive.

A traffic run makes its calls at the instants of an arrival schedule fixed in advance
(:func:`arrival_schedule`: seeded Poisson or even spacing), each call through the session's
whole policy and concurrently with the calls still in flight. The calls run as cooperative
callers of the worker process's engine hub (:mod:`labs.worker.hub`), one thread for every run
and burst of the process: a call spends nearly all its time sleeping, so a thread per call
would spend thousands of threads on sleeping.

Every run has its own seed (:func:`traffic_seed`): the session's, which comes from the
scenario and is the same for every student of a class, mixed with the session's id and the
run's number. The schedule and the calls' random draws (jitter, error rates) come from it, so
thirty students of one class arrive and back off independently of each other, as the virtual
storm's clients do (:mod:`labs.experiments.metastable`), instead of in lock-step.
"""

from __future__ import annotations

import hashlib
import random

from labs.engine.config import LIMITS

#: Calls per second and seconds a traffic run may have.
RATE_RANGE = (int(LIMITS["traffic.rate"].min), int(LIMITS["traffic.rate"].max))
DURATION_RANGE = (int(LIMITS["traffic.duration_s"].min), int(LIMITS["traffic.duration_s"].max))
ARRIVALS = LIMITS["traffic.arrivals"].choices


def traffic_seed(session_seed: int, session_id: int, number: int) -> int:
    """The seed of a session's ``number``-th traffic run (31 bits): the same arguments give
    the same seed; two sessions of one class (same ``session_seed``) get unrelated ones."""
    digest = hashlib.blake2b(f"{session_seed}:{session_id}:{number}".encode(), digest_size=4)
    return int.from_bytes(digest.digest(), "big") & 0x7FFFFFFF


def calls_rng(seed: int) -> random.Random:
    """The random draws of a run's calls (jitter, error rates), from the run's seed."""
    return random.Random(f"traffic-calls:{seed}")


def arrival_schedule(rate: int, duration_s: int, arrivals: str, seed: int) -> list[float]:
    """The instants (seconds from the start, ascending, all below ``duration_s``) at which a
    run's calls arrive: ``even`` spaces ``rate x duration_s`` calls ``1/rate`` apart from a
    phase in ``[0, 1/rate)``; ``poisson`` draws exponential gaps of mean ``1/rate``; both
    from a generator seeded by ``seed`` (the same seed, the same schedule)."""
    rng = random.Random(f"traffic:{seed}")
    if arrivals == "even":
        phase = rng.random() / rate
        return [phase + i / rate for i in range(rate * duration_s)]
    out: list[float] = []
    t = rng.expovariate(rate)
    while t < duration_s:
        out.append(t)
        t += rng.expovariate(rate)
    return out
