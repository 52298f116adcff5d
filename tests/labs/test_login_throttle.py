"""The login limits a classroom can live with (lab_project/login_limits.py on django-axes'
database handler): wrong passwords count per username and address together, with a short wait
after the limit; a bound on wrong passwords per username per hour from anywhere; refused tries
check no password and are not counted. The login page states the rules.

Runs on the real handler (rows in the test database), nothing mocked. Time passes by moving the
stored failures back ("time travel"), never by sleeping.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt, AccessFailureLog
from django.conf import settings
from django.core.management import call_command
from django.db.models import F
from django.urls import reverse

pytestmark = pytest.mark.django_db

NAT = "192.0.2.10"  # TEST-NET-1: the class's one address (a documentation address)
ELSEWHERE = "198.51.100.20"  # TEST-NET-2


def login(client, username: str, password: str, address: str = NAT):
    return client.post(
        reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address
    )


def logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def travel(seconds: float) -> None:
    """Let ``seconds`` pass for the login limits: every stored failure moves back in time."""
    delta = timedelta(seconds=seconds)
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - delta)
    AccessFailureLog.objects.update(attempt_time=F("attempt_time") - delta)


def lock_alice_from_the_nat(client) -> None:
    """The failure limit's wrong passwords for alice from the class's address: each is
    checked; the last one starts the wait (and answers with it)."""
    limit = settings.AXES_FAILURE_LIMIT
    statuses = [login(client, "alice", f"wrong-{i}").status_code for i in range(limit)]
    assert statuses == [200] * (limit - 1) + [429]


def test_the_settings_count_a_name_from_one_place_and_bound_a_name_per_hour():
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]
    assert settings.AXES_FAILURE_LIMIT == 5
    assert timedelta(minutes=1) == settings.AXES_COOLOFF_TIME
    assert settings.AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT is False
    assert settings.AXES_ENABLE_ACCESS_FAILURE_LOG is True
    assert settings.LAB_LOGIN_NAME_HOURLY_LIMIT == 30
    assert settings.AXES_HANDLER == "lab_project.login_limits.LoginLimitHandler"
    assert settings.AUTHENTICATION_BACKENDS[0] == "axes.backends.AxesStandaloneBackend"


def test_a_second_student_behind_the_same_address_logs_in_while_a_first_is_guessed_at(
    client, student, factory
):
    factory.student("carol", student.memberships.first().classroom)
    for i in range(3 * settings.AXES_FAILURE_LIMIT):
        login(client, "alice", f"guess-{i}")
    assert login(client, "alice", factory.password).status_code == 429  # alice waits ...
    response = login(client, "carol", factory.password)  # ... carol, same address, does not
    assert response.status_code == 302
    assert logged_in(client)


def test_a_class_behind_one_address_with_typos_everywhere_is_never_locked_out(client, factory):
    classroom = factory.classroom("Big class")
    names = [f"s{i:02d}" for i in range(30)]
    for name in names:
        factory.student(name, classroom)
    for name in names:  # everyone mistypes as often as they can without a wait
        for i in range(settings.AXES_FAILURE_LIMIT - 1):
            assert login(client, name, f"typo-{i}").status_code == 200
    for name in names:
        client.logout()
        assert login(client, name, factory.password).status_code == 302, name


def test_a_classmates_wrong_passwords_keep_a_student_out_for_a_minute_at_most(client, student):
    lock_alice_from_the_nat(client)
    # The classmate goes on typing during the wait: nothing is checked, the wait stays.
    for i in range(20):
        assert login(client, "alice", f"more-{i}").status_code == 429
    assert AccessFailureLog.objects.filter(username="alice").count() == settings.AXES_FAILURE_LIMIT

    travel(55)
    response = login(client, "alice", "correct-horse-battery-staple")
    assert response.status_code == 429  # a real wait, not none ...
    assert not logged_in(client)
    travel(6)  # ... of a minute at most
    assert login(client, "alice", "correct-horse-battery-staple").status_code == 302
    assert logged_in(client)


def test_the_refusal_says_which_rule_and_when_to_try_again(client, student):
    lock_alice_from_the_nat(client)
    travel(20)
    response = login(client, "alice", "wrong-again")
    assert response.status_code == 429
    assert 39 <= int(response["Retry-After"]) <= 41
    body = response.content.decode()
    assert f"This name had {settings.AXES_FAILURE_LIMIT} wrong passwords from this place" in body
    assert "Try again in 40 seconds" in body or "Try again in 41 seconds" in body
    assert "No password typed during the pause is checked" in body


def test_the_name_from_another_place_is_not_kept_waiting(client, student):
    lock_alice_from_the_nat(client)
    assert login(client, "alice", "correct-horse-battery-staple", ELSEWHERE).status_code == 302


def test_a_guesser_gets_no_more_than_the_hourly_bound_for_one_username(client, student):
    limit = settings.LAB_LOGIN_NAME_HOURLY_LIMIT
    tries = 0
    # A guesser with many addresses and all the patience in the world, within one hour: every
    # wait is sat out, and each round comes from a new address.
    for minute in range(45):
        address = f"203.0.113.{minute + 1}"
        for i in range(settings.AXES_FAILURE_LIMIT):
            login(client, "alice", f"guess-{minute}-{i}", address)
            tries += 1
        travel(61)
    assert tries > 3 * limit
    # Only the bound's guesses had their password checked (each checked one is logged).
    assert AccessFailureLog.objects.filter(username="alice").count() == limit
    # The right password is refused too (no password is checked), with the hour's message.
    response = login(client, "alice", "correct-horse-battery-staple", ELSEWHERE)
    assert response.status_code == 429
    assert f"{limit} wrong passwords within the last hour" in response.content.decode()
    # Once the first failures are an hour old, passwords are checked again.
    travel(3600)
    assert login(client, "alice", "correct-horse-battery-staple", ELSEWHERE).status_code == 302


def test_an_administrator_lifts_an_hourly_pause(client, student):
    for minute in range(settings.LAB_LOGIN_NAME_HOURLY_LIMIT // settings.AXES_FAILURE_LIMIT):
        for i in range(settings.AXES_FAILURE_LIMIT):
            login(client, "alice", f"guess-{minute}-{i}", f"203.0.113.{minute + 1}")
        travel(61)
    assert login(client, "alice", "correct-horse-battery-staple", ELSEWHERE).status_code == 429
    call_command("axes_reset_username", "alice")
    assert login(client, "alice", "correct-horse-battery-staple", ELSEWHERE).status_code == 302


def test_a_few_mistakes_then_the_right_password_still_logs_in(client, student, factory):
    for i in range(settings.AXES_FAILURE_LIMIT - 1):
        assert login(client, "alice", f"wrong-{i}").status_code == 200
    assert login(client, "alice", factory.password).status_code == 302


def test_the_login_page_states_the_limits(client):
    body = client.get(reverse("login")).content.decode()
    assert (
        f"After {settings.AXES_FAILURE_LIMIT} wrong passwords for a name from one place, "
        "that place waits a minute before trying that name again"
    ) in body
    assert f"{settings.LAB_LOGIN_NAME_HOURLY_LIMIT} wrong passwords within an hour" in body


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LAB_LOGIN_FAILURE_LIMIT": "2"}, "LAB_LOGIN_FAILURE_LIMIT must be between 3 and 100"),
        ({"LAB_LOGIN_COOLOFF_SECONDS": "5"}, "LAB_LOGIN_COOLOFF_SECONDS must be between 10"),
        ({"LAB_LOGIN_NAME_HOURLY_LIMIT": "x"}, "LAB_LOGIN_NAME_HOURLY_LIMIT must be an integer"),
        (
            {"LAB_LOGIN_FAILURE_LIMIT": "10", "LAB_LOGIN_NAME_HOURLY_LIMIT": "5"},
            "LAB_LOGIN_NAME_HOURLY_LIMIT (5) must be at least LAB_LOGIN_FAILURE_LIMIT (10)",
        ),
        ({"LAB_LOGIN_COOLOFF_MINUTES": "15"}, "replaced by LAB_LOGIN_COOLOFF_SECONDS"),
    ],
)
def test_the_limits_are_strict_settings(monkeypatch, tmp_path, env, message):
    from django.core.exceptions import ImproperlyConfigured

    from tests.test_settings import load_settings

    with pytest.raises(ImproperlyConfigured, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_settings(monkeypatch, tmp_path, **env)


def test_the_limits_come_from_the_environment(monkeypatch, tmp_path):
    from tests.test_settings import load_settings

    loaded = load_settings(
        monkeypatch,
        tmp_path,
        LAB_LOGIN_FAILURE_LIMIT="8",
        LAB_LOGIN_COOLOFF_SECONDS="30",
        LAB_LOGIN_NAME_HOURLY_LIMIT="40",
    )
    assert loaded["AXES_FAILURE_LIMIT"] == 8
    assert loaded["AXES_COOLOFF_TIME"] == timedelta(seconds=30)
    assert loaded["LAB_LOGIN_NAME_HOURLY_LIMIT"] == 40


def test_behind_the_tls_proxy_failures_count_against_the_address_the_proxy_saw(
    monkeypatch, tmp_path
):
    from django.http import HttpRequest

    from tests.test_settings import load_settings

    request = HttpRequest()
    request.META = {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": f"{ELSEWHERE}, {NAT}"}
    proxied = load_settings(monkeypatch, tmp_path, DJANGO_BEHIND_TLS_PROXY="true")
    # The proxy appended the address it saw; the entry before it is whatever the client sent.
    assert proxied["AXES_CLIENT_IP_CALLABLE"](request) == NAT
    direct = load_settings(monkeypatch, tmp_path)
    assert direct["AXES_CLIENT_IP_CALLABLE"](request) == "127.0.0.1"
