"""A learner launched from the test LMS answers a step's question, runs its burst on a real
worker, and the score reaches the LMS gradebook: graded on the worker, queued after commit,
posted by the worker's ``labs.send_lti_grade`` task (tests/lti_platform.py's AGS endpoint)."""

from __future__ import annotations

import json
import time

import pytest
from django.urls import reverse

from labs.models import Burst, LabSession, LtiGradePost, Scenario
from labs.services import lab
from tests.integration.conftest import ROOT
from tests.labs.test_lti_launch import launch_as
from tests.lti_platform import Launch, Platform, register

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def lms(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    platform = Platform().start()
    register(platform)
    yield platform
    platform.stop()


def wait_for_scores(lms, count: int, timeout: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(lms.scores) >= count:
            return lms.scores
        time.sleep(0.1)
    raise AssertionError(f"the gradebook received {len(lms.scores)} scores, not {count}")


def test_a_graded_step_reaches_the_gradebook_through_the_worker(celery_worker, client, lms):
    script = json.loads((ROOT / "scenarios" / "tour.json").read_text())
    Scenario.objects.create(slug="tour", title="The tour", script=script)
    launched, _ = launch_as(client, lms, "student-1", Launch(custom={"lesson": "tour"}))
    session = LabSession.objects.get()
    assert launched["Location"].startswith(session.get_absolute_url() + "?launch=")
    lab.session_set_dependency(session=session, user=session.owner, changes={"mode": "down"})

    # Step 3 asks how many attempts reach the dead dependency: 12 is right (docs: the tour).
    question = reverse("labs:session_step_prediction", args=[session.pk, 3])
    assert client.post(question, {"answer": "12"}).status_code == 200
    started = client.post(
        reverse("labs:session_burst", args=[session.pk]),
        {"size": 6, "concurrency": 1, "step": 3},
        HTTP_HX_REQUEST="true",
    )
    assert started.status_code == 200

    (score,) = wait_for_scores(lms, 1)
    asked = sum(1 for s in script["steps"] if s.get("ask") and "burst" in s)
    assert Burst.objects.get(session=session).status == Burst.Status.DONE
    assert score["userId"] == "student-1"
    assert (score["scoreGiven"], score["scoreMaximum"]) == (1, asked)
    assert score["comment"].startswith(f"1 of {asked} predictions right")
    (item,) = lms.lineitems
    assert score["lineitem"] == item["id"] and item["tag"] == "failure-lab:tour"
    deadline = time.monotonic() + 10
    while LtiGradePost.objects.get(session=session).status != "sent":
        assert time.monotonic() < deadline, "the outbox row was not marked sent"
        time.sleep(0.05)
