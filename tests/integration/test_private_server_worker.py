"""A student's own server with a queue (dependency mode ``server``) through the real stack:
bursts of two students on a real worker process each reach the student's own Redis model,
whose counters equal that student's journal, second by second and outcome by outcome; the
model is set afresh when the mode is set again and deleted when the student leaves it."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from labs.engine.redis import RedisSharedModel
from labs.live import runtime
from labs.models import Burst, JournalEvent, LabSession
from labs.services import bursts, lab
from tests.conftest import make_classroom, make_scenario, make_student, tour_script
from tests.integration.conftest import wait_for
from tests.integration.test_shared_worker import counters_agree_with_journal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

#: One server of 100 ms and a longest wait of 250 ms: five callers at once overload it.
SERVER = {"servers": 1, "service_ms": 100, "max_queue_ms": 250}
#: One attempt a call, and a breaker that stays closed: every call reaches the server.
POLICY = {"max_attempts": 1, "breaker": {"failure_threshold": 20}}


def own_servers(students: int) -> list[LabSession]:
    scenario = make_scenario("own-server", script=tour_script())
    room = make_classroom("Own servers", join_code="OWNSRV01")
    room.scenarios.add(scenario)
    sessions = []
    for i in range(students):
        student = make_student(f"own{i}", room)
        session = lab.session_open(user=student, classroom=room, scenario=scenario)
        lab.session_set_dependency(
            session=session, user=student, changes={"mode": "server", "server": SERVER}
        )
        session = LabSession.objects.get(pk=session.pk)
        lab.session_set_policy(session=session, user=student, changes=POLICY)
        sessions.append(LabSession.objects.get(pk=session.pk))
    return sessions


def test_each_students_own_server_counts_that_students_attempts_alone(worker_process):
    worker_process()
    sessions = own_servers(2)
    for session in sessions:
        model = runtime.private_model(session.pk)
        assert model.config.servers == 1 and model.config.service_ms == 100
    started = [
        bursts.burst_start(session=s, user=s.owner, size=10, concurrency=5) for s in sessions
    ]

    def done():
        return not Burst.objects.filter(
            pk__in=[b.pk for b in started], status__in=Burst.ACTIVE_STATUSES
        ).exists()

    wait_for(done, 120, message="both bursts on the students' own servers to finish")
    for burst, session in zip(started, sessions, strict=True):
        burst.refresh_from_db()
        assert burst.status == Burst.Status.DONE, burst.error
        rows = list(JournalEvent.objects.filter(session_id=session.pk, kind="attempt"))
        assert len(rows) == 10  # one attempt per call
        outcomes = Counter(row.data["outcome"] for row in rows)
        # five at once against one server: some are served, some wait too long and are shed
        assert outcomes["ok"] >= 1 and outcomes["shed"] >= 1, outcomes
        # one server: no two of this student's attempts held it at overlapping times
        served = sorted(
            (r.data["start_us"], r.data["finish_us"]) for r in rows if r.data["server"] >= 0
        )
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(served))
        # the student's own model counted exactly this student's attempts
        counters_agree_with_journal(None, rows, model=runtime.private_model(session.pk))
        assert burst.start_state["dependency"]["server"]["max_queue_ms"] == 250


def test_setting_the_mode_again_starts_the_server_fresh_and_leaving_it_deletes_it(
    worker_process,
):
    worker_process()
    (session,) = own_servers(1)
    burst = bursts.burst_start(session=session, user=session.owner, size=4, concurrency=2)

    def done():
        burst.refresh_from_db()
        return burst.status not in Burst.ACTIVE_STATUSES

    wait_for(done, 120, message="the burst on the student's own server to finish")
    model: RedisSharedModel = runtime.private_model(session.pk)
    assert sum(s.offered for s in model.counters()) == 4
    lab.session_set_dependency(
        session=session, user=session.owner, changes={"server": {"servers": 2}}
    )
    assert model.counters() == [] and model.config.servers == 2
    lab.session_set_dependency(session=session, user=session.owner, changes={"mode": "healthy"})
    assert not runtime.engine_redis().exists(*model.all_keys())


def test_steady_traffic_overloads_the_students_own_server_and_every_attempt_is_counted(
    worker_process,
):
    """Ten calls a second for three seconds at one server of 100 ms and a longest wait of
    250 ms (ten a second is its whole capacity; Poisson arrivals bunch up): the run ends,
    every call is journaled, and the student's model counted each attempt once."""
    from labs.services import traffic as traffic_services
    from tests.integration.test_traffic_worker import attempts_in, calls_in, ended

    worker_process()
    (session,) = own_servers(1)
    traffic = traffic_services.traffic_start(
        session=session, user=session.owner, rate=10, duration_s=3, arrivals="poisson"
    )
    ended(traffic)
    assert traffic.status == traffic.Status.DONE, traffic.error
    results = calls_in(traffic)
    assert len(results) == traffic.calls
    attempts = attempts_in(traffic)
    assert len(attempts) == len(results)  # one attempt a call
    assert {a.data["outcome"] for a in attempts} <= {"ok", "shed"}
    counters_agree_with_journal(None, attempts, model=runtime.private_model(session.pk))
