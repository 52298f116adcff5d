"""Steady traffic on the web side: start a run (its arrival schedule fixed and its call
numbers reserved), stop one, reap dead workers' ones. The run itself is
:mod:`labs.worker.traffic`; the lifecycle every kind of run shares is
:mod:`labs.services.runs`.

:func:`traffic_start` validates the rate, duration and arrivals, refuses a second active run
in the session (a check under the session's row lock, and the partial unique index
``one_active_traffic_per_session``), journals ``traffic_start`` and enqueues
``labs.run_traffic`` on commit. :func:`traffic_stop` ends a queued run at once and asks a
running one to start no further call (the calls in flight finish, never cut in half).
"""

from __future__ import annotations

from django.db import transaction

from labs.engine import Problem
from labs.journal import store as journal
from labs.live import enqueue
from labs.live.traffic import (
    ARRIVALS,
    DURATION_RANGE,
    RATE_RANGE,
    arrival_schedule,
    traffic_seed,
)
from labs.models import LabSession, Traffic
from labs.presenters.text import actor_name
from labs.services import runs
from labs.services.bursts import BurstRefused


class TrafficRefused(BurstRefused):
    """Traffic that cannot start; ``str()`` is a sentence for the student."""


class TrafficAlreadyRunning(TrafficRefused):
    status = 409

    def __init__(self, message: str = "") -> None:
        super().__init__(message or _already_running())


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
    return runs.start(
        TRAFFIC, session.pk, lambda: _start(session, user, rate, duration_s, arrivals)
    )


def _start(session: LabSession, user, rate: int, duration_s: int, arrivals: str) -> Traffic:
    with transaction.atomic():
        locked = LabSession.objects.select_for_update().get(pk=session.pk)
        if locked.traffic.filter(status__in=Traffic.ACTIVE_STATUSES).exists():
            raise TrafficAlreadyRunning(_already_running())
        number = locked.traffic.count() + 1
        seed = traffic_seed(locked.seed, locked.pk, number)
        calls = len(arrival_schedule(rate, duration_s, arrivals, seed))
        first_call = runs.first_call_no(locked.pk, locked.tier, locked.next_call_no, calls)
        locked.next_call_no = first_call + calls
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
        journal.record_one(
            locked,
            "traffic_start",
            f"traffic started by {actor_name(user)}: {rate} calls/s ({arrivals}) for "
            f"{duration_s} s, {calls} call(s) from call {first_call}",
            user=user,
            data={
                "traffic": traffic.pk,
                "rate": rate,
                "duration_s": duration_s,
                "arrivals": arrivals,
                "calls": calls,
                "first_call": first_call,
            },
        )
        transaction.on_commit(lambda: enqueue.send_traffic(traffic.pk))
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
    if runs.mark(TRAFFIC, traffic, Traffic.Status.QUEUED, Traffic.Status.STOPPED, "traffic_end",
                 message):  # fmt: skip
        traffic.refresh_from_db()
    return traffic


def traffic_reap_stale(*, session_id: int | None = None) -> int:
    """Mark runs whose worker died INTERRUPTED (and never-claimed queued ones FAILED),
    journaled ``traffic_end``; one session's or every one. Returns how many."""
    return runs.reap_stale(TRAFFIC, session_id=session_id)


TRAFFIC = runs.RunKind(
    model=Traffic,
    already_running=TrafficAlreadyRunning,
    active_index="one_active_traffic_per_session",
    interrupted_kind="traffic_end",
    failed_kind="traffic_end",
    entry=lambda traffic, status: {"data": {"traffic": traffic.pk, "status": status}},
    interrupted=lambda traffic: (
        f"traffic interrupted: its worker ({traffic.worker or 'unknown'}) stopped responding"
    ),
    never_claimed=lambda traffic: "traffic was never picked up by a worker; is the worker running?",
)
