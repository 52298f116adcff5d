"""The lab page's traffic controls over HTTP (htmx partial): start refused with the fields
and ranges and nothing changed, a second start refused while one is active, stop."""

from __future__ import annotations

import pytest
from django.urls import reverse

from labs.models import JournalEvent, Traffic
from labs.services import lab

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _no_worker(monkeypatch):
    """Starting traffic sends a task on commit; these tests only look at the request."""
    monkeypatch.setattr("labs.live.enqueue.send_traffic", lambda traffic_id: None)


@pytest.fixture
def session(classroom, scenario, student):
    return lab.session_open(user=student, classroom=classroom, scenario=scenario)


def test_page_has_the_controls(client, student, session):
    client.force_login(student)
    page = client.get(reverse("labs:session_detail", args=[session.pk]))
    assert b'id="traffic-form"' in page.content and b'id="traffic-start"' in page.content
    assert b"<script>" not in page.content.split(b'id="traffic-form"')[1].split(b"</form>")[0]


def test_start_out_of_range_names_fields_and_changes_nothing(client, student, session):
    client.force_login(student)
    url = reverse("labs:session_traffic", args=[session.pk])
    response = client.post(
        url, {"action": "start", "rate": "50", "duration_s": "1e3", "arrivals": "even"}, **HTMX
    )
    assert response.status_code == 400
    assert b"Calls per second: must be between 1 and 20 calls/s" in response.content
    assert b"Duration: must be a whole number between 1 and 300 s" in response.content
    assert not Traffic.objects.exists()
    assert not JournalEvent.objects.filter(kind="traffic_start").exists()


def test_start_then_refuse_a_second_then_stop(client, student, session):
    client.force_login(student)
    url = reverse("labs:session_traffic", args=[session.pk])
    data = {"action": "start", "rate": "4", "duration_s": "10", "arrivals": "even"}
    response = client.post(url, data, **HTMX)
    assert response.status_code == 200
    traffic = Traffic.objects.get(session=session)
    assert traffic.calls == 40 and traffic.status == Traffic.Status.QUEUED
    assert JournalEvent.objects.filter(session=session, kind="traffic_start").count() == 1
    assert client.post(url, data, **HTMX).status_code == 409
    response = client.post(url, {"action": "stop"}, **HTMX)
    assert response.status_code == 200
    traffic.refresh_from_db()
    assert traffic.status == Traffic.Status.STOPPED  # never claimed: ends at once
    assert JournalEvent.objects.filter(session=session, kind="traffic_end").count() == 1


def test_another_student_cannot_start_it(client, session, other_student):
    client.force_login(other_student)
    response = client.post(
        reverse("labs:session_traffic", args=[session.pk]),
        {"action": "start", "rate": "4", "duration_s": "10"},
        **HTMX,
    )
    assert response.status_code in (403, 404)
    assert not Traffic.objects.exists()


def test_a_policy_change_during_traffic_says_to_restart_it(client, classroom, student, scenario):
    from labs.models import JournalEvent, Traffic
    from labs.services import lab

    session = lab.session_open(user=student, classroom=classroom, scenario=scenario)
    Traffic.objects.create(
        session=session, rate=1, duration_s=10, arrivals="even", seed=1, calls=10,
        first_call_no=1, status=Traffic.Status.RUNNING,
    )  # fmt: skip
    lab.session_set_policy(session=session, user=student, changes={"max_attempts": 2})
    row = JournalEvent.objects.filter(session=session, kind="policy_set").latest("seq")
    assert row.message.endswith("the traffic running keeps its policy: restart it")
