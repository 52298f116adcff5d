"""Accounts: login, logout, password change, sign-up with a join code, the home page, and
opening a lab session from it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from labs.models import LabSession, Membership

pytestmark = pytest.mark.django_db

SIGNUP_PASSWORD = "a-long-unusual-passphrase-42"


def signup_data(**overrides) -> dict:
    data = {
        "join_code": "CLASSA01",
        "username": "newstudent",
        "first_name": "New",
        "last_name": "Student",
        "email": "new@example.com",
        "password1": SIGNUP_PASSWORD,
        "password2": SIGNUP_PASSWORD,
    }
    data.update(overrides)
    return data


# --- login, logout, password change -------------------------------------------------------


def test_login_page_renders(client):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert b"Log in" in response.content


def test_login_takes_the_user_home(client, student, factory):
    response = client.post(reverse("login"), {"username": "alice", "password": factory.password})
    assert response.status_code == 302
    assert response["Location"] == reverse("labs:home")


def test_wrong_password_is_refused_with_a_message(client, student):
    response = client.post(reverse("login"), {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert response.context["form"].non_field_errors()


def test_logout_needs_a_post(client, student):
    client.force_login(student)
    assert client.get(reverse("logout")).status_code == 405
    response = client.post(reverse("logout"))
    assert response.status_code == 302
    assert client.get(reverse("labs:home")).status_code == 302  # logged out: sent to login


def test_password_change_requires_login(client):
    response = client.get(reverse("password_change"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_password_change_works(client, student, factory):
    client.force_login(student)
    response = client.post(
        reverse("password_change"),
        {
            "old_password": factory.password,
            "new_password1": SIGNUP_PASSWORD,
            "new_password2": SIGNUP_PASSWORD,
        },
    )
    assert response.status_code == 302
    student.refresh_from_db()
    assert student.check_password(SIGNUP_PASSWORD)


# --- sign-up --------------------------------------------------------------------------------


def test_signup_page_renders_with_the_code_from_the_link(client, classroom):
    response = client.get(reverse("labs:signup") + "?code=CLASSA01")
    assert response.status_code == 200
    assert response.context["form"]["join_code"].value() == "CLASSA01"


def test_signup_with_a_join_code_creates_an_enrolled_student_and_logs_in(client, classroom):
    response = client.post(reverse("labs:signup"), signup_data())
    assert response.status_code == 302
    user = get_user_model().objects.get(username="newstudent")
    membership = Membership.objects.get(user=user)
    assert membership.classroom == classroom
    assert membership.role == Membership.Role.STUDENT
    assert not user.is_staff
    assert client.get(reverse("labs:home")).status_code == 200


def test_join_code_is_case_and_space_insensitive(client, classroom):
    response = client.post(reverse("labs:signup"), signup_data(join_code=" classa01 "))
    assert response.status_code == 302


def test_wrong_join_code_is_refused(client, classroom):
    response = client.post(reverse("labs:signup"), signup_data(join_code="NOPE1234"))
    assert response.status_code == 200
    errors = response.context["form"].errors["join_code"]
    assert "No class has this join code" in errors[0]
    assert not get_user_model().objects.filter(username="newstudent").exists()


def test_expired_join_code_is_refused(client, classroom):
    classroom.join_code_expires_at = timezone.now() - timedelta(minutes=1)
    classroom.save()
    response = client.post(reverse("labs:signup"), signup_data())
    assert response.status_code == 200
    errors = response.context["form"].errors["join_code"]
    assert "expired" in errors[0]
    assert not get_user_model().objects.filter(username="newstudent").exists()


def test_join_code_expiring_later_is_accepted(client, classroom):
    classroom.join_code_expires_at = timezone.now() + timedelta(days=1)
    classroom.save()
    assert client.post(reverse("labs:signup"), signup_data()).status_code == 302


def test_signup_refuses_a_taken_username(client, classroom, student):
    response = client.post(reverse("labs:signup"), signup_data(username="alice"))
    assert "username" in response.context["form"].errors


def test_signup_refuses_mismatched_passwords(client, classroom):
    response = client.post(reverse("labs:signup"), signup_data(password2="something-else-99"))
    assert "password2" in response.context["form"].errors


def test_signup_refuses_a_weak_password(client, classroom):
    response = client.post(reverse("labs:signup"), signup_data(password1="123", password2="123"))
    assert "password2" in response.context["form"].errors


def test_signup_refuses_an_empty_join_code(client, classroom):
    response = client.post(reverse("labs:signup"), signup_data(join_code=""))
    assert "join_code" in response.context["form"].errors


def test_logged_in_user_visiting_signup_goes_home(client, student):
    client.force_login(student)
    response = client.get(reverse("labs:signup"))
    assert response.status_code == 302


# --- home -----------------------------------------------------------------------------------


def test_home_requires_login(client):
    response = client.get(reverse("labs:home"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_student_home_lists_their_class_and_its_scenarios(client, student, classroom, scenario):
    client.force_login(student)
    response = client.get(reverse("labs:home"))
    body = response.content.decode()
    assert classroom.name in body
    assert scenario.title in body
    assert reverse("labs:session_open", args=[classroom.pk, scenario.pk]) in body


def test_student_home_hides_inactive_scenarios(client, student, classroom, factory):
    hidden = factory.scenario("hidden", title="Hidden one", is_active=False)
    classroom.scenarios.add(hidden)
    client.force_login(student)
    assert "Hidden one" not in client.get(reverse("labs:home")).content.decode()


def test_student_home_links_an_opened_session(client, student, classroom, scenario, factory):
    session = factory.session(student, classroom, scenario)
    client.force_login(student)
    body = client.get(reverse("labs:home")).content.decode()
    assert session.get_absolute_url() in body


def test_student_home_does_not_show_other_classes(client, student, other_classroom):
    client.force_login(student)
    assert other_classroom.name not in client.get(reverse("labs:home")).content.decode()


def test_instructor_home_lists_their_classes_with_a_manage_link(
    client, instructor, classroom, other_classroom, student
):
    client.force_login(instructor)
    response = client.get(reverse("labs:home"))
    body = response.content.decode()
    assert classroom.name in body
    assert classroom.join_code in body
    assert reverse("admin:labs_classroom_change", args=[classroom.pk]) in body
    assert other_classroom.name not in body
    assert response.context["teaching"][0].student_count == 1


# --- opening a lab session ----------------------------------------------------------------


def test_student_opens_a_lab_session_from_home(client, student, classroom, scenario):
    client.force_login(student)
    response = client.post(reverse("labs:session_open", args=[classroom.pk, scenario.pk]))
    session = LabSession.objects.get(owner=student, classroom=classroom, scenario=scenario)
    assert response.status_code == 302
    assert response["Location"] == session.get_absolute_url()
    page = client.get(session.get_absolute_url())
    assert page.status_code == 200
    assert scenario.title in page.content.decode()


def test_opening_a_session_needs_a_post(client, student, classroom, scenario):
    client.force_login(student)
    url = reverse("labs:session_open", args=[classroom.pk, scenario.pk])
    assert client.get(url).status_code == 405


def test_opening_twice_returns_the_same_session(client, student, classroom, scenario):
    client.force_login(student)
    url = reverse("labs:session_open", args=[classroom.pk, scenario.pk])
    first = client.post(url)["Location"]
    second = client.post(url)["Location"]
    assert first == second
    assert LabSession.objects.filter(owner=student).count() == 1


def test_opening_a_session_in_another_class_is_forbidden(
    client, student, other_classroom, scenario
):
    client.force_login(student)
    url = reverse("labs:session_open", args=[other_classroom.pk, scenario.pk])
    assert client.post(url).status_code == 403


def test_another_student_cannot_see_my_session(client, student, classroom, scenario, factory):
    session = factory.session(student, classroom, scenario)
    classmate = factory.student("erin", classroom)
    client.force_login(classmate)
    assert client.get(session.get_absolute_url()).status_code == 404


def test_instructor_of_the_class_can_see_a_student_session(
    client, student, instructor, classroom, scenario, factory
):
    session = factory.session(student, classroom, scenario)
    client.force_login(instructor)
    assert client.get(session.get_absolute_url()).status_code == 200


def test_instructor_of_another_class_cannot_see_the_session(
    client, student, other_instructor, classroom, scenario, factory
):
    session = factory.session(student, classroom, scenario)
    client.force_login(other_instructor)
    assert client.get(session.get_absolute_url()).status_code == 404


# --- the page frame -----------------------------------------------------------------------


def test_base_template_serves_htmx_from_the_package_with_csrf_header(client, student):
    client.force_login(student)
    body = client.get(reverse("labs:home")).content.decode()
    assert "/static/django-htmx/" in body or "/static/django_htmx/" in body
    assert 'hx-headers=\'{"X-CSRFToken": "' in body
    assert "https://" not in body.split("<body", 1)[0]  # no CDN in <head>


def test_nav_shows_login_state_and_a_logout_form(client, student):
    client.force_login(student)
    body = client.get(reverse("labs:home")).content.decode()
    assert "Signed in as" in body and "alice" in body
    assert f'action="{reverse("logout")}"' in body


def test_stylesheet_is_served_with_breaker_colours(client):
    from django.contrib.staticfiles import finders

    path = finders.find("css/lab.css")
    assert path
    css = Path(path).read_text(encoding="utf-8")
    for name in ("--breaker-closed", "--breaker-open", "--breaker-half-open", ":focus-visible"):
        assert name in css


# --- over-long values ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "field,label", [("username", "Username"), ("first_name", "First name"),
                    ("email", "Email address"), ("join_code", "Class join code"),
                    ("password1", "Password")],
)  # fmt: skip
def test_signup_refuses_an_over_long_value_by_name_without_echoing_it(
    client, classroom, field, label
):
    response = client.post(reverse("labs:signup"), signup_data(**{field: "x" * 500_000}))
    assert response.status_code == 200
    form = response.context["form"]
    limit = form.fields[field].max_length
    assert form.errors[field] == [f"{label} must be at most {limit} characters (got 500000)."]
    assert len(response.content) < 50_000
    assert not get_user_model().objects.filter(username="newstudent").exists()


def test_login_refuses_an_over_long_username_without_echoing_it(client, student):
    response = client.post(reverse("login"), {"username": "a" * 500_000, "password": "x"})
    assert response.status_code == 200
    assert "Username must be at most 150 characters" in response.content.decode()
    assert len(response.content) < 50_000


def test_form_posts_are_bounded_in_size(settings):
    assert 500_000 < settings.DATA_UPLOAD_MAX_MEMORY_SIZE <= 1_000_000


# --- joining another class ------------------------------------------------------------------


def test_student_home_offers_to_join_a_class(client, student):
    client.force_login(student)
    body = client.get(reverse("labs:home")).content.decode()
    assert f'action="{reverse("labs:join_class")}"' in body
    assert 'name="join_code"' in body


def test_a_student_joins_a_second_class_with_its_code(client, student, other_classroom):
    client.force_login(student)
    response = client.post(reverse("labs:join_class"), {"join_code": " classb02 "}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("labs:home")
    assert "You joined Resilience B." in response.content.decode()
    membership = Membership.objects.get(user=student, classroom=other_classroom)
    assert membership.role == Membership.Role.STUDENT
    assert other_classroom.name in response.content.decode()


def test_joining_with_a_wrong_code_is_refused_beside_the_field(client, student):
    client.force_login(student)
    response = client.post(reverse("labs:join_class"), {"join_code": "NOPE1234"})
    assert response.status_code == 400
    assert "No class has this join code" in response.content.decode()
    assert Membership.objects.filter(user=student).count() == 1


def test_joining_with_an_expired_code_is_refused(client, student, other_classroom):
    other_classroom.join_code_expires_at = timezone.now() - timedelta(minutes=1)
    other_classroom.save()
    client.force_login(student)
    response = client.post(reverse("labs:join_class"), {"join_code": "CLASSB02"})
    assert response.status_code == 400
    assert "expired" in response.content.decode()
    assert not Membership.objects.filter(user=student, classroom=other_classroom).exists()


def test_joining_a_class_already_joined_says_so_and_changes_nothing(client, student, classroom):
    client.force_login(student)
    response = client.post(reverse("labs:join_class"), {"join_code": "CLASSA01"}, follow=True)
    assert "You are already in Resilience A." in response.content.decode()
    assert Membership.objects.filter(user=student).count() == 1


def test_an_instructor_cannot_join_as_a_student(client, instructor, other_classroom):
    client.force_login(instructor)
    response = client.post(reverse("labs:join_class"), {"join_code": "CLASSB02"})
    assert response.status_code == 400
    assert "Instructors" in response.content.decode()
    assert not Membership.objects.filter(user=instructor, classroom=other_classroom).exists()


def test_joining_needs_login_and_a_post(client, student):
    assert client.post(reverse("labs:join_class"), {"join_code": "CLASSB02"}).status_code == 302
    client.force_login(student)
    assert client.get(reverse("labs:join_class")).status_code == 405


def test_an_over_long_join_code_is_refused_without_echoing_it(client, student):
    client.force_login(student)
    response = client.post(reverse("labs:join_class"), {"join_code": "Z" * 500_000})
    assert response.status_code == 400
    assert "Class join code must be at most 32 characters" in response.content.decode()
    assert len(response.content) < 50_000
