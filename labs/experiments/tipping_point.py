"""The tipping point: for a grid of offered load and trigger, does the shared dependency come
back after the trigger ends, and how long does it take?

Each cell runs the engine's :class:`~labs.engine.MemorySharedModel` (the live class's model)
against naive clients driven by a heap of events, so the whole map runs in well under a
second. It shows the stable line ``C / (1 + r)`` (Bronson et al., HotOS 2021; Huang et al.,
OSDI 2022): below it any trigger recovers, above it a long one locks in. Recovery is defined
by :data:`RECOVERED_PCT`; the model and the rule: docs/experiments.md.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from typing import Any

from labs.engine import MemorySharedModel, Problem, SharedConfig, Trigger
from labs.engine.config import LIMITS as ENGINE_LIMITS
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
    "LIMITS", "MAX_ATTEMPTS_TOTAL", "RECOVERED_PCT", "TippingParams", "run", "simulate",
    "stable_line_pct", "validate",
]  # fmt: skip

RECOVERED_PCT = 90
#: loads x triggers x kinds x calls: the map's size is capped here, so a page stays quick.
MAX_ATTEMPTS_TOTAL = 400_000
KINDS = ("down", "capacity")
_KIND_LABEL = {"down": "down", "capacity": "capacity drop"}


def _range(path: str) -> tuple[float, float]:
    limit = ENGINE_LIMITS[path]
    assert limit.min is not None and limit.max is not None
    return limit.min, limit.max


@dataclass(frozen=True)
class TippingParams:
    """Defaults: C = 50 attempts/s, 3 retries (stable line 25 % of C), loads 10 to 60 %,
    triggers of 2 and 8 s, down or a drop to 1 of 4 servers."""

    loads: tuple[int, ...] = (10, 20, 30, 40, 60)
    triggers_s: tuple[int, ...] = (2, 8)
    kinds: str = "both"
    retries: int = 3
    timeout_ms: int = 500
    servers: int = 4
    service_ms: int = 80
    max_queue_ms: int = 2000
    trigger_servers: int = 1
    trigger_at_s: int = 5
    observe_s: int = 20
    seed: int = 7


LIMITS: dict[str, Param] = {
    "loads": Param(
        "loads", "Offered load", (10, 20, 30, 40, 60), 1, 100, "% of capacity",
        kind="int_list", max_items=10,
    ),
    "triggers_s": Param(
        "triggers_s", "Trigger lasts", (2, 8), 1, 60, "s", kind="int_list", max_items=4
    ),
    "kinds": Param(
        "kinds", "Trigger", "both", kind="choice", choices=("both", "down", "capacity"),
        help="down: every attempt answers 503; capacity: fewer servers",
    ),
    "retries": Param("retries", "Retries per call", 3, 0, 5, help="naive: at once, no backoff"),
    "timeout_ms": Param("timeout_ms", "Attempt timeout", 500, 10, 10000, "ms"),
    "servers": Param("servers", "Servers", 4, *_range("shared.servers")),
    "service_ms": Param("service_ms", "Service time", 80, *_range("shared.service_ms"), "ms"),
    "max_queue_ms": Param(
        "max_queue_ms", "Longest queue wait", 2000, *_range("shared.max_queue_ms"), "ms",
        help="an attempt that would wait longer is shed at once (503)",
    ),
    "trigger_servers": Param(
        "trigger_servers", "Capacity drop: servers left", 1, 0, 63, help="below Servers"
    ),
    "trigger_at_s": Param("trigger_at_s", "Trigger at", 5, 2, 60, "s"),
    "observe_s": Param("observe_s", "Watch after the trigger", 20, 5, 120, "s"),
    "seed": Param("seed", "Seed", 7, 0, 999_999_999),
}  # fmt: skip


def stable_line_pct(retries: int) -> float:
    """The stable line as % of capacity: ``100 / (1 + retries)``."""
    return 100 / (1 + retries)


def validate(params: TippingParams) -> list[Problem]:
    """Field ranges, a capacity drop below the servers, and the map's size (at most
    :data:`MAX_ATTEMPTS_TOTAL` attempts in the worst case)."""
    problems = check_fields(params, LIMITS)
    if problems:
        return problems
    if params.kinds != "down" and params.trigger_servers >= params.servers:
        problems.append(
            Problem(
                "trigger_servers",
                f"must be between 0 and {params.servers - 1} (fewer than the {params.servers} "
                f"servers; got {params.trigger_servers})",
            )
        )
    capacity = params.servers * 1000 / params.service_ms
    kinds = 2 if params.kinds == "both" else 1
    worst = 0.0
    for trigger in params.triggers_s:
        span = params.trigger_at_s + trigger + params.observe_s
        worst += sum(load / 100 * capacity * span for load in params.loads)
    worst *= kinds * (1 + params.retries)
    if worst > MAX_ATTEMPTS_TOTAL:
        problems.append(
            Problem(
                "loads",
                f"the map would take up to {worst:,.0f} attempts (at most "
                f"{MAX_ATTEMPTS_TOTAL:,}): fewer or lower loads, fewer triggers, fewer "
                "servers or a longer service time",
            )
        )
    return problems


def simulate(
    params: TippingParams,
    load_pct: float,
    kind: str,
    trigger_s: int,
    *,
    later_load_pct: float | None = None,
    later_at_s: int | None = None,
    defences: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One run: Poisson calls at ``load_pct`` % of capacity, the trigger at
    ``trigger_at_s``; with ``later_load_pct``, the load changes to it at ``later_at_s``;
    ``defences``: the server's (``SharedConfig``'s rate limit, queue and concurrency limits,
    CoDel, queue order), as the instructor sets them on the live class; an attempt waiting in
    a LIFO queue asks again at each instant the model names, as a live caller does.

    Returns per-second ``calls`` (first attempts arriving), ``calls_ok`` (succeeded, at
    their answer), ``offered`` (attempts) and ``recovery_s`` (None: never)."""
    config = SharedConfig(
        params.servers, params.service_ms, params.max_queue_ms, **(defences or {})
    )
    model = MemorySharedModel(config)
    capacity = config.capacity_per_s
    end_s = params.trigger_at_s + trigger_s + params.observe_s
    rng = random.Random(f"tipping:{params.seed}:{load_pct}:{kind}:{trigger_s}")
    #: (time us, sequence, attempt (0: the trigger), ticket of a waiting attempt or 0)
    heap: list[tuple[int, int, int, int]] = []
    seq = 0
    t = 0.0
    while True:
        rate_pct = load_pct
        if later_load_pct is not None and later_at_s is not None and t >= later_at_s:
            rate_pct = later_load_pct
        t += rng.expovariate(capacity * rate_pct / 100)
        if t >= end_s:
            break
        seq += 1
        heap.append((round(t * 1e6), seq, 1, 0))
    heap.append((params.trigger_at_s * 1_000_000, 0, 0, 0))
    heapq.heapify(heap)
    trigger = Trigger(kind, trigger_s * 1000, servers=params.trigger_servers)  # type: ignore[arg-type]
    timeout_us = params.timeout_ms * 1000
    last_attempt = params.retries + 1
    horizon_us = end_s * 1_000_000
    while heap:
        at, n, attempt, ticket = heapq.heappop(heap)
        if attempt == 0:
            model.trigger(trigger, at)
            continue
        if ticket:
            decision = model.poll(ticket, at)
        else:
            decision = model.decide(at, timeout_us=timeout_us, attempt=attempt)
        if decision.outcome == "waiting":
            heapq.heappush(heap, (decision.answer_us, n, attempt, decision.ticket))
            continue
        if decision.outcome != "ok" and attempt < last_attempt and decision.answer_us < horizon_us:
            heapq.heappush(heap, (decision.answer_us, n, attempt + 1, 0))
    by_second = {s.second: s for s in model.counters()}
    span = range(end_s)
    calls = [by_second[s].calls if s in by_second else 0 for s in span]
    calls_ok = [by_second[s].calls_ok if s in by_second else 0 for s in span]
    offered = [by_second[s].offered if s in by_second else 0 for s in span]
    end = params.trigger_at_s + trigger_s
    recovered = None
    for s in range(end, end_s - 1):  # the last second's answers may fall past the run
        rest_ok, rest_calls = sum(calls_ok[s : end_s - 1]), sum(calls[s : end_s - 1])
        if calls_ok[s] * 100 >= RECOVERED_PCT * calls[s] and (
            rest_ok * 100 >= RECOVERED_PCT * rest_calls
        ):
            recovered = s - end
            break
    return {
        "calls_per_s": calls,
        "calls_ok_per_s": calls_ok,
        "offered_per_s": offered,
        "recovery_s": recovered,
        "attempts": sum(offered),
    }


