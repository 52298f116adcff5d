"""Bursts on the web side: start one (refused twice over when one is active), reap dead
workers' ones. The run itself is :mod:`labs.worker.bursts`; the lifecycle every kind of run
shares is :mod:`labs.services.runs`.

:func:`burst_start` refuses a second active burst in the same session with a check under the
session's row lock and the partial unique index ``one_active_burst_per_session``. The task is
enqueued on commit, so a rollback enqueues nothing; a burst the broker refuses (Redis down) is
marked FAILED at once and the start raises BurstNotQueued (503), so an outage never leaves the
session blocked by a burst no worker will ever see. A burst is never re-run (calls change the
dependency), only ever marked.
"""

from __future__ import annotations

import logging
import time

from django.db import connection, transaction
from django.utils import timezone

from labs.engine import LIMITS, Problem
from labs.journal import store as journal
from labs.live import enqueue
from labs.models import Burst, LabSession
from labs.services import runs

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

    def __init__(self, message: str = "") -> None:
        super().__init__(message or _already_running_message())


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
    ``labs.worker.tasks.run_burst`` after commit. Raises BurstInvalid (400) for bad numbers,
    BurstAlreadyRunning (409) when the session already has a queued or running burst and
    BurstNotQueued (503, the burst marked FAILED) when the broker cannot take it.
    """
    problems = validate_burst(size, concurrency)
    if problems:
        raise BurstInvalid(problems)
    return runs.start(
        BURSTS,
        session.pk,
        lambda: _start(session=session, user=user, size=size, concurrency=concurrency),
    )


def _start(*, session: LabSession, user, size: int, concurrency: int) -> Burst:
    with transaction.atomic():
        number, first_call, tier = _reserve_calls(session.pk, size)
        first = runs.first_call_no(session.pk, tier, first_call, size)
        if first != first_call:  # past the front of a chain: numbered on from its answers
            first_call = first
            LabSession.objects.filter(pk=session.pk).update(next_call_no=first + size)
        # The partial unique index one_active_burst_per_session refuses a second queued
        # or running burst (labs.services.runs.start): no query looks for one first.
        burst = Burst.objects.create(
            session_id=session.pk,
            number=number,
            size=size,
            concurrency=concurrency,
            first_call_no=first_call,
            created_by=user if getattr(user, "is_authenticated", False) else None,
        )
        journal.record_one(
            session,
            "burst_queued",
            f"burst {number} queued: {size} call(s) from call {first_call}, "
            f"{concurrency} caller(s) at once",
            user=user,
            burst_id=burst.pk,
            data={"size": size, "concurrency": concurrency, "burst": number},
        )
        enqueue.enqueue_burst_on_commit(
            burst.pk, on_unavailable=lambda exc: _not_queued(burst, exc)
        )
    return burst


def _reserve_calls(session_id: int, size: int) -> tuple[int, int, int | None]:
    """Count one more burst in the session and reserve ``size`` call numbers, in one
    ``UPDATE ... RETURNING`` that holds the session row's lock until commit (PostgreSQL; on
    SQLite the write takes the database's): returns (the burst's number, its first call
    number, its tier in the class's chain). Only the counters: the policy, dependency and state JSON are never read.
    Raises LabSession.DoesNotExist if the session is gone."""
    table = connection.ops.quote_name(LabSession._meta.db_table)
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET burst_count = burst_count + 1, "  # noqa: S608
            f"next_call_no = next_call_no + %s, updated_at = %s WHERE id = %s "
            f"RETURNING burst_count, next_call_no, tier",
            [size, now, session_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise LabSession.DoesNotExist(f"lab session {session_id} is gone")
    return row[0], row[1] - size, row[2]


def _not_queued(burst: Burst, exc: Exception) -> None:
    """Fail a committed burst the broker refused, at once: left QUEUED it would block the
    session until ``LAB_BURST_QUEUE_TIMEOUT_SECONDS``. Raises BurstNotQueued."""
    logger.warning("burst %s could not be queued: %s", burst.pk, exc)
    runs.mark(
        BURSTS,
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


# --- Anywhere ------------------------------------------------------------------------------


def bursts_reap_stale(*, session_id: int | None = None) -> int:
    """Mark bursts whose worker died INTERRUPTED (and stuck queued ones FAILED), journaled;
    one session's or every one (``labs.services.runs.reap_stale``). Returns how many."""
    return runs.reap_stale(BURSTS, session_id=session_id)


BURSTS = runs.RunKind(
    model=Burst,
    already_running=BurstAlreadyRunning,
    active_index="one_active_burst_per_session",
    interrupted_kind="burst_interrupted",
    failed_kind="burst_failed",
    entry=lambda burst, status: {"burst_id": burst.pk, "data": {"burst": burst.number}},
    interrupted=lambda burst: (
        f"burst {burst.number} interrupted: its worker ({burst.worker or 'unknown'}) stopped "
        "responding. It is not re-run (calls change the dependency); start a new burst."
    ),
    never_claimed=lambda burst: (
        f"burst {burst.number} was never picked up by a worker; is the worker running?"
    ),
    snapshot=True,
)
