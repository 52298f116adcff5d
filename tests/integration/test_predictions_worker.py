"""A prediction graded against the journal of its step's burst, run by a real worker: the
student answers, Do it runs the burst, the step shows the answer beside the observation."""

from __future__ import annotations

import json
import time

import pytest
from django.urls import reverse

from labs.models import Burst, Prediction
from labs.services import lab
from tests.conftest import make_classroom, make_scenario, make_student
from tests.integration.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _wait_done(session, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        burst = Burst.objects.filter(session=session).order_by("-number").first()
        if burst is not None and burst.status not in Burst.ACTIVE_STATUSES:
            return burst
        time.sleep(0.05)
    raise AssertionError("the burst did not finish")


def _grade(client, url, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(url).content.decode()
        if "data-grade=" in body:
            return body
        time.sleep(0.1)
    raise AssertionError("the prediction was never graded")


def test_a_wrong_prediction_is_shown_beside_what_the_journal_observed(celery_worker, client):
    script = json.loads((ROOT / "scenarios" / "tour.json").read_text())
    scenario = make_scenario("tour-predict", script=script)
    room = make_classroom("Predict class", join_code="PREDICT1")
    room.scenarios.add(scenario)
    student = make_student("predictor", room)
    session = lab.session_open(user=student, classroom=room, scenario=scenario)
    lab.session_set_dependency(session=session, user=student, changes={"mode": "down"})
    client.force_login(student)
    url = reverse("labs:session_step_prediction", args=[session.pk, 3])

    assert client.post(url, {"answer": "24"}).status_code == 200
    started = client.post(
        reverse("labs:session_burst", args=[session.pk]),
        {"size": 6, "concurrency": 1, "step": 3},
        HTTP_HX_REQUEST="true",
    )
    assert started.status_code == 200
    assert _wait_done(session).status == Burst.Status.DONE

    body = _grade(client, url)
    assert 'data-grade="wrong"' in body
    assert "<strong data-observed>12</strong>" in body and "<strong data-answer>24</strong>" in body
    assert "3 x 4 = 12" in body  # the explanation, shown after the run
    # The journal rows behind the number: the 12 attempts and the transition that stopped them.
    rows = body.split('class="step-journal-rows">')[1].split("</ol>")[0]
    assert rows.count("<li data-seq=") == 13
    assert "3 consecutive failed calls" in rows
    prediction = Prediction.objects.get(session=session, step=3)
    assert prediction.correct is False and prediction.observed["attempts"] == [4, 4, 4, 0, 0, 0]
    # The server refuses a change now that the step ran.
    assert client.post(url, {"answer": "12"}).status_code == 409
    assert Prediction.objects.get(pk=prediction.pk).answer == "24"
