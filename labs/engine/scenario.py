"""The scenario runner: a script of settings and bursts in, the JSON contract out.

:func:`run_scenario` drives an *executor* through the steps and builds the output from the
events the executor returns, so any executor that runs the engine (the in-process
:class:`EngineExecutor` here, or the web worker with real Redis) produces the same JSON:

``calls``        call, burst, attempts, outcome, backoff_ms, start_ms, end_ms, error, probe
``transitions``  at_ms, from, to, call, reason
``bursts``       burst, calls (count), call_numbers, succeeded, failed, fast_failed,
                 attempts (list), attempts_total, backoff_ms_total, start_ms, end_ms, wall_ms
``checks``       one per expected measure of a burst step: step, burst, measure, expected,
                 observed, tolerance, ok (see :mod:`labs.engine.expect`)
``observed``     for each burst step carrying ``expect``, ``ask`` or ``situation``: step,
                 burst and every measure :func:`~labs.engine.expect.observe` computes, and
                 ``missed`` (the step's sentence) when its ``situation`` did not happen
A step's missed ``situation`` is also a failed check (measure ``situation``), so the CLI
exits 1 on it.

Times are milliseconds since the scenario started, on the executor's clock.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, Protocol

from labs.engine.breaker import Breaker
from labs.engine.client import GuardedClient
from labs.engine.clock import Clock, SystemClock, VirtualClock
from labs.engine.config import DependencyConfig, Policy, Scenario, Step
from labs.engine.dependency import FakeDependency
from labs.engine.events import Event, Sink
from labs.engine.expect import check_expectations, check_situation, observe
from labs.engine.routes import arm_routes, build_routes, needs_routes
from labs.engine.shared import SharedDependency, private_server
from labs.engine.stores.base import Store
from labs.engine.stores.memory import MemoryStore
from labs.engine.validate import merge_settings, parse_dependency, parse_policy, parse_scenario

__all__ = ["EngineExecutor", "Executor", "build_output", "run_scenario"]


class Executor(Protocol):
    """What :func:`run_scenario` needs from whoever actually runs the calls."""

    clock: Clock

    def set_dependency(self, dependency: dict[str, Any]) -> None:
        """Apply a full (canonical) dependency dict and arm it."""
        ...

    def set_policy(self, policy: dict[str, Any]) -> None:
        """Apply a full (canonical) policy dict; breaker state carries over."""
        ...

    def burst(self, size: int, concurrency: int) -> list[Event]:
        """Run one burst; return its events (burst_start ... burst_end) in order."""
        ...

    def wait(self, ms: float) -> None:
        """Let ``ms`` milliseconds pass on the executor's clock."""
        ...


class EngineExecutor:
    """Runs a scenario in this process: one store (memory by default), one seeded rng.

    Virtual time by default; ``real=True`` uses a :class:`SystemClock` with honest sleeps.
    Call numbers continue across bursts (1, 2, ... like a lab session), bursts count from 1.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        real: bool = False,
        store: Store | None = None,
        clock: Clock | None = None,
        sink: Sink | None = None,
    ) -> None:
        self.clock: Clock = clock or (SystemClock() if real else VirtualClock())
        self.store: Store = store if store is not None else MemoryStore()
        self.rng = random.Random(seed)
        self.extra_sink = sink
        self.next_call = 1
        self.bursts = 0
        self._events: list[Event] = []
        self.dependency_config = DependencyConfig()
        self.dependency: FakeDependency | SharedDependency = FakeDependency(
            self.dependency_config, store=self.store, clock=self.clock, rng=self.rng
        )
        self.policy = Policy()
        self.breaker = self._breaker()

    def _sink(self, event: Event) -> None:
        self._events.append(event)
        if self.extra_sink is not None:
            self.extra_sink(event)

    def _breaker(self) -> Breaker:
        return Breaker(
            self.policy.breaker, store=self.store, clock=self.clock, rng=self.rng, sink=self._sink
        )

    def set_dependency(self, dependency: dict[str, Any]) -> None:
        """Apply and arm a dependency (every host, and B). Raises ValidationError."""
        config = self.dependency_config = parse_dependency(dependency)
        if config.mode == "server":  # a server with a queue, fresh: its queue starts empty
            self.dependency = private_server(config.server, clock=self.clock)
            return
        self.dependency = FakeDependency(config, store=self.store, clock=self.clock, rng=self.rng)
        if config.hosts or config.b is not None:
            arm_routes(config, store=self.store, clock=self.clock)
        else:
            self.dependency.arm()

    def set_policy(self, policy: dict[str, Any]) -> None:
        """Apply a policy; the breaker's state (in the store) carries over. Raises ValidationError."""
        self.policy = parse_policy(policy)
        self.breaker = self._breaker()

    def client(self) -> GuardedClient:
        """A guarded client over the current settings (with routes when the settings use
        hosts, B, a bulkhead, a fallback or idempotency keys)."""
        routes = None
        if needs_routes(self.dependency_config, self.policy):
            routes = build_routes(
                self.dependency_config,
                self.policy,
                store=self.store,
                clock=self.clock,
                rng=self.rng,
                sink=self._sink,
                breaker=self.breaker,
            )
        return GuardedClient(
            self.policy,
            breaker=self.breaker,
            dependency=self.dependency,
            clock=self.clock,
            rng=self.rng,
            sink=self._sink,
            store=self.store,
            routes=routes,
        )

    def burst(self, size: int, concurrency: int = 1) -> list[Event]:
        """Run the next burst; returns its events."""
        self.bursts += 1
        self._events = []
        self.client().run_burst(
            size, concurrency=concurrency, first_call=self.next_call, burst=self.bursts
        )
        self.next_call += size
        events, self._events = self._events, []
        return events

    def wait(self, ms: float) -> None:
        """Sleep ``ms`` on the clock (instant in virtual time)."""
        self.clock.sleep(ms / 1000)


