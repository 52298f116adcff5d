"""Every shipped scenario through services, a real Celery worker and Redis: its expectations,
measured from the journal, hold as they do in virtual time; a wrong one makes
``manage.py run_scenario`` exit 1 naming the expected and observed values."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from labs.engine import run_scenario
from labs.services import lab
from labs.services.scenario_runner import WorkerExecutor
from tests.conftest import make_classroom, make_scenario, make_student
from tests.integration.conftest import ROOT, subprocess_env

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SHIPPED = sorted(p.stem for p in (ROOT / "scenarios").glob("*.json"))


def _script(name: str) -> dict:
    return json.loads((ROOT / "scenarios" / f"{name}.json").read_text())


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenario_meets_its_expectations_on_the_worker(celery_worker, name):
    script = _script(name)
    scenario = make_scenario(f"{name}-live", script=script)
    room = make_classroom(f"{name} class", join_code=f"W{abs(hash(name)) % 10**7:07d}")
    room.scenarios.add(scenario)
    student = make_student(f"s-{name}", room)
    session = lab.session_open(user=student, classroom=room, scenario=scenario)

    live = run_scenario(script, executor=WorkerExecutor(session, user=student))

    assert live["clock"] == "real"
    assert live["checks"], f"{name} states no expectations"
    assert [
        (c["step"], c["measure"], c["expected"], c["observed"])
        for c in live["checks"]
        if not c["ok"]
    ] == []
    virtual = run_scenario(script)
    assert [(c["step"], c["measure"]) for c in live["checks"]] == [
        (c["step"], c["measure"]) for c in virtual["checks"]
    ]


def test_run_scenario_command_exits_1_on_a_failed_expectation(celery_worker, tmp_path):
    script = _script("tour")
    script["steps"] = [{"burst": 6, "expect": {"attempts_total": 7, "succeeded": 6}}]
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps(script))
    done = subprocess.run(
        [sys.executable, "manage.py", "run_scenario", str(path)],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    checks = json.loads(done.stdout)["checks"]
    assert [(c["measure"], c["expected"], c["observed"], c["ok"]) for c in checks] == [
        ("attempts_total", 7, 9, False),
        ("succeeded", 6, 6, True),
    ]
    assert "step 0 (burst 1) attempts_total: expected 7, observed 9" in done.stderr
