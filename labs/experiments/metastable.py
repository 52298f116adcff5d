"""The class makes its own retry storm: N clients share one dependency of finite capacity; a
short trigger, and what the clients' retries do next.

Each client is the engine's :class:`~labs.engine.GuardedClient` calling one
:class:`~labs.engine.MemorySharedModel` (the same model code as a live class's shared
dependency) in virtual time, so the lesson matches what a class sees live. The naive policy
and the chosen one run on the same arrivals. The model, the figures (baseline, peak, wasted
server time, time to recovery) and their definitions: docs/experiments.md.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from labs.engine import (
    Breaker,
    BreakerConfig,
    GuardedClient,
    MemorySharedModel,
    MemoryStore,
    Policy,
    Problem,
    SharedConfig,
    SharedDependency,
    Trigger,
    VirtualClock,
)
from labs.engine.config import LIMITS as ENGINE_LIMITS
from labs.engine.config import RetryBudgetConfig
from labs.experiments.base import (
    Chart,
    Column,
    Experiment,
    Figure,
    Param,
    Result,
    check_fields,
    series,
)

__all__ = [
    "LIMITS", "MAX_CALLS", "POLICIES", "MetastableParams", "figures_for", "run", "validate",
]  # fmt: skip

#: clients x rate x duration (the calls of one run) is capped here, so a page stays quick.
MAX_CALLS = 20_000
#: The policies a client can have; ``mixed`` gives the clients these in turn.
POLICIES = ("naive", "jitter", "budget", "breaker", "resilient")
_CHOICES = (*POLICIES, "mixed")
#: The breaker, budget and backoff of the non-naive policies.
BACKOFF_BASE_MS = 100
BACKOFF_CAP_MS = 1000
BREAKER = BreakerConfig(kind="consecutive", failure_threshold=3, cooldown_ms=1000)
BUDGET = RetryBudgetConfig(token_ratio=0.1, max_tokens=1)
RECOVERED_PCT = 90
COLLAPSED_PCT = 20


def _range(path: str) -> tuple[float, float]:
    limit = ENGINE_LIMITS[path]
    assert limit.min is not None and limit.max is not None
    return limit.min, limit.max


@dataclass(frozen=True)
class MetastableParams:
    """Defaults: 30 clients at about 70 % of the capacity, an 8 s outage at 10 s."""

    clients: int = 30
    rate: float = 4.7
    arrivals: str = "even"
    duration_s: int = 60
    trigger: str = "down"
    trigger_at_s: int = 10
    trigger_s: int = 8
    factor: float = 3.0
    trigger_servers: int = 2
    servers: int = 8
    service_ms: int = 40
    max_queue_ms: int = 2000
    timeout_ms: int = 500
    max_attempts: int = 4
    policy: str = "resilient"
    seed: int = 7


LIMITS: dict[str, Param] = {
    "clients": Param("clients", "Clients", 30, 1, 100),
    "rate": Param("rate", "Calls per second per client", 4.7, 0.1, 20, "calls/s", kind="number"),
    "arrivals": Param(
        "arrivals",
        "Arrivals",
        "even",
        kind="choice",
        choices=("even", "poisson"),
        help="evenly spaced from a seeded phase, or a seeded Poisson stream",
    ),
    "duration_s": Param("duration_s", "Calls arrive for", 60, 10, 300, "s"),
    "trigger": Param(
        "trigger",
        "Trigger",
        "down",
        kind="choice",
        choices=("down", "slow", "capacity"),
        help="down: every attempt answers 503 after its service time; slow: service x factor; "
        "capacity: fewer servers",
    ),
    "trigger_at_s": Param("trigger_at_s", "Trigger at", 10, 2, 290, "s"),
    "trigger_s": Param("trigger_s", "Trigger lasts", 8, 1, 120, "s"),
    "factor": Param("factor", "Slow: service time x", 3.0, 1, 20, kind="number"),
    "trigger_servers": Param(
        "trigger_servers", "Capacity drop: servers left", 2, 0, 63, help="below Servers"
    ),
    # the shared dependency's own ranges (the engine's LIMITS)
    "servers": Param("servers", "Servers", 8, *_range("shared.servers")),
    "service_ms": Param("service_ms", "Service time", 40, *_range("shared.service_ms"), "ms"),
    "max_queue_ms": Param(
        "max_queue_ms",
        "Longest queue wait",
        2000,
        *_range("shared.max_queue_ms"),
        "ms",
        help="an attempt that would wait longer is shed at once (503)",
    ),
    "timeout_ms": Param("timeout_ms", "Attempt timeout", 500, 1, 10000, "ms"),
    "max_attempts": Param("max_attempts", "Attempts per call", 4, 1, 5),
    "policy": Param(
        "policy",
        "Compared policy",
        "resilient",
        kind="choice",
        choices=_CHOICES,
        help="resilient = full jitter + retry budget + breaker; mixed = the five in turn",
    ),
    "seed": Param("seed", "Seed", 7, 0, 999_999_999),
}


def validate(params: MetastableParams) -> list[Problem]:
    """Field ranges, the trigger inside the run, a capacity drop below the servers, and at
    most :data:`MAX_CALLS` calls per run."""
    problems = check_fields(params, LIMITS)
    if problems:
        return problems
    if params.trigger_at_s + params.trigger_s > params.duration_s:
        most = max(0, params.duration_s - params.trigger_s)
        problems.append(
            Problem(
                "trigger_at_s",
                f"must be between 2 and {most} s so the trigger ends within the run "
                f"({params.duration_s} s; got {params.trigger_at_s})",
            )
        )
    if params.trigger == "capacity" and params.trigger_servers >= params.servers:
        problems.append(
            Problem(
                "trigger_servers",
                f"must be between 0 and {params.servers - 1} (fewer than the {params.servers} "
                f"servers; got {params.trigger_servers})",
            )
        )
    calls = params.clients * params.rate * params.duration_s
    if calls > MAX_CALLS:
        longest = max(10, math.floor(MAX_CALLS / (params.clients * params.rate)))
        problems.append(
            Problem(
                "duration_s",
                f"must be between 10 and {longest} s with {params.clients} clients at "
                f"{params.rate:g} calls/s (clients x rate x duration is capped at "
                f"{MAX_CALLS:,} calls; got {calls:,.0f})",
            )
        )
    return problems


def policy_for(name: str, params: MetastableParams) -> tuple[Policy, bool]:
    """The engine :class:`~labs.engine.Policy` of a named policy, and whether its breaker is
    on (a policy without one has its breaker forced closed)."""
    jitter = name in ("jitter", "resilient")
    budget = name in ("budget", "resilient")
    breaker = name in ("breaker", "resilient")
    policy = Policy(
        max_attempts=params.max_attempts,
        backoff_base_ms=BACKOFF_BASE_MS if jitter else 0,
        backoff_cap_ms=BACKOFF_CAP_MS if jitter else 0,
        jitter="full" if jitter else "none",
        breaker=BREAKER,
        retry_budget=BUDGET if budget else None,
        attempt_timeout_ms=params.timeout_ms,
    )
    return policy, breaker


def _arrivals(params: MetastableParams, rng: random.Random) -> list[float]:
    """One client's call times (seconds) in [0, duration)."""
    times = []
    if params.arrivals == "even":
        gap = 1 / params.rate
        t = rng.random() * gap
        while t < params.duration_s:
            times.append(t)
            t += gap
        return times
    t = rng.expovariate(params.rate)
    while t < params.duration_s:
        times.append(t)
        t = t + rng.expovariate(params.rate)
    return times


