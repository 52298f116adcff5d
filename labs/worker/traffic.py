"""Steady traffic on a worker: its arrivals and calls on the hub, stops asked from a page or
by a warm shutdown, its ``traffic_end``."""

from __future__ import annotations

import logging
import time
from collections import Counter

from django.db import connection

from labs.journal import kinds
from labs.journal import store as journal
from labs.live import runtime
from labs.live.traffic import arrival_schedule, calls_rng
from labs.models import Traffic
from labs.presenters.text import lab_error
from labs.services.traffic import TRAFFIC
from labs.worker import chain, runs
from labs.worker.hub import get_hub, hub_redis

logger = logging.getLogger(__name__)

#: Seconds between two looks at the session's dependency settings and at a stop asked.
CHECK_INTERVAL_S = runs.TICK_S
#: At most this long (seconds) a run that ends waits for its calls in flight to finish their
#: attempt (a call's own timeouts end it sooner; this bounds a call stuck on a lost store).
DRAIN_LIMIT_S = 60.0
#: ... and at most this long when the worker is stopping (a warm shutdown: ``make run`` and
#: compose kill what is left after 10 to 15 s).
SHUTDOWN_DRAIN_S = 5.0
#: What a run stopped by its worker's warm shutdown says in its ``traffic_end``.
WORKER_STOPPED = "the worker was stopped"


class Watched:
    """What the heartbeat thread's poll knows of one run: whether a stop was asked, or the
    row is gone or marked final by another process (``ended``). Written by the heartbeat
    thread, read by the hub's (plain attributes)."""

    __slots__ = ("asked", "ended", "stop")

    def __init__(self) -> None:
        self.stop = _stopping
        self.asked = False  # a stop someone asked for (stop_requested), not the worker's
        self.ended = False


_watched: dict[int, Watched] = {}
#: The worker is stopping (a warm shutdown began): see :func:`worker_stopping`.
_stopping = False


def traffic_run(*, traffic_id: int) -> str:
    """Run a queued traffic run to its end; returns the final status (this thread waits).

    The calls run as callers of the process's engine hub; when the schedule is done or a stop
    was asked, no further call starts, and the run ends when the calls in flight have."""
    watched = _watched.setdefault(traffic_id, Watched())
    state = _Run()
    try:
        return runs.run_claimed(
            TRAFFIC,
            traffic_id,
            lambda traffic: _work(traffic, watched, state),
            lambda traffic, exc: _failed(traffic, exc, watched, state),
            claim_filter={"stop_requested": False},
        )
    finally:
        _watched.pop(traffic_id, None)


class _Run:
    """One run's counts, written on the hub's thread only."""

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.started = 0
        self.stop = False


def _work(traffic: Traffic, watched: Watched, state: _Run) -> runs.Outcome | None:
    session = traffic.session
    hub = get_hub()
    clock = hub.clock
    outcomes = state.outcomes

    sink = runs.event_sink(session)
    schedule = arrival_schedule(traffic.rate, traffic.duration_s, traffic.arrivals, traffic.seed)
    engine = chain.build_engine(
        session, sink=sink, rng=calls_rng(traffic.seed), clock=clock, client=hub_redis()
    )
    dependency = runtime.DependencyWatch(session, engine, engine.rng, clock=clock)
    connection.close()  # not needed again until the run ends

    def run() -> None:
        t0 = clock.now()
        end = t0 + traffic.duration_s

        def call(call_no: int) -> None:
            try:
                result = engine.client.call(call_no)
            except Exception:  # counted, so the run still ends when the others have
                logger.exception("traffic %s: call %s failed in the lab", traffic.pk, call_no)
                outcomes["lab_error"] += 1
            else:
                outcomes[result.outcome] += 1

        def arrive(i: int) -> None:
            # One arrival scheduled at a time: after a stop nothing is left waiting.
            state.stop = state.stop or watched.stop
            if state.stop:
                return
            state.started += 1
            clock.spawn(lambda: call(traffic.first_call_no + i))
            if i + 1 < len(schedule):
                clock.call_at(max(t0 + schedule[i + 1], clock.now()), arrive, i + 1)

        if schedule:
            clock.call_at(max(t0 + schedule[0], clock.now()), arrive, 0)
        try:
            while True:
                # A dependency change lands between attempts, never in one (one GET per
                # CHECK_INTERVAL_S, not one per call). The run goes on while calls are in
                # flight after the last arrival or a stop.
                clock.sleep(CHECK_INTERVAL_S)
                dependency.check()
                state.stop = state.stop or watched.stop
                arriving = not state.stop and clock.now() < end
                if not (arriving or state.started > sum(outcomes.values())):
                    return
        finally:
            # However the run ends (an error included): the next arrival finds the stop and
            # starts nothing, and the calls in flight finish their attempt before the run's
            # end is journaled and its row marked, so no row of the run comes after its end
            # and the session's next run never runs beside it.
            state.stop = True
            drain_until = clock.now() + (SHUTDOWN_DRAIN_S if _stopping else DRAIN_LIMIT_S)
            while state.started > sum(outcomes.values()) and clock.now() < drain_until:
                clock.sleep(CHECK_INTERVAL_S)

    hub.run(run)
    if _ended_elsewhere(traffic.pk, watched):
        return runs.ENDED_ELSEWHERE
    cut_short = state.started < len(schedule)
    summary = _summary(traffic, state.started, outcomes)
    verb = "stopped" if cut_short else "ended"
    if cut_short and _stopping and not watched.asked:
        verb = f"stopped ({WORKER_STOPPED}; start it again to go on)"
        summary["reason"] = WORKER_STOPPED
    entry = journal.entry(
        session,
        "traffic_end",
        f"traffic {verb}: {summary['started']} of {traffic.calls} call(s) made, "
        f"{summary['succeeded']} succeeded, {summary['degraded']} degraded, "
        f"{summary['failed']} failed, {summary['fast_failed']} fast-failed",
        data={"traffic": traffic.pk, **summary},
        emitted=time.time(),
    )
    status = Traffic.Status.STOPPED if cut_short else Traffic.Status.DONE
    return runs.Outcome(status, {"summary": summary}, entry)


