"""Accounts for a real class: a roster's one-time password logs in once and then asks for the
student's own; the roster's separator (comma, semicolon, tab) is found, or named when it is
none of them."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from labs.models import OneTimePassword
from labs.services.accounts import RosterError, roster_import, roster_parse, roster_separator

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "a-garden-of-forking-paths"


def login(client, username: str, password: str):
    return client.post(reverse("login"), {"username": username, "password": password})


@pytest.fixture
def roster(classroom):
    accounts = roster_import(classroom=classroom, text="dana,Dana Scully,\nfox,Fox Mulder,\n")
    return {a.username: a.password for a in accounts}


# --- the one-time password ------------------------------------------------------------------


def test_a_roster_password_logs_in_once_then_asks_for_a_new_one(client, roster):
    response = login(client, "dana", roster["dana"])
    assert response.status_code == 302
    assert response["Location"] == reverse("choose_password")
    page = client.get(response["Location"])
    assert page.status_code == 200
    body = page.content.decode()
    assert "Choose your password" in body
    assert "The one-time password from your instructor is now used up" in body
    assert not OneTimePassword.objects.filter(user__username="dana").exists()


def test_a_second_login_with_the_roster_password_fails(client, roster):
    login(client, "dana", roster["dana"])
    client.logout()
    response = login(client, "dana", roster["dana"])
    assert response.status_code == 200  # the login page again, with the error
    assert "_auth_user_id" not in client.session
    assert "Please enter a correct username and password" in response.content.decode()


def test_until_a_password_is_chosen_every_page_leads_to_the_choice(client, roster, classroom):
    login(client, "dana", roster["dana"])
    for url in (reverse("labs:home"), reverse("labs:class_dashboard", args=[classroom.pk])):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"] == reverse("choose_password")
    htmx = client.get(reverse("labs:home"), HTTP_HX_REQUEST="true")
    assert htmx.status_code == 204
    assert htmx["HX-Redirect"] == reverse("choose_password")


def test_the_chosen_password_is_validated_then_kept_and_the_student_goes_on(client, roster):
    login(client, "dana", roster["dana"])
    short = client.post(
        reverse("choose_password"), {"new_password1": "abc", "new_password2": "abc"}
    )
    assert short.status_code == 200
    assert "This password is too short" in short.content.decode()
    assert client.get(reverse("labs:home")).status_code == 302  # still asked

    response = client.post(
        reverse("choose_password"),
        {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("labs:home")
    assert client.get(reverse("labs:home")).status_code == 200  # logged in, free to go
    client.logout()
    assert login(client, "dana", roster["dana"]).status_code == 200  # the old one: refused
    response = login(client, "dana", NEW_PASSWORD)
    assert response.status_code == 302
    assert response["Location"] == reverse("labs:home")  # no second ask


def test_each_roster_password_is_its_own_students_once(client, roster):
    login(client, "dana", roster["dana"])
    client.logout()
    # Fox's one-time password is untouched by Dana's login.
    response = login(client, "fox", roster["fox"])
    assert response["Location"] == reverse("choose_password")


def test_without_a_one_time_login_the_page_asks_for_the_current_password(client, student):
    client.force_login(student)
    response = client.get(reverse("choose_password"))
    assert response.status_code == 302
    assert response["Location"] == reverse("password_change")
    posted = client.post(
        reverse("choose_password"),
        {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
    )
    assert posted.status_code == 302
    student.refresh_from_db()
    assert not student.check_password(NEW_PASSWORD)


def test_a_signed_up_students_own_password_logs_in_as_often_as_they_like(client, student):
    for _ in range(3):
        response = login(client, "alice", "correct-horse-battery-staple")
        assert response.status_code == 302
        assert response["Location"] == reverse("labs:home")
        client.logout()


def test_two_racing_logins_with_one_roster_password_let_one_in(roster):
    from labs.services.accounts import LoginRefused, account_login

    user = get_user_model().objects.get(username="dana")
    stale = get_user_model().objects.get(username="dana")  # checked by a racing request
    assert account_login(user=user) is True
    with pytest.raises(LoginRefused):
        account_login(user=stale)
    assert not get_user_model().objects.get(username="dana").has_usable_password()


# --- the separator ----------------------------------------------------------------------------

ROWS = [("ann", "Ann Lee", "ann@example.com"), ("ben", "Ben Okafor", "")]


def roster_text(separator: str, header: bool = True) -> str:
    lines = [separator.join(("username", "full name", "email"))] if header else []
    lines += [separator.join(row) for row in ROWS]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("separator", [",", ";", "\t"], ids=["comma", "semicolon", "tab"])
def test_the_separator_is_found(separator):
    text = roster_text(separator)
    assert roster_separator(text) == separator
    rows = roster_parse(text)
    assert [(r.username, r.full_name, r.email) for r in rows] == ROWS


def test_a_semicolon_roster_with_commas_in_its_names_is_read_by_its_semicolons():
    text = "ann;Lee, Ann;ann@example.com\nben;Okafor, Ben;\n"
    assert [r.full_name for r in roster_parse(text)] == ["Lee, Ann", "Okafor, Ben"]


def test_a_short_row_is_reported_in_the_rosters_own_separator():
    text = "ann;Ann Lee;ann@example.com\nben;Ben Okafor\n"
    with pytest.raises(RosterError) as caught:
        roster_parse(text)
    assert caught.value.errors == [
        "Line 2: expected 3 columns (username, full name, email) separated by semicolons, got 2."
    ]


def test_a_separator_that_is_none_of_the_three_is_named():
    text = "ann|Ann Lee|ann@example.com\nben|Ben Okafor|\n"
    assert roster_separator(text) is None
    with pytest.raises(RosterError) as caught:
        roster_parse(text)
    (message,) = caught.value.errors
    assert "could not be told apart" in message
    assert "commas, semicolons or tabs" in message
    assert "'|'" in message


def test_the_admin_import_page_takes_a_semicolon_roster(client, superuser, classroom):
    client.force_login(superuser)
    url = reverse("admin:labs_classroom_roster", args=[classroom.pk])
    response = client.post(url, {"csv_text": roster_text(";")})
    assert response.status_code == 200
    body = response.content.decode()
    assert "ann" in body and "ben" in body
    assert get_user_model().objects.filter(username__in=["ann", "ben"]).count() == 2
    assert OneTimePassword.objects.filter(user__username__in=["ann", "ben"]).count() == 2
