"""Breaker versus no breaker: a dependency dead for a while, then healthy, under a steady
stream of requests.

Closed-loop callers on one :class:`~labs.engine.VirtualClock`, each call one attempt through
the engine's :class:`~labs.engine.GuardedClient` (no retries: this isolates the breaker),
run once with the breaker forced closed and once with the engine's
:class:`~labs.engine.Breaker`. Counted: the dead dependency's load, callers' time waiting on
failures, fast rejections, and how late the breaker notices the recovery (docs/experiments.md).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from labs.engine import (
    Breaker,
    BreakerConfig,
    CallResult,
    DependencyConfig,
    FakeDependency,
    GuardedClient,
    MemoryStore,
    Policy,
    Problem,
    VirtualClock,
)
from labs.engine.dependency import AttemptResult
from labs.engine.events import is_fast_fail
from labs.experiments.base import (
    Chart,
    Column,
    Experiment,
    Figure,
    Param,
    Result,
    check_fields,
    fmt_number,
    ratio,
    series,
)

__all__ = ["LIMITS", "MAX_CALLS", "BreakerParams", "run", "validate"]

#: callers x duration / think time (the most calls a run can make) is capped here.
MAX_CALLS = 10_000
_CHART_POINTS = 100


@dataclass(frozen=True)
class BreakerParams:
    """Defaults: dead for 5 s, each call hanging 300 ms then 503; breaker opening after 5
    consecutive failures for 2 s (closest to the seed's figures)."""

    dead_ms: float = 5000.0
    hang_ms: float = 300.0
    healthy_ms: float = 5.0
    duration_ms: float = 8000.0
    think_ms: float = 10.0
    callers: int = 1
    failure_threshold: int = 5
    cooldown_ms: float = 2000.0


LIMITS: dict[str, Param] = {
    "dead_ms": Param("dead_ms", "Dependency dead for", 5000.0, 0, 60000, "ms", kind="number"),
    "hang_ms": Param(
        "hang_ms", "A dead call hangs", 300.0, 1, 5000, "ms", kind="number", help="then answers 503"
    ),
    "healthy_ms": Param("healthy_ms", "Healthy latency", 5.0, 0, 1000, "ms", kind="number"),
    "duration_ms": Param("duration_ms", "Run for", 8000.0, 100, 60000, "ms", kind="number"),
    "think_ms": Param(
        "think_ms",
        "Pause between calls",
        10.0,
        1,
        1000,
        "ms",
        kind="number",
        help="each caller waits this long after every call",
    ),
    "callers": Param("callers", "Callers", 1, 1, 20, help="closed loops calling at once"),
    "failure_threshold": Param(
        "failure_threshold",
        "Breaker threshold",
        5,
        1,
        20,
        help="opens after this many consecutive failed calls",
    ),
    "cooldown_ms": Param(
        "cooldown_ms", "Breaker cooldown", 2000.0, 100, 60000, "ms", kind="number"
    ),
}

_MODES = (("none", "no breaker"), ("breaker", "breaker"))


def validate(params: BreakerParams) -> list[Problem]:
    """Field ranges, and the size of the run (callers x duration / think time)."""
    problems = check_fields(params, LIMITS)
    if problems:
        return problems
    calls = params.callers * params.duration_ms / params.think_ms
    if calls > MAX_CALLS:
        longest = int(MAX_CALLS * params.think_ms / params.callers)
        problems.append(
            Problem(
                "duration_ms",
                f"must be between 100 and {min(60000, longest)} ms with {params.callers} "
                f"caller(s) pausing {params.think_ms:g} ms (callers x duration / pause is "
                f"capped at {MAX_CALLS:,} calls; got {calls:,.0f})",
            )
        )
    return problems


class _DeadThenHealthy:
    """The engine's fake dependency, down until ``dead_ms`` (by attempt start), then healthy."""

    def __init__(self, params: BreakerParams, clock: VirtualClock) -> None:
        store, rng = MemoryStore(), random.Random(0)
        self.clock = clock
        self.dead_until = params.dead_ms / 1000
        self.down = FakeDependency(
            DependencyConfig(mode="down", latency_ms=params.hang_ms, error="503"),
            store=store,
            clock=clock,
            rng=rng,
        )
        self.healthy = FakeDependency(
            DependencyConfig(mode="healthy", latency_ms=params.healthy_ms),
            store=store,
            clock=clock,
            rng=rng,
        )
        self.sick_calls = 0

    def attempt(self, timeout_ms: float | None = None) -> AttemptResult:
        if self.clock.now() < self.dead_until:
            self.sick_calls += 1
            return self.down.attempt(timeout_ms)
        return self.healthy.attempt(timeout_ms)


def _simulate(params: BreakerParams, with_breaker: bool) -> tuple[list[CallResult], int]:
    clock = VirtualClock()
    store = MemoryStore()
    rng = random.Random(0)  # cooldown jitter is off: never drawn from
    config = BreakerConfig(
        kind="consecutive",
        failure_threshold=params.failure_threshold,
        cooldown_ms=params.cooldown_ms,
    )
    breaker = Breaker(config, store=store, clock=clock, rng=rng)
    if not with_breaker:
        breaker.force_closed("no breaker: every call goes through")
    dependency = _DeadThenHealthy(params, clock)
    client = GuardedClient(
        Policy(max_attempts=1, breaker=config),
        breaker=breaker,
        dependency=dependency,  # type: ignore[arg-type]
        clock=clock,
        rng=rng,
        store=store,
    )
    numbers = itertools.count(1)
    end = params.duration_ms / 1000
    pause = params.think_ms / 1000
    results: list[CallResult] = []

    def caller() -> None:
        while clock.now() < end:
            results.append(client.call(next(numbers)))
            clock.sleep(pause)

    clock.run_concurrently([caller] * params.callers)
    return results, dependency.sick_calls


def _metrics(results: list[CallResult], sick_calls: int, params: BreakerParams) -> dict[str, float]:
    failed = [r for r in results if r.attempts and r.outcome != "success"]
    recovered = [
        r.end_ms for r in results if r.outcome == "success" and r.start_ms >= params.dead_ms
    ]
    return {
        "calls": len(results),
        "reached": sum(1 for r in results if r.attempts),
        "sick_calls": sick_calls,
        "failed": len(failed),
        "waiting_ms": round(sum(r.end_ms - r.start_ms for r in failed), 3),
        "rejected": sum(1 for r in results if is_fast_fail(r.outcome)),
        "succeeded": sum(1 for r in results if r.outcome == "success"),
        "first_success_ms": round(min(recovered), 3) if recovered else -1.0,
    }


def _waiting_curve(
    results: list[CallResult], params: BreakerParams
) -> tuple[list[float], list[float]]:
    """Cumulative waiting time on failed calls, sampled at evenly spaced times."""
    step = params.duration_ms / _CHART_POINTS
    xs = [round(i * step, 3) for i in range(_CHART_POINTS + 1)]
    done = sorted(
        (r.end_ms, r.end_ms - r.start_ms) for r in results if r.attempts and r.outcome != "success"
    )
    ys, total, i = [], 0.0, 0
    for x in xs:
        while i < len(done) and done[i][0] <= x:
            total += done[i][1]
            i += 1
        ys.append(total)
    return xs, ys


def run(params: BreakerParams) -> Result:
    """Run the stream without and with the breaker. Deterministic (no randomness)."""
    raw = {key: _simulate(params, key == "breaker") for key, _ in _MODES}
    stats = {key: _metrics(*raw[key], params) for key, _ in _MODES}
    none, brk = stats["none"], stats["breaker"]
    curves = {key: _waiting_curve(raw[key][0], params) for key, _ in _MODES}
    chart = Chart(
        key="waiting",
        title="Time spent waiting on failed calls (cumulative)",
        kind="line",
        x=tuple(curves["none"][0]),
        x_label="time (ms)",
        y_label="waiting (ms)",
        series=tuple(series(label, curves[key][1]) for key, label in _MODES),
    )
    rows = tuple({"mode": label, **stats[key]} for key, label in _MODES)

    def first(value: float) -> str:
        return "never" if value < 0 else fmt_number(value)

    figures = (
        Figure(
            "sick_none", "Calls into the dead dependency, no breaker", none["sick_calls"], seed="17"
        ),
        Figure(
            "sick_breaker", "Calls into the dead dependency, breaker", brk["sick_calls"], seed="7"
        ),
        Figure(
            "waiting_none",
            "Waiting on failures, no breaker",
            none["waiting_ms"],
            "ms",
            seed="5,291 ms",
        ),
        Figure(
            "waiting_breaker",
            "Waiting on failures, breaker",
            brk["waiting_ms"],
            "ms",
            seed="2,173 ms",
        ),
        Figure("rejected", "Immediate rejections (breaker)", brk["rejected"], seed="407"),
        Figure(
            "recovered",
            "First success after recovery (no breaker / breaker)",
            f"{first(none['first_success_ms'])} / {first(brk['first_success_ms'])}",
            "ms",
        ),
    )
    return Result(
        experiment="breaker",
        params=EXPERIMENT.params_dict(params),
        figures=figures,
        columns=(
            Column("mode", "Mode"),
            Column("calls", "Calls"),
            Column("sick_calls", "Reached the dead dependency"),
            Column("waiting_ms", "Waiting on failures (ms)"),
            Column("rejected", "Rejected at once"),
            Column("succeeded", "Succeeded"),
            Column("first_success_ms", "First success after recovery (ms)"),
        ),
        rows=rows,
        charts=(chart,),
        metrics={
            "none": none,
            "breaker": brk,
            "sick_cut": ratio(none["sick_calls"], brk["sick_calls"]),
            "waiting_cut": ratio(none["waiting_ms"], brk["waiting_ms"]),
        },
        notes=(
            "One attempt per call: no retries, so only the breaker differs between the runs.",
            "A call's fate is decided by when its attempt starts: before the recovery it hangs "
            "and fails, afterwards it succeeds quickly.",
        ),
    )


EXPERIMENT: Experiment[BreakerParams] = Experiment(
    name="breaker",
    title="Breaker versus no breaker",
    summary="A dependency dead for 5 s: without a breaker every call waits for its 503; "
    "a breaker rejects at once and spares the dependency.",
    params_type=BreakerParams,
    limits=LIMITS,
    validate=validate,
    run=run,
    models="A dependency dead for 5 s (each call hangs 300 ms, then 503), then healthy, "
    "under a steady stream of requests, with and without a circuit breaker.",
    seed_text="No breaker: 17 calls into the dependency, 5,291 ms waiting, 0 rejections; "
    "breaker: 7 calls, 2,173 ms, 407 immediate rejections.",
)
