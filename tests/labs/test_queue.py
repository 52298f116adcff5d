"""The services enqueue Celery tasks by name (labs.live.queue); the names must be the tasks'."""

from __future__ import annotations

from lab_project.celery import app
from labs import tasks
from labs.live import queue


def test_every_queued_name_is_a_registered_task():
    app.loader.import_default_modules()
    for name in (queue.RUN_BURST, queue.RESTORE_CLASS_FAULT):
        assert name in app.tasks, name
    assert tasks.run_burst.name == queue.RUN_BURST
    assert tasks.restore_class_fault.name == queue.RESTORE_CLASS_FAULT
