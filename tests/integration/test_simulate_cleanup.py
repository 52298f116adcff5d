"""``manage.py simulate_class --cleanup`` while the bots' traffic runs on a real worker process:
their runs are stopped (calls in flight finish), then the bots, their sessions and journals
are removed; nothing of theirs is written afterwards, and a real student is untouched."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from labs.journal import store as journal
from labs.models import JournalEvent, LabSession, Membership, Traffic
from labs.services import lab
from labs.services.simulate import classroom_simulate
from tests.conftest import make_classroom, make_scenario, make_student, tour_script
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_cleanup_stops_the_running_bots_and_removes_them(worker_process, capsys):
    worker_process()
    scenario = make_scenario("sim-tour", script=tour_script())
    room = make_classroom("Simulated", join_code="SIMCLEAN")
    room.scenarios.add(scenario)
    alice = make_student("alice", room)
    hers = lab.session_open(user=alice, classroom=room, scenario=scenario)
    journal.record([journal.entry(hers, "policy_set", message="alice was here")])

    simulation = classroom_simulate(
        classroom=room, students=3, policy="naive", rate=5, duration_s=120, arrivals="even"
    )
    ids = [s.pk for s in simulation.sessions]
    wait_for(
        lambda: JournalEvent.objects.filter(session__in=ids, kind="call_result").count() >= 6,
        60,
        interval=0.2,
        message="the bots' calls to be journaled",
    )
    assert Traffic.objects.filter(session__in=ids, status="running").count() == 3

    call_command("simulate_class", "SIMCLEAN", "--cleanup")

    assert "removed 3 simulated students, 3 sessions and" in capsys.readouterr().out
    assert not LabSession.objects.filter(pk__in=ids).exists()
    assert not Traffic.objects.filter(session__in=ids).exists()
    assert not Membership.objects.filter(classroom=room, simulated=True).exists()
    assert not get_user_model().objects.filter(username__startswith=f"bot-c{room.pk}-").exists()
    time.sleep(2)  # a run that went on would write its next calls' rows within this
    assert not JournalEvent.objects.filter(session__in=ids).exists()
    assert LabSession.objects.filter(pk=hers.pk).exists()
    assert JournalEvent.objects.filter(session=hers, message="alice was here").exists()