def _simulate(
    params: MetastableParams, mix: str, chosen: tuple[Policy, bool] | None = None
) -> dict[str, Any]:
    """One run with every client on ``mix`` (a policy, or ``mixed``), or on ``chosen`` (an
    engine policy and whether its breaker is on) when given."""
    clock = VirtualClock()
    config = SharedConfig(params.servers, params.service_ms, params.max_queue_ms)
    model = MemorySharedModel(config, clock=clock)
    outcomes: dict[str, int] = {}
    calls = 0
    for i in range(params.clients):
        name = POLICIES[i % len(POLICIES)] if mix == "mixed" else mix
        policy, with_breaker = chosen or policy_for(name, params)
        store = MemoryStore()
        rng = random.Random(f"metastable:{params.seed}:{i}")
        breaker = Breaker(policy.breaker, store=store, clock=clock, rng=rng)
        if not with_breaker:
            breaker.force_closed("no breaker in this policy")
        client = GuardedClient(
            policy,
            breaker=breaker,
            dependency=SharedDependency(model, clock=clock),
            clock=clock,
            rng=rng,
            store=store,
        )
        arrivals = _arrivals(params, random.Random(f"arrivals:{params.seed}:{i}"))
        calls += len(arrivals)
        for n, at in enumerate(arrivals, start=1):

            def one(client: GuardedClient = client, n: int = n) -> None:
                outcome = client.call(n).outcome
                outcomes[outcome] = outcomes.get(outcome, 0) + 1

            clock.spawn(one, at=at)
    trigger = Trigger(
        params.trigger,  # type: ignore[arg-type]
        params.trigger_s * 1000,
        factor=params.factor,
        servers=params.trigger_servers,
    )
    clock.call_at(params.trigger_at_s, model.trigger, trigger)
    clock.run()
    return {"seconds": model.counters(), "outcomes": outcomes, "calls": calls}


