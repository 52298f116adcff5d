"""Beyond one dependency: the hosts a call is spread over, one breaker per host, a second
dependency B, its side effects, the cached answer a fallback uses.

A :class:`Route` is one dependency as the guarded client reaches it: its hosts (each a
:class:`~labs.engine.dependency.FakeDependency` with its own mode, in its own store scope
``h0`` .. ``h7``), the dependency-wide breaker, and with ``breaker_scope: host`` one breaker
per host. :func:`build_routes` makes the routes of a session's settings (dependency A, and B
when ``dependency.b`` is set; B's state lives in the store scope ``b``).

Spreading: round robin sends attempt ``n`` of call ``c`` to host ``(c - 1 + n - 1) mod H``
(a retry moves to the next host; no shared counter, so processes agree without a round
trip); ``random`` draws the host from the session's seeded rng. With per-host breakers a host
whose breaker refuses is skipped for the next one; when every host refuses, the attempt is
rejected.

None of this is used when nothing of it is configured (:func:`needs_routes`): the client
then runs exactly as it always did.
"""

from __future__ import annotations

import random
import threading
from dataclasses import replace
from typing import Any

from labs.engine.breaker import Breaker, Permit, Rejection
from labs.engine.clock import Clock
from labs.engine.config import DependencyConfig, Policy
from labs.engine.dependency import AttemptResult, FakeDependency
from labs.engine.events import Event, Sink, null_sink
from labs.engine.stores.base import Store

__all__ = ["Route", "arm_routes", "build_routes", "labelled", "needs_routes"]


def needs_routes(dependency: DependencyConfig, policy: Policy) -> bool:
    """Whether the settings use hosts, B, side effects, per-host breakers, the pool, a
    fallback or idempotency keys (else the client's plain path runs, unchanged)."""
    return bool(
        dependency.hosts
        or dependency.b is not None
        or dependency.side_effect
        or policy.breaker_scope == "host"
        or policy.pooled
        or policy.fallback
        or policy.idempotency_keys
    )


def labelled(sink: Sink, data: dict[str, Any], prefix: str) -> Sink:
    """A sink that adds ``data`` to every event and ``prefix: `` to its sentence (the
    transitions of a host's or B's breaker say whose they are)."""

    def emit(event: Event) -> None:
        sink(replace(event, data={**event.data, **data}, explain=f"{prefix}: {event.explain}"))

    return emit


