"""Retry amplification: T tiers, each retrying the next, in front of a failing leaf.

Every tier is the engine's :class:`~labs.engine.GuardedClient` (breakers forced closed: this
is about retries alone) calling the next through :class:`~labs.engine.chain.NextTier`, the
adapter a live class's chain of students uses; the leaf is a ``down``
:class:`~labs.engine.FakeDependency`, on a :class:`~labs.engine.VirtualClock`. Without a
budget each request reaches the leaf ``A^T`` times; the engine's
:class:`~labs.engine.RetryBudget`, one bucket per tier, bounds each tier's retries by a
ratio of its calls. The budget arithmetic: docs/experiments.md.
"""

from __future__ import annotations

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
from labs.engine.chain import NextTier
from labs.engine.config import RetryBudgetConfig
from labs.engine.dependency import AttemptResult
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

__all__ = ["LIMITS", "MAX_LEAF_HITS", "AmplificationParams", "run", "validate"]

#: requests x attempts^tiers (the leaf hits without a budget) is capped here, so every run
#: stays well under a second.
MAX_LEAF_HITS = 10_000


@dataclass(frozen=True)
class AmplificationParams:
    """Defaults are the issue's: 3 tiers, 3 attempts, 30 requests, a 10 % budget."""

    tiers: int = 3
    attempts: int = 3
    requests: int = 30
    budget_pct: float = 10.0
    budget_tokens: float = 10.0
    latency_ms: float = 5.0
    backoff_base_ms: float = 25.0


LIMITS: dict[str, Param] = {
    "tiers": Param("tiers", "Tiers", 3, 1, 6, help="services in the chain in front of the leaf"),
    "attempts": Param(
        "attempts",
        "Attempts per call",
        3,
        1,
        5,
        help="each tier tries the next one up to this many times",
    ),
    "requests": Param("requests", "User requests", 30, 1, 1000),
    "budget_pct": Param(
        "budget_pct",
        "Retry budget",
        10.0,
        0,
        100,
        "%",
        kind="number",
        help="each call a tier receives earns this share of one retry",
    ),
    "budget_tokens": Param(
        "budget_tokens",
        "Budget reserve",
        10.0,
        1,
        100,
        "tokens",
        kind="number",
        help="a tier's bucket starts full at this many retries",
    ),
    "latency_ms": Param(
        "latency_ms",
        "Leaf latency",
        5.0,
        0,
        1000,
        "ms",
        kind="number",
        help="each failing leaf attempt takes this long",
    ),
    "backoff_base_ms": Param(
        "backoff_base_ms",
        "Backoff base",
        25.0,
        0,
        500,
        "ms",
        kind="number",
        help="a tier sleeps min(500, base x 2^(n-1)) after its n-th failure",
    ),
}

_BACKOFF_CAP_MS = 500.0
_MODES = (("no_budget", "no budget"), ("budget", "with budget"))


