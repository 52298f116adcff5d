"""A new kind of run is its scheduling alone: a tiny third kind, defined here, goes through
the shared claim, heartbeat, reap and mark (``labs.services.runs``, ``labs.worker.runs``) on a
real Celery worker with a real Redis, as bursts and traffic runs do."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery import shared_task
from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

from labs.journal import store as journal
from labs.models import JournalEvent, LabSession, Run
from labs.services.runs import RunKind, reap_stale
from labs.worker import runs
from labs.worker.hub import get_hub
from tests.conftest import make_classroom, make_scenario, make_session, make_student
from tests.integration.conftest import wait_for


class Chore(Run):
    """The third kind: a session's run that only waits ``seconds`` on the worker's hub."""

    session = models.ForeignKey(LabSession, on_delete=models.CASCADE, related_name="+")
    seconds = models.FloatField(default=0.0)

    class Meta(Run.Meta):  # the shared constraints: one active chore per session
        app_label = "chores"  # no app, no migration: the test creates its table


class ChoreAlreadyRunning(Exception):
    pass


CHORES = RunKind(
    model=Chore,
    already_running=ChoreAlreadyRunning,
    active_index="one_active_chore_per_session",
    interrupted_kind="traffic_end",
    failed_kind="traffic_end",
    entry=lambda chore, status: {"data": {"chore": chore.pk, "status": status}},
    interrupted=lambda chore: f"chore {chore.pk} interrupted: its worker stopped responding",
    never_claimed=lambda chore: f"chore {chore.pk} was never picked up by a worker",
)


def _work(chore: Chore) -> runs.Outcome:
    clock = get_hub().clock
    waited = get_hub().run(lambda: (clock.sleep(chore.seconds), chore.seconds)[1])
    entry = journal.entry(chore.session, "traffic_end", f"chore {chore.pk} done",
                          data={"chore": chore.pk})  # fmt: skip
    return runs.Outcome(Chore.Status.DONE, {"summary": {"waited": waited}}, entry)


def _failed(chore: Chore, exc: Exception) -> runs.Outcome:
    return runs.Outcome(Chore.Status.FAILED, {"error": str(exc)})


@shared_task(name="tests.run_chore", ignore_result=True)
def run_chore(chore_id: int) -> str:
    return runs.run_claimed(CHORES, chore_id, _work, _failed)


@pytest.fixture
def chores(transactional_db):
    with connection.schema_editor() as editor:
        editor.create_model(Chore)
    yield
    with connection.schema_editor() as editor:
        editor.delete_model(Chore)


@pytest.fixture
def session(transactional_db):
    classroom = make_classroom()
    return make_session(make_student("chorer", classroom), classroom, make_scenario())


def test_a_third_kind_is_claimed_heartbeaten_and_marked_by_the_shared_loop(
    chores, session, celery_worker, settings
):
    from lab_project.celery import app

    chore = Chore.objects.create(session=session, seconds=3.0)
    app.send_task("tests.run_chore", args=(chore.pk,))
    wait_for(lambda: Chore.objects.get(pk=chore.pk).status == Chore.Status.RUNNING, 30,
             interval=0.05, message="the chore to be claimed")  # fmt: skip
    claimed = Chore.objects.get(pk=chore.pk)
    assert claimed.worker == runs.WORKER_ID
    # The one heartbeat thread stamps this kind's rows too, while it runs.
    wait_for(
        lambda: Chore.objects.get(pk=chore.pk).heartbeat_at > claimed.heartbeat_at,
        settings.LAB_BURST_HEARTBEAT_SECONDS + 2,
        interval=0.1,
        message="a heartbeat",
    )
    # A reaper in this very process never takes its own live run for dead.
    Chore.objects.filter(pk=chore.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    assert reap_stale(CHORES) == 0
    wait_for(lambda: not Chore.objects.get(pk=chore.pk).is_active, 30, interval=0.1,
             message="the chore to end")  # fmt: skip
    done = Chore.objects.get(pk=chore.pk)
    assert done.status == Chore.Status.DONE
    assert done.summary == {"waited": 3.0}
    assert done.finished_at is not None
    assert JournalEvent.objects.filter(session=session, message=f"chore {chore.pk} done").exists()
    # A second delivery finds nothing to claim.
    assert run_chore(chore.pk) == "skipped"


def test_a_dead_workers_chore_is_reaped_once_and_journaled(chores, session):
    old = timezone.now() - timedelta(hours=1)
    dead = Chore.objects.create(session=session, status=Chore.Status.RUNNING, started_at=old,
                                heartbeat_at=old, worker="elsewhere:1")  # fmt: skip
    # the shared constraint: one active chore a session
    with pytest.raises(IntegrityError), transaction.atomic():
        Chore.objects.create(session=session)
    other = make_session(make_student("chorer2", session.classroom), session.classroom,
                         session.scenario)  # fmt: skip
    lost = Chore.objects.create(session=other)
    Chore.objects.filter(pk=lost.pk).update(created_at=old)
    assert reap_stale(CHORES) == 2
    assert reap_stale(CHORES) == 0  # each is marked once
    dead.refresh_from_db()
    lost.refresh_from_db()
    assert dead.status == Chore.Status.INTERRUPTED
    assert "stopped responding" in dead.error
    assert lost.status == Chore.Status.FAILED
    assert JournalEvent.objects.filter(session__in=[session, other], kind="traffic_end").count() == 2