def _r(x: float) -> float:
    return round(x, 3)


def run_scenario(
    scenario: Scenario | Mapping[str, Any],
    *,
    executor: Executor | None = None,
    real: bool = False,
    include_events: bool = False,
    pause_before_burst_ms: float = 0.0,
) -> dict[str, Any]:
    """Run every step of ``scenario``; return the JSON contract (see the module docstring).

    ``set_dependency`` / ``set_policy`` steps are merged into the settings in force and the
    full result is handed to the executor. With ``include_events`` the output also lists
    every event. ``pause_before_burst_ms`` lets that much time pass on the executor's clock
    before every burst step, as a student reading the step and typing a prediction does: a
    lesson must meet its expectations whatever the pause. Raises ValidationError for an
    invalid scenario dict (nothing runs).
    """
    if not isinstance(scenario, Scenario):
        scenario = parse_scenario(scenario)
    if executor is None:
        executor = EngineExecutor(seed=scenario.seed, real=real)
    t0 = executor.clock.now() * 1000
    dependency = scenario.dependency.to_dict()
    policy = scenario.policy.to_dict()
    executor.set_dependency(dependency)
    executor.set_policy(policy)
    events: list[Event] = []
    checks: list[dict[str, Any]] = []
    observed: list[dict[str, Any]] = []
    breaker = "closed"
    for index, step in enumerate(scenario.steps):
        if step.action == "burst":
            assert step.burst is not None
            if pause_before_burst_ms > 0:
                executor.wait(pause_before_burst_ms)
            burst_events = executor.burst(step.burst, step.concurrency)
            events.extend(burst_events)
            breaker = _check_burst(index, step, burst_events, breaker, checks, observed)
        elif step.action == "wait":
            executor.wait(step.wait_ms or 0)
        elif step.action == "set_dependency":
            dependency = parse_dependency(merge_settings(dependency, step.changes or {})).to_dict()
            executor.set_dependency(dependency)
        else:
            policy = parse_policy(merge_settings(policy, step.changes or {})).to_dict()
            executor.set_policy(policy)
    total = executor.clock.now() * 1000 - t0
    output = build_output(events, t0)
    output.update(
        name=scenario.name,
        seed=scenario.seed,
        clock="real" if isinstance(executor.clock, SystemClock) else "virtual",
        total_ms=_r(total),
        checks=checks,
        observed=observed,
    )
    if include_events:
        output["events"] = [dict(e.to_dict(), at_ms=_r(e.at_ms - t0)) for e in events]
    return output


def _check_burst(
    index: int,
    step: Step,
    burst_events: list[Event],
    breaker: str,
    checks: list[dict[str, Any]],
    observed: list[dict[str, Any]],
) -> str:
    """Observe one burst step's events and append its situation and expectation checks (and
    what it observed, when the step asks or expects anything). Returns the breaker's state
    after the burst, which the next burst starts from."""
    seen = observe(burst_events, breaker)
    number = next((e.burst for e in burst_events if e.kind == "burst_end"), None)
    missed = check_situation(step.situation, seen)
    if step.expect or step.ask or step.situation:
        observed.append(
            {"step": index, "burst": number, **seen, **({"missed": missed} if missed else {})}
        )
    if step.situation:
        checks.append(
            {
                "step": index,
                "burst": number,
                "measure": "situation",
                "expected": "happened",
                "observed": missed or "happened",
                "tolerance": 0.0,
                "ok": not missed,
            }
        )
    if step.expect:
        checks += check_expectations(step.expect, seen, step=index, burst=number)
    return seen["breaker_after"]


def build_output(events: list[Event], t0_ms: float = 0.0) -> dict[str, Any]:
    """``calls``, ``transitions`` and ``bursts`` from a list of engine events, with times
    relative to ``t0_ms``."""
    calls = []
    transitions = []
    bursts = []
    for e in events:
        if e.kind == "call_result":
            calls.append(
                {
                    "call": e.call,
                    "burst": e.burst,
                    "attempts": e.data.get("attempts", e.attempt or 0),
                    "outcome": e.outcome,
                    "backoff_ms": e.backoff_ms or 0.0,
                    "start_ms": _r(e.data["start_ms"] - t0_ms),
                    "end_ms": _r(e.data["end_ms"] - t0_ms),
                    "error": e.error,
                    "probe": e.data.get("probe", False),
                }
            )
        elif e.kind == "transition":
            transitions.append(
                {
                    "at_ms": _r(e.at_ms - t0_ms),
                    "from": e.state_from,
                    "to": e.state_to,
                    "call": e.call,
                    "reason": e.reason,
                }
            )
        elif e.kind == "burst_end":
            summary = dict(e.data)
            for key in ("start_ms", "end_ms"):
                summary[key] = _r(summary[key] - t0_ms)
            bursts.append(summary)
    calls.sort(key=lambda c: c["call"])
    return {"calls": calls, "transitions": transitions, "bursts": bursts}
