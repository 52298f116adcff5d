"""LTI 1.3 launches against the test platform (tests/lti_platform.py) served on loopback:
the OIDC login, the signed launch, who is who, and every refusal (a page in words, a log
line, nothing written)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import urlopen

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from lti_tool.models import (
    Key,
    LtiContext,
    LtiDeployment,
    LtiMembership,
    LtiUser,
)

from labs.models import (
    Burst,
    Classroom,
    LabSession,
    LtiCourseLink,
    LtiGradePost,
    Membership,
    Prediction,
    Scenario,
)
from labs.services import lti as lti_services
from tests.lti_platform import Launch, Platform, new_key, parse_form_post, post_form, register

pytestmark = pytest.mark.django_db

LOGGER = "labs.services.lti"


@pytest.fixture
def platform(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    lms = Platform().start()
    yield lms
    lms.stop()


@pytest.fixture
def registration(platform):
    return register(platform)


def login_step(client, platform, sub: str, hint: str = "", host: str | None = None, **overrides):
    params = {
        "iss": platform.issuer,
        "client_id": platform.client_id,
        "login_hint": sub,
        "lti_message_hint": hint,
        "target_link_uri": "http://testserver/lti/launch/",
        **overrides,
    }
    return client.get("/lti/login/", params, **({"HTTP_HOST": host} if host else {}))


def platform_form(platform, response) -> tuple[str, dict]:
    """Follow the tool's redirect to the platform's authorization endpoint (over HTTP)."""
    assert response.status_code == 302, response.content
    location = response["Location"]
    assert location.startswith(platform.url("/auth"))
    with urlopen(location, timeout=10) as answer:  # noqa: S310 (loopback test server)
        return parse_form_post(answer.read().decode())


def launch_as(client, platform, sub: str, launch: Launch | None = None):
    hint = platform.plan(f"hint-{sub}", launch or Launch())
    action, fields = platform_form(platform, login_step(client, platform, sub, hint))
    assert urlparse(action).path == "/lti/launch/"
    return client.post("/lti/launch/", fields), fields


def counts() -> dict:
    return {
        "users": get_user_model().objects.count(),
        "classes": Classroom.objects.count(),
        "members": Membership.objects.count(),
        "lti_users": LtiUser.objects.count(),
        "contexts": LtiContext.objects.count(),
        "deployments": LtiDeployment.objects.count(),
        "sessions": LabSession.objects.count(),
    }


def test_the_tool_serves_its_active_keys_as_a_key_set(client, registration):
    old = Key.objects.get()
    new = Key.objects.generate()
    Key.objects.filter(pk=old.pk).update(is_active=False)  # rotated out
    keys = client.get("/lti/jwks/").json()["keys"]
    assert [k["kid"] for k in keys] == [new.as_jwk()["kid"]]
    assert keys[0]["kty"] == "RSA" and "d" not in keys[0]


def test_an_instructor_launch_creates_the_user_and_the_course_class(client, platform, registration):
    response, _ = launch_as(client, platform, "teacher-1")
    classroom = Classroom.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/classes/{classroom.pk}/dashboard/"
    assert classroom.name == "Distributed Systems 101"
    user = LtiUser.objects.get(sub="teacher-1").auth_user
    assert (user.first_name, user.last_name) == ("Ada", "Lovelace")
    assert not user.has_usable_password()
    assert Membership.objects.get(user=user).role == Membership.Role.INSTRUCTOR
    assert LtiCourseLink.objects.get().classroom == classroom
    dashboard = client.get(response["Location"])
    assert dashboard.status_code == 200
    assert "Distributed Systems 101" in dashboard.content.decode()


def test_a_learner_launch_lands_in_the_lesson_of_the_link(client, platform, registration):
    scenario = Scenario.objects.filter(is_active=True).first() or Scenario.objects.create(
        slug="first-lesson", title="First lesson", script={}
    )
    response, _ = launch_as(client, platform, "student-1", Launch(custom={"lesson": scenario.slug}))
    session = LabSession.objects.get()
    assert response.status_code == 302 and response["Location"].startswith(session.get_absolute_url() + "?launch=")
    assert session.scenario == scenario
    assert session.owner.get_full_name() == "Grace Hopper"
    assert Membership.objects.get(user=session.owner).role == Membership.Role.STUDENT
    page = client.get(response["Location"])
    assert page.status_code == 200 and scenario.title in page.content.decode()
    assert "Opened in a new tab because your course asks" in page.content.decode()


def test_a_second_launch_signs_in_the_same_user_into_the_same_class(client, platform, registration):
    launch_as(client, platform, "student-1")
    client.logout()
    launch_as(client, platform, "student-1")
    assert get_user_model().objects.count() == 1
    assert Classroom.objects.count() == 1
    assert Membership.objects.count() == 1


def test_two_courses_are_two_classes_and_neither_sees_the_other(client, platform, registration):
    launch_as(client, platform, "student-1")
    client.logout()
    launch_as(client, platform, "student-1", Launch(context_id="course-202", context_title="Ops"))
    user = LtiUser.objects.get(sub="student-1").auth_user
    assert sorted(Classroom.objects.for_student(user).values_list("name", flat=True)) == [
        "Distributed Systems 101",
        "Ops",
    ]
    client.logout()
    launch_as(client, platform, "teacher-1", Launch(context_id="course-202", context_title="Ops"))
    teacher = LtiUser.objects.get(sub="teacher-1").auth_user
    assert list(Classroom.objects.for_instructor(teacher).values_list("name", flat=True)) == ["Ops"]


def test_an_unknown_role_is_a_student_and_said_in_the_log(client, platform, registration, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        response, _ = launch_as(client, platform, "observer-1")
    assert response.status_code == 302
    assert Membership.objects.get().role == Membership.Role.STUDENT
    assert any("unknown" in r.getMessage() and "Mentor" in r.getMessage() for r in caplog.records)


def test_existing_accounts_keep_working_beside_lti(client, platform, registration):
    User = get_user_model()
    User.objects.create_user("local", password="a-long-password-1")
    launch_as(client, platform, "student-1")
    client.logout()
    response = client.post(
        "/accounts/login/", {"username": "local", "password": "a-long-password-1"}
    )
    assert response.status_code == 302
    assert client.get("/").wsgi_request.user.username == "local"


# --- refusals ----------------------------------------------------------------------------


def assert_refused(response, words: str, caplog, code: str, before: dict):
    assert response.status_code == 403
    text = response.content.decode()
    assert "refused" in text and words in text
    assert any(f"refused ({code})" in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]
    assert counts() == before
    assert "_auth_user_id" not in response.wsgi_request.session


@pytest.mark.parametrize(
    ("launch", "words", "code"),
    [
        (Launch(signing_key=new_key()), "signature does not match", "signature"),
        (Launch(expires_in=-120), "has expired", "expired"),
        (Launch(deployment_id="deploy-unknown"), "deployment", "deployment"),
        (Launch(client_id="someone-else"), "does not know this learning platform", "platform"),
        (
            Launch(issuer="https://other.example"),
            "does not know this learning platform",
            "platform",
        ),
    ],
    ids=["bad-signature", "expired", "wrong-deployment", "unknown-client-id", "unknown-issuer"],
)
def test_a_bad_id_token_is_refused_and_changes_nothing(
    client, platform, registration, caplog, launch, words, code
):
    before = counts()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        response, _ = launch_as(client, platform, "student-1", launch)
    assert_refused(response, words, caplog, code, before)


def test_a_login_from_an_unknown_platform_is_refused(client, platform, registration, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        response = login_step(client, platform, "student-1", iss="https://unknown.example")
    assert response.status_code == 403
    assert "does not know this learning platform" in response.content.decode()


def test_a_reused_nonce_is_refused(client, platform, registration, caplog):
    first, fields = launch_as(client, platform, "student-1")
    assert first.status_code == 302
    client.logout()
    before = counts()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        again = client.post("/lti/launch/", fields)
    assert_refused(again, "already used", caplog, "nonce_reused", before)


@pytest.mark.parametrize("state", ["", "not-the-state"], ids=["missing", "wrong"])
def test_a_missing_or_wrong_state_is_refused(client, platform, registration, caplog, state):
    hint = platform.plan("hint", Launch())
    _, fields = platform_form(platform, login_step(client, platform, "student-1", hint))
    before = counts()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        response = client.post("/lti/launch/", {**fields, "state": state})
    assert_refused(response, "did not start in this browser", caplog, "state", before)


def test_a_launch_from_another_browser_is_refused(client, platform, registration, caplog):
    """The state cookie stays with the browser that started the login."""
    hint = platform.plan("hint", Launch())
    _, fields = platform_form(platform, login_step(client, platform, "student-1", hint))
    before = counts()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        response = Client().post("/lti/launch/", fields)
    assert_refused(response, "did not start in this browser", caplog, "state", before)


def test_a_launch_for_a_class_of_another_course_is_refused(client, platform, registration, caplog):
    launch_as(client, platform, "teacher-1", Launch(context_id="course-202", context_title="Ops"))
    other_class = Classroom.objects.get(name="Ops")
    client.logout()
    before = counts()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        response, _ = launch_as(
            client, platform, "student-1", Launch(custom={"classroom": str(other_class.pk)})
        )
    assert_refused(response, "another course", caplog, "context", before)
    # From its own course the same link works.
    client.logout()
    ok, _ = launch_as(
        client,
        platform,
        "student-1",
        Launch(context_id="course-202", custom={"classroom": str(other_class.pk)}),
    )
    assert ok.status_code == 302


def test_a_launch_with_no_token_is_refused(client, registration):
    response = client.post("/lti/launch/", {"state": "x"})
    assert response.status_code == 403


# --- the platform's registration in the admin ----------------------------------------------


def test_the_platform_page_shows_what_the_lms_administrator_pastes(
    client, admin_user, registration
):
    client.force_login(admin_user)
    page = client.get(f"/admin/lti_tool/ltiregistration/{registration.pk}/change/")
    text = page.content.decode()
    assert page.status_code == 200
    assert "To paste into the LMS" in text
    assert f"http://testserver/lti/login/{registration.uuid}/" in text
    assert "http://testserver/lti/launch/" in text
    assert "http://testserver/lti/jwks/" in text
    assert "Deep-linking URL" in text and "deploy-1" in text


def test_a_platform_added_in_the_admin_launches(client, admin_user, platform):
    """Added through the admin form (issuer, client id, URLs, an active deployment id)."""
    client.force_login(admin_user)
    response = client.post(
        "/admin/lti_tool/ltiregistration/add/",
        {
            "name": "Moodle",
            "uuid": "3f1c6f7e-2b7a-4c55-9a33-8c1f2b7f0a11",
            "issuer": platform.issuer,
            "client_id": platform.client_id,
            "audience": "",
            "auth_url": platform.url("/auth"),
            "token_url": platform.url("/token"),
            "keyset_url": platform.url("/jwks"),
            "is_active": "on",
            "public_key": "",
            "private_key": "",
            "deployments-TOTAL_FORMS": "1",
            "deployments-INITIAL_FORMS": "0",
            "deployments-MIN_NUM_FORMS": "0",
            "deployments-MAX_NUM_FORMS": "1000",
            "deployments-0-deployment_id": platform.deployment_id,
            "deployments-0-is_active": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Key.objects.active().count() == 1  # the tool's first key, made on save
    client.logout()
    platform.add_person("student-9", "Alan", "Turing", "Learner")
    done, _ = launch_as(client, platform, "student-9")
    assert done.status_code == 302


def test_a_login_without_a_client_id_uses_the_platform_login_url(client, platform, registration):
    hint = platform.plan("hint", Launch())
    response = client.get(
        f"/lti/login/{registration.uuid}/",
        {
            "iss": platform.issuer,
            "login_hint": "student-1",
            "lti_message_hint": hint,
            "target_link_uri": "http://testserver/lti/launch/",
        },
    )
    _, fields = platform_form(platform, response)
    assert client.post("/lti/launch/", fields).status_code == 302


def test_rotating_keys_keeps_the_recent_key_in_the_key_set(client, registration):
    from django.core.management import call_command

    first = Key.objects.get()
    call_command("rotate_keys", "--deactivate-after", "7")
    kids = {k["kid"] for k in client.get("/lti/jwks/").json()["keys"]}
    assert first.as_jwk()["kid"] in kids and len(kids) == 2
    Key.objects.filter(pk=first.pk).update(
        datetime_created=first.datetime_created.replace(year=2000)
    )
    call_command("rotate_keys", "--deactivate-after", "7")
    kids = {k["kid"] for k in client.get("/lti/jwks/").json()["keys"]}
    assert first.as_jwk()["kid"] not in kids and len(kids) == 2


# --- deep linking ---------------------------------------------------------------------------


def lesson() -> Scenario:
    return Scenario.objects.active().order_by("position").first() or Scenario.objects.create(
        slug="first-lesson", title="First lesson", script={}
    )


def test_an_instructor_deep_links_a_lesson_and_a_learner_launches_it(
    client, platform, registration
):
    scenario = lesson()
    response, _ = launch_as(client, platform, "teacher-1", Launch(deep_linking=True))
    assert response["Location"] == "/lti/deep-link/"
    picker = client.get("/lti/deep-link/").content.decode()
    assert "Add a Failure Lab lesson to your course" in picker and scenario.title in picker

    answer = client.post("/lti/deep-link/", {"lesson": scenario.slug})
    assert answer.status_code == 200
    html = answer.content.decode()
    assert platform.url("/deep-link-return") in html
    assert f"form-action 'self' {platform.issuer}" in answer["Content-Security-Policy"]
    jwt_value = re.search(r'name="JWT" value="([^"]+)"', html).group(1)
    tool_jwks = client.get("/lti/jwks/").json()
    platform.tool_jwks = lambda: tool_jwks
    assert post_form(platform.url("/deep-link-return"), {"JWT": jwt_value}) == {"received": 1}
    (item,) = platform.links
    classroom = Classroom.objects.get()
    assert item["type"] == "ltiResourceLink" and item["url"] == "http://testserver/lti/launch/"
    assert item["custom"] == {"lesson": scenario.slug, "classroom": str(classroom.pk)}
    assert item["lineItem"]["scoreMaximum"] == 100
    assert classroom.scenarios.filter(pk=scenario.pk).exists()

    client.logout()
    launched, _ = launch_as(client, platform, "student-1", Launch(custom=item["custom"]))
    session = LabSession.objects.get()
    assert launched["Location"].startswith(session.get_absolute_url() + "?launch=")
    assert (session.classroom, session.scenario) == (classroom, scenario)


def test_a_learner_cannot_deep_link(client, platform, registration, caplog):
    before = counts()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        response, _ = launch_as(client, platform, "student-1", Launch(deep_linking=True))
    assert_refused(response, "Only a teacher", caplog, "deep_link_role", before)


def test_the_lesson_picker_needs_a_deep_linking_launch(client, admin_user):
    client.force_login(admin_user)
    response = client.get("/lti/deep-link/")
    assert response.status_code == 403 and "no longer open" in response.content.decode()


# --- roster (NRPS) --------------------------------------------------------------------------


def test_an_instructor_launch_syncs_the_roster_and_the_button_marks_leavers_inactive(
    client, platform, registration
):
    platform.add_person("student-2", "Edsger", "Dijkstra", "Learner")
    response, _ = launch_as(client, platform, "teacher-1")
    classroom = Classroom.objects.get()
    names = sorted(m.user.get_full_name() for m in classroom.memberships.filter(role="student"))
    assert names == ["Edsger Dijkstra", "Grace Hopper", "Otto Observer"]
    assert platform.tokens_issued  # the roster was read with a client-credentials token

    # Grace leaves the course, Otto is listed inactive: both kept, both marked inactive.
    platform.rosters["course-101"] = ["teacher-1", "student-2", "observer-1"]
    platform.inactive["course-101"] = ["observer-1"]
    page = client.get(response["Location"])
    assert "Sync the roster from the course" in page.content.decode()
    synced = client.post(f"/classes/{classroom.pk}/lti/roster/", follow=True)
    text = synced.content.decode()
    assert "Roster synced from the course: 2 members (0 new), 2 who left marked inactive." in text
    inactive = {m.user.sub for m in LtiMembership.objects.filter(is_active=False)}
    assert inactive == {"student-1", "observer-1"}
    assert classroom.memberships.count() == 4  # nobody deleted


def test_only_a_teacher_of_the_class_syncs_its_roster(client, platform, registration):
    launch_as(client, platform, "teacher-1")
    classroom = Classroom.objects.get()
    client.logout()
    launch_as(client, platform, "student-1")
    assert client.post(f"/classes/{classroom.pk}/lti/roster/").status_code == 403


def test_a_roster_that_cannot_be_read_is_reported_and_changes_nothing(
    client, platform, registration
):
    launch_as(client, platform, "teacher-1")
    classroom = Classroom.objects.get()
    before = counts()
    platform.tool_jwks = lambda: {"keys": []}  # the platform no longer trusts the tool's key
    synced = client.post(f"/classes/{classroom.pk}/lti/roster/", follow=True)
    assert "The roster could not be read from the course" in synced.content.decode()
    assert counts() == before


# --- grades (AGS) ---------------------------------------------------------------------------

DOWN_STEP = 3  # the tour's step that asks a prediction and runs a burst


@pytest.fixture
def scenario(db):
    """The shipped tour, whose steps ask predictions."""
    script = json.loads((Path(__file__).parents[2] / "scenarios" / "tour.json").read_text())
    return Scenario.objects.create(slug="tour", title="The tour", script=script)


@pytest.fixture
def learner_session(client, platform, registration, scenario):
    response, _ = launch_as(client, platform, "student-1", Launch(custom={"lesson": "tour"}))
    session = LabSession.objects.get()
    assert response["Location"].startswith(session.get_absolute_url() + "?launch=")
    return session


def asked_and_steps(scenario) -> tuple[int, int]:
    steps = scenario.script["steps"]
    return sum(1 for s in steps if s.get("ask") and "burst" in s), len(steps)


def graded_prediction(session, correct: bool) -> Prediction:
    burst = Burst.objects.create(
        session=session, number=1, size=6, created_by=session.owner, status=Burst.Status.DONE
    )
    return Prediction.objects.create(
        session=session, owner=session.owner, step=DOWN_STEP, measure="dependency_hits",
        answer="6", burst=burst, ran_at=burst.created_at, observed={"dependency_hits": 6},
        correct=correct,
    )  # fmt: skip


def test_a_graded_step_reaches_the_gradebook_on_the_link_line_item(
    client, platform, learner_session, scenario
):
    asked, steps = asked_and_steps(scenario)
    assert asked >= 1
    graded_prediction(learner_session, correct=True)
    assert client.post(f"/sessions/{learner_session.pk}/steps/{DOWN_STEP}/done/").status_code == 204
    post = LtiGradePost.objects.get(session=learner_session)
    assert (post.score_given, post.score_maximum, post.status) == (1, asked, "pending")

    assert lti_services.lti_grade_send(post_id=post.pk) is True
    (item,) = platform.lineitems
    assert item["label"] == scenario.title and item["scoreMaximum"] == 100
    assert item["resourceLinkId"] == "link-1" and item["tag"] == "failure-lab:tour"
    (score,) = platform.scores
    assert score["lineitem"] == item["id"] and score["userId"] == "student-1"
    assert (score["scoreGiven"], score["scoreMaximum"]) == (1, asked)
    assert score["activityProgress"] == "InProgress" and score["gradingProgress"] == "Pending"
    assert score["comment"] == f"1 of {asked} predictions right, 1 of {steps} steps done"
    post.refresh_from_db()
    assert post.status == "sent" and post.sent_at is not None

    # Every step done: Completed and FullyGraded, on the same line item.
    for step in range(1, steps + 1):
        client.post(f"/sessions/{learner_session.pk}/steps/{step}/done/")
    lti_services.lti_grade_send(post_id=post.pk)
    assert len(platform.lineitems) == 1
    assert platform.scores[-1]["activityProgress"] == "Completed"
    assert platform.scores[-1]["gradingProgress"] == "FullyGraded"


def test_a_failed_post_stays_is_shown_and_is_retried_until_sent(
    client, platform, learner_session, monkeypatch
):
    retries = []
    monkeypatch.setattr(
        lti_services.enqueue, "send_grade_post", lambda pk, countdown: retries.append(countdown)
    )
    client.post(f"/sessions/{learner_session.pk}/steps/1/done/")
    post = LtiGradePost.objects.get()
    platform.fail_scores = 2
    assert lti_services.lti_grade_send(post_id=post.pk) is False
    assert lti_services.lti_grade_send(post_id=post.pk) is False
    post.refresh_from_db()
    assert (post.status, post.attempts) == ("pending", 2)
    assert post.last_error == "the LMS answered with HTTP status 503"
    assert retries == [30, 60]  # the retries queued, each later than the last
    assert platform.scores == []

    teacher = client.logout() or launch_as(client, platform, "teacher-1")[0]
    page = client.get(teacher["Location"]).content.decode()
    assert (
        "1 score waiting to reach the course's gradebook: the last try failed (the LMS "
        "answered with HTTP status 503); it is tried again automatically." in page
    )

    assert lti_services.lti_grade_send(post_id=post.pk) is True
    assert len(platform.scores) == 1
    assert "waiting to reach" not in client.get(teacher["Location"]).content.decode()


def test_a_session_opened_without_the_lms_sends_no_grade(client, student, classroom, scenario):
    from labs.services.lab import session_open

    session = session_open(user=student, classroom=classroom, scenario=scenario)
    client.force_login(student)
    assert client.post(f"/sessions/{session.pk}/steps/1/done/").status_code == 204
    assert not LtiGradePost.objects.exists()


# --- framing: launched pages allow the launching LMS, every other page refuses ---------------


def frame_ancestors(response) -> str:
    directives = dict(
        d.strip().split(" ", 1) for d in response["Content-Security-Policy"].split(";") if d
    )
    return directives["frame-ancestors"]


def test_launched_pages_may_be_framed_by_the_launching_lms_only(client, platform, learner_session):
    page = client.get(learner_session.get_absolute_url())
    assert frame_ancestors(page) == platform.issuer
    assert "X-Frame-Options" not in page
    other = client.get(f"/sessions/{learner_session.pk}/history/")
    assert other.status_code == 200
    assert frame_ancestors(other) == "'none'" and other["X-Frame-Options"] == "DENY"


def test_the_return_url_origin_the_platform_signs_may_frame_too(client, platform, registration):
    launch_as(client, platform, "teacher-1", Launch(return_url="https://school.lms.example/c/1"))
    classroom = Classroom.objects.get()
    page = client.get(f"/classes/{classroom.pk}/dashboard/")
    assert frame_ancestors(page) == f"{platform.issuer} https://school.lms.example"
    assert "Opened from your course, inside its page." in page.content.decode()


def test_a_page_of_a_session_that_did_not_launch_refuses_to_be_framed(
    client, student, classroom, scenario
):
    from labs.services.lab import session_open

    session = session_open(user=student, classroom=classroom, scenario=scenario)
    client.force_login(student)
    page = client.get(session.get_absolute_url())
    assert frame_ancestors(page) == "'none'" and page["X-Frame-Options"] == "DENY"


def test_on_a_secure_context_the_launch_cookies_are_partitioned_and_others_are_not(
    client, platform, registration
):
    """In an LMS iframe only partitioned cookies reach the lab (CHIPS); tests/e2e's iframe
    test shows the launch fails without them."""
    hint = platform.plan("hint", Launch())
    login = login_step(client, platform, "student-1", hint, host="localhost")
    (state_cookie,) = [c for name, c in login.cookies.items() if name.startswith("lti1p3-")]
    assert "Partitioned" in state_cookie.output() and "SameSite=None" in state_cookie.output()
    assert "Secure" in state_cookie.output()
    _, fields = platform_form(platform, login)
    launched = client.post("/lti/launch/", fields, HTTP_HOST="localhost")
    session_cookie = launched.cookies["sessionid"].output()
    assert "Partitioned" in session_cookie and "SameSite=None" in session_cookie
    plain = Client().get("/accounts/login/", HTTP_HOST="localhost")
    assert "Partitioned" not in plain.cookies["csrftoken"].output()
    assert "SameSite=Lax" in plain.cookies["csrftoken"].output()


def test_an_instructor_deep_links_the_storm_panel(client, platform, registration):
    launch_as(client, platform, "teacher-1", Launch(deep_linking=True))
    picker = client.get("/lti/deep-link/").content.decode()
    assert "Storm panel" in picker
    answer = client.post("/lti/deep-link/", {"lesson": "storm-panel"})
    jwt_value = re.search(r'name="JWT" value="([^"]+)"', answer.content.decode()).group(1)
    tool_jwks = client.get("/lti/jwks/").json()
    platform.tool_jwks = lambda: tool_jwks
    assert post_form(platform.url("/deep-link-return"), {"JWT": jwt_value}) == {"received": 1}
    (item,) = platform.links
    classroom = Classroom.objects.get()
    assert item["custom"] == {"panel": "storm-panel", "classroom": str(classroom.pk)}
    assert "lineItem" not in item
    client.logout()
    opened, _ = launch_as(client, platform, "teacher-1", Launch(custom=item["custom"]))
    assert opened["Location"] == f"/classes/{classroom.pk}/storm/"
    panel = client.get(opened["Location"])
    assert panel.status_code == 200 and frame_ancestors(panel) == platform.issuer
    client.logout()
    student, _ = launch_as(client, platform, "student-1", Launch(custom=item["custom"]))
    assert student["Location"] == "/"


def test_a_platform_that_does_not_answer_in_time_is_reported(
    client, platform, registration, monkeypatch
):
    launch_as(client, platform, "teacher-1")
    classroom = Classroom.objects.get()
    monkeypatch.setattr(lti_services, "PLATFORM_TIMEOUT_S", 0.5)
    platform.nrps_delay_s = 3.0
    synced = client.post(f"/classes/{classroom.pk}/lti/roster/", follow=True)
    assert "The roster could not be read from the course" in synced.content.decode()
    assert "the LMS could not be reached" in synced.content.decode()
