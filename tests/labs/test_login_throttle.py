"""Failed logins are throttled per username and per address (django-axes, database handler):
after the failure limit the login answers 429 with a page saying when to try again, the right
password included, until the cool-off has passed. The login page states the rule.

Runs on the real database handler (rows in the test database), nothing mocked.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import override_settings
from django.urls import reverse

pytestmark = pytest.mark.django_db

ATTACKER = "192.0.2.10"  # TEST-NET-1: a documentation address, never contacted
ELSEWHERE = "198.51.100.20"  # TEST-NET-2


def login(client, username: str, password: str, address: str = "127.0.0.1"):
    return client.post(
        reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address
    )


def logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_the_settings_throttle_per_username_and_per_address():
    assert settings.AXES_LOCKOUT_PARAMETERS == ["username", "ip_address"]
    assert 3 <= settings.AXES_FAILURE_LIMIT <= 20
    assert timedelta(minutes=1) <= settings.AXES_COOLOFF_TIME
    assert settings.AXES_HANDLER == "axes.handlers.database.AxesDatabaseHandler"
    assert settings.AUTHENTICATION_BACKENDS[0] == "axes.backends.AxesStandaloneBackend"


def test_fifty_wrong_passwords_lock_the_account_and_the_right_one_is_refused(client, student):
    limit = settings.AXES_FAILURE_LIMIT
    statuses = [login(client, "alice", f"wrong-{i}").status_code for i in range(50)]
    assert statuses[: limit - 1] == [200] * (limit - 1)  # ordinary refusals first
    assert set(statuses[limit:]) == {429}

    response = login(client, "alice", "correct-horse-battery-staple")
    assert response.status_code == 429
    assert not logged_in(client)
    body = response.content.decode()
    assert "Too many failed logins" in body
    assert f"{limit} failed" in body
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    assert f"{minutes} minutes" in body


def test_a_locked_username_stays_locked_from_another_address(client, student):
    for i in range(settings.AXES_FAILURE_LIMIT):
        login(client, "alice", f"wrong-{i}", address=ATTACKER)
    response = login(client, "alice", "correct-horse-battery-staple", address=ELSEWHERE)
    assert response.status_code == 429
    assert not logged_in(client)


def test_an_address_trying_many_usernames_is_locked_out(client, student, factory):
    factory.user("carol")
    for i in range(settings.AXES_FAILURE_LIMIT):
        login(client, f"guess{i}", "password", address=ATTACKER)
    # A real account with its right password, from the locked address: refused.
    assert login(client, "alice", factory.password, address=ATTACKER).status_code == 429
    assert not logged_in(client)
    # The same account from another address is not affected.
    assert login(client, "carol", factory.password, address=ELSEWHERE).status_code == 302
    assert logged_in(client)


def test_the_lockout_ends_after_the_cool_off(client, student, factory):
    with override_settings(AXES_COOLOFF_TIME=timedelta(seconds=1)):
        for i in range(settings.AXES_FAILURE_LIMIT):
            login(client, "alice", f"wrong-{i}")
        assert login(client, "alice", factory.password).status_code == 429
        time.sleep(1.5)  # only a lower bound: a slower machine waits longer, still past it
        response = login(client, "alice", factory.password)
    assert response.status_code == 302
    assert logged_in(client)


def test_a_few_mistakes_then_the_right_password_still_logs_in(client, student, factory):
    for i in range(settings.AXES_FAILURE_LIMIT - 1):
        assert login(client, "alice", f"wrong-{i}").status_code == 200
    assert login(client, "alice", factory.password).status_code == 302


def test_the_login_page_states_the_limit_and_the_lockout(client):
    body = client.get(reverse("login")).content.decode()
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    assert f"After {settings.AXES_FAILURE_LIMIT} failed logins" in body
    assert f"{minutes} minutes" in body


def test_behind_the_tls_proxy_failures_count_against_the_address_the_proxy_saw(
    monkeypatch, tmp_path
):
    from django.http import HttpRequest

    from tests.test_settings import load_settings

    request = HttpRequest()
    request.META = {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": f"{ELSEWHERE}, {ATTACKER}"}
    proxied = load_settings(monkeypatch, tmp_path, DJANGO_BEHIND_TLS_PROXY="true")
    # The proxy appended the address it saw; the entry before it is whatever the client sent.
    assert proxied["AXES_CLIENT_IP_CALLABLE"](request) == ATTACKER
    direct = load_settings(monkeypatch, tmp_path)
    assert direct["AXES_CLIENT_IP_CALLABLE"](request) == "127.0.0.1"
