"""The tour (scenarios/tour.json) through services, a real worker and Redis equals the engine's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from labs.engine import run_scenario
from labs.models import JournalEvent
from labs.services import lab
from labs.services.scenario_runner import WorkerExecutor
from tests.conftest import make_classroom, make_scenario, make_student, tour_script
from tests.integration.conftest import ROOT, subprocess_env

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _shape(output: dict) -> dict:
    """What must match exactly between virtual and real time: everything but timings."""
    return {
        "calls": [(c["call"], c["burst"], c["attempts"], c["outcome"], c["backoff_ms"])
                  for c in output["calls"]],
        "transitions": [(t["from"], t["to"], t["call"]) for t in output["transitions"]],
        "bursts": [(b["calls"], b["succeeded"], b["attempts"]) for b in output["bursts"]],
    }  # fmt: skip


def test_tour_through_the_worker_gives_the_engines_counts_and_transitions(celery_worker):
    script = tour_script()
    scenario = make_scenario("tour-live", script=script)
    room = make_classroom("Tour class", join_code="TOURTOUR")
    room.scenarios.add(scenario)
    student = make_student("tourist", room)
    session = lab.session_open(user=student, classroom=room, scenario=scenario)

    live = run_scenario(script, executor=WorkerExecutor(session, user=student))
    virtual = run_scenario(script)

    assert _shape(live) == _shape(virtual)
    assert [b["attempts"] for b in live["bursts"]] == [[4, 1, 1, 1, 1, 1], [4, 4, 4, 0, 0, 0], [1]]
    assert live["bursts"][0]["backoff_ms_total"] == 175
    assert [(t["from"], t["to"], t["call"]) for t in live["transitions"]] == [
        ("closed", "open", 9), ("open", "half_open", 13), ("half_open", "closed", 13),
    ]  # fmt: skip
    # The journal names the probe's call number, as the tour promises.
    closing = JournalEvent.objects.get(session=session, kind="transition", state_to="closed")
    assert closing.call_no == 13
    # Real time: at least the configured sleeps (9 attempts * 5 ms + 175 ms in burst 1).
    assert live["bursts"][0]["wall_ms"] >= 220


def test_run_scenario_command_prints_the_json_contract(celery_worker, tmp_path):
    """The headless command, in its own process, against the worker running in this one."""
    script = tour_script(steps=[{"burst": 6}, {"set_dependency": {"mode": "down"}}, {"burst": 4}])
    path = tmp_path / "short-tour.json"
    path.write_text(json.dumps(script))
    done = subprocess.run(
        [sys.executable, "manage.py", "run_scenario", str(path)],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)
    assert output["clock"] == "real"
    assert [b["attempts"] for b in output["bursts"]] == [[4, 1, 1, 1, 1, 1], [4, 4, 4, 0]]
    assert [(t["from"], t["to"], t["call"]) for t in output["transitions"]] == [
        ("closed", "open", 9)
    ]
    # The throwaway session is gone afterwards.
    assert not get_user_model().objects.filter(username__startswith="headless-").exists()


def test_run_scenario_command_refuses_a_bad_script_with_exit_2(tmp_path, transactional_db):
    script = tour_script()
    script["dependency"]["mode"] = "sideways"
    script["policy"]["max_attempts"] = 9
    path = Path(tmp_path / "bad.json")
    path.write_text(json.dumps(script))
    done = subprocess.run(
        [sys.executable, "manage.py", "run_scenario", str(path)],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert any(line.startswith("dependency.mode:") for line in lines)
    assert any(line.startswith("policy.max_attempts:") and "1" in line and "5" in line for line in lines)