def figures_for(params: MetastableParams, policy: Policy, *, breaker_on: bool = True) -> dict:
    """The run's figures (see the module docstring) with every client on ``policy``: how a
    scenario's own policy fares in the storm (the storm lesson's test runs each of its steps'
    policies through this)."""
    return _metrics(params, _simulate(params, "custom", (policy, breaker_on)))


def _capacity(params: MetastableParams, second: int) -> float:
    """Attempts per second the servers can complete during ``second``."""
    servers, service = params.servers, params.service_ms
    if params.trigger_at_s <= second < params.trigger_at_s + params.trigger_s:
        if params.trigger == "capacity":
            servers = params.trigger_servers
        elif params.trigger == "slow":
            service = service * round(params.factor * 100) / 100
    return servers * 1000 / service


def _metrics(params: MetastableParams, raw: dict[str, Any]) -> dict[str, Any]:
    by_second = {s.second: s for s in raw["seconds"]}
    span = range(params.duration_s)
    offered = [by_second[s].offered if s in by_second else 0 for s in span]
    goodput = [by_second[s].calls_ok if s in by_second else 0 for s in span]
    p99 = [(by_second[s].wait_p99_ms or 0.0) if s in by_second else 0.0 for s in span]
    base = range(1, params.trigger_at_s)
    base_offered = sum(offered[s] for s in base) / len(base)
    base_goodput = sum(goodput[s] for s in base) / len(base)
    end = params.trigger_at_s + params.trigger_s
    recovered_at = None
    enough = base_goodput * RECOVERED_PCT / 100
    for s in range(end, params.duration_s):
        rest = goodput[s:]
        if goodput[s] >= enough and sum(rest) / len(rest) >= enough:
            recovered_at = s
            break
    below = 0
    for s in range(end, params.duration_s):
        if goodput[s] >= base_goodput * COLLAPSED_PCT / 100:
            break
        below += 1
    totals = {
        name: sum(getattr(s, name) for s in raw["seconds"])
        for name in ("offered", "ok", "error", "shed", "skipped", "timeout", "retries", "calls_ok")
    }
    wasted_ms = sum(s.wasted_us for s in raw["seconds"]) / 1000
    return {
        "calls": raw["calls"],
        "outcomes": dict(sorted(raw["outcomes"].items())),
        **totals,
        "wasted_ms": round(wasted_ms, 3),
        "baseline_offered": round(base_offered, 3),
        "baseline_goodput": round(base_goodput, 3),
        "peak_offered": max(offered),
        "peak_over_baseline": round(max(offered) / base_offered, 3) if base_offered else math.inf,
        "retries_per_call": round(totals["retries"] / raw["calls"], 3) if raw["calls"] else 0.0,
        "recovery_s": None if recovered_at is None else recovered_at - end,
        "below_20_s": below,
        "offered_per_s": offered,
        "goodput_per_s": goodput,
        "wait_p99_ms_per_s": p99,
    }


def _label(mix: str) -> str:
    return {
        "naive": "naive",
        "resilient": "jitter + budget + breaker",
        "mixed": "mixed policies",
    }.get(mix, f"{mix} only")


def _recovery_text(metrics: dict[str, Any]) -> str:
    seconds = metrics["recovery_s"]
    return "never" if seconds is None else f"{seconds} s"


