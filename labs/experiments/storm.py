"""Retry storm: C clients fail together, then retry with the same backoff, with and without
jitter; arrivals per time bin show the synchronised waves.

Each client is the engine's :class:`~labs.engine.GuardedClient` (breaker forced closed)
against its own ``down`` :class:`~labs.engine.FakeDependency`, all starting at virtual time 0
on one :class:`~labs.engine.VirtualClock`, so their first attempts fail together; only the
retries count as arrivals. Figures per mode: peak per bin, mean per bin, burst factor and
duration (docs/experiments.md).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from labs.engine import (
    Breaker,
    BreakerConfig,
    DependencyConfig,
    Event,
    FakeDependency,
    GuardedClient,
    MemoryStore,
    Policy,
    Problem,
    VirtualClock,
)
from labs.experiments.base import (
    Chart,
    Column,
    Experiment,
    Figure,
    Param,
    Result,
    check_fields,
    ratio,
    series,
)

__all__ = ["LIMITS", "MAX_BINS", "MAX_RETRIES_TOTAL", "StormParams", "run", "validate"]

#: The chart shows at most this many bins (each run's worst case is checked up front).
MAX_BINS = 2000
#: clients x retries (the retries of one run) is capped here, so a run stays around a second.
MAX_RETRIES_TOTAL = 5000
JITTERED = ("full", "equal", "decorrelated", "proportional")


@dataclass(frozen=True)
class StormParams:
    """Defaults: the issue's 200 clients and 4 retries, 20 ms bins, full jitter."""

    clients: int = 200
    retries: int = 4
    base_ms: float = 100.0
    cap_ms: float = 2000.0
    jitter: str = "full"
    latency_ms: float = 50.0
    bin_ms: float = 20.0
    seed: int = 7


LIMITS: dict[str, Param] = {
    "clients": Param("clients", "Clients", 200, 1, 1000),
    "retries": Param("retries", "Retries per client", 4, 1, 10),
    "base_ms": Param(
        "base_ms",
        "Backoff base",
        100.0,
        1,
        1000,
        "ms",
        kind="number",
        help="sleep after the n-th failure: min(cap, base x 2^(n-1))",
    ),
    "cap_ms": Param(
        "cap_ms", "Backoff cap", 2000.0, 1, 10000, "ms", kind="number", help="at least the base"
    ),
    "jitter": Param(
        "jitter", "Jitter (for the jittered run)", "full", kind="choice", choices=JITTERED
    ),
    "latency_ms": Param(
        "latency_ms",
        "Failure latency",
        50.0,
        0,
        1000,
        "ms",
        kind="number",
        help="each failing attempt takes this long",
    ),
    "bin_ms": Param("bin_ms", "Bin width", 20.0, 1, 1000, "ms", kind="number"),
    "seed": Param("seed", "Seed", 7, 0, 999_999_999),
}


