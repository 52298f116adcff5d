"""Hands work to the Celery workers, by task name.

:mod:`labs.tasks` defines the tasks (thin: ids in, a service call); the services that
enqueue them sit below it and send by name, so no module imports upward. A test checks that
every name here is a registered task.
"""

from __future__ import annotations

from django.db import transaction

RUN_BURST = "labs.run_burst"
RESTORE_CLASS_FAULT = "labs.restore_class_fault"


def _app():
    from lab_project.celery import app  # the project's Celery app, configured from settings

    return app


def enqueue_burst_on_commit(burst_id: int) -> None:
    """Queue burst ``burst_id`` for a worker once the current transaction commits."""
    transaction.on_commit(lambda: _app().send_task(RUN_BURST, args=(burst_id,)))


def enqueue_fault_restore(fault_id: int, countdown: int) -> None:
    """Queue the end of timed class fault ``fault_id`` in ``countdown`` seconds."""
    _app().send_task(RESTORE_CLASS_FAULT, args=(fault_id,), countdown=countdown)
