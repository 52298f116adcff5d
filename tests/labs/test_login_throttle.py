"""The login limits a classroom can live with (lab_project/login_limits.py on django-axes'
database handler): wrong passwords count per username and address together, with a short wait
after the limit; a bound on wrong passwords per username per hour from anywhere; refused tries
check no password and are not counted. The login page states the rules. A browser where a
name logged in before carries a device cookie for it: that name logs in there even while the
rules pause it for everyone else, within the browser's own small failure limit.

Runs on the real handler (rows in the test database), nothing mocked. Time passes by moving the
stored failures back ("time travel"), never by sleeping.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt, AccessFailureLog
from django.conf import settings
from django.core import signing
from django.core.management import call_command
from django.db.models import F
from django.test import Client, RequestFactory
from django.urls import reverse

from lab_project.login_limits import DEVICE_SALT, token_hash, trusted_device
from labs.models import LoginDevice

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
    """Let ``seconds`` pass for the login limits: every stored failure and trusted browser
    moves back in time."""
    delta = timedelta(seconds=seconds)
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - delta)
    AccessFailureLog.objects.update(attempt_time=F("attempt_time") - delta)
    LoginDevice.objects.update(created_at=F("created_at") - delta)


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


# --- Trusted browsers (device cookies) --------------------------------------------------------

DEVICE = settings.LAB_LOGIN_DEVICE_COOKIE_NAME
RIGHT = "correct-horse-battery-staple"  # the factories' password (factory.password)


def browser_that_logged_in(username: str, address: str = NAT) -> Client:
    """A browser where ``username`` logged in and then logged out (the device cookie stays)."""
    browser = Client()
    assert login(browser, username, RIGHT, address).status_code == 302
    assert DEVICE in browser.cookies
    browser.post(reverse("logout"))
    assert not logged_in(browser)
    return browser


def classmate_pauses(username: str) -> int:
    """A classmate behind the class's address guesses ``username``'s password, sitting out
    every wait, until well past the hourly bound. Returns the tries made."""
    classmate = Client()
    tries = 0
    for _round in range(2 * settings.LAB_LOGIN_NAME_HOURLY_LIMIT // settings.AXES_FAILURE_LIMIT):
        for i in range(settings.AXES_FAILURE_LIMIT):
            login(classmate, username, f"guess-{tries}-{i}")
            tries += 1
        travel(61)
    assert tries > settings.LAB_LOGIN_NAME_HOURLY_LIMIT
    assert name_paused_for_a_new_browser(username)
    return tries


def name_paused_for_a_new_browser(username: str) -> bool:
    response = login(Client(), username, RIGHT)
    return response.status_code == 429


def test_a_student_logs_in_at_once_on_their_own_browser_while_a_classmate_pauses_the_name(
    student,
):
    alices_browser = browser_that_logged_in("alice")
    classmate_pauses("alice")
    checked = AccessFailureLog.objects.filter(username="alice").count()
    assert checked == settings.LAB_LOGIN_NAME_HOURLY_LIMIT  # the guesser stays bounded ...

    response = login(alices_browser, "alice", RIGHT)  # ... alice, where she logged in, is not
    assert response.status_code == 302
    assert logged_in(alices_browser)
    # A new browser for alice (the guesser's, or hers on a new computer) is still refused,
    # with the hour's message and no password checked.
    fresh = login(Client(), "alice", RIGHT)
    assert fresh.status_code == 429
    assert f"{settings.LAB_LOGIN_NAME_HOURLY_LIMIT} wrong passwords within the last hour" in (
        fresh.content.decode()
    )
    assert AccessFailureLog.objects.filter(username="alice").count() == checked


def test_the_trusted_browser_also_skips_the_wait_of_a_name_from_its_address(student):
    alices_browser = browser_that_logged_in("alice")
    lock_alice_from_the_nat(Client())
    assert login(Client(), "alice", RIGHT).status_code == 429
    assert login(alices_browser, "alice", RIGHT).status_code == 302


def test_another_students_device_cookie_gives_no_bypass(student, factory):
    factory.student("bob", student.memberships.first().classroom)
    bobs_browser = browser_that_logged_in("bob")
    classmate_pauses("alice")
    response = login(bobs_browser, "alice", RIGHT)
    assert response.status_code == 429
    assert not logged_in(bobs_browser)
    assert login(bobs_browser, "bob", RIGHT).status_code == 302  # bob's own trust is intact


def forged(cookie: str) -> list[str]:
    """Forgeries of a real device cookie of alice's."""
    payload, _, signature = cookie.rpartition(":")
    tokens = signing.loads(cookie, salt=DEVICE_SALT)
    flipped = signature[:-1] + ("A" if signature[-1] != "A" else "B")
    return [
        f"{payload}:{flipped}",  # the signature altered
        signing.dumps(tokens, salt="another-salt", compress=False),  # another salt
        signing.dumps(tokens, key="not-this-sites-key", salt=DEVICE_SALT),  # another key
        signing.dumps(["a-token-nobody-was-given"], salt=DEVICE_SALT),  # no such browser
        tokens[0],  # the bare token, unsigned
        "",
    ]


