"""The live class and the virtual-time model reach the same verdict at the tipping point.

One small shared dependency (2 servers x 50 ms: C = 40 attempts/s) and naive clients that
retry 3 times (the stable line C / (1 + 3) = 10 calls/s). For a load well below the line
and one well above it, the same down trigger runs twice: in virtual time through
``tipping_point``'s ``simulate`` (the engine's ``MemorySharedModel``) and in a live class,
where bot students (``classroom_simulate``) send Poisson traffic through a real Celery worker
to the class's Redis model and the instructor's trigger fires through the service. The live
verdict is the storm panel's recovery clock (``storm_headline``) over the seconds Redis
recorded, read as a recovery question is graded (``recovery_observed``); the virtual one is
the experiment's time to recovery. Both must say "back within WITHIN_S s of the trigger's
end" below the line and "not back" above it; and, above it, "back" again once the server
defends itself with CoDel, or serves the newest waiting attempt first (LIFO: a fresh attempt is
served before its caller gives up, where FIFO serves attempts nobody waits for any more), set
by the instructor on the live class and given to the
experiment as the same ``SharedConfig``.
"""

from __future__ import annotations

import pytest

from labs.engine import (
    Breaker,
    GuardedClient,
    MemorySharedModel,
    MemoryStore,
    SharedDependency,
    Trigger,
    VirtualClock,
    parse_policy,
)
from labs.experiments.tipping_point import TippingParams, simulate
from labs.grading import recovery_observed
from labs.live import runtime
from labs.live.traffic import arrival_schedule, calls_rng
from labs.models import JournalEvent, Traffic
from labs.presenters.storm import BASELINE_SECONDS, storm_headline
from labs.services import shared as shared_services
from labs.services.simulate import MAX_ATTEMPTS, TIMEOUT_MS, classroom_simulate
from labs.services.traffic import traffic_stop
from tests.integration.conftest import wait_for, wait_run_ended
from tests.integration.test_shared_worker import shared_class

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SERVERS, SERVICE_MS = 2, 50
CAPACITY = SERVERS * 1000 / SERVICE_MS  # 40 attempts/s
RETRIES = MAX_ATTEMPTS - 1  # the bots' naive policy: 3 retries at once
STABLE_LINE = CAPACITY / (1 + RETRIES)  # 10 calls/s
BOTS = 3
TRIGGER_S = 5
#: Seconds after the trigger's end within which "recovered" counts.
WITHIN_S = 8
#: Complete seconds of steady traffic before the trigger (the clock's baseline).
WARM_S = 4
#: Generous, for a loaded 2-core machine: the worker's start, the bots' first calls.
STEADY_TIMEOUT_S = 60


#: The server's defence of the third case: CoDel sheds a wait over 100 ms once waits have
#: stayed over it for 100 ms (below the bots' 500 ms attempt timeout, so no server time goes
#: to attempts nobody waits for).
CODEL = {"codel_target_ms": 100, "codel_interval_ms": 100}
#: The fourth case's: a freed server takes the newest waiting attempt (the explicit queue).
LIFO = {"discipline": "lifo"}


def virtual_verdict(
    calls_per_s: float, max_queue_ms: int, defences: dict | None = None
) -> tuple[str, int | None]:
    """``yes``/``no`` and the seconds to recovery of the same setup in virtual time."""
    params = TippingParams(
        servers=SERVERS, service_ms=SERVICE_MS, max_queue_ms=max_queue_ms, retries=RETRIES,
        timeout_ms=TIMEOUT_MS, trigger_at_s=5, observe_s=WITHIN_S + 2,
    )  # fmt: skip
    out = simulate(params, calls_per_s * 100 / CAPACITY, "down", TRIGGER_S, defences=defences)
    back = out["recovery_s"]
    return ("yes" if back is not None and back <= WITHIN_S else "no"), back


def wait_steady(room, calls_per_s: float) -> None:
    """Wait until the last WARM_S complete seconds each had calls and, together, at least
    half the calls the bots are asked for (Poisson arrivals vary from second to second)."""

    def steady():
        rows = runtime.shared_now(room.pk, back_s=WARM_S + 1)["seconds"][:-1][-WARM_S:]
        calls = [r["calls"] for r in rows]
        return len(calls) == WARM_S and all(calls) and sum(calls) >= calls_per_s * WARM_S / 2

    wait_for(steady, STEADY_TIMEOUT_S, interval=0.5, message=f"steady {calls_per_s} calls/s")


def live_verdict(room, teacher) -> dict:
    """Fire a down trigger for TRIGGER_S s, wait WITHIN_S s past its end by Redis's clock,
    and read the panel's recovery clock over the recorded seconds."""
    shared_services.classroom_fire_trigger(
        classroom=room, user=teacher, values={"kind": "down", "duration_ms": TRIGGER_S * 1000}
    )
    span = runtime.shared_trigger_span(room.pk)
    assert span is not None
    trigger = {"kind": "down", "from_s": span["from_us"] / 1e6, "until_s": span["until_us"] / 1e6}
    due = int(trigger["until_s"]) + WITHIN_S + 1
    first = int(trigger["from_s"]) - BASELINE_SECONDS - 2

    def seconds_up():
        recorded = runtime.shared_seconds(room.pk, first, due - 1)
        return recorded if recorded["now"] >= due else None

    recorded = wait_for(seconds_up, TRIGGER_S + WITHIN_S + 30, interval=0.5, message="the window")
    headline = storm_headline(recorded["seconds"], trigger, due)
    observed = recovery_observed(headline, WITHIN_S)
    calls = [(r["second"], r["calls"], r["calls_ok"], r["offered"]) for r in recorded["seconds"]]
    return {"headline": headline, "observed": observed, "seconds": calls}


