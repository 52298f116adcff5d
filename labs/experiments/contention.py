"""Backoff strategies under contention: N clients updating one row with optimistic concurrency,
the simulation of the AWS Architecture Blog's "Exponential Backoff And Jitter".

The strategies' sleeps are the engine's :func:`~labs.engine.jittered_backoff_ms`, and time is
the engine's :class:`~labs.engine.VirtualClock` with one scheduled write per attempt (a write
succeeds when no write succeeded since the client's read reached the server). The model, the
mapping of the study's ``expo(n)`` onto ``backoff_ms`` and the simplifications that keep the
sweep fast: docs/experiments.md.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from labs.engine import Problem, VirtualClock
from labs.engine.retry import jittered_backoff_ms
from labs.experiments.base import (
    Chart,
    Column,
    Experiment,
    Figure,
    Param,
    Result,
    check_fields,
    fmt_number,
    series,
)

__all__ = ["LIMITS", "MAX_WORK", "STRATEGIES", "ContentionParams", "run", "simulate", "validate"]

STRATEGIES = ("none", "exponential", "full", "equal", "decorrelated")
_LABELS = {
    "none": "no backoff",
    "exponential": "exponential",
    "full": "full jitter",
    "equal": "equal jitter",
    "decorrelated": "decorrelated jitter",
}
_ENGINE_JITTER = {
    "exponential": "none",
    "full": "full",
    "equal": "equal",
    "decorrelated": "decorrelated",
}
#: What a re-run of the study's simulator gave at 100 clients (calls).
STUDY_CALLS_AT_100 = {
    "none": 2424,
    "exponential": 1858,
    "decorrelated": 1006,
    "equal": 811,
    "full": 797,
}
#: trials x the sum of N^2 over the clients list is capped here (no backoff costs ~N^2/4 writes).
MAX_WORK = 300_000


@dataclass(frozen=True)
class ContentionParams:
    """Defaults: the study's network (10 +- 2 ms per leg), base 5 ms, cap 2 s; N from 10 to 200."""

    clients: tuple[int, ...] = (10, 20, 50, 100, 150, 200)
    focus: int = 100
    base_ms: float = 5.0
    cap_ms: float = 2000.0
    net_mean_ms: float = 10.0
    net_sd_ms: float = 2.0
    trials: int = 1
    seed: int = 7


LIMITS: dict[str, Param] = {
    "clients": Param(
        "clients",
        "Clients (N values)",
        (10, 20, 50, 100, 150, 200),
        2,
        500,
        kind="int_list",
        max_items=12,
        help="one run per N and strategy",
    ),
    "focus": Param(
        "focus",
        "Headline at N =",
        100,
        2,
        500,
        help="the figures compare the strategies at this N (run too if not listed)",
    ),
    "base_ms": Param(
        "base_ms",
        "Backoff base",
        5.0,
        0.1,
        1000,
        "ms",
        kind="number",
        help="the n-th failure sleeps up to min(cap, base x 2^n)",
    ),
    "cap_ms": Param(
        "cap_ms", "Backoff cap", 2000.0, 1, 60000, "ms", kind="number", help="at least the base"
    ),
    "net_mean_ms": Param("net_mean_ms", "Network leg mean", 10.0, 0, 1000, "ms", kind="number"),
    "net_sd_ms": Param("net_sd_ms", "Network leg spread (sd)", 2.0, 0, 1000, "ms", kind="number"),
    "trials": Param("trials", "Trials per point", 1, 1, 20, help="results are averaged"),
    "seed": Param("seed", "Seed", 7, 0, 999_999_999),
}


def _points(params: ContentionParams) -> list[int]:
    return sorted({*params.clients, params.focus})


def validate(params: ContentionParams) -> list[Problem]:
    """Field ranges, cap >= base, and the size of the sweep (trials x sum of N^2)."""
    problems = check_fields(params, LIMITS)
    if problems:
        return problems
    if params.cap_ms < params.base_ms:
        problems.append(
            Problem(
                "cap_ms",
                f"must be between base_ms ({params.base_ms:g}) and 60000 ms "
                f"(got {params.cap_ms:g})",
            )
        )
    if params.net_mean_ms == 0 and params.net_sd_ms == 0:
        problems.append(
            Problem(
                "net_mean_ms",
                "must be above 0 when net_sd_ms is 0 (a network with no "
                "delay never lets a write conflict; got 0)",
            )
        )
    work = params.trials * sum(n * n for n in _points(params))
    if work > MAX_WORK:
        problems.append(
            Problem(
                "clients",
                f"too large a sweep: trials x the sum of N^2 (focus included) must be at most "
                f"{MAX_WORK:,} (got {params.trials} x {work // params.trials:,} = {work:,})",
            )
        )
    return problems


