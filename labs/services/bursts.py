"""Burst lifecycle: start (web), run (worker), heartbeat and reaping (any process).

A burst is a row that moves QUEUED -> RUNNING -> DONE | FAILED | INTERRUPTED, each move a
conditional UPDATE so two processes can never both make it (healthchecks-style claims):

- :func:`burst_start` refuses a second active burst in the same session twice over: a check
  under the session's row lock, and the partial unique index ``one_active_burst_per_session``
  for whatever slips past it. The task is enqueued on commit, so a rollback enqueues nothing;
  a burst the broker refuses (Redis down) is marked FAILED at once and the start raises
  BurstNotQueued (503), so an outage never leaves the session blocked by a burst no worker
  will ever see.
- :func:`burst_run` claims QUEUED -> RUNNING; a redelivered message finds nothing to claim and
  does nothing. Calls have side effects on the dependency (a flaky counter going down), so a
  burst is never re-run, only ever marked.
- While a burst runs, its worker process touches ``heartbeat_at`` every second. A RUNNING burst
  whose heartbeat is older than ``LAB_BURST_STALE_SECONDS`` belonged to a worker that died:
  :func:`bursts_reap_stale` marks it INTERRUPTED and journals that (the row is pushed to the
  page like any other), so the session can burst again. Every worker's heartbeat thread, started
  when the worker is ready (:func:`worker_ready`), reaps every :func:`reap_interval` seconds,
  idle or busy; a start refused by an active burst and a page load reap that session too.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from labs.engine import LIMITS, Problem
from labs.journal import store as journal
from labs.live import queue, runtime
from labs.live.hub import bookkeeping, get_hub
from labs.live.writers import get_writer
from labs.models import Burst, LabSession
from labs.presenters.text import lab_error
from labs.selectors.runs import stale_runs

logger = logging.getLogger(__name__)

# A burst run from the lab page has the limits of a scenario's burst step (the engine's LIMITS).
BURST_SIZE_RANGE = (int(LIMITS["steps[].burst"].min), int(LIMITS["steps[].burst"].max))
BURST_CONCURRENCY_RANGE = (
    int(LIMITS["steps[].concurrency"].min),
    int(LIMITS["steps[].concurrency"].max),
)


class BurstRefused(Exception):
    """A burst that cannot start; ``str()`` is a sentence for the student."""

    status = 400


class BurstAlreadyRunning(BurstRefused):
    status = 409


class BurstNotQueued(BurstRefused):
    """The broker (Redis) could not take the burst: it is already marked FAILED, nothing ran,
    and the same click can be tried again in a moment."""

    status = 503


class BurstInvalid(BurstRefused):
    """Size or concurrency out of range; ``problems`` name the fields."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


