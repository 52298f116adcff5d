"""What every kind of run shares on any process: marking a run final, and reaping the runs a
dead worker left behind.

A kind of run (a burst, steady traffic, ...) is a :class:`~labs.models.Run` table and a
:class:`RunKind` saying how its marks read in the journal. Every move of a run's status is a
conditional UPDATE, so two processes never both make it and each mark is journaled once. The
worker's half (claim, heartbeat, the run loop) is :mod:`labs.worker.runs`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import IntegrityError, transaction
from django.utils import timezone

from labs.journal import store as journal
from labs.live import liveness, runtime
from labs.models import Run

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class RunKind:
    """One kind of run: its model and what its marks journal.

    ``entry(run, new_status)`` gives the journal entry's extra fields (``burst_id``,
    ``data``); ``interrupted(run)`` and ``never_claimed(run)`` the messages of the two reaps;
    ``interrupted_kind`` and ``failed_kind`` their journal kinds."""

    model: type[Run]
    #: Raised when the session has an active run already; the partial unique index saying so.
    already_running: type[Exception]
    active_index: str
    interrupted_kind: str
    failed_kind: str
    entry: Callable[[Run, str], dict[str, Any]]
    interrupted: Callable[[Run], str]
    never_claimed: Callable[[Run], str]
    #: Store the session's breaker snapshot after a mark (the run moved the breaker).
    snapshot: bool = False
    #: The pks of the runs this process is running now (never reaped here).
    here: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def runs_here(self, run: Run, worker_id: str) -> bool:
        """Whether this process runs ``run`` now (its own live run, never stale)."""
        if run.worker != worker_id:
            return False
        with self.lock:
            return run.pk in self.here


def start(kind: RunKind, session_id: int, create: Callable[[], T]) -> T:
    """Create a run with ``create()`` (its transaction writes the row, journals, enqueues on
    commit). When the session's active run is in the way (the kind's ``already_running``, or
    its partial unique index refusing the row), that run may be a dead worker's: only then
    reap the session (two queries saved on every normal start) and try once more."""
    try:
        return _create(kind, create)
    except kind.already_running:
        if not reap_stale(kind, session_id=session_id):
            raise
    return _create(kind, create)


def _create(kind: RunKind, create: Callable[[], T]) -> T:
    try:
        return create()
    except IntegrityError as exc:
        # Another request created the session's active run a moment ago; the transaction
        # is rolled back.
        if kind.active_index in str(exc) or "UNIQUE" in str(exc).upper():
            raise kind.already_running() from exc
        raise


#: This process's name on the runs it claims.
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"


def mark(kind: RunKind, run: Run, old: str, new: str, journal_kind: str, message: str,
         *, snapshot: bool | None = None) -> int:  # fmt: skip
    """Move ``run`` from ``old`` to ``new`` (a conditional UPDATE) and journal it; returns 1
    when this call made the move, 0 when another process had."""
    model = kind.model
    with transaction.atomic():
        changed = model.objects.filter(pk=run.pk, status=old).update(
            status=new, finished_at=timezone.now(), error=message
        )
        if changed:
            journal.record(
                [journal.entry(run.session, journal_kind, message, **kind.entry(run, new))]
            )
    if changed and (kind.snapshot if snapshot is None else snapshot):
        runtime.save_snapshot(run.session_id)
    return changed


def reap_stale(kind: RunKind, *, session_id: int | None = None) -> int:
    """Mark the kind's runs whose worker died INTERRUPTED (a heartbeat older than
    ``LAB_BURST_STALE_SECONDS``) and queued ones no worker claimed in time FAILED; one
    session's or every one. A run this process is running is never marked here: it ends as
    its calls do; nor is one whose worker says in Redis that it runs it
    (:mod:`labs.live.liveness`: its heartbeat row is late, the database restarting). Returns
    how many it marked."""
    model = kind.model
    running, queued = model.objects.stale(session_id=session_id)
    running = list(running)
    spared = liveness.alive(running)
    marked = 0
    for run in running:
        if kind.runs_here(run, WORKER_ID):
            continue
        if run.pk in spared:
            logger.info("%s %s looks stale but its worker %s says it runs it",
                        model.__name__, run.pk, run.worker)  # fmt: skip
            continue
        marked += mark(kind, run, model.Status.RUNNING, model.Status.INTERRUPTED,
                       kind.interrupted_kind, kind.interrupted(run))  # fmt: skip
    for run in queued:
        marked += mark(kind, run, model.Status.QUEUED, model.Status.FAILED,
                       kind.failed_kind, kind.never_claimed(run))  # fmt: skip
    return marked


def first_call_no(session_id: int, tier: int | None, first: int, size: int) -> int:
    """The first of ``size`` call numbers a run reserved from ``first`` on (the session's
    ``next_call_no``). A service past the front of a chain also numbers the calls it answers,
    from its counter in Redis: its own run takes its numbers from that counter too, so no two
    calls of the session share a number; the caller then moves ``next_call_no`` past them."""
    if not tier or tier < 2:
        return first
    return runtime.reserve_call_numbers(session_id, first - 1, size)