def test_a_forged_device_cookie_gives_no_bypass(student):
    alices_browser = browser_that_logged_in("alice")
    real = alices_browser.cookies[DEVICE].value
    classmate_pauses("alice")
    for value in forged(real):
        browser = Client()
        browser.cookies[DEVICE] = value
        response = login(browser, "alice", RIGHT)
        assert response.status_code == 429, value
        assert not logged_in(browser)
    assert login(alices_browser, "alice", RIGHT).status_code == 302  # the real one works


def test_a_device_cookie_with_too_many_wrong_passwords_stops_being_trusted(student):
    alices_browser = browser_that_logged_in("alice")
    classmate_pauses("alice")
    checked = AccessFailureLog.objects.filter(username="alice").count()
    limit = settings.LAB_LOGIN_DEVICE_FAILURE_LIMIT
    # Someone at alice's browser (a shared computer) guesses: the browser's own tries are
    # checked, and counted on the browser only.
    for i in range(limit):
        response = login(alices_browser, "alice", f"at-her-desk-{i}")
        assert response.status_code == 200
        assert "Please enter a correct username and password" in response.content.decode()
    assert not LoginDevice.objects.filter(user=student).exists()  # forgotten
    assert AccessFailureLog.objects.filter(username="alice").count() == checked
    # Now the browser is like any other: the name's pause holds there too.
    response = login(alices_browser, "alice", RIGHT)
    assert response.status_code == 429
    assert not logged_in(alices_browser)


def test_a_right_password_gives_a_trusted_browser_its_tries_back(student):
    alices_browser = browser_that_logged_in("alice")
    classmate_pauses("alice")
    limit = settings.LAB_LOGIN_DEVICE_FAILURE_LIMIT
    for _day in range(3):  # a few typos each time, then the right password
        for i in range(limit - 1):
            assert login(alices_browser, "alice", f"typo-{i}").status_code == 200
        assert login(alices_browser, "alice", RIGHT).status_code == 302
        alices_browser.post(reverse("logout"))
    assert LoginDevice.objects.get(user=student).failures == 0


def test_tries_are_claimed_before_the_password_is_checked(student):
    """However many tries from one trusted browser run at once, at most the browser's limit of
    them are trusted: each claims one with a conditional UPDATE before its password is
    checked."""
    alices_browser = browser_that_logged_in("alice")
    cookie = alices_browser.cookies[DEVICE].value
    trusted = 0
    for _ in range(3 * settings.LAB_LOGIN_DEVICE_FAILURE_LIMIT):
        request = RequestFactory().post(reverse("login"))
        request.COOKIES[DEVICE] = cookie
        trusted += trusted_device(request, "alice") is not None
        assert trusted_device(request, "alice") is trusted_device(request, "alice")  # once
    assert trusted == settings.LAB_LOGIN_DEVICE_FAILURE_LIMIT


