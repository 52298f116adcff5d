"""The run loop every kind of run takes on a worker: claim, run on the hub, flush the journal,
mark; with one heartbeat thread and one sweeper thread for all of them.

- :func:`run_claimed` claims a QUEUED run (a conditional UPDATE: a redelivered message finds
  nothing to claim), hands it to the kind's ``work``, flushes the journal writer, then marks
  the run final, so no row of the run is written after its end.
- The heartbeat thread stamps ``heartbeat_at`` of every run this process runs, of every kind,
  one UPDATE a kind every ``LAB_BURST_HEARTBEAT_SECONDS``, and gives each kind's ``poll`` (a
  look at its rows, e.g. a stop asked) a turn every :data:`TICK_S`. The liveness thread says
  the same runs are alive in Redis (:mod:`labs.live.liveness`), apart from the database.
- The sweeper runs every registered sweep (the reaping of each kind, the class faults'
  backstop...) every :func:`reap_interval` seconds, in turn, on a thread of its own: a slow
  sweep must not make this worker's runs look stale.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.db.models.functions import Now
from django.utils import timezone

from labs.journal import store as journal
from labs.live import liveness
from labs.models import Run
from labs.services.runs import WORKER_ID, RunKind, reap_stale
from labs.worker.hub import bookkeeping, get_hub
from labs.worker.once import daemon_once
from labs.worker.writers import get_writer

logger = logging.getLogger(__name__)

#: Seconds between two turns of the heartbeat thread (the kinds' polls).
TICK_S = 0.5
#: How long a run's final row waits for a database that is away (a PostgreSQL restart).
FINISH_RETRY_S = 30.0


@dataclass
class Outcome:
    """How a run ended: its final status, the row's other fields (``summary``, ``error``) and
    the journal entry saying so (None when the kind journals nothing more)."""

    status: str
    fields: dict[str, Any] = field(default_factory=dict)
    entry: journal.Entry | None = None


#: What ``work`` or ``failed`` returns when another process marked the run final meanwhile.
ENDED_ELSEWHERE = None


def run_claimed(
    kind: RunKind,
    pk: int,
    work: Callable[[Run], Outcome | None],
    failed: Callable[[Run, Exception], Outcome | None],
    *,
    claim_filter: dict[str, Any] | None = None,
) -> str:
    """Run ``kind``'s run ``pk`` to its end on this worker; returns its final status, or
    "skipped" (nothing to claim) or "ended elsewhere".

    ``work(run)`` runs it (on the hub; this thread waits) and says how it ended; an exception
    there goes to ``failed(run, exc)``. Either returning None means another process marked
    the run final and journaled its end already. Database work waits for the process's
    bookkeeping turn (:func:`labs.worker.hub.bookkeeping`)."""
    with bookkeeping():
        if not claim(kind, pk, **(claim_filter or {})):
            logger.info("%s %s not queued any more; nothing to do", kind.model.__name__, pk)
            return "skipped"
        run = kind.model.objects.select_related("session").get(pk=pk)
        # Never wait for the next turn holding a connection: the holder of the turn needs
        # one from the same pool (see bookkeeping).
        release_connection()
    writer = get_writer()
    try:
        try:
            outcome = work(run)
        except Exception as exc:
            logger.exception("%s %s failed", kind.model.__name__, pk)
            release_connection()  # before the waits below (the flush, the turn)
            outcome = failed(run, exc)
        if outcome is ENDED_ELSEWHERE:
            return "ended elsewhere"
        if outcome.entry is not None:
            writer.submit(outcome.entry)
        writer.flush()
        through_outage(lambda: finish(kind, pk, outcome.status, **outcome.fields))
        return outcome.status
    finally:
        with kind.lock:
            kind.here.discard(pk)
        release_connection()


def event_sink(session, *, burst_id: int | None = None,
               then: Callable[[Any], None] | None = None) -> Callable[[Any], None]:  # fmt: skip
    """The engine's sink for a run's events: each becomes a journal entry, handed to the
    journal writer with the rest of the hub's round; ``then(event)`` runs after."""
    hub = get_hub()
    writer = get_writer()
    session_id, classroom_id = session.pk, session.classroom_id

    def sink(event) -> None:
        hub.journal(writer, journal.entry_from_event(
            event, session_id=session_id, classroom_id=classroom_id, burst_id=burst_id
        ))  # fmt: skip
        if then is not None:
            then(event)

    return sink


