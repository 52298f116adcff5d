"""Hands work to the Celery workers, by task name.

:mod:`labs.worker.tasks` defines the tasks (thin: ids in, a service call); the services that
enqueue them sit below it and send by name, so no module imports upward. A test checks that
every name here is a registered task.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction
from kombu.exceptions import OperationalError

RUN_BURST = "labs.run_burst"
RESTORE_CLASS_FAULT = "labs.restore_class_fault"
RUN_TRAFFIC = "labs.run_traffic"
SEND_LTI_GRADE = "labs.send_lti_grade"


def _app():
    from lab_project.celery import app  # the project's Celery app, configured from settings

    return app


class QueueUnavailable(Exception):
    """The broker (Redis) could not take a message: unreachable, refusing or not answering
    within the publish timeouts of ``lab_project.celery``."""


def send_burst(burst_id: int) -> None:
    """Queue burst ``burst_id`` for a worker now; QueueUnavailable when the broker is down."""
    try:
        _app().send_task(RUN_BURST, args=(burst_id,))
    except OperationalError as exc:
        raise QueueUnavailable(str(exc)) from exc


def enqueue_burst_on_commit(
    burst_id: int, on_unavailable: Callable[[QueueUnavailable], None]
) -> None:
    """Queue burst ``burst_id`` for a worker once the current transaction commits (a rollback
    queues nothing). If the broker cannot take it, ``on_unavailable(exc)`` runs instead, after
    the commit; whatever it raises reaches the code that committed."""

    def send() -> None:
        try:
            send_burst(burst_id)
        except QueueUnavailable as exc:
            on_unavailable(exc)

    transaction.on_commit(send)


def enqueue_fault_restore(fault_id: int, countdown: int) -> None:
    """Queue the end of timed class fault ``fault_id`` in ``countdown`` seconds."""
    _app().send_task(RESTORE_CLASS_FAULT, args=(fault_id,), countdown=countdown)


def send_traffic(traffic_id: int) -> None:
    """Queue traffic run ``traffic_id`` for a worker now (called on commit)."""
    _app().send_task(RUN_TRAFFIC, args=(traffic_id,))


def send_grade_post(post_id: int, *, countdown: int = 0) -> None:
    """Queue the LMS grade post ``post_id`` (after ``countdown`` s); QueueUnavailable when the
    broker is down (the row stays pending in the database)."""
    try:
        _app().send_task(SEND_LTI_GRADE, args=(post_id,), countdown=countdown)
    except OperationalError as exc:
        raise QueueUnavailable(str(exc)) from exc
