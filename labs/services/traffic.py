"""Steady traffic in a session: start (web), run (worker), stop and reaping (any process).

A :class:`~labs.models.Traffic` row moves QUEUED -> RUNNING -> DONE | STOPPED | INTERRUPTED
| FAILED, each move a conditional UPDATE, as a burst does (``labs.services.bursts``):

- :func:`traffic_start` validates the rate (1 to 20 calls/s), duration (1 to 300 s) and
  arrivals (poisson, even), refuses a second active run in the session (the check under the
  session's row lock, and the partial unique index ``one_active_traffic_per_session``),
  fixes the arrival schedule (seeded per run: ``labs.live.traffic.traffic_seed``), reserves
  one call number per arrival, journals ``traffic_start`` and enqueues ``labs.run_traffic``
  on commit.
- :func:`traffic_run` claims QUEUED -> RUNNING and runs the calls as callers of the
  process's engine hub (``labs.live.hub``), concurrently with each other and with every
  other run's and burst's calls. Every ``CHECK_INTERVAL_S`` one thread per worker process (the traffic watch)
  touches ``heartbeat_at`` of every run the process is running and looks at their
  ``stop_requested`` (two queries for all of them), and each run looks, between calls, at
  whether the session's dependency settings changed. It journals ``traffic_end`` when the
  last call has finished.
- :func:`traffic_stop` asks a running run to start no further call (the calls in flight
  finish, never cut in half) or ends a queued one at once.
- :func:`traffic_reap_stale` marks a RUNNING run whose heartbeat is older than
  ``LAB_BURST_STALE_SECONDS`` INTERRUPTED (its worker died) and a QUEUED one nobody claimed
  within ``LAB_BURST_QUEUE_TIMEOUT_SECONDS`` FAILED.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from labs.engine import Problem
from labs.journal import kinds
from labs.journal import store as journal
from labs.live import queue, runtime
from labs.live.hub import get_hub
from labs.live.traffic import (
    ARRIVALS,
    DURATION_RANGE,
    RATE_RANGE,
    arrival_schedule,
    calls_rng,
    traffic_seed,
)
from labs.live.writers import get_writer
from labs.models import LabSession, Traffic
from labs.presenters.text import actor_name, lab_error
from labs.selectors.runs import stale_runs
from labs.services.bursts import WORKER_ID, BurstRefused, start_sweeper, through_outage

logger = logging.getLogger(__name__)

#: Seconds between two looks at ``stop_requested`` (and two heartbeats) of a running run,
#: and between two looks at the session's dependency settings.
CHECK_INTERVAL_S = 0.5
#: At most this long (seconds) a run that ends waits for its calls in flight to finish their
#: attempt (a call's own timeouts end it sooner; this bounds a call stuck on a lost store).
DRAIN_LIMIT_S = 60.0
#: ... and at most this long when the worker is stopping (a warm shutdown: ``make run`` and
#: compose kill what is left after 10 to 15 s).
SHUTDOWN_DRAIN_S = 5.0
#: What a run stopped by its worker's warm shutdown says in its ``traffic_end``.
WORKER_STOPPED = "the worker was stopped"


class TrafficRefused(BurstRefused):
    """Traffic that cannot start; ``str()`` is a sentence for the student."""


class TrafficAlreadyRunning(TrafficRefused):
    status = 409


class TrafficInvalid(TrafficRefused):
    """Rate, duration or arrivals out of range; ``problems`` name the fields."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


