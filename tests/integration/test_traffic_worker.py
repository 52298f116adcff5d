"""Steady traffic through the real stack: a real worker process runs a session's open-loop
calls; the number of calls is the arrival schedule's, every attempt is journaled, and a stop
lets the calls in flight finish (no wall-clock assertion: only counts and states)."""

from __future__ import annotations

import itertools
import time

import pytest

from labs.live.traffic import arrival_schedule, traffic_seed
from labs.models import JournalEvent, LabSession, Traffic
from labs.services import lab, runs
from labs.services import shared as shared_services
from labs.services import traffic as svc
from tests.conftest import make_classroom, make_scenario, make_student, tour_script
from tests.integration.conftest import wait_for
from tests.integration.test_shared_worker import counters_agree_with_journal, shared_class

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def class_sessions(count: int, tag: str) -> list[LabSession]:
    """``count`` students' sessions on the tour scenario in one new class (``tag`` names it)."""
    scenario = make_scenario(f"{tag}-tour", script=tour_script())
    room = make_classroom(f"{tag} class", join_code=f"{tag.upper():0<8}"[:8])
    room.scenarios.add(scenario)
    return [
        lab.session_open(user=make_student(f"{tag}_{i}", room), classroom=room, scenario=scenario)
        for i in range(count)
    ]


def private_session() -> LabSession:
    return class_sessions(1, "traffic")[0]


def ended(traffic: Traffic, timeout: float = 120) -> Traffic:
    def done():
        traffic.refresh_from_db()
        return traffic if not traffic.is_active else None

    return wait_for(done, timeout, interval=0.2, message=f"traffic {traffic.pk} to end")


def calls_in(traffic: Traffic) -> list[JournalEvent]:
    last = traffic.first_call_no + traffic.calls
    return list(
        JournalEvent.objects.filter(
            session_id=traffic.session_id,
            kind="call_result",
            call_no__gte=traffic.first_call_no,
            call_no__lt=last,
        )
    )


def attempts_in(traffic: Traffic) -> list[JournalEvent]:
    last = traffic.first_call_no + traffic.calls
    return list(
        JournalEvent.objects.filter(
            session_id=traffic.session_id,
            kind="attempt",
            call_no__gte=traffic.first_call_no,
            call_no__lt=last,
        )
    )


def test_arrival_schedules_are_seeded_and_bounded():
    even = arrival_schedule(5, 3, "even", 1)
    assert len(even) == 15 and 0 <= even[0] < 0.2 and max(even) < 3
    assert [round(b - a, 9) for a, b in itertools.pairwise(even)] == [0.2] * 14
    assert even == arrival_schedule(5, 3, "even", 1) != arrival_schedule(5, 3, "even", 2)
    poisson = arrival_schedule(10, 20, "poisson", 7)
    assert poisson == arrival_schedule(10, 20, "poisson", 7)
    assert poisson != arrival_schedule(10, 20, "poisson", 8)
    assert all(0 <= t < 20 for t in poisson) and poisson == sorted(poisson)
    assert 100 < len(poisson) < 300  # mean 200


def test_each_session_and_run_of_a_class_gets_its_own_seed(db):
    """The scenario's seed is the same for every student of a class: a run's seed mixes in the
    session and the run's number, so thirty students do not arrive (or back off) in
    lock-step, and the same session and number always give the same seed."""
    sessions = class_sessions(3, "seeds")
    assert len({s.seed for s in sessions}) == 1  # the scenario's
    runs = [svc.traffic_start(session=s, user=s.owner, rate=10, duration_s=5) for s in sessions]
    assert len({r.seed for r in runs}) == 3
    schedules = [arrival_schedule(r.rate, r.duration_s, r.arrivals, r.seed) for r in runs]
    assert all(len(a) == r.calls for a, r in zip(schedules, runs, strict=True))
    assert schedules[0] != schedules[1] != schedules[2] != schedules[0]
    assert runs[0].seed == traffic_seed(sessions[0].seed, sessions[0].pk, 1)
    Traffic.objects.filter(pk=runs[0].pk).update(status=Traffic.Status.DONE)
    again = svc.traffic_start(session=sessions[0], user=sessions[0].owner, rate=10, duration_s=5)
    assert again.seed == traffic_seed(sessions[0].seed, sessions[0].pk, 2) != runs[0].seed