def test_the_device_cookie_is_signed_httponly_lax_and_for_the_login_page_only(student):
    response = login(Client(), "alice", RIGHT)
    cookie = response.cookies[DEVICE]
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Lax"
    assert cookie["path"] == reverse("login")
    assert cookie["max-age"] == settings.LAB_LOGIN_DEVICE_COOKIE_DAYS * 24 * 3600
    assert not cookie["secure"]  # plain HTTP (tests, development) ...
    secure = Client().post(
        reverse("login"), {"username": "alice", "password": RIGHT}, REMOTE_ADDR=NAT, secure=True
    )
    assert secure.cookies[DEVICE]["secure"] is True  # ... Secure over HTTPS
    # The value names no one: a signed list of random tokens, of which the database keeps
    # only a hash.
    assert "alice" not in cookie.value
    (token,) = signing.loads(cookie.value, salt=DEVICE_SALT)
    assert len(token) >= 20
    assert LoginDevice.objects.filter(user=student, token_hash=token_hash(token)).exists()
    assert not LoginDevice.objects.filter(token_hash=token).exists()


def test_a_shared_computer_stays_trusted_for_each_name_that_logged_in_on_it(student, factory):
    classroom = student.memberships.first().classroom
    factory.student("bob", classroom)
    shared = browser_that_logged_in("alice")
    assert login(shared, "bob", RIGHT).status_code == 302
    shared.post(reverse("logout"))
    classmate_pauses("alice")
    assert login(shared, "alice", RIGHT).status_code == 302


def test_a_browser_remembers_the_latest_names_only(settings, student, factory):
    settings.LAB_LOGIN_DEVICE_NAMES = 2
    classroom = student.memberships.first().classroom
    for name in ("bob", "carol"):
        factory.student(name, classroom)
    shared = browser_that_logged_in("alice")
    for name in ("bob", "carol"):
        assert login(shared, name, RIGHT).status_code == 302
        shared.post(reverse("logout"))
    assert len(signing.loads(shared.cookies[DEVICE].value, salt=DEVICE_SALT)) == 2
    assert not LoginDevice.objects.filter(user=student).exists()  # alice's went first
    classmate_pauses("alice")
    assert login(shared, "alice", RIGHT).status_code == 429


def test_a_browser_is_trusted_for_the_cookies_lifetime_only(student):
    alices_browser = browser_that_logged_in("alice")
    classmate_pauses("alice")
    travel(settings.LAB_LOGIN_DEVICE_COOKIE_DAYS * 24 * 3600 + 60)
    # The month also let the name's failures expire: pause it again within the hour.
    classmate_pauses("alice")
    assert login(alices_browser, "alice", RIGHT).status_code == 429


def test_a_password_change_leaves_every_other_browser_untrusted(student):
    first = browser_that_logged_in("alice", ELSEWHERE)
    second = Client()
    assert login(second, "alice", RIGHT).status_code == 302
    new_password = "a-garden-of-forking-paths"
    response = second.post(
        reverse("password_change"),
        {"old_password": RIGHT, "new_password1": new_password, "new_password2": new_password},
    )
    assert response.status_code == 302
    second.post(reverse("logout"))
    classmate_pauses("alice")
    assert login(first, "alice", new_password, ELSEWHERE).status_code == 429
    assert login(second, "alice", new_password).status_code == 302  # where it was changed