def claim(kind: RunKind, pk: int, **claim_filter: Any) -> bool:
    """QUEUED -> RUNNING for this worker, a conditional UPDATE; the run is then this
    process's (heartbeat, never reaped here) until :func:`run_claimed` ends it."""
    model = kind.model
    now = timezone.now()
    claimed = model.objects.filter(pk=pk, status=model.Status.QUEUED, **claim_filter).update(
        status=model.Status.RUNNING, started_at=now, heartbeat_at=now, worker=WORKER_ID
    )
    if claimed:
        with kind.lock:
            kind.here.add(pk)
        watch(kind)
        _heartbeat_thread()
        _liveness_thread()
        start_sweeper(f"{model.__name__.lower()} reaper", lambda: reap_stale(kind))
    return bool(claimed)


def finish(kind: RunKind, pk: int, status: str, **fields: Any) -> int:
    """RUNNING -> ``status``, a conditional UPDATE (a run reaped meanwhile stays reaped)."""
    model = kind.model
    with bookkeeping():
        return model.objects.filter(pk=pk, status=model.Status.RUNNING).update(
            status=status, finished_at=timezone.now(), **fields
        )


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


def release_connection() -> None:
    """Give this thread's database connection back while its run does not need it, so a
    worker running a hundred runs does not hold a hundred PostgreSQL connections (with
    ``DATABASE_POOL_SIZE`` the pool keeps it). SQLite's connection stays: it is a file
    handle, and opening one again costs the next query more than the run saves."""
    if connection.vendor != "sqlite":
        connection.close()


# --- The heartbeat: every run of every kind this process runs -----------------------------

#: Each kind's look at its running rows, every TICK_S (``poll(ids)``), by kind.
_polls: dict[RunKind, Callable[[list[int]], None]] = {}
_kinds: list[RunKind] = []
_kinds_lock = threading.Lock()
#: No reap before this instant (monotonic): after the heartbeat failed (the database was away)
#: every worker's heartbeats failed too, and live runs get a staleness window, from the
#: database's return, to land.
_hold_reaps_until = 0.0


def watch(kind: RunKind, poll: Callable[[list[int]], None] | None = None) -> None:
    """Keep the heartbeat of ``kind``'s runs in this process, and call ``poll(ids)`` with
    them every :data:`TICK_S` (on the heartbeat thread: it must be quick)."""
    with _kinds_lock:
        if kind not in _kinds:
            _kinds.append(kind)
        if poll is not None:
            _polls[kind] = poll


def touch(kind: RunKind, ids: list[int]) -> None:
    """Stamp the runs' heartbeats with the database's clock as the row is written: a time
    taken here before the query would be as old as the wait for a pooled connection
    (seconds, after a PostgreSQL restart), and the run would look stale when it is not."""
    model = kind.model
    model.objects.filter(pk__in=ids, status=model.Status.RUNNING).update(heartbeat_at=Now())


def _running() -> dict[RunKind, list[int]]:
    """The pks of the runs this process runs now, by kind (kinds without any left out)."""
    with _kinds_lock:
        kinds = list(_kinds)
    running = {}
    for kind in kinds:
        with kind.lock:
            if kind.here:
                running[kind] = list(kind.here)
    return running


def _heartbeat_loop() -> None:
    global _hold_reaps_until
    next_touch = 0.0
    failed = False  # the last heartbeat failed (the database away)
    while True:
        time.sleep(TICK_S)
        running = _running()
        if not running:
            continue
        try:
            if time.monotonic() >= next_touch:
                next_touch = time.monotonic() + settings.LAB_BURST_HEARTBEAT_SECONDS
                for kind, ids in running.items():
                    touch(kind, ids)
            for kind, ids in running.items():
                if kind in _polls:
                    _polls[kind](ids)
            if failed:  # back: other workers' runs get a staleness window from now too
                failed = False
                _hold_reaps_until = time.monotonic() + settings.LAB_BURST_STALE_SECONDS
        except Exception:  # the heartbeat must outlive a database hiccup
            logger.exception("run heartbeat failed")
            failed = True
            _hold_reaps_until = time.monotonic() + settings.LAB_BURST_STALE_SECONDS
        finally:
            # A few short queries a second do not need a connection held open between ticks.
            connection.close()


