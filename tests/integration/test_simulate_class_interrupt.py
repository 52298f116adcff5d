"""``manage.py simulate_class --wait`` stopped midway (SIGTERM, as ``timeout`` sends it) stops
the bots' traffic it started: the runs end early, stopped, instead of going on for their
whole ``--for`` on the workers."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from labs.models import Traffic
from tests.conftest import make_classroom, make_scenario, tour_script
from tests.integration.conftest import ROOT, subprocess_env, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.mark.timeout(300)
def test_sigterm_while_waiting_stops_the_bots_traffic(worker_process, tmp_path):
    worker_process()
    room = make_classroom("Interrupted", join_code="SIGCLASS")
    room.scenarios.add(make_scenario("sig-tour", script=tour_script()))
    log = tmp_path / "simulate.log"
    with log.open("wb") as out:
        command = subprocess.Popen(
            [sys.executable, "manage.py", "simulate_class", "SIGCLASS", "--students", "2",
             "--rate", "2", "--for", "300", "--arrivals", "even", "--wait"],
            cwd=ROOT, env=subprocess_env(), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        wait_for(
            lambda: Traffic.objects.filter(
                session__classroom=room, status=Traffic.Status.RUNNING
            ).count() == 2,
            120, interval=0.2, message="both bots' traffic running",
        )  # fmt: skip
        command.send_signal(signal.SIGTERM)
        code = command.wait(60)
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
    output = log.read_text()
    assert code == 1, output
    assert "interrupted (SIGTERM received): stopped the bots' traffic (2 runs still going)" in (
        output
    ), output

    def ended():
        runs = list(Traffic.objects.filter(session__classroom=room))
        return all(r.status not in Traffic.ACTIVE_STATUSES for r in runs) and runs

    runs = wait_for(ended, 60, interval=0.2, message="the bots' traffic to end")
    assert {r.status for r in runs} == {Traffic.Status.STOPPED}, [r.status for r in runs]