@pytest.mark.parametrize(
    ("rate", "defences", "expected"),
    [
        pytest.param(1, None, "yes", id="0.3x-the-line-recovers"),
        pytest.param(10, None, "no", id="3x-the-line-locks-in"),
        pytest.param(10, CODEL, "yes", id="3x-the-line-with-codel-recovers"),
        pytest.param(10, LIFO, "yes", id="3x-the-line-with-lifo-recovers"),
    ],
)
def test_the_live_class_and_the_virtual_model_agree_on_recovery(
    worker_process, rate, defences, expected
):
    calls_per_s = BOTS * rate
    assert (calls_per_s < STABLE_LINE) == (expected == "yes" and not defences)
    room, teacher, _ = shared_class(0, servers=SERVERS, service_ms=SERVICE_MS)
    if defences:
        shared_services.classroom_set_shared(classroom=room, user=teacher, values=defences)
        stored = runtime.shared_model(room.pk).config.to_dict()
        assert {k: stored[k] for k in defences} == defences
    config = runtime.shared_config(room.pk)
    assert config.capacity_per_s == CAPACITY
    virtual, virtual_back = virtual_verdict(calls_per_s, config.max_queue_ms, defences)

    worker_process()
    sim = classroom_simulate(
        classroom=room, students=BOTS, policy="naive", rate=rate, duration_s=120,
        arrivals="poisson",
    )  # fmt: skip
    try:
        wait_steady(room, calls_per_s)
        live = live_verdict(room, teacher)
    finally:
        for session in sim.sessions:
            traffic_stop(session=session, user=session.owner)
        for run in sim.traffic:
            wait_run_ended(run, 60)
    for run in Traffic.objects.filter(pk__in=[t.pk for t in sim.traffic]):
        assert run.status in (Traffic.Status.DONE, Traffic.Status.STOPPED), run.error

    observed = live["observed"]
    assert observed is not None, live
    detail = f"virtual {virtual} ({virtual_back}), live {observed}, seconds {live['seconds']}"
    assert virtual == expected, detail
    assert observed["recovered"] == expected, detail
    assert live["headline"]["state"] == ("recovered" if expected == "yes" else "not_recovered")
    if defences is CODEL:  # the defence did the work: attempts were shed by CoDel, live as virtual
        shed = sum(r["shed"] for r in runtime.shared_now(room.pk, back_s=60)["seconds"])
        assert shed > 0, detail


# --- second by second ------------------------------------------------------------------------

#: How far a live second's count may be from the same second's in virtual time, as a share of
#: the attempts offered in that second (and at least a few): the live arrivals come a few
#: milliseconds after their schedule's instants (the worker's hub, a loaded machine), which
#: moves an attempt near a second's edge, or near its turn in the queue, across it, and in
#: the second the class comes back a few milliseconds decide many timeouts (seen: 15 live
#: against 3 virtual of 45 attempts). Measured runs stayed within 0.27 of the share; the
#: margin is for a loaded machine.
SECOND_TOLERANCE = {"abs": 6, "share": 0.4}
#: On a machine loaded by other work the live class can come back a second or two after
#: virtual time does (its attempts arrive late, and the second the class comes back moves):
#: a live second also matches when it is within the tolerance of one of the virtual seconds
#: up to this many before it. Seen once, with a test run beside CI's: 21 live timeouts
#: against 0 virtual two seconds after the trigger's end, the class back a second later.
LAG_S = 2
#: And the whole window's counts, where the moves across a second's edge cancel out
#: (measured: within 2.5 % on a quiet machine). A loaded machine moves more of them: seen
#: once in CI, the LIFO case's timeouts 381 live against 407 virtual (6.4 %), its offered
#: attempts 954 against 997, while a model that serves the wrong waiter first locks the class
#: in and misses by far more.
TOTAL_TOLERANCE = 0.10
COMPARED = ("offered", "calls", "ok", "error", "shed", "timeout")


