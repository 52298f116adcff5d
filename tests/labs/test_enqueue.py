"""The services enqueue Celery tasks by name (labs.live.enqueue); the names must be the tasks'."""

from __future__ import annotations

from lab_project.celery import app
from labs.live import enqueue
from labs.worker import tasks


def test_every_queued_name_is_a_registered_task():
    app.loader.import_default_modules()
    for name in (enqueue.RUN_BURST, enqueue.RESTORE_CLASS_FAULT):
        assert name in app.tasks, name
    assert tasks.run_burst.name == enqueue.RUN_BURST
    assert tasks.restore_class_fault.name == enqueue.RESTORE_CLASS_FAULT