def _liveness_loop() -> None:
    """Say in Redis which runs this process runs (:mod:`labs.live.liveness`), every
    ``LAB_BURST_HEARTBEAT_SECONDS``, never waiting for the database as the heartbeat does."""
    while True:
        time.sleep(settings.LAB_BURST_HEARTBEAT_SECONDS)
        running = _running()
        if not running:
            continue
        try:
            liveness.stamp(
                {kind.model._meta.label_lower: ids for kind, ids in running.items()}, WORKER_ID
            )
        except Exception:  # Redis away: the heartbeats' rows decide alone meanwhile
            logger.warning("runs' liveness not said in Redis", exc_info=True)


# --- The sweeper: reaping and other backstops, one thread ---------------------------------

_sweeps: dict[str, Callable[[], object]] = {}
_sweeps_lock = threading.Lock()
#: The worker is ready (its boot says so): the sweeper runs even while no run is running
#: here. A process running runs without a boot (Celery's embedded test worker) sweeps only
#: while it has some.
_ready = False


def worker_ready() -> None:
    """Sweep from now on, busy or idle (:mod:`labs.worker.boot`, when the worker is ready)."""
    global _ready
    _ready = True
    _sweeper_thread()


def _busy() -> bool:
    return bool(_running())


def reap_interval() -> float:
    """Seconds between two rounds of the sweeper: a dead worker's run is marked at most this
    long after its heartbeat goes stale (``LAB_BURST_STALE_SECONDS``)."""
    return max(settings.LAB_BURST_HEARTBEAT_SECONDS, settings.LAB_BURST_STALE_SECONDS / 2)


def start_sweeper(name: str, sweep: Callable[[], object]) -> None:
    """Run ``sweep`` every :func:`reap_interval` seconds from now on, once per ``name``. A
    failing sweep is logged and held for a staleness window (as after a heartbeat failure)."""
    with _sweeps_lock:
        _sweeps.setdefault(name, sweep)
    _sweeper_thread()


def _sweep_forever() -> None:
    held: dict[str, float] = {}  # sweep -> not before (after a failure)
    failed: set[str] = set()  # sweeps whose last try failed (the database away, say)
    while True:
        time.sleep(reap_interval())
        if not (_ready or _busy()):
            continue
        with _sweeps_lock:
            sweeps = list(_sweeps.items())
        for name, sweep in sweeps:
            if time.monotonic() < max(held.get(name, 0.0), _hold_reaps_until):
                continue
            if name in failed:
                # Every worker's heartbeats failed while the database was away: the live runs
                # get a staleness window from its return, not from this sweep's last failure
                # (an idle worker's sweep would otherwise reap a run whose own worker has not
                # yet written its first heartbeat since the return).
                if _database_answers():
                    failed.discard(name)
                    held[name] = time.monotonic() + settings.LAB_BURST_STALE_SECONDS
                continue
            try:
                sweep()
            except Exception:  # the sweeper must outlive a database hiccup
                logger.exception("%s failed", name)
                held[name] = time.monotonic() + settings.LAB_BURST_STALE_SECONDS
                failed.add(name)
        connection.close()


def _database_answers() -> bool:
    """Whether this thread can reach the database now."""
    try:
        connection.ensure_connection()
    except Exception:
        connection.close()
        return False
    return True


#: The heartbeat of this process's runs and the sweeper of every kind's stale runs: one
#: daemon thread each, started by the first run or sweep registered.
_heartbeat_thread = daemon_once(_heartbeat_loop, "run-heartbeat")
_liveness_thread = daemon_once(_liveness_loop, "run-liveness")
_sweeper_thread = daemon_once(_sweep_forever, "worker-sweeper")