def _failed(traffic: Traffic, exc: Exception, watched: Watched, state: _Run) -> runs.Outcome | None:
    if _ended_elsewhere(traffic.pk, watched):
        return runs.ENDED_ELSEWHERE
    error = lab_error(exc)
    entry = journal.entry(
        traffic.session,
        "traffic_end",
        f"traffic stopped by an error in the lab: {error}",
        data={
            "traffic": traffic.pk,
            "error": error,
            **_summary(traffic, state.started, state.outcomes),
        },
        emitted=time.time(),
    )
    return runs.Outcome(Traffic.Status.FAILED, {"error": error}, entry)


def _ended_elsewhere(traffic_id: int, watched: Watched) -> bool:
    """Whether another process marked the run final meanwhile (its ``traffic_end`` is in the
    journal already: this run journals no second one)."""
    if watched.ended:
        return True
    try:
        running = Traffic.objects.filter(pk=traffic_id, status=Traffic.Status.RUNNING).exists()
    except Exception:  # the database cannot say: end the run here as usual
        return False
    finally:
        connection.close()
    return not running


def poll(ids: list[int]) -> None:
    """On the heartbeat thread, every ``runs.TICK_S``: one SELECT of the running runs'
    ``stop_requested`` and status, for every traffic run of the process at once."""
    rows = {
        pk: (stop_requested, status)
        for pk, stop_requested, status in Traffic.objects.filter(pk__in=ids).values_list(
            "pk", "stop_requested", "status"
        )
    }
    for traffic_id in ids:
        watched = _watched.get(traffic_id)
        if watched is None:
            continue
        stop_requested, status = rows.get(traffic_id, (True, None))
        if status != Traffic.Status.RUNNING:  # gone, or marked final elsewhere: it stops
            watched.ended = watched.stop = True
        elif stop_requested:
            watched.asked = watched.stop = True


runs.watch(TRAFFIC, poll)


def _summary(traffic: Traffic, started: int, outcomes: Counter[str]) -> dict:
    """The run's summary: its calls counted as every page counts them (labs.journal.kinds;
    a call answered by a fallback is degraded, not failed)."""
    counts = kinds.count_outcomes(outcomes)
    del counts["attempts_total"]  # a traffic run counts its calls, not their attempts
    return {
        "scheduled": traffic.calls,
        "started": started,
        "finished": sum(outcomes.values()),
        **counts,
        "outcomes": dict(outcomes),
    }


def worker_stopping() -> None:
    """A warm shutdown began (SIGTERM, Ctrl-C): every traffic run of this process starts no
    further call, lets its calls in flight finish (at most ``SHUTDOWN_DRAIN_S``) and ends
    STOPPED with "the worker was stopped" in its ``traffic_end``, instead of holding the
    worker for the rest of its schedule and being reaped INTERRUPTED as if its worker had
    died. The session can start the run again on another worker at once."""
    global _stopping
    _stopping = True
    for watched in list(_watched.values()):
        watched.stop = True
