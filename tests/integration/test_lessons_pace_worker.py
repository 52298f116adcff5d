"""The two lessons with a window, on a real worker at a person's pace: the student waits
seconds between steps (longer than the window itself) and the graded step still shows the
lesson; when the student does something else in between, the step says in words that its
situation did not happen, grades nothing and can be run again."""

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

#: Longer than the rate limit's 1.5 s window: a reader's pause before the burst.
READING_S = 3.0


def _lesson(name: str, code: str, client):
    script = json.loads((ROOT / "scenarios" / f"{name}.json").read_text())
    scenario = make_scenario(f"{name}-{code}", script=script)
    room = make_classroom(f"Pace {code}", join_code=code)
    room.scenarios.add(scenario)
    student = make_student(f"pace{code.lower()}", room)
    session = lab.session_open(user=student, classroom=room, scenario=scenario)
    client.force_login(student)
    return session, student, script


def _burst(client, session, size: int, step: int | None = None) -> Burst:
    before = Burst.objects.filter(session=session).count()
    data = {"size": size, "concurrency": 1, **({"step": step} if step else {})}
    started = client.post(
        reverse("labs:session_burst", args=[session.pk]), data, HTTP_HX_REQUEST="true"
    )
    assert started.status_code == 200, started.content.decode()[:500]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        burst = Burst.objects.filter(session=session).order_by("-number").first()
        if burst and burst.number > before and burst.status not in Burst.ACTIVE_STATUSES:
            assert burst.status == Burst.Status.DONE
            return burst
        time.sleep(0.05)
    raise AssertionError("the burst did not finish")


def _settled(client, url, timeout=30.0) -> str:
    """The step's partial once the worker graded it, or released it (situation missed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(url).content.decode()
        if "data-grade=" in body or "data-missed" in body:
            return body
        time.sleep(0.1)
    raise AssertionError("the prediction was neither graded nor released")


def test_the_rate_limit_lesson_is_graded_right_after_a_readers_pause(celery_worker, client):
    session, student, _script = _lesson("rate_limited_retry_after", "PACE0001", client)
    _burst(client, session, 2)
    lab.session_set_dependency(session=session, user=student, changes={"retry_after_ms": 1500})
    time.sleep(READING_S)  # reading step 3 and typing the prediction
    url = reverse("labs:session_step_prediction", args=[session.pk, 3])
    assert client.post(url, {"answer": "1485"}).status_code == 200
    _burst(client, session, 1, step=3)

    body = _settled(client, url)
    assert 'data-grade="right"' in body, body
    prediction = Prediction.objects.get(session=session, step=3)
    assert prediction.observed["attempts"] == [4] and prediction.observed["throttled"] == 3
    assert abs(prediction.observed["backoff_ms_total"] - 1485) <= 100
    assert "they add up to 1485 ms" in body  # the explanation agrees with the grade


def test_a_rate_limit_used_up_before_the_step_grades_nothing_and_says_why(celery_worker, client):
    session, student, _script = _lesson("rate_limited_retry_after", "PACE0002", client)
    _burst(client, session, 2)
    lab.session_set_dependency(session=session, user=student, changes={"retry_after_ms": 1500})
    _burst(client, session, 1)  # the student ran a burst of their own: the window is used up
    time.sleep(2.0)
    url = reverse("labs:session_step_prediction", args=[session.pk, 3])
    assert client.post(url, {"answer": "1485"}).status_code == 200
    missed_burst = _burst(client, session, 1, step=3)

    body = _settled(client, url)
    assert "data-grade=" not in body
    assert f"Burst {missed_burst.number} graded nothing." in body
    assert "its rate limit had already run out before this burst" in body
    prediction = Prediction.objects.get(session=session, step=3)
    assert (prediction.correct, prediction.ran_at, prediction.burst) == (None, None, None)
    do_it = body.split('id="step-do-3"')[1].split(">")[0]
    assert "disabled" not in do_it  # the step may run again

    # Step 2 again sets the limit afresh; the step then shows its lesson and is graded.
    lab.session_set_dependency(session=session, user=student, changes={"retry_after_ms": 1500})
    time.sleep(1.0)
    _burst(client, session, 1, step=3)
    body = _settled(client, url)
    assert 'data-grade="right"' in body and "graded nothing" not in body


def test_the_fallback_lesson_is_graded_right_at_a_readers_pace(celery_worker, client):
    session, student, script = _lesson("fallback_cached", "PACE0003", client)
    steps = script["steps"]
    lab.session_set_dependency(session=session, user=student, changes=steps[0]["set_dependency"])
    time.sleep(READING_S)
    url2 = reverse("labs:session_step_prediction", args=[session.pk, 2])
    assert client.post(url2, {"answer": "0"}).status_code == 200
    _burst(client, session, 10, step=2)
    body = _settled(client, url2)
    assert 'data-grade="right"' in body, body
    observed = Prediction.objects.get(session=session, step=2).observed
    assert (observed["succeeded"], observed["degraded"], observed["errors"]) == (4, 6, 0)

    lab.session_set_dependency(session=session, user=student, changes={"mode": "down"})
    url5 = reverse("labs:session_step_prediction", args=[session.pk, 5])
    assert client.post(url5, {"answer": "0"}).status_code == 200
    # Too early: the cached answer is still fresh, so the step's situation did not happen.
    _burst(client, session, 4, step=5)
    body = _settled(client, url5)
    assert "data-grade=" not in body and "was still under 3 s old" in body
    time.sleep(3.6)  # the wait of step 4, a little late
    _burst(client, session, 4, step=5)
    body = _settled(client, url5)
    assert 'data-grade="right"' in body, body
    observed = Prediction.objects.get(session=session, step=5).observed
    assert (observed["degraded"], observed["errors"], observed["fallback_expired"]) == (0, 4, 4)
