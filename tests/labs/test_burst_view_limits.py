"""The Run burst view's answers that are not a queued burst: the per-user rate limit (429,
counted in the Django cache, which is the real Redis) and the light 409 while a burst runs.

Requests run the real services; the Celery send waits for a commit that never comes inside
these test transactions, so a started burst stays QUEUED (what the 409 needs).
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from labs.clicks import RUN_BURST_LIMIT_PER_MINUTE
from labs.models import Burst, LabSession
from labs.services import lab
from tests.conftest import flush_test_redis, make_student

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _fresh_redis():
    flush_test_redis()  # the rate limit's counters live in the cache database


@pytest.fixture
def session(student, classroom, scenario) -> LabSession:
    return lab.session_open(user=student, classroom=classroom, scenario=scenario)


@pytest.fixture
def owner_client(client, student):
    client.force_login(student)
    return client


def run_burst(client: Client, session: LabSession, htmx: bool = True):
    url = reverse("labs:session_burst", args=[session.pk])
    return client.post(url, {"size": "6"}, **(HTMX if htmx else {}))


def test_409_while_a_burst_runs_answers_only_the_message_retargeted(owner_client, session):
    assert run_burst(owner_client, session).status_code == 200
    response = run_burst(owner_client, session)
    assert response.status_code == 409
    html = response.content.decode()
    assert "A burst is already running in this session" in html
    assert 'id="burst-message"' in html
    assert 'id="burst-form"' not in html  # not the whole form again
    assert response["HX-Retarget"] == "#burst-message"
    assert response["HX-Reswap"] == "outerHTML"


def test_409_without_javascript_renders_the_page_with_the_message(owner_client, session):
    run_burst(owner_client, session, htmx=False)
    response = run_burst(owner_client, session, htmx=False)
    assert response.status_code == 409
    html = response.content.decode()
    assert 'id="burst-form"' in html and 'id="lab"' in html
    assert "A burst is already running in this session" in html


def test_run_burst_is_rate_limited_per_user_with_a_429_naming_the_limit(
    owner_client, session, classroom
):
    for _ in range(RUN_BURST_LIMIT_PER_MINUTE):
        assert run_burst(owner_client, session).status_code in (200, 409)
    bursts_before = Burst.objects.filter(session=session).count()

    response = run_burst(owner_client, session)
    assert response.status_code == 429
    html = response.content.decode()
    assert f"at most {RUN_BURST_LIMIT_PER_MINUTE} a minute" in html
    assert response["HX-Retarget"] == "#burst-message"
    assert int(response["Retry-After"]) >= 1
    no_js = run_burst(owner_client, session, htmx=False)
    assert no_js.status_code == 429
    assert f"at most {RUN_BURST_LIMIT_PER_MINUTE} a minute" in no_js.content.decode()
    assert Burst.objects.filter(session=session).count() == bursts_before

    # Per user: another student in the class is not held back by this one's clicks.
    other = make_student("bea", classroom)
    other_session = lab.session_open(user=other, classroom=classroom, scenario=session.scenario)
    other_client = Client()
    other_client.force_login(other)
    assert run_burst(other_client, other_session).status_code == 200