def test_bad_traffic_is_refused_naming_field_and_range(db):
    session = private_session()
    with pytest.raises(svc.TrafficInvalid) as info:
        svc.traffic_start(
            session=session, user=session.owner, rate=21, duration_s=0, arrivals="burst"
        )
    text = str(info.value)
    assert "Calls per second: must be between 1 and 20 calls/s" in text
    assert "Duration: must be between 1 and 300 s" in text
    assert "Arrivals: must be one of poisson, even" in text
    assert not Traffic.objects.exists()
    assert not JournalEvent.objects.filter(kind="traffic_start").exists()


def test_traffic_runs_every_scheduled_call_on_a_worker_process(worker_process):
    worker_process()
    session = private_session()
    traffic = svc.traffic_start(
        session=session, user=session.owner, rate=10, duration_s=2, arrivals="even"
    )
    assert traffic.calls == 20
    with pytest.raises(svc.TrafficAlreadyRunning):
        svc.traffic_start(session=session, user=session.owner, rate=1, duration_s=1)
    ended(traffic)
    assert traffic.status == Traffic.Status.DONE, traffic.error
    results = calls_in(traffic)
    assert sorted(r.call_no for r in results) == list(
        range(traffic.first_call_no, traffic.first_call_no + 20)
    )
    attempts = attempts_in(traffic)
    assert len(attempts) == sum(r.data["attempts"] for r in results)
    assert traffic.summary["started"] == traffic.summary["finished"] == 20
    kinds = list(
        JournalEvent.objects.filter(session=session, kind__startswith="traffic_")
        .order_by("seq")
        .values_list("kind", flat=True)
    )
    assert kinds == ["traffic_start", "traffic_end"]


def test_two_sessions_of_one_class_draw_their_own_random_numbers(worker_process):
    """The calls' draws (here a 50 % error rate's) come from the run's seed, not the
    scenario's: two students with the same settings and schedule see different outcomes."""
    worker_process()
    sessions = class_sessions(2, "draws")
    for session in sessions:
        lab.session_set_dependency(
            session=session,
            user=session.owner,
            changes={"mode": "error_rate", "rate": 0.5, "latency_ms": 1},
        )
    runs = [
        svc.traffic_start(session=s, user=s.owner, rate=20, duration_s=2, arrivals="even")
        for s in sessions
    ]
    outcomes = []
    for run in runs:
        assert ended(run).status == Traffic.Status.DONE, run.error
        attempts = sorted(attempts_in(run), key=lambda a: (a.call_no, a.attempt_no))
        assert len(attempts) >= run.calls == 40
        outcomes.append(
            [(a.call_no - run.first_call_no, a.attempt_no, a.outcome) for a in attempts]
        )
    assert {o for *_k, o in outcomes[0]} >= {"ok", "error"}
    assert outcomes[0] != outcomes[1]


def test_stopping_traffic_lets_the_calls_in_flight_finish(worker_process):
    worker_process()
    room, _teacher, (session,) = shared_class(servers=1, service_ms=200)
    traffic = svc.traffic_start(
        session=session, user=session.owner, rate=5, duration_s=300, arrivals="poisson"
    )

    def some_calls():
        return len(calls_in(traffic)) >= 3

    wait_for(some_calls, 120, interval=0.2, message="a few traffic calls")
    svc.traffic_stop(session=session, user=session.owner)
    ended(traffic)
    assert traffic.status == Traffic.Status.STOPPED, traffic.error
    results = calls_in(traffic)
    # every call started has finished (none cut in half), and far fewer than scheduled
    assert traffic.summary["started"] == traffic.summary["finished"] == len(results)
    assert 3 <= len(results) < traffic.calls
    attempts = attempts_in(traffic)
    assert len(attempts) == sum(r.data["attempts"] for r in results)
    counters_agree_with_journal(room.pk, attempts)
    end = JournalEvent.objects.get(session=session, kind="traffic_end")
    assert "stopped" in end.message


def test_a_killed_workers_traffic_is_reaped_and_the_session_can_start_again(
    worker_process, settings
):
    session = private_session()
    victim = worker_process()
    traffic = svc.traffic_start(session=session, user=session.owner, rate=5, duration_s=300)
    wait_for(lambda: len(calls_in(traffic)) >= 2, 120, interval=0.2, message="a few calls")
    victim.kill()
    settings.LAB_BURST_STALE_SECONDS = 2

    def reaped():
        svc.traffic_reap_stale(session_id=session.pk)
        traffic.refresh_from_db()
        return traffic.status == Traffic.Status.INTERRUPTED

    wait_for(reaped, 60, interval=0.5, message="the dead worker's traffic to be reaped")
    assert JournalEvent.objects.filter(session=session, kind="traffic_end").count() == 1
    worker_process()
    session.refresh_from_db()
    again = svc.traffic_start(
        session=session, user=session.owner, rate=2, duration_s=1, arrivals="even"
    )
    assert again.first_call_no == traffic.first_call_no + traffic.calls
    assert ended(again).status == Traffic.Status.DONE


