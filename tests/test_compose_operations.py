"""docker-compose.yml and operations: the web health check is /healthz, and every process of
the lab writes its metrics into one shared directory that /metrics reads."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
APP_SERVICES = ("web", "worker", "migrate")


def test_the_web_health_check_is_healthz():
    test = " ".join(COMPOSE["services"]["web"]["healthcheck"]["test"])
    assert "http://127.0.0.1:8000/healthz" in test


def test_every_app_service_mounts_the_metrics_directory_it_is_told_about():
    for name in APP_SERVICES:
        service = COMPOSE["services"][name]
        directory = service["environment"]["PROMETHEUS_MULTIPROC_DIR"]
        assert f"metrics:{directory}" in service["volumes"], name
    assert "metrics" in COMPOSE["volumes"]


def test_metrics_scrapers_are_loopback_unless_configured():
    env = COMPOSE["services"]["web"]["environment"]
    assert env["LAB_METRICS_ALLOWED_IPS"] == "${LAB_METRICS_ALLOWED_IPS:-127.0.0.1,::1}"