def run(params: MetastableParams) -> Result:
    """The naive run and the chosen policy's, on the same seeded arrivals."""
    modes = ("naive", params.policy)
    stats = {mode: _metrics(params, _simulate(params, mode)) for mode in dict.fromkeys(modes)}
    naive, chosen = stats["naive"], stats[params.policy]
    label = _label(params.policy)
    x = tuple(range(params.duration_s))
    capacity = [_capacity(params, s) for s in x]
    charts = (
        Chart(
            key="offered",
            title="Attempts offered per second against the capacity",
            kind="line",
            x=x,
            x_label="time (s)",
            y_label="attempts per second",
            series=(
                series("capacity", capacity),
                series("naive", naive["offered_per_s"]),
                series(label, chosen["offered_per_s"]),
            ),
        ),
        Chart(
            key="goodput",
            title="Goodput: calls succeeded per second",
            kind="line",
            x=x,
            x_label="time (s)",
            y_label="calls succeeded per second",
            series=(
                series("healthy baseline", [naive["baseline_goodput"]] * len(x)),
                series("naive", naive["goodput_per_s"]),
                series(label, chosen["goodput_per_s"]),
            ),
        ),
        Chart(
            key="wait",
            title="Queue wait, 99th percentile of the attempts served",
            kind="line",
            x=x,
            x_label="time (s)",
            y_label="queue wait p99 (ms)",
            series=(
                series("naive", naive["wait_p99_ms_per_s"]),
                series(label, chosen["wait_p99_ms_per_s"]),
            ),
        ),
    )
    rows = tuple(
        {
            "policy": "naive" if mode == "naive" else label,
            "calls": m["calls"],
            "attempts": m["offered"],
            "retries_per_call": m["retries_per_call"],
            "ok": m["ok"],
            "timeout": m["timeout"],
            "shed": m["shed"] + m["skipped"],
            "error": m["error"],
            "wasted_s": round(m["wasted_ms"] / 1000, 1),
            "peak": m["peak_over_baseline"],
            "recovery": _recovery_text(m),
        }
        for mode, m in stats.items()
    )
    end = params.trigger_at_s + params.trigger_s
    figures = (
        Figure(
            "peak_naive",
            "Peak offered load over the healthy baseline, naive",
            f"{naive['peak_over_baseline']:.2f}",
            "x",
        ),
        Figure(
            "peak_chosen",
            f"Peak offered load over the healthy baseline, {label}",
            f"{chosen['peak_over_baseline']:.2f}",
            "x",
            seed="issue: at most 1.3x",
        ),
        Figure(
            "retries_per_call",
            "Retries per original call (naive / chosen)",
            f"{naive['retries_per_call']:.2f} / {chosen['retries_per_call']:.2f}",
        ),
        Figure(
            "wasted",
            "Wasted server time (naive / chosen)",
            f"{naive['wasted_ms'] / 1000:,.1f} / {chosen['wasted_ms'] / 1000:,.1f}",
            "s",
        ),
        Figure(
            "recovery_naive",
            f"Time to recovery after the trigger ends (at {end} s), naive",
            _recovery_text(naive),
            note=f"goodput below {COLLAPSED_PCT} % of the baseline for "
            f"{naive['below_20_s']} s after the trigger",
            seed="issue: below 20 % for at least 30 s",
        ),
        Figure(
            "recovery_chosen",
            f"Time to recovery after the trigger ends, {label}",
            _recovery_text(chosen),
            seed="issue: within 5 s",
        ),
    )
    per_second_keys = ("offered_per_s", "goodput_per_s", "wait_p99_ms_per_s")
    return Result(
        experiment="metastable",
        params=EXPERIMENT.params_dict(params),
        figures=figures,
        columns=(
            Column("policy", "Policy"),
            Column("calls", "Calls"),
            Column("attempts", "Attempts"),
            Column("retries_per_call", "Retries per call"),
            Column("ok", "Answered ok"),
            Column("timeout", "Timed out"),
            Column("shed", "Shed"),
            Column("error", "Answered 503"),
            Column("wasted_s", "Wasted server time (s)"),
            Column("peak", "Peak / baseline"),
            Column("recovery", "Recovery"),
        ),
        rows=rows,
        charts=charts,
        metrics={
            mode: {k: v for k, v in m.items() if k not in per_second_keys}
            for mode, m in stats.items()
        }
        | {"capacity_per_s": SharedConfig(params.servers, params.service_ms).capacity_per_s},
        notes=(
            f"Healthy baseline: seconds 1 to {params.trigger_at_s - 1}. Recovery: the first "
            f"second with goodput at or above {RECOVERED_PCT} % of the baseline, and "
            "the mean from there to the end as well.",
            "Attempts, goodput and waits are the shared model's own per-second counters (the "
            "same code a live class's shared dependency runs).",
            f"jitter: full jitter, base {BACKOFF_BASE_MS} ms, cap {BACKOFF_CAP_MS} ms; budget: "
            f"{BUDGET.token_ratio:g} token per call, at most {BUDGET.max_tokens:g}; breaker: "
            f"opens after {BREAKER.failure_threshold} failed calls for {BREAKER.cooldown_ms:g} ms.",
        ),
    )


EXPERIMENT: Experiment[MetastableParams] = Experiment(
    name="metastable",
    title="The class makes its own retry storm",
    summary="Thirty clients share one dependency at 70 % of its capacity; an 8 s outage, and "
    "naive retries keep it down long after the outage ends.",
    params_type=MetastableParams,
    limits=LIMITS,
    validate=validate,
    run=run,
    models="N clients send calls open-loop to one shared dependency with finite capacity "
    "(servers, service time, FIFO queue, load shedding); a trigger; naive retries against "
    "the chosen policy.",
    seed_text="Metastable failure (Bronson et al., HotOS 2021): a trigger pushes an "
    "overloaded system into a state that outlasts it, sustained by retries.",
)
