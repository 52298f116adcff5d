"""A timed class-wide fault whose restore task is lost, with a real worker and broker."""

from __future__ import annotations

import redis
from django.conf import settings

from labs.models import ClassFault, JournalEvent
from labs.services import classroom as class_services
from labs.services import lab
from tests.integration.conftest import wait_for


def test_a_timed_fault_whose_restore_task_was_lost_is_restored_by_a_worker_without_a_page_load(
    worker_process, classroom, scenario, student, instructor
):
    """The restore task sits on the broker until its countdown ends; a worker that dies
    holding it does not get it delivered again. Here the message is deleted from the broker
    before any worker runs: a worker started afterwards restores the fault by its own sweep
    (no dashboard loads, no request is made), once, journaled under the instructor's name."""
    session = lab.session_open(user=student, classroom=classroom, scenario=scenario)
    before = session.dependency["mode"]
    assert before != "down"
    class_services.classroom_set_dependency(
        classroom=classroom, user=instructor, changes={"mode": "down"}, duration_s=1
    )
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    assert broker.llen("celery") == 1, "the restore task was not on the broker"
    broker.delete("celery")
    fault = ClassFault.objects.get(classroom=classroom)
    assert fault.status == ClassFault.Status.ACTIVE
    session.refresh_from_db()
    assert session.dependency["mode"] == "down"

    worker_process()
    wait_for(
        lambda: ClassFault.objects.get(pk=fault.pk).status != ClassFault.Status.ACTIVE,
        timeout=60,
        message="a worker's sweep restoring the fault",
    )
    session.refresh_from_db()
    assert session.dependency["mode"] == before
    restored = JournalEvent.objects.filter(session=session, kind="fault_restored")
    assert restored.count() == 1
    assert restored.get().actor == instructor