def validate_traffic(rate: object, duration_s: object, arrivals: object) -> list[Problem]:
    """Problems with a traffic run's settings (empty when all are fine)."""
    problems = []
    for field, label, value, (low, high), unit in (
        ("rate", "Calls per second", rate, RATE_RANGE, " calls/s"),
        ("duration_s", "Duration", duration_s, DURATION_RANGE, " s"),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(
                Problem(
                    field,
                    f"must be a whole number between {low} and {high}{unit} (got {value!r})",
                    label,
                )
            )
        elif not low <= value <= high:
            problems.append(
                Problem(field, f"must be between {low} and {high}{unit} (got {value})", label)
            )
    if arrivals not in ARRIVALS:
        problems.append(
            Problem(
                "arrivals", f"must be one of {', '.join(ARRIVALS)} (got {arrivals!r})", "Arrivals"
            )
        )
    return problems


def traffic_start(
    *, session: LabSession, user, rate: int, duration_s: int, arrivals: str = "poisson"
) -> Traffic:
    """Queue steady traffic in ``session``: ``rate`` calls/s for ``duration_s`` seconds.

    Raises TrafficInvalid (400, fields and ranges named, nothing changed) and
    TrafficAlreadyRunning (409) when the session already has an active run (a dead worker's
    run in the way is reaped first).
    """
    problems = validate_traffic(rate, duration_s, arrivals)
    if problems:
        raise TrafficInvalid(problems)
    try:
        return _start(session, user, rate, duration_s, arrivals)
    except TrafficAlreadyRunning:
        if not traffic_reap_stale(session_id=session.pk):
            raise
    return _start(session, user, rate, duration_s, arrivals)


def _start(session: LabSession, user, rate: int, duration_s: int, arrivals: str) -> Traffic:
    try:
        with transaction.atomic():
            locked = LabSession.objects.select_for_update().get(pk=session.pk)
            if locked.traffic.filter(status__in=Traffic.ACTIVE_STATUSES).exists():
                raise TrafficAlreadyRunning(_already_running())
            number = locked.traffic.count() + 1
            seed = traffic_seed(locked.seed, locked.pk, number)
            calls = len(arrival_schedule(rate, duration_s, arrivals, seed))
            first_call = locked.next_call_no
            locked.next_call_no += calls
            locked.save(update_fields=["next_call_no", "updated_at"])
            traffic = Traffic.objects.create(
                session=locked,
                rate=rate,
                duration_s=duration_s,
                arrivals=arrivals,
                seed=seed,
                calls=calls,
                first_call_no=first_call,
                created_by=user if getattr(user, "is_authenticated", False) else None,
            )
            journal.record(
                [
                    journal.entry(
                        locked,
                        "traffic_start",
                        user=user,
                        message=(
                            f"traffic started by {actor_name(user)}: {rate} calls/s "
                            f"({arrivals}) for {duration_s} s, {calls} call(s) from call "
                            f"{first_call}"
                        ),
                        data={
                            "traffic": traffic.pk,
                            "rate": rate,
                            "duration_s": duration_s,
                            "arrivals": arrivals,
                            "calls": calls,
                            "first_call": first_call,
                        },
                    )
                ]
            )
            transaction.on_commit(lambda: queue.send_traffic(traffic.pk))
    except IntegrityError as exc:
        if "one_active_traffic_per_session" in str(exc) or "UNIQUE" in str(exc).upper():
            raise TrafficAlreadyRunning(_already_running()) from exc
        raise
    return traffic


def _already_running() -> str:
    return "Traffic is already running in this session; stop it before starting another."


def traffic_stop(*, session: LabSession, user) -> Traffic | None:
    """Stop the session's active traffic: a queued run ends at once (STOPPED, journaled
    ``traffic_end``); a running one starts no further call and ends when its calls in flight
    have finished. Returns the run, or None when none was active."""
    traffic = session.traffic.filter(status__in=Traffic.ACTIVE_STATUSES).first()
    if traffic is None:
        return None
    Traffic.objects.filter(pk=traffic.pk).update(stop_requested=True)
    message = f"traffic stopped by {actor_name(user)} before it started; no call was made"
    if _mark(traffic, Traffic.Status.QUEUED, Traffic.Status.STOPPED, "traffic_end", message):
        traffic.refresh_from_db()
    return traffic


# --- On the worker --------------------------------------------------------------------------


def traffic_run(*, traffic_id: int) -> str:
    """Run a queued traffic run to its end; returns the final status (this thread waits).

    Claims the run first (a redelivered message finds nothing to claim: "skipped"). The
    calls run as cooperative callers of the process's engine hub (:mod:`labs.live.hub`);
    every engine event goes to the process's journal writer. When the schedule is done or a stop
    was asked, no further call starts; the run ends when the calls in flight have finished.
    """
    now = timezone.now()
    claimed = Traffic.objects.filter(
        pk=traffic_id, status=Traffic.Status.QUEUED, stop_requested=False
    ).update(status=Traffic.Status.RUNNING, started_at=now, heartbeat_at=now, worker=WORKER_ID)
    if not claimed:
        return "skipped"
    traffic = Traffic.objects.select_related("session").get(pk=traffic_id)
    session = traffic.session
    writer = get_writer()
    outcomes: Counter[str] = Counter()
    stop = {"asked": False, "started": 0}
    # The run's thread never waits for the database while calls are in flight (on SQLite an
    # UPDATE queues for the journal writers' lock, and every call due meanwhile would wake
    # late): the process's traffic watch keeps the heartbeat and reads stop_requested.
    watched = _watch(traffic_id)

    hub = get_hub()
    clock = hub.clock

    def sink(event) -> None:
        hub.journal(
            writer,
            journal.entry_from_event(
                event, session_id=session.pk, classroom_id=session.classroom_id, burst_id=None
            ),
        )

    schedule = arrival_schedule(traffic.rate, traffic.duration_s, traffic.arrivals, traffic.seed)
    try:
        # Every call of the run is a caller on the process's engine hub (labs.live.hub), with
        # every other run's and burst's calls; this thread waits for the run's end.
        engine = runtime.build_engine(
            session,
            sink=sink,
            rng=calls_rng(traffic.seed),
            clock=clock,
            client=runtime.hub_redis(),
        )
        watch = runtime.DependencyWatch(session, engine, engine.rng, clock=clock)
        connection.close()  # not needed again until the run ends

        def run() -> None:
            t0 = clock.now()
            end = t0 + traffic.duration_s

            def call(call_no: int) -> None:
                try:
                    result = engine.client.call(call_no)
                except Exception:  # counted, so the run still ends when the others have
                    logger.exception("traffic %s: call %s failed in the lab", traffic_id, call_no)
                    outcomes["lab_error"] += 1
                else:
                    outcomes[result.outcome] += 1

            def arrive(i: int) -> None:
                # One arrival scheduled at a time: after a stop nothing is left waiting.
                stop["asked"] = stop["asked"] or watched.stop
                if stop["asked"]:
                    return
                stop["started"] += 1
                clock.spawn(lambda: call(traffic.first_call_no + i))
                if i + 1 < len(schedule):
                    clock.call_at(max(t0 + schedule[i + 1], clock.now()), arrive, i + 1)

            if schedule:
                clock.call_at(max(t0 + schedule[0], clock.now()), arrive, 0)
            try:
                while True:
                    # A dependency change lands between attempts, never in one (one GET per
                    # CHECK_INTERVAL_S, not one per call). The run goes on while calls are
                    # in flight after the last arrival or a stop.
                    clock.sleep(CHECK_INTERVAL_S)
                    watch.check()
                    stop["asked"] = stop["asked"] or watched.stop
                    arriving = not stop["asked"] and clock.now() < end
                    in_flight = stop["started"] > sum(outcomes.values())
                    if not (arriving or in_flight):
                        return
            finally:
                # However the run ends (an error included): the next arrival finds the stop
                # and starts nothing, and the calls in flight finish their attempt before
                # the run's end is journaled and its row marked, so no row of the run comes
                # after its end and the session's next run never runs beside it.
                stop["asked"] = True
                drain_until = clock.now() + (SHUTDOWN_DRAIN_S if _stopping else DRAIN_LIMIT_S)
                while stop["started"] > sum(outcomes.values()) and clock.now() < drain_until:
                    clock.sleep(CHECK_INTERVAL_S)

        hub.run(run)
        if _ended_elsewhere(traffic_id, watched):
            return "ended elsewhere"
        cut_short = stop["started"] < len(schedule)
        status = Traffic.Status.STOPPED if cut_short else Traffic.Status.DONE
        summary = _summary(traffic, stop["started"], outcomes)
        verb = "stopped" if cut_short else "ended"
        if cut_short and _stopping and not watched.asked:
            verb = f"stopped ({WORKER_STOPPED}; start it again to go on)"
            summary["reason"] = WORKER_STOPPED
        writer.submit(
            journal.entry(
                session,
                "traffic_end",
                f"traffic {verb}: {summary['started']} of {traffic.calls} call(s) made, "
                f"{summary['succeeded']} succeeded, {summary['degraded']} degraded, "
                f"{summary['failed']} failed, {summary['fast_failed']} fast-failed",
                data={"traffic": traffic_id, **summary},
                emitted=time.time(),
            )
        )
        writer.flush()
        through_outage(
            lambda: Traffic.objects.filter(pk=traffic_id, status=Traffic.Status.RUNNING).update(
                status=status, finished_at=timezone.now(), summary=summary
            )
        )
    except Exception as exc:
        logger.exception("traffic %s failed", traffic_id)
        if _ended_elsewhere(traffic_id, watched):
            return "ended elsewhere"
        writer.submit(
            journal.entry(
                session,
                "traffic_end",
                f"traffic stopped by an error in the lab: {lab_error(exc)}",
                data={
                    "traffic": traffic_id,
                    "error": lab_error(exc),
                    **_summary(traffic, stop["started"], outcomes),
                },
                emitted=time.time(),
            )
        )
        writer.flush()
        status = Traffic.Status.FAILED
        error = lab_error(exc)
        through_outage(
            lambda: Traffic.objects.filter(pk=traffic_id, status=Traffic.Status.RUNNING).update(
                status=status, finished_at=timezone.now(), error=error
            )
        )
    finally:
        _unwatch(traffic_id)
        connection.close()
    return status


def _ended_elsewhere(traffic_id: int, watched: _Watched) -> bool:
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


# --- The traffic watch: heartbeats and stop requests of every run in this process ------------


class _Watched:
    """What the traffic watch knows of one run: whether a stop was asked, or the row is gone
    or marked final by another process (``ended``). Written by the watch thread, read by the
    run's thread (plain attributes)."""

    __slots__ = ("asked", "ended", "stop")

    def __init__(self) -> None:
        self.stop = False
        self.asked = False  # a stop someone asked for (stop_requested), not the worker's
        self.ended = False


_watched: dict[int, _Watched] = {}
#: The worker is stopping (a warm shutdown began): see :func:`worker_stopping`.
_stopping = False
_watch_lock = threading.Lock()
_watch_thread: threading.Thread | None = None


def _watch(traffic_id: int) -> _Watched:
    """Put a claimed run under the process's traffic watch (started on first use)."""
    global _watch_thread
    watched = _Watched()
    watched.stop = _stopping
    with _watch_lock:
        _watched[traffic_id] = watched
        if _watch_thread is None:
            _watch_thread = threading.Thread(target=_watch_loop, name="traffic-watch", daemon=True)
            _watch_thread.start()
    return watched


def _runs_here(traffic: Traffic) -> bool:
    if traffic.worker != WORKER_ID:
        return False
    with _watch_lock:
        return traffic.pk in _watched


def _unwatch(traffic_id: int) -> None:
    with _watch_lock:
        _watched.pop(traffic_id, None)


def _watch_loop() -> None:
    """Every ``CHECK_INTERVAL_S``: one UPDATE touching the heartbeat of every run this process
    is running, one SELECT of their ``stop_requested``. Per process, not per run: thirty runs
    in a worker cost two queries per interval, not sixty, and none on a run's thread."""
    while True:
        time.sleep(CHECK_INTERVAL_S)
        with _watch_lock:
            watched = dict(_watched)
        if not watched:
            connection.close()  # nothing to watch: no connection held open meanwhile
            continue
        try:
            _watch_tick(watched)
        except Exception:  # the watch must outlive a database hiccup
            logger.exception("traffic watch failed")
            connection.close()


def _watch_tick(watched: dict[int, _Watched]) -> None:
    ids = list(watched)
    # Now(): the database's clock when the row is written, not a time taken before waiting
    # for a pooled connection (see bursts._heartbeat_loop).
    Traffic.objects.filter(pk__in=ids, status=Traffic.Status.RUNNING).update(heartbeat_at=Now())
    rows = {
        pk: (stop_requested, status)
        for pk, stop_requested, status in Traffic.objects.filter(pk__in=ids).values_list(
            "pk", "stop_requested", "status"
        )
    }
    for traffic_id, entry in watched.items():
        stop_requested, status = rows.get(traffic_id, (True, None))
        if status != Traffic.Status.RUNNING:  # gone, or marked final elsewhere: it stops
            entry.ended = entry.stop = True
        elif stop_requested:
            entry.asked = entry.stop = True


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
    STOPPED with "the worker was stopped" in its ``traffic_end``, within the seconds a
    shutdown is given, instead of holding the worker for the rest of its schedule (up to
    300 s) and being reaped INTERRUPTED as if its worker had died. The session can start
    the run again on another worker at once."""
    global _stopping
    _stopping = True
    with _watch_lock:
        for entry in _watched.values():
            entry.stop = True


def worker_ready() -> None:
    """Start this worker process's traffic reaper: every ``bursts.reap_interval()`` seconds
    it marks the runs of dead workers (stale heartbeats) INTERRUPTED, so a killed worker's
    run ends and the session can start traffic again without anyone loading a page."""
    start_sweeper("traffic-reaper", traffic_reap_stale)


# --- Anywhere ------------------------------------------------------------------------------


def traffic_reap_stale(*, session_id: int | None = None) -> int:
    """Mark runs whose worker died INTERRUPTED (and never-claimed queued ones FAILED),
    journaled ``traffic_end``; conditional updates, so concurrent reapers mark each once. A
    run this process is running is never marked here."""
    running, queued = stale_runs(Traffic, session_id=session_id)
    marked = 0
    for traffic in running:
        if _runs_here(traffic):
            continue  # this process's own live run ends as its calls do, never reaped here
        marked += _mark(
            traffic,
            Traffic.Status.RUNNING,
            Traffic.Status.INTERRUPTED,
            "traffic_end",
            f"traffic interrupted: its worker ({traffic.worker or 'unknown'}) stopped responding",
        )
    for traffic in queued:
        marked += _mark(
            traffic,
            Traffic.Status.QUEUED,
            Traffic.Status.FAILED,
            "traffic_end",
            "traffic was never picked up by a worker; is the worker running?",
        )
    return marked


def _mark(traffic: Traffic, old: str, new: str, kind: str, message: str) -> int:
    with transaction.atomic():
        changed = Traffic.objects.filter(pk=traffic.pk, status=old).update(
            status=new, finished_at=timezone.now(), error=message
        )
        if changed:
            journal.record(
                [
                    journal.entry(
                        traffic.session, kind, message, data={"traffic": traffic.pk, "status": new}
                    )
                ]
            )
    return changed