def validate_burst(size: object, concurrency: object) -> list[Problem]:
    """Problems with a burst's size and concurrency (empty when both are fine)."""
    problems = []
    for field, label, value, (low, high) in (
        ("size", "Calls in the burst", size, BURST_SIZE_RANGE),
        ("concurrency", "Concurrent callers", concurrency, BURST_CONCURRENCY_RANGE),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(
                Problem(
                    field, f"must be a whole number between {low} and {high} (got {value!r})", label
                )
            )
        elif not low <= value <= high:
            problems.append(
                Problem(field, f"must be between {low} and {high} (got {value})", label)
            )
    return problems


def burst_start(*, session: LabSession, user, size: int, concurrency: int = 1) -> Burst:
    """Queue a burst of ``size`` calls with ``concurrency`` callers in ``session``.

    Reserves the call numbers (``first_call_no``..), journals ``burst_queued`` and enqueues
    ``labs.tasks.run_burst`` after commit. Raises BurstInvalid (400) for bad numbers,
    BurstAlreadyRunning (409) when the session already has a queued or running burst and
    BurstNotQueued (503, the burst marked FAILED) when the broker cannot take it.
    """
    problems = validate_burst(size, concurrency)
    if problems:
        raise BurstInvalid(problems)
    try:
        return _start(session=session, user=user, size=size, concurrency=concurrency)
    except BurstAlreadyRunning:
        # Only now look for a dead worker's burst (two queries, saved on every normal start):
        # if the burst in the way was stale, it is marked and this one starts.
        if not bursts_reap_stale(session_id=session.pk):
            raise
    return _start(session=session, user=user, size=size, concurrency=concurrency)


def _start(*, session: LabSession, user, size: int, concurrency: int) -> Burst:
    try:
        with transaction.atomic():
            number, first_call = _reserve_calls(session.pk, size)
            # The partial unique index one_active_burst_per_session refuses a second queued
            # or running burst (IntegrityError below): no query looks for one first.
            burst = Burst.objects.create(
                session_id=session.pk,
                number=number,
                size=size,
                concurrency=concurrency,
                first_call_no=first_call,
                created_by=user if getattr(user, "is_authenticated", False) else None,
            )
            journal.record(
                [
                    journal.entry(
                        session,
                        "burst_queued",
                        user=user,
                        burst_id=burst.pk,
                        message=(
                            f"burst {number} queued: {size} call(s) from call "
                            f"{first_call}, {concurrency} caller(s) at once"
                        ),
                        data={"size": size, "concurrency": concurrency, "burst": number},
                    )
                ]
            )
            queue.enqueue_burst_on_commit(
                burst.pk, on_unavailable=lambda exc: _not_queued(burst, exc)
            )
    except IntegrityError as exc:
        # The session has a queued or running burst (the index), perhaps one another request
        # created a moment ago; the transaction (the reservation too) is rolled back.
        if "one_active_burst_per_session" in str(exc) or "UNIQUE" in str(exc).upper():
            raise BurstAlreadyRunning(_already_running_message()) from exc
        raise
    return burst


def _reserve_calls(session_id: int, size: int) -> tuple[int, int]:
    """Count one more burst in the session and reserve ``size`` call numbers, in one
    ``UPDATE ... RETURNING`` that holds the session row's lock until commit (PostgreSQL; on
    SQLite the write takes the database's): returns (the burst's number, its first call
    number). Only the counters: the policy, dependency and state JSON are never read.
    Raises LabSession.DoesNotExist if the session is gone."""
    table = connection.ops.quote_name(LabSession._meta.db_table)
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET burst_count = burst_count + 1, "  # noqa: S608
            f"next_call_no = next_call_no + %s, updated_at = %s WHERE id = %s "
            f"RETURNING burst_count, next_call_no",
            [size, now, session_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise LabSession.DoesNotExist(f"lab session {session_id} is gone")
    return row[0], row[1] - size


def _not_queued(burst: Burst, exc: Exception) -> None:
    """Fail a committed burst the broker refused, at once: left QUEUED it would block the
    session until ``LAB_BURST_QUEUE_TIMEOUT_SECONDS``. Raises BurstNotQueued."""
    logger.warning("burst %s could not be queued: %s", burst.pk, exc)
    _mark(
        burst,
        Burst.Status.QUEUED,
        Burst.Status.FAILED,
        "burst_failed",
        f"burst {burst.number} could not be queued: the lab lost its connection to Redis. "
        "Nothing ran; run it again in a moment.",
        snapshot=False,  # nothing ran, and the engine's Redis may be down too
    )
    raise BurstNotQueued(
        "The lab is reconnecting to Redis, so this burst could not be queued and nothing ran. "
        "Try again in a moment."
    ) from exc


def _already_running_message() -> str:
    return (
        "A burst is already running in this session; wait for it to finish "
        "(the journal shows its progress) before starting another."
    )


# --- On the worker --------------------------------------------------------------------------

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"
_running: set[int] = set()
_running_lock = threading.Lock()
_heartbeat_thread: threading.Thread | None = None
_reap_when_idle = False


def burst_run(*, burst_id: int) -> str:
    """Run a queued burst to its end on this worker; returns the final status.

    Claims the burst first (QUEUED -> RUNNING); if the claim fails (a redelivered message, a
    burst already reaped) it does nothing and returns "skipped". It then stores the burst's
    start state (``Burst.start_state``: what a replay needs) and runs the burst with an rng
    seeded as recorded there, on the process's engine hub (:mod:`labs.live.hub`; this thread
    waits). Every engine event goes to the process's journal writer; the row is marked DONE
    only after all its events are committed. An exception in the engine marks the burst
    FAILED with the error journaled. The database work before and after the calls waits for
    the process's bookkeeping turn (:func:`labs.live.hub.bookkeeping`).
    """
    hub = get_hub()
    with bookkeeping():
        now = timezone.now()
        claimed = Burst.objects.filter(pk=burst_id, status=Burst.Status.QUEUED).update(
            status=Burst.Status.RUNNING, started_at=now, heartbeat_at=now, worker=WORKER_ID
        )
        if not claimed:
            logger.info("burst %s not queued any more; nothing to do", burst_id)
            return "skipped"
        _ensure_heartbeat()
        with _running_lock:
            _running.add(burst_id)
        burst = Burst.objects.select_related("session").get(pk=burst_id)
        # Never wait for the next turn holding a connection: the holder of the turn needs
        # one from the same pool (see bookkeeping).
        release_connection()
    session = burst.session
    writer = get_writer()
    watch: runtime.DependencyWatch | None = None

    def sink(event) -> None:
        hub.journal(
            writer,
            journal.entry_from_event(
                event, session_id=session.pk, classroom_id=session.classroom_id, burst_id=burst_id
            ),
        )
        if event.kind == "call_result" and watch is not None:
            watch.check()

    try:
        with bookkeeping():
            rng_seed = runtime.burst_rng_seed(session)
            state, restored = runtime.start_state(session, burst, rng_seed)
            if restored:
                writer.submit(restored_entry(session, burst_id))
            Burst.objects.filter(pk=burst_id).update(start_state=state)
            # A burst never touches the database until it ends (the journal writer does
            # the writing): give the connection back (see release_connection).
            release_connection()
            # The calls run on the process's engine hub: its clock, its batched Redis client.
            engine = runtime.build_engine(
                session, sink=sink, client=runtime.hub_redis(), clock=hub.clock,
                rng=random.Random(rng_seed),
            )  # fmt: skip
            watch = runtime.DependencyWatch(session, engine, engine.rng, clock=hub.clock)
        result = hub.run(
            lambda: engine.client.run_burst(
                burst.size,
                concurrency=burst.concurrency,
                first_call=burst.first_call_no,
                burst=burst.number,
            )
        )
        writer.flush()
        status = Burst.Status.DONE
        summary = result.summary()

        def done() -> None:
            with bookkeeping():
                Burst.objects.filter(pk=burst_id, status=Burst.Status.RUNNING).update(
                    status=status, finished_at=timezone.now(), summary=summary
                )

        through_outage(done)
    except Exception as exc:
        logger.exception("burst %s failed", burst_id)
        release_connection()  # before the waits below (the flush, the turn)
        writer.submit(
            journal.entry(
                session,
                "burst_failed",
                f"burst {burst.number} stopped by an error in the lab: {lab_error(exc)}",
                burst_id=burst_id,
                emitted=time.time(),
            )
        )
        writer.flush()
        status = Burst.Status.FAILED
        error = lab_error(exc)

        def failed() -> None:
            with bookkeeping():
                Burst.objects.filter(pk=burst_id, status=Burst.Status.RUNNING).update(
                    status=status, finished_at=timezone.now(), error=error
                )

        through_outage(failed)
    finally:
        with _running_lock:
            _running.discard(burst_id)
        release_connection()
    return status


#: How long a run's final row waits for a database that is away (a PostgreSQL restart).
FINISH_RETRY_S = 30.0


def through_outage(write: Callable[[], object]) -> None:
    """Run ``write`` (a run's final UPDATE), trying again for up to ``FINISH_RETRY_S`` while
    the database is away (a restart): a run whose calls all finished must not be left
    RUNNING, to be reaped INTERRUPTED after its own end was journaled. Other errors, and the
    last try's, are raised."""
    deadline = time.monotonic() + FINISH_RETRY_S
    pause = 0.25
    while True:
        try:
            write()
            return
        except (OperationalError, InterfaceError):
            connection.close()
            if time.monotonic() + pause > deadline:
                raise
            logger.warning("the database is away; the run's final row is written again in %.2f s",
                           pause)  # fmt: skip
            time.sleep(pause)
            pause = min(pause * 2, 2.0)


def runs_here(burst_id: int, worker: str) -> bool:
    """Whether this process is running the burst now (its own live run, never stale)."""
    if worker != WORKER_ID:
        return False
    with _running_lock:
        return burst_id in _running


def release_connection() -> None:
    """Give this thread's database connection back while its run does not need it, so a
    worker running a hundred bursts does not hold a hundred PostgreSQL connections (with
    ``DATABASE_POOL_SIZE`` the pool keeps it). SQLite's connection stays: it is a file
    handle, and opening one again costs the next query more than the run saves."""
    if connection.vendor != "sqlite":
        connection.close()


def restored_entry(session: LabSession, burst_id: int | None) -> journal.Entry:
    """The journal entry saying Redis lost the session and the snapshot was put back."""
    state = (session.breaker_snapshot or {}).get("state", "closed")
    return journal.entry(
        session,
        "state_restored",
        burst_id=burst_id,
        state_to=state,
        message=(
            f"Redis had lost this session's breaker state; restored it from the database "
            f"snapshot (breaker {state.replace('_', '-').upper()})"
        ),
        emitted=time.time(),
    )


def worker_ready() -> None:
    """Start this worker process's burst thread now rather than at its first burst: besides
    touching the heartbeats of the bursts running here, the thread reaps dead workers' bursts
    every few seconds, so a burst whose worker was killed ends (and its page hears of it)
    even when no page loads and nothing else runs. (A process that runs bursts without this
    call, such as Celery's embedded test worker, reaps only while it has bursts running.)"""
    global _reap_when_idle
    _reap_when_idle = True
    _ensure_heartbeat()


def reap_interval() -> float:
    """Seconds between two reaps by one worker: a dead worker's burst is marked at most this
    long after its heartbeat goes stale (``LAB_BURST_STALE_SECONDS``)."""
    return max(settings.LAB_BURST_HEARTBEAT_SECONDS, settings.LAB_BURST_STALE_SECONDS / 2)


#: The sweeps this process runs (:func:`start_sweeper`), by name, and the one thread running them.
_sweeps: dict[str, Callable[[], object]] = {}
_sweeper_thread: threading.Thread | None = None
_sweeps_lock = threading.Lock()


def start_sweeper(name: str, sweep: Callable[[], object]) -> None:
    """Run ``sweep`` every :func:`reap_interval` seconds from now on, once per ``name``: a
    worker's backstops for what a dead worker left behind (traffic runs, class faults). Every
    sweep of the process runs on one thread, in turn, with one database connection a round,
    closed between rounds; a failing sweep is logged and tried again next round. Not on the
    bursts' heartbeat thread: a slow sweep must not make this worker's bursts look stale."""
    global _sweeper_thread
    with _sweeps_lock:
        _sweeps.setdefault(name, sweep)
        if _sweeper_thread is None:
            _sweeper_thread = threading.Thread(target=_sweep_forever, name="worker-sweeper",
                                               daemon=True)  # fmt: skip
            _sweeper_thread.start()


def _sweep_forever() -> None:
    held: dict[str, float] = {}  # sweep -> not before (after a failure)
    while True:
        time.sleep(reap_interval())
        with _sweeps_lock:
            sweeps = list(_sweeps.items())
        for name, sweep in sweeps:
            if time.monotonic() < held.get(name, 0.0):
                continue
            try:
                sweep()
            except Exception:  # the sweeper must outlive a database hiccup
                logger.exception("%s failed", name)
                # As the burst reaper does: after an outage, live runs' heartbeats get a
                # staleness window to land before anything is taken for dead.
                held[name] = time.monotonic() + settings.LAB_BURST_STALE_SECONDS
        connection.close()


def _ensure_heartbeat() -> None:
    global _heartbeat_thread
    with _running_lock:
        if _heartbeat_thread is None:
            _heartbeat_thread = threading.Thread(
                target=_heartbeat_loop, name="burst-heartbeat", daemon=True
            )
            _heartbeat_thread.start()


def _heartbeat_loop() -> None:
    interval = settings.LAB_BURST_HEARTBEAT_SECONDS
    next_reap = 0.0
    while True:
        time.sleep(interval)
        with _running_lock:
            ids = list(_running)
        # A ready worker reaps busy or idle; the marks are conditional updates, so two workers
        # reaping together journal each dead burst once.
        reap = bool(ids or _reap_when_idle) and time.monotonic() >= next_reap
        if not ids and not reap:
            continue
        try:
            if ids:
                _touch_heartbeats(ids)
            if reap:
                next_reap = time.monotonic() + reap_interval()
                bursts_reap_stale()
        except Exception:  # the heartbeat must outlive a database hiccup
            logger.exception("burst heartbeat failed")
            # The database was away: every worker's heartbeats failed too. Reap again only
            # once they have had a staleness window to land, or live runs look dead.
            next_reap = time.monotonic() + settings.LAB_BURST_STALE_SECONDS
        finally:
            # A few short queries a second do not need a connection held open between ticks.
            connection.close()


def _touch_heartbeats(ids: list[int]) -> None:
    """Stamp the running bursts' heartbeats with the database's clock as the row is written:
    a time taken here before the query would be as old as the wait for a pooled connection
    (seconds, after a PostgreSQL restart), and the burst would look stale when it is not."""
    Burst.objects.filter(pk__in=ids, status=Burst.Status.RUNNING).update(heartbeat_at=Now())


# --- Anywhere ------------------------------------------------------------------------------


def bursts_reap_stale(*, session_id: int | None = None) -> int:
    """Mark bursts whose worker died as INTERRUPTED (and stuck queued ones as FAILED).

    A RUNNING burst is stale when its heartbeat is older than ``LAB_BURST_STALE_SECONDS``; a
    QUEUED one when no worker claimed it within ``LAB_BURST_QUEUE_TIMEOUT_SECONDS``. Each mark
    is a conditional update, so concurrent reapers journal each burst once. A burst this
    process is running is never marked here, however old its heartbeat (its heartbeat may
    have failed while the database restarted): it ends as its calls do. Returns how many
    bursts it marked.
    """
    running, queued = stale_runs(Burst, session_id=session_id)
    marked = 0
    for burst in running:
        if runs_here(burst.pk, burst.worker):
            continue
        marked += _mark(
            burst,
            Burst.Status.RUNNING,
            Burst.Status.INTERRUPTED,
            "burst_interrupted",
            f"burst {burst.number} interrupted: its worker ({burst.worker or 'unknown'}) stopped "
            "responding. It is not re-run (calls change the dependency); start a new burst.",
        )
    for burst in queued:
        marked += _mark(
            burst,
            Burst.Status.QUEUED,
            Burst.Status.FAILED,
            "burst_failed",
            f"burst {burst.number} was never picked up by a worker; is the worker running?",
        )
    return marked


def _mark(
    burst: Burst, old: str, new: str, kind: str, message: str, *, snapshot: bool = True
) -> int:
    with transaction.atomic():
        changed = Burst.objects.filter(pk=burst.pk, status=old).update(
            status=new, finished_at=timezone.now(), error=message
        )
        if changed:
            journal.record(
                [
                    journal.entry(
                        burst.session, kind, message, burst_id=burst.pk, data={"burst": burst.number}
                    )
                ]
            )
    if changed and snapshot:
        runtime.save_snapshot(burst.session_id)
    return changed