def test_a_roster_password_trusts_the_browser_once_the_students_own_is_chosen(classroom):
    from labs.services.accounts import roster_import

    (account,) = roster_import(classroom=classroom, text="dana,Dana Scully,\n")
    browser = Client()
    response = login(browser, "dana", account.password)
    assert response["Location"] == reverse("choose_password")
    assert DEVICE not in response.cookies  # not for the one-time password
    own = "a-garden-of-forking-paths"
    response = browser.post(
        reverse("choose_password"), {"new_password1": own, "new_password2": own}
    )
    assert response.status_code == 302
    assert DEVICE in response.cookies
    browser.post(reverse("logout"))
    for minute in range(settings.LAB_LOGIN_NAME_HOURLY_LIMIT // settings.AXES_FAILURE_LIMIT):
        for i in range(settings.AXES_FAILURE_LIMIT):
            login(Client(), "dana", f"guess-{minute}-{i}")
        travel(61)
    assert login(Client(), "dana", own).status_code == 429
    assert login(browser, "dana", own).status_code == 302


def test_a_sign_up_trusts_the_browser_for_the_new_name(classroom):
    own = "a-long-unusual-passphrase-42"
    browser = Client()
    response = browser.post(
        reverse("labs:signup"),
        {
            "join_code": classroom.join_code,
            "username": "erin",
            "password1": own,
            "password2": own,
        },
        REMOTE_ADDR=NAT,
    )
    assert response.status_code == 302
    assert DEVICE in response.cookies
    browser.post(reverse("logout"))
    for minute in range(settings.LAB_LOGIN_NAME_HOURLY_LIMIT // settings.AXES_FAILURE_LIMIT):
        for i in range(settings.AXES_FAILURE_LIMIT):
            login(Client(), "erin", f"guess-{minute}-{i}")
        travel(61)
    assert login(Client(), "erin", own).status_code == 429
    assert login(browser, "erin", own).status_code == 302


def test_the_pages_say_a_known_computer_logs_in_during_a_pause(client, student):
    sentence = (
        "On a computer where you have logged in before, you can log in even while your name "
        "is paused."
    )
    page = client.get(reverse("login")).content.decode()
    assert sentence in page
    assert "On any other computer, the pause applies to you too." in page
    lock_alice_from_the_nat(client)
    refusal = login(client, "alice", RIGHT).content.decode()
    assert sentence in refusal
    assert "On this one, the pause applies." in refusal


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LAB_LOGIN_DEVICE_COOKIE_DAYS": "0"}, "LAB_LOGIN_DEVICE_COOKIE_DAYS must be between 1"),
        ({"LAB_LOGIN_DEVICE_COOKIE_DAYS": "30d"}, "LAB_LOGIN_DEVICE_COOKIE_DAYS must be an integ"),
        ({"LAB_LOGIN_DEVICE_FAILURE_LIMIT": "21"}, "LAB_LOGIN_DEVICE_FAILURE_LIMIT must be betw"),
        ({"LAB_LOGIN_DEVICE_NAMES": "0"}, "LAB_LOGIN_DEVICE_NAMES must be between 1 and 30"),
    ],
)
def test_the_device_cookie_settings_are_strict(monkeypatch, tmp_path, env, message):
    from django.core.exceptions import ImproperlyConfigured

    from tests.test_settings import load_settings

    with pytest.raises(ImproperlyConfigured, match=message):
        load_settings(monkeypatch, tmp_path, **env)


def test_the_device_cookie_settings_come_from_the_environment(monkeypatch, tmp_path):
    from tests.test_settings import load_settings

    defaults = load_settings(monkeypatch, tmp_path)
    assert defaults["LAB_LOGIN_DEVICE_COOKIE_DAYS"] == 30
    assert defaults["LAB_LOGIN_DEVICE_FAILURE_LIMIT"] == 5
    assert defaults["LAB_LOGIN_DEVICE_NAMES"] == 10
    loaded = load_settings(
        monkeypatch,
        tmp_path,
        LAB_LOGIN_DEVICE_COOKIE_DAYS="7",
        LAB_LOGIN_DEVICE_FAILURE_LIMIT="3",
        LAB_LOGIN_DEVICE_NAMES="4",
    )
    assert loaded["LAB_LOGIN_DEVICE_COOKIE_DAYS"] == 7
    assert loaded["LAB_LOGIN_DEVICE_FAILURE_LIMIT"] == 3
    assert loaded["LAB_LOGIN_DEVICE_NAMES"] == 4