def validate(params: AmplificationParams) -> list[Problem]:
    """Field ranges, and the size of the run (requests x attempts^tiers leaf hits)."""
    problems = check_fields(params, LIMITS)
    if problems:
        return problems
    hits = params.requests * params.attempts**params.tiers
    if hits > MAX_LEAF_HITS:
        most = max(1, MAX_LEAF_HITS // params.attempts**params.tiers)
        problems.append(
            Problem(
                "requests",
                f"must be between 1 and {most} with {params.tiers} tiers of {params.attempts} "
                f"attempts (requests x attempts^tiers is capped at {MAX_LEAF_HITS:,}; "
                f"got {params.requests} x {params.attempts}^{params.tiers} = {hits:,})",
            )
        )
    return problems


class _Tier:
    """A tier: a guarded client calling ``downstream``; counts the calls it receives."""

    def __init__(self, client: GuardedClient, name: str) -> None:
        self.client = client
        self.name = name
        self.received = 0
        self.results: list[CallResult] = []

    def handle(self, parent: dict | None = None) -> CallResult:
        self.received += 1
        result = self.client.call(self.received)
        self.results.append(result)
        return result


class _CountingLeaf:
    """The failing leaf: the engine's fake dependency in ``down`` mode, hits counted."""

    def __init__(self, dependency: FakeDependency) -> None:
        self.dependency = dependency
        self.hits = 0

    def attempt(self, timeout_ms: float | None = None) -> AttemptResult:
        self.hits += 1
        return self.dependency.attempt(timeout_ms)


def _chain(
    params: AmplificationParams, budget: bool
) -> tuple[list[_Tier], _CountingLeaf, VirtualClock]:
    """Build the tiers front to back: tier 1 receives the user requests."""
    clock = VirtualClock()
    rng = random.Random(0)  # no jitter: the rng is never drawn from
    leaf = _CountingLeaf(
        FakeDependency(
            DependencyConfig(mode="down", latency_ms=params.latency_ms),
            store=MemoryStore(),
            clock=clock,
            rng=rng,
        )
    )
    policy = Policy(
        max_attempts=params.attempts,
        backoff_base_ms=params.backoff_base_ms,
        backoff_cap_ms=max(_BACKOFF_CAP_MS, params.backoff_base_ms),
        jitter="none",
        retry_budget=(
            RetryBudgetConfig(token_ratio=params.budget_pct / 100, max_tokens=params.budget_tokens)
            if budget
            else None
        ),
    )
    tiers: list[_Tier] = []
    downstream: _CountingLeaf | NextTier = leaf
    for number in range(params.tiers, 0, -1):
        store = MemoryStore()  # one per tier: its own breaker and its own budget bucket
        breaker = Breaker(BreakerConfig(), store=store, clock=clock, rng=rng)
        breaker.force_closed("retry amplification: breakers are not part of this experiment")
        client = GuardedClient(
            policy,
            breaker=breaker,
            dependency=downstream,  # type: ignore[arg-type]
            clock=clock,
            rng=rng,
            store=store,
        )
        tier = _Tier(client, f"tier {number}")
        tiers.append(tier)
        # The next tier looks like a dependency to the one in front of it: its failed call
        # (attempts spent, or its budget said no) is a 503 there (labs.engine.chain).
        downstream = NextTier([tier], clock=clock, caller=f"tier {number - 1}")
    tiers.reverse()
    return tiers, leaf, clock


def _simulate(params: AmplificationParams, budget: bool) -> dict[str, object]:
    tiers, leaf, clock = _chain(params, budget)
    front = tiers[0]
    wait_ms: list[float] = []
    for _ in range(params.requests):
        result = front.handle()
        wait_ms.append(result.end_ms - result.start_ms)
    per_tier = []
    for number, tier in enumerate(tiers, start=1):
        attempts = sum(r.attempts for r in tier.results)
        per_tier.append(
            {
                "tier": number,
                "received": tier.received,
                "attempts": attempts,
                "retries": attempts - tier.received,
                "budget_denied": sum(1 for r in tier.results if r.outcome == "budget_exhausted"),
            }
        )
    return {
        "leaf_hits": leaf.hits,
        "tiers": per_tier,
        "retries": sum(t["retries"] for t in per_tier),
        "budget_denied": sum(t["budget_denied"] for t in per_tier),
        "wait_ms_per_request": round(sum(wait_ms) / len(wait_ms), 3),
        "virtual_ms": round(clock.now() * 1000, 3),
    }


def run(params: AmplificationParams) -> Result:
    """Run the chain without and with the per-tier budget. Deterministic (no randomness)."""
    runs = {mode: _simulate(params, mode == "budget") for mode, _ in _MODES}
    plain, budgeted = runs["no_budget"], runs["budget"]
    factor = ratio(plain["leaf_hits"], params.requests)  # type: ignore[arg-type]
    fewer = ratio(plain["leaf_hits"], budgeted["leaf_hits"])  # type: ignore[arg-type]
    rows = []
    for mode, label in _MODES:
        for tier in runs[mode]["tiers"]:  # type: ignore[attr-defined]
            rows.append({"mode": label, "tier": f"tier {tier['tier']}", **_without_tier(tier)})
        rows.append(
            {
                "mode": label,
                "tier": "leaf",
                "received": runs[mode]["leaf_hits"],
                "attempts": "",
                "retries": "",
                "budget_denied": "",
            }
        )
    labels = [f"tier {i}" for i in range(1, params.tiers + 1)] + ["leaf"]
    chart = Chart(
        key="calls_per_tier",
        title="Calls arriving at each tier",
        kind="bar",
        x=tuple(labels),
        x_label="tier (1 receives the user requests)",
        y_label="calls",
        series=tuple(
            series(label, [t["received"] for t in runs[mode]["tiers"]] + [runs[mode]["leaf_hits"]])  # type: ignore[attr-defined]
            for mode, label in _MODES
        ),
    )
    figures = (
        Figure("leaf_hits", "Leaf hits without a budget", plain["leaf_hits"], seed="810"),  # type: ignore[arg-type]
        Figure(
            "factor", "Amplification (leaf hits per request)", round(factor, 1), "x", seed="27x"
        ),
        Figure(
            "retries",
            "Retries made by the tiers, no budget",
            plain["retries"],
            seed="780 (60 + 180 + 540)",
        ),  # type: ignore[arg-type]
        Figure(
            "leaf_hits_budget",
            f"Leaf hits with a {fmt_number(params.budget_pct)} % budget",
            budgeted["leaf_hits"],
            seed="69",
        ),  # type: ignore[arg-type]
        Figure("fewer", "Fewer leaf hits with the budget", round(fewer, 1), "x", seed="11.7x"),
        Figure(
            "wait",
            "A user waits for the error (no budget / budget)",
            f"{fmt_number(plain['wait_ms_per_request'])} / {fmt_number(budgeted['wait_ms_per_request'])}",  # type: ignore[arg-type]
            "ms",
        ),
    )
    return Result(
        experiment="amplification",
        params=EXPERIMENT.params_dict(params),
        figures=figures,
        columns=(
            Column("mode", "Mode"),
            Column("tier", "Tier"),
            Column("received", "Calls received"),
            Column("attempts", "Attempts sent on"),
            Column("retries", "Retries"),
            Column("budget_denied", "Budget denials"),
        ),
        rows=tuple(rows),
        charts=(chart,),
        metrics={
            "leaf_hits": plain["leaf_hits"],
            "leaf_hits_budget": budgeted["leaf_hits"],
            "factor": factor,
            "fewer": fewer,
            "runs": runs,
        },
        notes=(
            "Each tier is the engine's guarded client; its breaker is forced closed.",
            f"Budget: one bucket per tier, starting full at {fmt_number(params.budget_tokens)} "
            f"tokens; each call received deposits {fmt_number(params.budget_pct)} % of a token; "
            "each retry spends one token.",
        ),
    )


def _without_tier(tier: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in tier.items() if k != "tier"}


EXPERIMENT: Experiment[AmplificationParams] = Experiment(
    name="amplification",
    title="Retry amplification",
    summary="Tiers that each retry the next turn 30 user requests into 810 hits on a failing "
    "leaf; a per-tier retry budget caps it.",
    params_type=AmplificationParams,
    limits=LIMITS,
    validate=validate,
    run=run,
    models="A chain of T services, each retrying the next up to A times, in front of a leaf "
    "that always fails (503), with and without a per-tier retry budget.",
    seed_text="30 requests, 3 tiers x 3 attempts: 810 leaf hits (27x); with a 10 % budget: "
    "69 (11.7x fewer).",
)
