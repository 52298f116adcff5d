"""docker-compose.yml (no Docker engine here): parsed and checked against the process
commands that `make run` uses (lab_project/processes.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from lab_project.processes import DAPHNE_CMD, WORKER_CMD, daphne_cmd

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_has_the_four_services(compose):
    assert {"web", "worker", "redis", "postgres"} <= set(compose["services"])


def test_web_runs_the_same_daphne_command_as_make_run(compose):
    assert compose["services"]["web"]["command"] == daphne_cmd("0.0.0.0", 8000)  # noqa: S104
    assert DAPHNE_CMD[:-1] == ["daphne", "--no-server-name", "-b", "127.0.0.1", "-p", "8000"]


def test_worker_runs_the_same_celery_command_as_make_run(compose):
    assert compose["services"]["worker"]["command"] == WORKER_CMD


def test_worker_command_uses_a_thread_pool():
    assert WORKER_CMD[WORKER_CMD.index("--pool") + 1] == "threads"


@pytest.mark.parametrize("service", ["web", "worker", "redis", "postgres"])
def test_every_long_running_service_has_a_health_check(compose, service):
    healthcheck = compose["services"][service]["healthcheck"]
    assert healthcheck["test"]
    assert healthcheck["interval"]


@pytest.mark.parametrize("service", ["web", "worker"])
def test_app_services_wait_for_healthy_redis_and_postgres(compose, service):
    depends = compose["services"][service]["depends_on"]
    assert depends["redis"]["condition"] == "service_healthy"
    assert depends["postgres"]["condition"] == "service_healthy"
    assert depends["migrate"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("service", ["web", "worker", "migrate"])
def test_app_services_point_at_the_compose_redis_and_postgres(compose, service):
    env = compose["services"][service]["environment"]
    assert env["REDIS_URL"] == "redis://redis:6379"
    assert env["DATABASE_URL"].startswith("postgres://")
    assert "@postgres:5432/" in env["DATABASE_URL"]


def test_dockerfile_default_command_is_the_web_command():
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile, re.MULTILINE)
    assert cmd
    assert json.loads(cmd.group(1)) == daphne_cmd("0.0.0.0", 8000)  # noqa: S104


def _variables_read_by_settings() -> set[str]:
    source = (ROOT / "lab_project" / "settings.py").read_text()
    return set(re.findall(r'env_\w+\(\s*"([A-Z_]+)"', source))


def test_env_example_documents_every_setting_variable():
    example = (ROOT / ".env.example").read_text()
    documented = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", example, re.MULTILINE))
    missing = _variables_read_by_settings() - documented
    assert not missing, f".env.example lacks {sorted(missing)}"


def test_compose_sets_only_variables_the_settings_know(compose):
    known = _variables_read_by_settings() | {"LAB_WORKER_CONCURRENCY"}
    env = compose["services"]["web"]["environment"]
    assert set(env) <= known, set(env) - known