def _replica(room, runs: list[Traffic], span: dict, until_s: float) -> dict[int, dict]:
    """The same class in virtual time: each bot's run with its seeded arrival schedule from
    the instant its live run started, its own policy and seeded draws, against a memory
    model with the class's settings and the same trigger at the same instant."""
    model = MemorySharedModel(runtime.shared_config(room.pk))
    starts = {}
    for run in runs:
        first = JournalEvent.objects.get(
            session=run.session, kind="attempt", call_no=run.first_call_no, attempt_no=1
        )
        schedule = arrival_schedule(run.rate, run.duration_s, run.arrivals, run.seed)
        starts[run.pk] = first.data["arrival_us"] / 1e6 - schedule[0], schedule
    clock = VirtualClock(start=min(t0 for t0, _ in starts.values()))
    for run in runs:
        t0, schedule = starts[run.pk]
        policy = parse_policy(run.session.policy)
        store, rng = MemoryStore(), calls_rng(run.seed)
        breaker = Breaker(policy.breaker, store=store, clock=clock, rng=rng)
        live = Breaker(policy.breaker, store=runtime.session_store(run.session.pk), clock=clock)
        if live.snapshot()["forced"] == "closed":  # the bots' naive policy has no breaker
            breaker.force_closed("as the live bot's")
        client = GuardedClient(
            policy, breaker=breaker,
            dependency=SharedDependency(model, clock=clock, session=run.session.pk),
            clock=clock, rng=rng, store=store,
        )  # fmt: skip
        for i, at in enumerate(schedule):
            if t0 + at < until_s:
                clock.spawn(lambda c=client, n=run.first_call_no + i: c.call(n), at=t0 + at)
    trigger = Trigger("down", span["until_us"] // 1000 - span["from_us"] // 1000)
    clock.call_at(span["from_us"] / 1e6, model.trigger, trigger, span["from_us"])
    clock.run()
    return {s.second: {name: getattr(s, name) for name in COMPARED} for s in model.counters()}


def _close(live: dict, virtual: dict) -> bool:
    """Whether a live second counts what a virtual one does, name by name, within
    :data:`SECOND_TOLERANCE` of the larger of their offered attempts."""
    offered = max(live.get("offered", 0), virtual.get("offered", 0))
    allowed = max(SECOND_TOLERANCE["abs"], SECOND_TOLERANCE["share"] * offered)
    return all(abs(live.get(n, 0) - virtual.get(n, 0)) <= allowed for n in COMPARED)


@pytest.mark.parametrize(
    "defences", [pytest.param(LIFO, id="lifo"), pytest.param(CODEL, id="codel")]
)
def test_the_live_class_and_virtual_time_count_the_same_outcomes_second_by_second(
    worker_process, defences
):
    """A server policy, a down trigger and bot students with even, seeded arrivals at three
    times the stable line, through a real worker; then the same runs replayed in virtual
    time (:func:`_replica`). Every second from before the trigger to WITHIN_S s after its end
    counts the same attempts, calls and outcomes within :data:`SECOND_TOLERANCE` (of the
    virtual second, or of one up to :data:`LAG_S` before it), and the window within
    :data:`TOTAL_TOLERANCE`; every call of the window is counted in both."""
    room, teacher, _ = shared_class(0, servers=SERVERS, service_ms=SERVICE_MS)
    shared_services.classroom_set_shared(classroom=room, user=teacher, values=defences)
    worker_process()
    sim = classroom_simulate(
        classroom=room, students=BOTS, policy="naive", rate=10, duration_s=120, arrivals="even",
    )  # fmt: skip
    try:
        wait_steady(room, BOTS * 10)
        shared_services.classroom_fire_trigger(
            classroom=room, user=teacher, values={"kind": "down", "duration_ms": TRIGGER_S * 1000}
        )
        span = runtime.shared_trigger_span(room.pk)
        first = int(span["from_us"] // 1_000_000) - 3
        last = int(span["until_us"] // 1_000_000) + WITHIN_S

        def seconds_up():
            recorded = runtime.shared_seconds(room.pk, first, last + 2)
            return recorded if recorded["now"] >= last + 3 else None

        recorded = wait_for(seconds_up, TRIGGER_S + WITHIN_S + 30, interval=0.5, message="window")
    finally:
        for session in sim.sessions:
            traffic_stop(session=session, user=session.owner)
        for run in sim.traffic:
            wait_run_ended(run, 60)
    runs = list(Traffic.objects.filter(pk__in=[t.pk for t in sim.traffic]))
    virtual = _replica(room, runs, span, until_s=last + 1)
    live = {r["second"]: r for r in recorded["seconds"]}
    far = []
    totals = {name: [0, 0] for name in COMPARED}
    for sec in range(first, last + 1):
        mine_sec = live.get(sec, {})
        for name in COMPARED:
            totals[name][0] += mine_sec.get(name, 0)
            totals[name][1] += virtual.get(sec, {}).get(name, 0)
        if not any(_close(mine_sec, virtual.get(sec - lag, {})) for lag in range(LAG_S + 1)):
            far.append((sec - first, mine_sec, virtual.get(sec, {})))
    assert far == [], (far, totals)
    for name, (mine, theirs) in totals.items():
        assert abs(mine - theirs) <= max(4, TOTAL_TOLERANCE * theirs), (name, totals)
    # the same arrivals, each once: a late live call at either edge of the window may cross
    # it, at most one a bot at each edge (the bots' calls are 100 ms apart)
    assert abs(totals["calls"][0] - totals["calls"][1]) <= 2 * BOTS, totals
    assert totals["offered"][1] > totals["calls"][1] > 0, totals  # retries: a storm was on