class Route:
    """One dependency as the client reaches it (see the module docstring).

    ``name`` is ``"a"`` or ``"b"`` when the session has two dependencies, else None (events
    then carry no dependency label). ``in_flight`` counts its calls under way, for the
    bulkhead.
    """

    def __init__(
        self,
        name: str | None,
        config: DependencyConfig,
        policy: Policy,
        *,
        store: Store,
        clock: Clock,
        rng: random.Random,
        sink: Sink | None,
        breaker: Breaker | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.store = store
        self.rng = rng
        self.spread = config.spread
        sink = sink if sink is not None else null_sink
        label: dict[str, Any] = {"dependency": name} if name else {}
        hosts = config.host_configs()
        self.stores = (
            [store] if len(hosts) == 1 else [store.scoped(f"h{i}") for i in range(len(hosts))]
        )
        self.hosts = [
            FakeDependency(c, store=s, clock=clock, rng=rng)
            for c, s in zip(hosts, self.stores, strict=True)
        ]
        if breaker is None:
            breaker = Breaker(
                policy.breaker,
                store=store,
                clock=clock,
                rng=rng,
                sink=labelled(sink, label, name.upper()) if name else sink,
            )
        self.breaker = breaker
        self.host_breakers: list[Breaker] = []
        if policy.breaker_scope == "host":
            if len(hosts) == 1:
                self.host_breakers = [breaker]
            else:
                prefix = f"{name.upper()} " if name else ""
                self.host_breakers = [
                    Breaker(
                        policy.breaker,
                        store=s,
                        clock=clock,
                        rng=rng,
                        sink=labelled(sink, {**label, "host": i}, f"{prefix}host {i}"),
                    )
                    for i, s in enumerate(self.stores)
                ]
        self.in_flight = 0
        self._lock = threading.Lock()

    @property
    def many_hosts(self) -> bool:
        """Whether attempts name their host (more than one)."""
        return len(self.hosts) > 1

    def pick(self, call_no: int, attempt: int) -> int:
        """The host of attempt ``attempt`` of call ``call_no`` (see the module docstring)."""
        count = len(self.hosts)
        if count == 1:
            return 0
        if self.spread == "random":
            return self.rng.randrange(count)
        return (call_no - 1 + attempt - 1) % count

    def admit(
        self, call_no: int, attempt: int, burst: int | None
    ) -> tuple[Permit | Rejection, int, Breaker]:
        """Per-host breakers: the first host from :meth:`pick` on whose breaker admits the
        attempt, with its permit and breaker; a Rejection when every host's breaker refuses."""
        first = self.pick(call_no, attempt)
        count = len(self.hosts)
        refusals: list[tuple[int, Rejection]] = []
        for step in range(count):
            host = (first + step) % count
            breaker = self.host_breakers[host]
            permit = breaker.allow(call=call_no, burst=burst)
            if not isinstance(permit, Rejection):
                return permit, host, breaker
            refusals.append((host, permit))
        if count == 1:
            return refusals[0][1], 0, self.host_breakers[0]
        waits = [r.retry_in_ms for _, r in refusals if r.retry_in_ms is not None]
        return (
            Rejection(
                "open",
                refusals[0][1].generation,
                min(waits) if waits else None,
                f"rejected: the breaker of every host ({count}) refuses; dependency not called",
            ),
            first,
            self.host_breakers[first],
        )

    def enter(self, limit: int | None) -> bool:
        """Take a place among the calls in flight; False when ``limit`` are already there."""
        with self._lock:
            if limit is not None and self.in_flight >= limit:
                return False
            self.in_flight += 1
            return True

    def leave(self) -> None:
        """Give the place back."""
        with self._lock:
            self.in_flight -= 1

    def attempt(
        self, host: int, timeout_ms: float | None, key: str | None
    ) -> tuple[AttemptResult, str | None]:
        """One attempt on ``host``; returns the answer and what became of the side effect:
        None (none configured, or the work was not done), ``applied``, or ``duplicate`` (the
        dependency honours keys and had applied this key's effect already)."""
        answer = self.hosts[host].attempt(timeout_ms)
        if not self.config.side_effect or not answer.processed:
            return answer, None
        if key is not None and self.config.honours_keys and not self.store.effect_once(key):
            return answer, "duplicate"
        return answer, "applied"


def build_routes(
    dependency: DependencyConfig,
    policy: Policy,
    *,
    store: Store,
    clock: Clock,
    rng: random.Random,
    sink: Sink | None,
    breaker: Breaker,
) -> list[Route]:
    """Dependency A (its dependency-wide breaker is ``breaker``), then B if configured."""
    routes = [
        Route(
            "a" if dependency.b is not None else None,
            dependency,
            policy,
            store=store,
            clock=clock,
            rng=rng,
            sink=sink,
            breaker=breaker,
        )
    ]
    if dependency.b is not None:
        routes.append(
            Route(
                "b", dependency.b, policy, store=store.scoped("b"), clock=clock, rng=rng, sink=sink
            )
        )
    return routes


def arm_routes(dependency: DependencyConfig, *, store: Store, clock: Clock) -> None:
    """Write every host's (and B's) fresh dependency state (a ``set_dependency``)."""
    rng = random.Random(0)  # arming draws nothing
    for route in build_routes(
        dependency,
        Policy(),
        store=store,
        clock=clock,
        rng=rng,
        sink=None,
        breaker=Breaker(Policy().breaker, store=store, clock=clock),
    ):
        for host in route.hosts:
            host.arm()
