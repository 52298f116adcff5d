"""The class's chain of students on a worker: a run in a front-tier session calls the next
tier's services, each through its student's own policy, down to the shared dependency.

At the start of a run in a session of tier k, :func:`build_engine` builds an engine for
every session of tiers k+1 to the back (their breakers, budgets and stores are the ones in
Redis every worker shares) and puts the engine's :class:`~labs.engine.chain.NextTier` where
each client expects its dependency. A call a service answers is numbered from the session's
counter in Redis (:func:`labs.live.runtime.inbound_key`), journaled in that session's own
journal with the call it answers (``data["parent"]``), and runs as a caller of its own on
the hub, so the tier in front stops waiting at its attempt timeout while it goes on. Each
tier's calls in and attempts out are counted by the second for the storm panel
(:func:`labs.live.runtime.chain_key`), sent without waiting.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from labs.engine.chain import Counted, NextTier
from labs.engine.outcomes import CallResult
from labs.live import runtime
from labs.models import LabSession
from labs.worker import runs


def build_engine(
    session: LabSession, *, sink, rng: random.Random, clock, client
) -> runtime.SessionEngine:
    """The session's engine for a run: :func:`labs.live.runtime.build_engine`, except that a
    session in the class's chain calls the next tier (or, at the back, the shared dependency,
    counted)."""
    layout = runtime.chain_layout(session.classroom_id) if session.tier else []
    place = _place(layout, session.pk)
    if place is None:
        return runtime.build_engine(session, sink=sink, rng=rng, clock=clock, client=client)
    tier, index = place
    depth = len(layout)
    tally: Counter[tuple[int, str]] = Counter()
    count = _counter(client, session.classroom_id, clock, tally)
    services: list[_Inbound] = []
    for number in range(depth, tier, -1):
        services = [
            _inbound(s, number, i, depth, services, count, clock, client, rng)
            for i, s in enumerate(layout[number - 1], start=1)
        ]
    # A burst's summary says how many of its attempts reached the shared dependency: the
    # back tier's attempts of this run's chain (built for this run alone).
    wrap = _wrap(tier, index, depth, services, count, clock,
                 extra=lambda: {"leaf_hits": tally[(depth, "out")], "tier": tier})  # fmt: skip
    return runtime.build_engine(session, sink=sink, rng=rng, clock=clock, client=client, wrap=wrap)


def _place(layout: list[list[LabSession]], session_id: int) -> tuple[int, int] | None:
    for number, tier in enumerate(layout, start=1):
        for index, session in enumerate(tier, start=1):
            if session.pk == session_id:
                return number, index
    return None


def service_name(tier: int, index: int) -> str:
    """How a service of the chain is named in the journal (not by its student)."""
    return f"tier {tier}, service {index}"


def _wrap(
    tier: int, index: int, depth: int, downstream: list[_Inbound], count, clock, extra=None
) -> Callable[[Any], Any]:
    """The dependency of a service of ``tier``: the next tier (the shared dependency at the
    back), counted; the run's own service (the one with ``extra``) is where its calls, the
    users' requests, enter the chain."""

    def wrap(dependency: Any) -> Any:
        if tier < depth:
            dependency = NextTier(downstream, clock=clock, caller=service_name(tier, index))
        return Counted(dependency, tier=tier, count=count, extra=extra, entry=extra is not None)

    return wrap


def _counter(
    client, classroom_id: int, clock, tally: Counter[tuple[int, str]]
) -> Callable[[int, str], None]:
    """``count(tier, "in" | "out")``: into the run's ``tally``, and one ``HINCRBY`` on the
    second's key (with its ``EXPIRE`` the first time this run writes that second), sent with
    the hub's next batch without waiting for the replies."""
    keep = str(runtime.CHAIN_KEEP_S)
    expiring = [-1]  # the last second whose key this run gave an expiry

    def count(tier: int, direction: str) -> None:
        tally[(tier, direction)] += 1
        second = int(clock.now())
        key = runtime.chain_key(classroom_id, second)
        client.send_nowait(("HINCRBY", key, f"{direction}:{tier}", 1))
        if second != expiring[0]:
            expiring[0] = second
            client.send_nowait(("EXPIRE", key, keep))

    return count


class _Inbound:
    """A service past the front: answers a call of the tier in front with its own client."""

    def __init__(self, session: LabSession, name: str, engine: runtime.SessionEngine,
                 parents: dict[int, dict[str, Any]], client) -> None:  # fmt: skip
        self.name = name
        self.session_id = session.pk
        self.engine = engine
        self.parents = parents
        self.client = client
        self.key = runtime.inbound_key(session.pk)

    def handle(self, parent: dict[str, Any]) -> CallResult:
        call_no = int(self.client.incr(self.key))
        self.parents[call_no] = parent
        try:
            return self.engine.client.call(call_no)
        finally:
            self.parents.pop(call_no, None)


def _inbound(
    session: LabSession, tier: int, index: int, depth: int, downstream: list[_Inbound],
    count, clock, client, rng: random.Random,
) -> _Inbound:  # fmt: skip
    # Its calls are numbered on from the session's own (SET NX: a counter already going,
    # another run's, is kept), so the numbers never repeat one of its own runs'.
    client.set(runtime.inbound_key(session.pk), session.next_call_no - 1, nx=True)
    parents: dict[int, dict[str, Any]] = {}
    engine = runtime.build_engine(
        session,
        sink=_answering_sink(session, parents),
        rng=random.Random(f"{rng.random()}:{session.pk}"),
        clock=clock,
        client=client,
        wrap=_wrap(tier, index, depth, downstream, count, clock),
    )
    return _Inbound(session, service_name(tier, index), engine, parents, client)


def _answering_sink(session: LabSession, parents: dict[int, dict[str, Any]]):
    """The session's journal sink, each row of a call it answers marked with that call's
    parent (``data["parent"]``); its ``call_result`` says whose call it answered."""
    sink = runs.event_sink(session)

    def answering(event) -> None:
        parent = parents.get(event.call) if event.call is not None else None
        if parent is not None:
            data = dict(event.data or {})
            data["parent"] = parent
            explain = event.explain
            if event.kind == "call_result":
                explain += (
                    f" (answering {parent['service']}'s call {parent['call']}, "
                    f"attempt {parent['attempt']})"
                )
            event = dataclasses.replace(event, data=data, explain=explain)
        sink(event)

    return answering
