"""``manage.py simulate_class`` through the real stack: bot students in shared mode, their
traffic run by a real worker process, every attempt journaled and counted by the class's
shared model; bad options refused naming the option and its range."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from labs.live import runtime
from labs.models import JournalEvent, LabSession, Traffic
from tests.conftest import make_classroom, make_scenario, tour_script
from tests.integration.conftest import wait_for
from tests.integration.test_shared_worker import counters_agree_with_journal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def a_class():
    scenario = make_scenario("sim-tour", script=tour_script())
    room = make_classroom("Simulated", join_code="SIMCLASS")
    room.scenarios.add(scenario)
    return room


def test_bad_options_are_refused_naming_them(capsys):
    room = a_class()
    with pytest.raises(CommandError) as info:
        call_command(
            "simulate_class", str(room.pk), "--students", "0", "--policy", "wild", "--rate", "21"
        )
    text = str(info.value)
    assert "students: must be between 1 and 200" in text
    assert "policy: must be one of naive, jitter, budget, breaker, resilient, mixed" in text
    assert "rate: must be between 1 and 20" in text
    assert not LabSession.objects.exists()
    with pytest.raises(CommandError, match="CLASS: no class"):
        call_command("simulate_class", "NOSUCHCLASS")


def test_a_few_bots_run_their_traffic_on_two_worker_processes(worker_process, capsys):
    worker_process()
    worker_process()
    room = a_class()
    args = ["simulate_class", "SIMCLASS", "--students", "3", "--policy", "mixed"]
    call_command(*args, "--rate", "3", "--for", "2", "--arrivals", "even", "--wait")
    sessions = list(LabSession.objects.filter(classroom=room))
    assert len(sessions) == 3
    assert all(s.dependency["mode"] == "shared" for s in sessions)
    assert {s.owner.username for s in sessions} == {f"bot-c{room.pk}-{i:03d}" for i in range(3)}
    runs = list(Traffic.objects.filter(session__classroom=room))
    assert len(runs) == 3

    def all_ended():
        return not Traffic.objects.filter(
            pk__in=[t.pk for t in runs], status__in=["queued", "running"]
        ).exists()

    wait_for(all_ended, 120, interval=0.2, message="the bots' traffic to end")
    for run in Traffic.objects.filter(pk__in=[t.pk for t in runs]):
        assert run.status == Traffic.Status.DONE, run.error
        assert run.calls == 6 and run.summary["finished"] == 6
    results = JournalEvent.objects.filter(session__classroom=room, kind="call_result")
    assert results.count() == 18
    attempts = list(JournalEvent.objects.filter(session__classroom=room, kind="attempt"))
    assert attempts and all("outcome" in a.data for a in attempts)
    counters_agree_with_journal(room.pk, attempts)
    # reusing the class reuses the bots
    call_command(*args, "--rate", "1", "--for", "1")
    assert LabSession.objects.filter(classroom=room).count() == 3
    assert runtime.shared_model(room.pk).state()["config"]["servers"] == 8
