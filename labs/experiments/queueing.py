"""Queueing: the server's queue discipline decides an incident (AWS's queueing simulator).

The README runs of ``joemag1/queueingsimulator`` on the engine's
:class:`~labs.engine.server.QueueServer`, plus the spike under the server's other defences
(adaptive LIFO, CoDel, an AIMD limit, a rate limit). To stay under a second only part of the
simulator's 1,000,000 ticks is simulated and the rest is counted at the simulated rates.
The setup, what is kept of the simulator and why: docs/experiments.md.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from labs.engine import Problem, SharedConfig
from labs.engine.server import QueueServer, Reply, ServerPolicy, parse_server_policy
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

__all__ = ["LIMITS", "README", "QueueingParams", "run", "simulate", "validate"]

#: The README's figures: (run, failure rate in %).
README = {"fifo_spike": 9.91, "lifo_spike": 0.79, "fifo_overload": 86.74}
_CHUNK_US = 10_000_000
SPIKE_X = 10
#: a worker takes its next queued request one tick (1 ms) after finishing; a request arriving
#: in that tick takes it first (the simulator's order within a tick)
PICKUP_US = 1000


@dataclass(frozen=True)
class QueueingParams:
    """Defaults: the simulator's (10 workers, 50 ms, queue 1,000, timeout 1,000 ms,
    retry probability 0.5) and the README's rates (0.1 and 0.5 per ms)."""

    rate: float = 0.1
    overload_rate: float = 0.5
    workers: int = 10
    mean_latency_ms: int = 50
    timeout_ms: int = 1000
    queue_size: int = 1000
    retry_probability: float = 0.5
    horizon_ms: int = 1_000_000
    overload_ms: int = 20_000
    policies: str = "all"
    seed: int = 7


LIMITS: dict[str, Param] = {
    "rate": Param("rate", "Arrivals per ms (spike runs)", 0.1, 0.01, 0.5, kind="number"),
    "overload_rate": Param(
        "overload_rate", "Arrivals per ms (overload run)", 0.5, 0.01, 1, kind="number"
    ),
    "workers": Param("workers", "Workers", 10, 1, 64),
    "mean_latency_ms": Param("mean_latency_ms", "Mean service time", 50, 1, 1000, "ms"),
    "timeout_ms": Param("timeout_ms", "Client timeout", 1000, 10, 10000, "ms"),
    "queue_size": Param("queue_size", "Queue size", 1000, 1, 10000, "requests"),
    "retry_probability": Param(
        "retry_probability", "Retry probability", 0.5, 0, 1, kind="number"
    ),
    "horizon_ms": Param(
        "horizon_ms", "Spike runs last", 1_000_000, 100_000, 2_000_000, "ms",
        help="the spike hits the first horizon / 1000 requests",
    ),
    "overload_ms": Param(
        "overload_ms", "Overload run simulated for", 20_000, 5_000, 120_000, "ms",
        help="the rest of the horizon is counted at the rates of its second half",
    ),
    "policies": Param(
        "policies", "Runs", "all", kind="choice", choices=("all", "readme"),
        help="readme: only the README's three runs; all: the server's defences too",
    ),
    "seed": Param("seed", "Seed", 7, 0, 999_999_999),
}  # fmt: skip


def validate(params: QueueingParams) -> list[Problem]:
    """Field ranges, and a service time below the timeout (the simulator's own rule for a
    meaningful run)."""
    problems = check_fields(params, LIMITS)
    if problems:
        return problems
    if params.mean_latency_ms >= params.timeout_ms:
        problems.append(
            Problem(
                "mean_latency_ms",
                f"must be between 1 and {params.timeout_ms - 1} ms (below the client "
                f"timeout; got {params.mean_latency_ms})",
            )
        )
    return problems