def validate(params: StormParams) -> list[Problem]:
    """Field ranges, cap >= base, the size of the run (clients x retries), and at most
    :data:`MAX_BINS` bins in the worst case."""
    problems = check_fields(params, LIMITS)
    if problems:
        return problems
    if params.cap_ms < params.base_ms:
        problems.append(
            Problem(
                "cap_ms",
                f"must be between base_ms ({params.base_ms:g}) and 10000 ms "
                f"(got {params.cap_ms:g})",
            )
        )
        return problems
    total = params.clients * params.retries
    if total > MAX_RETRIES_TOTAL:
        most = max(1, min(10, MAX_RETRIES_TOTAL // params.clients))
        problems.append(
            Problem(
                "retries",
                f"must be between 1 and {most} with {params.clients} clients "
                f"(clients x retries is capped at {MAX_RETRIES_TOTAL:,}; "
                f"got {total:,})",
            )
        )
        return problems
    longest = _longest_ms(params)
    smallest_bin = math.ceil(longest / MAX_BINS)
    if longest / params.bin_ms > MAX_BINS:
        problems.append(
            Problem(
                "bin_ms",
                f"must be between {smallest_bin} and 1000 ms for this run "
                f"(at most {MAX_BINS} bins over up to {longest:g} ms; "
                f"got {params.bin_ms:g})",
            )
        )
    return problems


def _longest_ms(params: StormParams) -> float:
    """The latest a retry can arrive: every sleep at its upper bound (cap for decorrelated)."""
    total = params.latency_ms
    for n in range(1, params.retries + 1):
        upper = min(params.cap_ms, params.base_ms * 2 ** (n - 1))
        if params.jitter == "decorrelated":
            upper = params.cap_ms
        elif params.jitter == "proportional":
            upper = min(params.cap_ms, 1.2 * upper)
        total += upper + params.latency_ms
    return total


def _simulate(params: StormParams, jitter: str) -> list[tuple[float, int]]:
    """(arrival time in ms, retry number) of every retry, in time order."""
    clock = VirtualClock()
    arrivals: list[tuple[float, int]] = []

    def sink(event: Event) -> None:
        if event.kind == "attempt" and event.attempt and event.attempt > 1:
            arrivals.append((event.at_ms - (event.latency_ms or 0.0), event.attempt - 1))

    policy = Policy(
        max_attempts=params.retries + 1,
        backoff_base_ms=params.base_ms,
        backoff_cap_ms=params.cap_ms,
        jitter=jitter,  # type: ignore[arg-type]
    )
    dependency = DependencyConfig(mode="down", latency_ms=params.latency_ms)
    callers = []
    for i in range(params.clients):
        store = MemoryStore()
        rng = random.Random(f"storm:{params.seed}:{jitter}:{i}")
        breaker = Breaker(BreakerConfig(), store=store, clock=clock, rng=rng)
        breaker.force_closed("retry storm: breakers are not part of this experiment")
        client = GuardedClient(
            policy,
            breaker=breaker,
            dependency=FakeDependency(dependency, store=store, clock=clock, rng=rng),
            clock=clock,
            rng=rng,
            sink=sink,
            store=store,
        )
        callers.append(lambda client=client, number=i + 1: client.call(number))
    clock.run_concurrently(callers)
    arrivals.sort()
    return arrivals


def _stats(arrivals: list[tuple[float, int]], bin_ms: float) -> dict[str, float | int | list[int]]:
    if not arrivals:
        return {
            "arrivals": 0,
            "peak": 0,
            "mean": 0.0,
            "burst": 0.0,
            "duration_ms": 0.0,
            "peak_at_ms": 0.0,
            "bins": [],
        }
    last = arrivals[-1][0]
    nbins = int(last // bin_ms) + 1
    bins = [0] * nbins
    for at, _ in arrivals:
        bins[int(at // bin_ms)] += 1
    peak = max(bins)
    mean = len(arrivals) / nbins
    return {
        "arrivals": len(arrivals),
        "peak": peak,
        "mean": round(mean, 3),
        "burst": round(peak / mean, 3),
        "duration_ms": round(last, 3),
        "peak_at_ms": bins.index(peak) * bin_ms,
        "bins": bins,
    }


def run(params: StormParams) -> Result:
    """Run the storm without jitter and with ``params.jitter``; same seed, same numbers."""
    modes = (("none", "no jitter"), (params.jitter, f"{params.jitter} jitter"))
    raw = {key: _simulate(params, key) for key, _ in modes}
    stats = {key: _stats(raw[key], params.bin_ms) for key, _ in modes}
    plain, jittered = stats["none"], stats[params.jitter]
    nbins = max(len(plain["bins"]), len(jittered["bins"]))  # type: ignore[arg-type]
    x = tuple(round(i * params.bin_ms, 3) for i in range(nbins))
    chart = Chart(
        key="arrivals",
        title=f"Retry arrivals per {params.bin_ms:g} ms bin",
        kind="line",
        x=x,
        x_label="time since the failure (ms)",
        y_label=f"arrivals per {params.bin_ms:g} ms",
        series=tuple(
            series(label, list(stats[key]["bins"]) + [0] * (nbins - len(stats[key]["bins"])))  # type: ignore[arg-type, operator]
            for key, label in modes
        ),
    )
    rows = []
    for key, label in modes:
        for retry in range(1, params.retries + 1):
            times = [at for at, n in raw[key] if n == retry]
            if not times:
                continue
            rows.append(
                {
                    "mode": label,
                    "retry": retry,
                    "arrivals": len(times),
                    "first_ms": round(times[0], 1),
                    "last_ms": round(times[-1], 1),
                    "spread_ms": round(times[-1] - times[0], 1),
                }
            )
    figures = (
        Figure(
            "burst_none",
            "Burst factor without jitter (peak / mean)",
            round(plain["burst"], 1),
            "x",
            seed="19.6x",
        ),  # type: ignore[arg-type]
        Figure(
            "burst_jitter",
            f"Burst factor with {params.jitter} jitter",
            round(jittered["burst"], 1),
            "x",
            seed="5.3x",
        ),  # type: ignore[arg-type]
        Figure(
            "peak_none", f"Peak per {params.bin_ms:g} ms without jitter", plain["peak"], seed="185"
        ),  # type: ignore[arg-type]
        Figure(
            "peak_jitter", f"Peak per {params.bin_ms:g} ms with jitter", jittered["peak"], seed="65"
        ),  # type: ignore[arg-type]
        Figure(
            "mean",
            "Mean per bin (no jitter / jitter)",
            f"{plain['mean']:.1f} / {jittered['mean']:.1f}",
            seed="9.4 / 12.3",
        ),
        Figure(
            "duration",
            "Storm lasts (no jitter / jitter)",
            f"{plain['duration_ms']:,.0f} / {jittered['duration_ms']:,.0f}",
            "ms",
            seed="1,694 / 1,302 ms",
        ),
    )
    return Result(
        experiment="storm",
        params=EXPERIMENT.params_dict(params),
        figures=figures,
        columns=(
            Column("mode", "Mode"),
            Column("retry", "Retry"),
            Column("arrivals", "Arrivals"),
            Column("first_ms", "First (ms)"),
            Column("last_ms", "Last (ms)"),
            Column("spread_ms", "Spread (ms)"),
        ),
        rows=tuple(rows),
        charts=(chart,),
        metrics={key: {k: v for k, v in stats[key].items() if k != "bins"} for key, _ in modes}
        | {
            "burst_cut": ratio(plain["burst"], jittered["burst"]),  # type: ignore[arg-type]
            "peak_cut": ratio(plain["peak"], jittered["peak"]),  # type: ignore[arg-type]
        },
        notes=(
            "Arrivals are retries only; the clients' first attempts, all at time 0, are the "
            "failure that starts the storm.",
            "Mean = arrivals / bins from time 0 to the last arrival; burst factor = peak / mean.",
        ),
    )


EXPERIMENT: Experiment[StormParams] = Experiment(
    name="storm",
    title="Retry storm",
    summary="Clients that fail together and back off by the same formula retry in "
    "synchronised waves; jitter spreads them out.",
    params_type=StormParams,
    limits=LIMITS,
    validate=validate,
    run=run,
    models="C clients fail at the same moment and retry up to N times with exponential "
    "backoff, once without jitter and once with; the dependency stays down.",
    seed_text="200 clients, 4 retries, 20 ms bins: burst factor 19.6x without jitter, 5.3x "
    "with; peak 185 vs 65 per bin.",
)
