"""The launch-scoped token (labs/services/launch_token.py): a course launch's lab page works
from a browser that keeps no cookie of the tool, for that learner's launched session only,
with CSRF still checked; an expired, tampered or misplaced token is refused with a page."""

from __future__ import annotations

import logging
import re
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from django.conf import settings
from django.core import signing
from django.core.cache import cache
from django.test import Client

from labs.models import LabSession, Scenario
from labs.services import launch_token as tokens
from labs.services.lab import session_open
from tests.conftest import make_classroom, make_student
from tests.labs.test_lti_launch import launch_as, platform, registration  # noqa: F401
from tests.lti_platform import Launch

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
LOGGER = "labs.services.launch_token"


@pytest.fixture
def launched(client, platform, registration):  # noqa: F811
    """A learner's launch: (their session, the token the launch put in the page's URL)."""
    scenario = Scenario.objects.filter(is_active=True).first() or Scenario.objects.create(
        slug="first-lesson", title="First lesson", script={}
    )
    response, _ = launch_as(
        client, platform, "student-1",
        Launch(custom={"lesson": scenario.slug}, return_url="https://lms.example/course"),
    )  # fmt: skip
    session = LabSession.objects.get()
    location = urlsplit(response["Location"])
    assert location.path == session.get_absolute_url()
    return session, parse_qs(location.query)["launch"][0]


def page_csrf(page) -> str:
    return re.search(r'"X-CSRFToken": "([^"]+)"', page.content.decode()).group(1)


def test_the_launched_page_works_without_any_cookie_and_says_where_it_opened(launched):
    session, token = launched
    browser = Client(enforce_csrf_checks=True)  # no cookie of the launch
    url = session.get_absolute_url()
    page = browser.get(url, {"launch": token})
    body = page.content.decode()
    assert page.status_code == 200 and session.scenario.title in body
    assert "Opened from your course, inside its page." in body
    assert f'name="lab-launch-token" content="{token}"' in body
    assert "js/launch-token.js" in body
    # Framed by the launching LMS only, though no session cookie says it launched.
    policy = page["Content-Security-Policy"]
    assert "frame-ancestors" in policy and "https://lms.example" in policy
    assert "X-Frame-Options" not in page
    # The grant's CSRF secret is never handed out as a cookie; the words show once.
    assert "csrftoken" not in page.cookies and "sessionid" not in page.cookies
    again = browser.get(url, {"launch": token})
    assert "Opened from your course" not in again.content.decode()


def test_an_htmx_post_with_the_token_is_csrf_checked_against_the_grant(launched):
    session, token = launched
    browser = Client(enforce_csrf_checks=True)
    post_url = f"/sessions/{session.pk}/dependency/"
    headers = {**HTMX, "HTTP_X_LAB_LAUNCH": token}
    # No CSRF token: refused, though the launch token is right.
    assert browser.post(post_url, {"mode": "down"}, **headers).status_code == 403
    # A token masked from another secret (an ordinary cookie's): refused.
    assert browser.post(
        post_url, {"mode": "down"}, **headers, HTTP_X_CSRFTOKEN="x" * 64
    ).status_code == 403
    csrf = page_csrf(browser.get(session.get_absolute_url(), {"launch": token}))
    # The page's own token, from another site: refused by the origin check.
    assert browser.post(
        post_url, {"mode": "down"}, **headers, HTTP_X_CSRFTOKEN=csrf,
        HTTP_ORIGIN="https://evil.example",
    ).status_code == 403  # fmt: skip
    session.refresh_from_db()
    assert session.dependency.get("mode") != "down"
    answer = browser.post(post_url, {"mode": "down"}, **headers, HTTP_X_CSRFTOKEN=csrf)
    assert answer.status_code == 200, answer.content[:300]
    session.refresh_from_db()
    assert session.dependency["mode"] == "down"


def test_a_token_opens_only_its_session_pages(launched, caplog):
    session, token = launched
    room = make_classroom("Other", join_code="OTHER001")
    room.scenarios.add(session.scenario)
    other = session_open(user=make_student("bob", room), classroom=room, scenario=session.scenario)
    browser = Client()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for path in (other.get_absolute_url(), "/", f"/classes/{session.classroom_id}/dashboard/",
                     "/accounts/password_change/"):  # fmt: skip
            page = browser.get(path, {"launch": token})
            assert page.status_code == 403, path
            assert "opens only the lesson it launched" in page.content.decode()
    assert "launch token refused (scope)" in caplog.text
    assert browser.get(f"/sessions/{session.pk}/history/", {"launch": token}).status_code == 200


@pytest.mark.parametrize("change", ["tampered", "other_user", "other_session", "deactivated"])
def test_a_tampered_or_misbound_token_is_refused(launched, change, caplog):
    session, token = launched
    url = session.get_absolute_url()
    payload = signing.loads(token, salt=tokens.SALT)
    if change == "tampered":
        token = token[:-3] + ("aaa" if not token.endswith("aaa") else "bbb")
    elif change == "other_user":  # validly signed, but not the user the grant names
        bob = make_student("bob", session.classroom)
        token = signing.dumps({**payload, "u": bob.pk}, salt=tokens.SALT)
    elif change == "other_session":
        token = signing.dumps({**payload, "s": session.pk + 1}, salt=tokens.SALT)
        url = f"/sessions/{session.pk + 1}/"
    else:
        session.owner.is_active = False
        session.owner.save()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        page = Client().get(url, {"launch": token})
    assert page.status_code == 403
    assert "Open the lesson again from your course" in page.content.decode()
    assert "launch token refused" in caplog.text


def test_an_expired_token_or_a_grant_gone_from_the_server_is_refused(launched, monkeypatch):
    session, token = launched
    url = session.get_absolute_url()
    old = signing.b62_encode(int(time.time()) - settings.LTI_LAUNCH_TOKEN_MAX_AGE_S - 5)
    monkeypatch.setattr(signing.TimestampSigner, "timestamp", lambda self: old)
    expired = tokens.launch_token_issue(
        user=session.owner, session_id=session.pk, frame_origins=[]
    )
    monkeypatch.undo()
    page = Client().get(url, {"launch": expired})
    assert page.status_code == 403 and "has expired" in page.content.decode()
    assert Client().get(url, {"launch": token}).status_code == 200
    grant_id = signing.loads(token, salt=tokens.SALT)["g"]
    cache.delete(f"lti-launch-grant:{grant_id}")
    page = Client().get(url, {"launch": token})
    assert page.status_code == 403 and "has expired" in page.content.decode()


def test_without_a_token_or_a_cookie_the_page_asks_to_sign_in(launched):
    session, _ = launched
    page = Client().get(session.get_absolute_url())
    assert page.status_code == 302 and "/accounts/login/" in page["Location"]