def _kinds(params: TippingParams) -> tuple[str, ...]:
    return KINDS if params.kinds == "both" else (params.kinds,)


def _cell(recovery: int | None) -> str:
    return "never" if recovery is None else f"{recovery} s"


def run(params: TippingParams) -> Result:
    """Every cell of the map; the boundary (lowest load that locks in) per trigger."""
    capacity = params.servers * 1000 / params.service_ms
    line = stable_line_pct(params.retries)
    grid: dict[str, dict[int, int | None]] = {}
    attempts = 0
    rows = []
    for kind in _kinds(params):
        for trigger_s in params.triggers_s:
            label = f"{_KIND_LABEL[kind]}, {trigger_s} s"
            cells: dict[int, int | None] = {}
            for load in params.loads:
                out = simulate(params, load, kind, trigger_s)
                cells[load] = out["recovery_s"]
                attempts += out["attempts"]
            grid[label] = cells
            row: dict[str, Any] = {"trigger": label}
            row.update({f"load_{load}": _cell(cells[load]) for load in params.loads})
            rows.append(row)
    boundary = {
        label: min((load for load, rec in cells.items() if rec is None), default=None)
        for label, cells in grid.items()
    }
    never_y = params.observe_s
    chart = Chart(
        key="map",
        title=f"Time to recovery by offered load; never = drawn at {never_y} s",
        kind="line",
        x=tuple(params.loads),
        x_label="offered load (% of capacity)",
        y_label="seconds to recover",
        series=tuple(
            series(label, [never_y if r is None else r for r in cells.values()])
            for label, cells in grid.items()
        ),
    )
    locked = [load for cells in grid.values() for load, rec in cells.items() if rec is None]
    lowest_locked = min(locked, default=None)
    safe = [load for load in params.loads if load < line]
    safe_all_recover = all(grid[label][load] is not None for label in grid for load in safe)
    figures = (
        Figure(
            "stable_line",
            f"Stable line: capacity / (1 + {params.retries} retries)",
            f"{line:.1f} % ({capacity * line / 100:,.1f} calls/s)",
            seed="Bronson et al.; Huang et al., Theorem 2: C / (1 + r)",
        ),
        Figure(
            "lowest_locked",
            "Lowest load that locks in",
            "none" if lowest_locked is None else f"{lowest_locked} %",
            seed="just above the stable line",
        ),
        Figure(
            "below_line",
            "Every trigger below the line recovers",
            "yes" if safe_all_recover else "no",
        ),
    )
    return Result(
        experiment="tipping_point",
        params=EXPERIMENT.params_dict(params),
        figures=figures,
        columns=(
            Column("trigger", "Trigger"),
            *(Column(f"load_{load}", f"{load} %") for load in params.loads),
        ),
        rows=tuple(rows),
        charts=(chart,),
        metrics={
            "capacity_per_s": capacity,
            "stable_line_pct": round(line, 3),
            "grid": {label: {str(k): v for k, v in cells.items()} for label, cells in grid.items()},
            "boundary": boundary,
            "lowest_locked": lowest_locked,
            "attempts": attempts,
        },
        notes=(
            f"Capacity C = {params.servers} servers x 1000 / {params.service_ms} ms = "
            f"{capacity:g} attempts/s; each cell is one run with naive clients (up to "
            f"{params.retries} retries at once, {params.timeout_ms} ms attempt timeout).",
            f"Recovery: the first second after the trigger from which at least "
            f"{RECOVERED_PCT} % of the arriving calls succeed (and on average until the end); "
            f"never: not within {params.observe_s} s.",
            "The table is the map: one row per trigger, one column per load.",
        ),
    )


EXPERIMENT: Experiment[TippingParams] = Experiment(
    name="tipping_point",
    title="The tipping point",
    summary="For each offered load and trigger: does the shared dependency come back, and "
    "when? Below capacity / (1 + retries) it always does; above, a long trigger locks it in.",
    params_type=TippingParams,
    limits=LIMITS,
    validate=validate,
    run=run,
    models="Naive clients (retries at once) send Poisson calls to the class's shared "
    "dependency model at each load of the grid; each trigger (down, or a capacity drop) "
    "for each duration; time to recovery after the trigger ends.",
    seed_text="Metastable failures (Bronson et al., HotOS 2021; Huang et al., OSDI 2022, "
    "Theorem 2): stable below about C / (1 + r); above it, a trigger can outlast itself.",
)
