"""Who may read /metrics (allowed addresses and staff, nobody else), the strict parsing of
LAB_METRICS_ALLOWED_IPS, and what /healthz shows without a login."""

from __future__ import annotations

import ipaddress
import os
import runpy
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from tests.conftest import make_user

SETTINGS_FILE = Path(__file__).resolve().parents[2] / "lab_project" / "settings.py"
OUTSIDER = "203.0.113.7"


def get_metrics(client: Client, address: str, **headers):
    return client.get("/metrics", REMOTE_ADDR=address, **headers)


@pytest.mark.django_db
@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_loopback_may_scrape_by_default(client, address):
    response = get_metrics(client, address)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert b"failurelab_breaker_sessions" in response.content


@pytest.mark.django_db
def test_an_address_not_allowed_gets_a_404(client):
    response = get_metrics(client, OUTSIDER)
    assert response.status_code == 404
    assert b"failurelab" not in response.content


@pytest.mark.django_db
def test_a_forwarded_header_does_not_make_an_outsider_allowed(client):
    response = get_metrics(client, OUTSIDER, HTTP_X_FORWARDED_FOR="127.0.0.1")
    assert response.status_code == 404


@pytest.mark.django_db
def test_a_configured_network_may_scrape_ipv4_mapped_too(client, settings):
    settings.LAB_METRICS_ALLOWED_IPS = [ipaddress.ip_network("203.0.113.0/24")]
    assert get_metrics(client, OUTSIDER).status_code == 200
    assert get_metrics(client, f"::ffff:{OUTSIDER}").status_code == 200
    assert get_metrics(client, "127.0.0.1").status_code == 404


@pytest.mark.django_db
def test_staff_may_scrape_from_anywhere_a_student_may_not(client):
    student = make_user("stu")
    client.force_login(student)
    assert get_metrics(client, OUTSIDER).status_code == 404
    staff = make_user("ops", is_staff=True)
    client.force_login(staff)
    assert get_metrics(client, OUTSIDER).status_code == 200


@pytest.mark.django_db
def test_metrics_accepts_only_get(client):
    assert client.post("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 405


@pytest.mark.parametrize("value", ["10.0.0.1/8", "localhost", "127.0.0.1,,::1", "300.1.1.1"])
def test_a_malformed_allowed_list_stops_the_process_naming_the_variable(
    monkeypatch, tmp_path, value
):
    for name in list(os.environ):
        if name.startswith(("DJANGO_", "LAB_", "REDIS_", "DATABASE_")):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("LAB_TEST_DB_NAME", str(tmp_path / "test.sqlite3"))
    monkeypatch.setenv("LAB_METRICS_ALLOWED_IPS", value)
    with pytest.raises(ImproperlyConfigured, match="LAB_METRICS_ALLOWED_IPS"):
        runpy.run_path(str(SETTINGS_FILE))


def test_the_allowed_list_takes_addresses_and_networks(monkeypatch, tmp_path):
    monkeypatch.setenv("LAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("LAB_METRICS_ALLOWED_IPS", "10.1.2.3, 172.16.0.0/12,fd00::/8")
    loaded = runpy.run_path(str(SETTINGS_FILE))
    assert loaded["LAB_METRICS_ALLOWED_IPS"] == [
        ipaddress.ip_network("10.1.2.3/32"),
        ipaddress.ip_network("172.16.0.0/12"),
        ipaddress.ip_network("fd00::/8"),
    ]


@pytest.mark.django_db
def test_healthz_needs_no_login_and_names_only_checks(client):
    response = client.get("/healthz", REMOTE_ADDR=OUTSIDER)
    assert response.status_code in (200, 503)
    report = response.json()
    assert set(report) == {"status", "checks"}
    assert set(report["checks"]) == {"database", "redis", "broker", "worker", "writer"}
    allowed_keys = {"status", "ms", "error", "workers", "last_beat_s", "lag_s"}
    for check in report["checks"].values():
        assert set(check) <= allowed_keys
    assert report["checks"]["database"]["status"] == "ok"
    assert response["Cache-Control"].startswith("max-age=0")