def _runs(params: QueueingParams) -> dict[str, tuple[str, ServerPolicy, bool]]:
    """Run key -> (label, server policy, with the spike)."""
    q = params.queue_size
    runs = {
        "fifo_spike": ("FIFO, latency spike", ServerPolicy(queue_limit=q), True),
        "lifo_spike": ("LIFO, latency spike", ServerPolicy("lifo", queue_limit=q), True),
        "fifo_overload": ("FIFO, overload", ServerPolicy(queue_limit=q), False),
    }
    if params.policies == "all":
        timeout = params.timeout_ms
        capacity_per_s = round(params.workers * 1000 / params.mean_latency_ms, 1)
        defences = {
            "adaptive_spike": (
                "adaptive LIFO, spike",
                {"discipline": "adaptive_lifo", "lifo_after_ms": max(1, timeout // 10)},
            ),
            "codel_spike": (
                "CoDel, spike",
                {"codel_target_ms": max(1, timeout // 20), "codel_interval_ms": max(10, timeout // 2)},
            ),
            "aimd_spike": (
                "AIMD limit, spike",
                {"concurrency": "aimd", "concurrency_limit": 4 * params.workers,
                 "concurrency_max": 1000, "limit_latency_ms": timeout // 2},
            ),
            "rate_spike": (
                "rate limit, spike",
                {"rate_per_s": capacity_per_s, "rate_burst": params.workers},
            ),
        }  # fmt: skip
        for key, (label, settings) in defences.items():
            runs[key] = (label, parse_server_policy({**settings, "queue_limit": q}), True)
    return runs


def simulate(params: QueueingParams, policy: ServerPolicy, spike: bool) -> dict[str, Any]:
    """One run of the simulator's setup on the engine's queue server; failure rate in %."""
    rate = params.rate if spike else params.overload_rate
    horizon_us = params.horizon_ms * 1000
    simulated_us = horizon_us if spike else min(horizon_us, params.overload_ms * 1000)
    config = SharedConfig(params.workers, params.mean_latency_ms, max_queue_ms=10**9)
    server = QueueServer(config, policy, pickup_us=PICKUP_US)
    rng = random.Random(f"queueing:{params.seed}:{rate}:{spike}")
    service_rng = random.Random(f"service:{params.seed}:{rate}:{spike}")
    gap_ms = 1 / rate

    def arrive() -> None:
        send(1)
        nxt = server.now + int(1000 * max(0.0, rng.gauss(gap_ms, gap_ms / 4)))
        if nxt < horizon_us:
            server.at(nxt, arrive)

    state = {"requests": 0, "failed": 0, "spike_left": params.horizon_ms // 1000 if spike else 0}
    failed_by: dict[str, int] = {}
    timeout_us = params.timeout_ms * 1000
    mean, spread = params.mean_latency_ms, params.mean_latency_ms / 4

    def send(attempt: int) -> None:
        state["requests"] += 1
        service = int(max(0.0, service_rng.gauss(mean, spread)))
        if state["spike_left"] > 0:
            state["spike_left"] -= 1
            service *= SPIKE_X
        server.submit(
            answer, attempt=attempt, timeout_us=timeout_us, service_us=service * 1000, give_up=False
        )

    def answer(reply: Reply) -> None:
        if reply.outcome == "ok":
            return
        state["failed"] += 1
        why = reply.reason or reply.outcome
        failed_by[why] = failed_by.get(why, 0) + 1
        if rng.random() < params.retry_probability:
            send(reply.attempt + 1)

    server.at(int(1000 * max(0.0, rng.gauss(gap_ms, gap_ms / 4))), arrive)
    stopped_us = simulated_us
    chunk_end, failed_before = _CHUNK_US, 0
    while chunk_end < simulated_us + _CHUNK_US:
        server.run(min(chunk_end, simulated_us))
        quiet = state["failed"] == failed_before and server.queued == 0
        if spike and state["spike_left"] == 0 and quiet and chunk_end < simulated_us:
            stopped_us = chunk_end
            break
        failed_before = state["failed"]
        chunk_end += _CHUNK_US
    per_second = server.counters()
    seconds = range(stopped_us // 1_000_000)
    rest_s = (horizon_us - stopped_us) / 1e6
    if spike:  # the healthy rest: rate x time left, all served
        extra_requests, extra_failed = rest_s * 1000 * rate, 0.0
    else:  # the rest of the collapse at the rates of the run's second half
        half = seconds[len(seconds) // 2 :]
        rows = [per_second.get(sec, {}) for sec in half]
        extra_requests = sum(r.get("offered", 0) for r in rows) / len(half) * rest_s
        failing = sum(r.get("shed", 0) + r.get("timeout", 0) for r in rows)
        extra_failed = failing / len(half) * rest_s
    requests = state["requests"] + extra_requests
    failed = state["failed"] + extra_failed
    return {
        "requests": round(requests),
        "simulated": state["requests"],
        "failed": round(failed),
        "failed_simulated": state["failed"],
        "failed_by": dict(sorted(failed_by.items())),
        "failure_pct": round(100 * failed / requests, 2) if requests else 0.0,
        "simulated_failure_pct": round(100 * state["failed"] / state["requests"], 2),
        "stopped_ms": stopped_us // 1000,
        "ok_per_s": [per_second.get(sec, {}).get("ok", 0) for sec in seconds],
        "offered_per_s": [per_second.get(sec, {}).get("offered", 0) for sec in seconds],
        "wasted_s": round(server.totals()["wasted_us"] / 1e6, 1),
    }


def run(params: QueueingParams) -> Result:
    """The README's three runs (and the server's defences under the spike)."""
    runs = _runs(params)
    stats = {key: simulate(params, policy, spike) for key, (_, policy, spike) in runs.items()}
    rows = []
    for key, (label, _, _) in runs.items():
        s = stats[key]
        rows.append(
            {
                "run": label,
                "requests": s["requests"],
                "failed": s["failed"],
                "failure_pct": s["failure_pct"],
                "readme": f"{README[key]} %" if key in README else "none",
                "wasted_s": s["wasted_s"],
            }
        )
    figures = tuple(
        Figure(
            key,
            f"Failed requests, {runs[key][0]}",
            stats[key]["failure_pct"],
            "%",
            seed=f"{README[key]}%",
        )
        for key in README
    )
    span = 60
    # only runs simulated for the whole minute (a run that stopped early is not drawn as 0)
    shown = [
        k
        for k in ("fifo_spike", "lifo_spike", "adaptive_spike", "codel_spike", "aimd_spike")
        if k in runs and stats[k]["stopped_ms"] >= span * 1000
    ]
    chart = Chart(
        key="goodput",
        title="Answered in time per second, the first minute of the spike runs",
        kind="line",
        x=tuple(range(span)),
        x_label="time (s)",
        y_label="requests answered per second",
        series=tuple(series(runs[k][0], (stats[k]["ok_per_s"] + [0] * span)[:span]) for k in shown),
    )
    capacity = params.workers / params.mean_latency_ms
    return Result(
        experiment="queueing",
        params=EXPERIMENT.params_dict(params),
        figures=figures,
        columns=(
            Column("run", "Run"),
            Column("requests", "Requests"),
            Column("failed", "Failed"),
            Column("failure_pct", "Failed (%)"),
            Column("readme", "README"),
            Column("wasted_s", "Wasted (s)"),
        ),
        rows=tuple(rows),
        charts=(chart,),
        metrics={
            key: {k: v for k, v in s.items() if not k.endswith("_per_s")}
            for key, s in stats.items()
        }
        | {"capacity_per_ms": capacity, "readme": README},
        notes=(
            f"Capacity: {params.workers} workers / {params.mean_latency_ms} ms = {capacity:g} "
            f"requests per ms; {params.rate:g} per ms is {params.rate / capacity:.0%} of it, "
            f"{params.overload_rate:g} per ms is {params.overload_rate / capacity:.1f}x.",
            "A failed request is one refused by the full queue or answered after the client's "
            "timeout; half of them are retried at once, as new requests. Wasted: server time "
            "spent on answers that came too late.",
            "A spike run stops once a 10 s stretch after the spike had no failure and ended "
            "with an empty queue; the rest of its arrivals are counted as served. The overload "
            f"run is simulated for {params.overload_ms / 1000:g} s; the rest of the "
            f"{params.horizon_ms / 1000:g} s is counted at the rates of its second half.",
        ),
    )


EXPERIMENT: Experiment[QueueingParams] = Experiment(
    name="queueing",
    title="Queueing: the server decides the incident",
    summary="A short latency spike: with a FIFO queue about 10 % of requests fail, with LIFO "
    "under 1 %; at 2.5x the capacity, most fail (congestion collapse).",
    params_type=QueueingParams,
    limits=LIMITS,
    validate=validate,
    run=run,
    models="AWS's queueing simulator on the lab's server model: workers, a bounded queue, "
    "client timeouts and retries; FIFO against LIFO, adaptive LIFO, CoDel, a concurrency "
    "limit and a rate limit.",
    seed_text="joemag1/queueingsimulator README: with a latency spike FIFO fails 9.91 % of "
    "requests and LIFO 0.79 %; at 2.5x overload 86.74 % fail.",
)