def test_a_run_finishing_its_calls_in_flight_is_not_taken_for_a_dead_one(worker_process, settings):
    """Five calls arrive in the first second, but one server of 2 s each answers the last
    about 10 s later: the run keeps vouching for itself until then, so a reaper with a 2 s
    staleness leaves it alone and it ends DONE."""
    worker_process()
    room, teacher, (session,) = shared_class(servers=1, service_ms=2000)
    shared_services.classroom_set_shared(
        classroom=room, user=teacher, values={"max_queue_ms": 10000}
    )
    traffic = svc.traffic_start(
        session=session, user=session.owner, rate=5, duration_s=1, arrivals="even"
    )
    settings.LAB_BURST_STALE_SECONDS = 2

    def over():
        svc.traffic_reap_stale(session_id=session.pk)
        traffic.refresh_from_db()
        return not traffic.is_active

    wait_for(over, 120, interval=0.5, message="the traffic to end")
    assert traffic.status == Traffic.Status.DONE, traffic.error
    assert traffic.summary["finished"] == 5


def test_a_run_marked_final_elsewhere_stops_its_schedule_and_journals_no_second_end(
    worker_process,
):
    """Another process marks the running run final (as a reaper does): the worker's traffic
    watch sees it within a check, no further call starts, and the run journals no second
    ``traffic_end``; the session's next run starts and runs alone."""
    session = private_session()
    worker_process()
    traffic = svc.traffic_start(
        session=session, user=session.owner, rate=10, duration_s=120, arrivals="even"
    )
    wait_for(lambda: len(calls_in(traffic)) >= 3, 120, interval=0.2, message="a few calls")
    traffic.refresh_from_db()
    assert runs.mark(
        svc.TRAFFIC, traffic, Traffic.Status.RUNNING, Traffic.Status.INTERRUPTED, "traffic_end",
        "traffic interrupted: its worker (elsewhere) stopped responding",
    )  # fmt: skip

    def quiet():
        before = len(calls_in(traffic))
        time.sleep(2.0)
        return len(calls_in(traffic)) == before

    wait_for(quiet, 30, interval=0.1, message="the run's calls to stop")
    assert len(calls_in(traffic)) < traffic.calls
    assert JournalEvent.objects.filter(session=session, kind="traffic_end").count() == 1
    traffic.refresh_from_db()
    assert traffic.status == Traffic.Status.INTERRUPTED
    session.refresh_from_db()
    again = svc.traffic_start(
        session=session, user=session.owner, rate=2, duration_s=1, arrivals="even"
    )
    assert ended(again).status == Traffic.Status.DONE
    assert JournalEvent.objects.filter(session=session, kind="traffic_end").count() == 2


def test_a_worker_stopped_during_traffic_ends_its_runs_saying_so_within_the_grace_period(
    worker_process,
):
    """SIGTERM to the worker's process group (what ``make run`` and compose send; they kill
    what is left 10 to 15 s later): the run stops at once, its calls in flight finish, it
    ends STOPPED with "the worker was stopped" in its ``traffic_end``, and the worker exits
    within the grace period. The session starts again on another worker."""
    import os
    import signal

    session = private_session()
    victim = worker_process()
    traffic = svc.traffic_start(
        session=session, user=session.owner, rate=5, duration_s=300, arrivals="even"
    )
    wait_for(lambda: len(calls_in(traffic)) >= 3, 120, interval=0.2, message="a few calls")
    stopped_at = time.monotonic()
    os.killpg(victim.proc.pid, signal.SIGTERM)
    victim.proc.wait(60)
    took = time.monotonic() - stopped_at
    assert took < 10.0, f"the worker took {took:.1f} s to stop"
    traffic.refresh_from_db()
    assert traffic.status == Traffic.Status.STOPPED, (traffic.status, traffic.error)
    end = JournalEvent.objects.get(session=session, kind="traffic_end")
    assert "the worker was stopped" in end.message
    assert "stopped responding" not in end.message
    assert end.data["started"] == end.data["finished"] == len(calls_in(traffic))
    assert not JournalEvent.objects.filter(session=session, seq__gt=end.seq).exists()
    worker_process()
    session.refresh_from_db()
    again = svc.traffic_start(
        session=session, user=session.owner, rate=2, duration_s=1, arrivals="even"
    )
    assert ended(again).status == Traffic.Status.DONE
