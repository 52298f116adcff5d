"""Reaping a run whose heartbeat is old: never the reaper's own live run (docs/bursts.md).

A heartbeat that could not be written for a while (the database restarting) leaves the row
looking stale; the worker running it must not mark it interrupted while its calls go on. A
run of another worker (or of this one that is no longer running here) is still reaped.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from labs.live import liveness
from labs.live.health import redis_client
from labs.models import Burst, JournalEvent, Traffic
from labs.services import bursts, traffic
from labs.services.runs import WORKER_ID
from labs.worker import runs
from tests.conftest import make_session

pytestmark = pytest.mark.django_db


@pytest.fixture
def session(student, classroom, scenario):
    return make_session(student, classroom, scenario)


def _stale_burst(session, worker: str, number: int = 1) -> Burst:
    old = timezone.now() - timedelta(minutes=5)
    return Burst.objects.create(
        session=session, number=number, size=3, status=Burst.Status.RUNNING, started_at=old,
        heartbeat_at=old, worker=worker,
    )  # fmt: skip


def test_a_worker_never_reaps_a_burst_it_is_running_however_old_its_heartbeat(session):
    burst = _stale_burst(session, WORKER_ID)
    bursts.BURSTS.here.add(burst.pk)  # as runs.claim does, without starting its threads
    try:
        assert bursts.bursts_reap_stale(session_id=session.pk) == 0
    finally:
        bursts.BURSTS.here.discard(burst.pk)
    burst.refresh_from_db()
    assert burst.status == Burst.Status.RUNNING
    assert not JournalEvent.objects.filter(kind="burst_interrupted").exists()


def test_a_stale_burst_of_another_worker_or_no_longer_running_here_is_reaped(session):
    burst = _stale_burst(session, "elsewhere:1")
    assert bursts.bursts_reap_stale(session_id=session.pk) == 1
    burst.refresh_from_db()
    assert burst.status == Burst.Status.INTERRUPTED
    # Same worker id, but not in this process's running set (a previous life of the id).
    _stale_burst(session, WORKER_ID, number=2)
    assert bursts.bursts_reap_stale(session_id=session.pk) == 1


def test_a_worker_never_reaps_a_traffic_run_it_is_running(session):
    old = timezone.now() - timedelta(minutes=5)
    run = Traffic.objects.create(
        session=session, rate=1, duration_s=10, seed=1, calls=10, first_call_no=1,
        status=Traffic.Status.RUNNING, started_at=old, heartbeat_at=old,
        worker=WORKER_ID,
    )  # fmt: skip
    traffic.TRAFFIC.here.add(run.pk)
    try:
        assert traffic.traffic_reap_stale(session_id=session.pk) == 0
    finally:
        traffic.TRAFFIC.here.discard(run.pk)
    assert traffic.traffic_reap_stale(session_id=session.pk) == 1
    run.refresh_from_db()
    assert run.status == Traffic.Status.INTERRUPTED


def test_the_heartbeat_is_stamped_by_the_database_when_written(session, monkeypatch):
    """The stamp is the database's clock at the UPDATE, not a Python time taken before the
    wait for a connection: a stand-in clock for Python's ``timezone.now`` is not used."""
    burst = _stale_burst(session, WORKER_ID)
    frozen = timezone.now() - timedelta(hours=1)
    monkeypatch.setattr(runs.timezone, "now", lambda: frozen)
    runs.touch(bursts.BURSTS, [burst.pk])
    monkeypatch.undo()
    burst.refresh_from_db()
    assert abs((timezone.now() - burst.heartbeat_at).total_seconds()) < 60


# --- a worker that says in Redis it runs the run (labs.live.liveness) ---------------------


def test_a_stale_looking_run_whose_worker_says_in_redis_it_runs_it_is_spared_until_it_stops(
    session,
):
    """After a PostgreSQL restart the heartbeat row of a live run can land late; its worker's
    word in Redis keeps it from being reaped, and once the word is gone (the worker died: its
    key expires) the row's staleness decides again."""
    burst = _stale_burst(session, "worker-a:1")
    liveness.stamp({"labs.burst": [burst.pk]}, "worker-a:1")
    assert bursts.bursts_reap_stale(session_id=session.pk) == 0
    burst.refresh_from_db()
    assert burst.status == Burst.Status.RUNNING
    redis_client(settings.CELERY_BROKER_URL).delete(liveness.key("labs.burst", burst.pk))
    assert bursts.bursts_reap_stale(session_id=session.pk) == 1
    burst.refresh_from_db()
    assert burst.status == Burst.Status.INTERRUPTED


def test_the_word_of_another_worker_or_of_another_kind_spares_nothing(session):
    burst = _stale_burst(session, "worker-a:1")
    liveness.stamp({"labs.burst": [burst.pk]}, "worker-b:2")  # not the run's worker
    liveness.stamp({"labs.traffic": [burst.pk]}, "worker-a:1")  # a traffic run's number
    assert bursts.bursts_reap_stale(session_id=session.pk) == 1


def test_the_word_expires_after_the_staleness_window(session, settings):
    settings.LAB_BURST_STALE_SECONDS = 2
    burst = _stale_burst(session, "worker-a:1")
    liveness.stamp({"labs.burst": [burst.pk]}, "worker-a:1")
    ttl_ms = redis_client(settings.CELERY_BROKER_URL).pttl(liveness.key("labs.burst", burst.pk))
    assert 1000 < ttl_ms <= 2000


def test_without_redis_the_heartbeat_rows_decide(session, settings):
    burst = _stale_burst(session, "worker-a:1")
    liveness.stamp({"labs.burst": [burst.pk]}, "worker-a:1")
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing answers there
    assert liveness.alive([burst]) == set()
    assert bursts.bursts_reap_stale(session_id=session.pk) == 1