def simulate(
    clients: int,
    strategy: str,
    rng: random.Random,
    *,
    base_ms: float = 5.0,
    cap_ms: float = 2000.0,
    net_mean_ms: float = 10.0,
    net_sd_ms: float = 2.0,
) -> tuple[int, float]:
    """One run: ``clients`` clients each write the row once. Returns (write calls, completion ms)."""
    clock = VirtualClock()
    call_at = clock.call_at
    gauss = rng.gauss
    mean, sd = net_mean_ms, net_sd_ms
    mean2, sd2 = 2 * net_mean_ms, net_sd_ms * math.sqrt(2)
    jitter = _ENGINE_JITTER.get(strategy)
    last_success = -math.inf
    calls = 0
    completion = 0.0

    def write(read_at: float, failures: int, previous: float | None) -> None:
        nonlocal last_success, calls, completion
        calls += 1
        now = clock.now() * 1000
        if last_success < read_at:  # nobody wrote since our read: the version still matches
            last_success = now
            done = now + abs(gauss(mean, sd))
            if done > completion:
                completion = done
            return
        failures += 1
        sleep = 0.0
        if jitter is not None:
            sleep = jittered_backoff_ms(jitter, failures + 1, base_ms, cap_ms, rng, previous)
        read = now + sleep + abs(gauss(mean2, sd2))
        call_at((read + abs(gauss(mean2, sd2))) / 1000, write, read, failures, sleep)

    for _ in range(clients):
        read = abs(gauss(mean, sd))
        call_at((read + abs(gauss(mean2, sd2))) / 1000, write, read, 0, None)
    clock.run()
    return calls, completion


def run(params: ContentionParams) -> Result:
    """Every strategy at every N (``trials`` seeded runs each, averaged)."""
    points = _points(params)
    calls: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    times: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    for n in points:
        for strategy in STRATEGIES:
            total_calls, total_time = 0, 0.0
            for trial in range(params.trials):
                rng = random.Random(f"contention:{params.seed}:{n}:{strategy}:{trial}")
                c, t = simulate(
                    n,
                    strategy,
                    rng,
                    base_ms=params.base_ms,
                    cap_ms=params.cap_ms,
                    net_mean_ms=params.net_mean_ms,
                    net_sd_ms=params.net_sd_ms,
                )
                total_calls += c
                total_time += t
            calls[strategy].append(round(total_calls / params.trials, 3))
            times[strategy].append(round(total_time / params.trials, 3))
    at = points.index(params.focus)
    focus_calls = {s: calls[s][at] for s in STRATEGIES}
    focus_times = {s: times[s][at] for s in STRATEGIES}
    charts = (
        Chart(
            "calls",
            "Total calls (writes) to finish",
            "line",
            tuple(points),
            "clients (N)",
            "calls",
            tuple(series(_LABELS[s], calls[s]) for s in STRATEGIES),
        ),
        Chart(
            "time",
            "Time until the last client is done",
            "line",
            tuple(points),
            "clients (N)",
            "completion (ms)",
            tuple(series(_LABELS[s], times[s]) for s in STRATEGIES),
        ),
    )
    rows = []
    for i, n in enumerate(points):
        for s in STRATEGIES:
            rows.append(
                {
                    "clients": n,
                    "strategy": _LABELS[s],
                    "calls": calls[s][i],
                    "per_client": round(calls[s][i] / n, 2),
                    "completion_ms": round(times[s][i], 1),
                }
            )
    slowest = max(STRATEGIES, key=lambda s: focus_times[s])
    figures = [
        Figure(
            f"calls_{s}",
            f"Calls at N = {params.focus}, {_LABELS[s]}",
            round(focus_calls[s]),
            seed=f"{STUDY_CALLS_AT_100[s]:,} (study re-run)" if params.focus == 100 else "",
        )
        for s in STRATEGIES
    ]
    figures.append(
        Figure(
            "slowest",
            f"Slowest to complete at N = {params.focus}",
            f"{_LABELS[slowest]} ({fmt_number(round(focus_times[slowest]))} ms)",
            seed="exponential (study)",
        )
    )
    return Result(
        experiment="contention",
        params=EXPERIMENT.params_dict(params),
        figures=tuple(figures),
        columns=(
            Column("clients", "N"),
            Column("strategy", "Strategy"),
            Column("calls", "Calls"),
            Column("per_client", "Calls per client"),
            Column("completion_ms", "Completion (ms)"),
        ),
        rows=tuple(rows),
        charts=charts,
        metrics={
            "points": points,
            "calls": calls,
            "times": times,
            "focus": params.focus,
            "focus_calls": focus_calls,
            "focus_times": focus_times,
            "slowest": slowest,
        },
        notes=(
            "Calls are write attempts, as in the study; every attempt also makes one read.",
            f"Averaged over {params.trials} seeded run(s) per point; the study averaged 100.",
        ),
    )


EXPERIMENT: Experiment[ContentionParams] = Experiment(
    name="contention",
    title="Backoff strategies under contention",
    summary="N clients race to update one row with optimistic concurrency: jitter halves the "
    "calls, plain exponential backoff takes the longest.",
    params_type=ContentionParams,
    limits=LIMITS,
    validate=validate,
    run=run,
    models='The AWS "Exponential Backoff And Jitter" simulation: N clients, one row, '
    "optimistic concurrency, five retry strategies, N from 10 to 200.",
    seed_text="A re-run of the study at 100 clients: about 2,424 calls with no backoff, 1,858 "
    "exponential, 1,006 decorrelated, 811 equal, 797 full jitter.",
)
