"""A step's question on the lab page: the answer is stored on the server, refused beside the
field when it is not a sensible number (or state), final once the step ran (409), and the
step's Do it is enabled only once an answer is in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.urls import reverse

from labs.models import Burst, Prediction
from labs.services import lab, predictions

ROOT = Path(__file__).resolve().parents[2]
TOUR = json.loads((ROOT / "scenarios" / "tour.json").read_text())
DOWN_STEP = 3  # the tour's burst against the dead dependency (steps count from 1)


@pytest.fixture
def session(db, scenario, classroom, student):
    scenario.script = TOUR
    scenario.save()
    return lab.session_open(user=student, classroom=classroom, scenario=scenario)


@pytest.fixture
def owner_client(client, student):
    client.force_login(student)
    return client


def _url(session, step=DOWN_STEP):
    return reverse("labs:session_step_prediction", args=[session.pk, step])


def test_the_page_shows_the_question_and_a_disabled_do_it(owner_client, session):
    body = owner_client.get(session.get_absolute_url()).content.decode()
    assert "How many attempts reach it during these 6 calls?" in body
    assert 'id="step-do-3"' in body
    do_it = body.split('id="step-do-3"')[1].split(">")[0]
    assert "disabled" in do_it


def test_an_answer_is_stored_and_enables_do_it(owner_client, session, student):
    response = owner_client.post(_url(session), {"answer": "24"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    prediction = Prediction.objects.get(session=session, step=DOWN_STEP)
    assert (prediction.owner, prediction.measure, prediction.answer) == (
        student, "dependency_hits", "24",
    )  # fmt: skip
    assert prediction.created_at is not None and prediction.ran_at is None
    do_it = response.content.decode().split('id="step-do-3"')[1].split(">")[0]
    assert "disabled" not in do_it and "&quot;step&quot;: 3" in do_it
    # Changing the answer before the step ran is allowed.
    assert owner_client.post(_url(session), {"answer": "12"}).status_code == 200
    assert Prediction.objects.get(pk=prediction.pk).answer == "12"


@pytest.mark.parametrize(
    ("answer", "words"),
    [("lots", "between 0 and 100"), ("-1", "between 0 and 100"), ("1e9", "between 0 and 100"),
     ("nan", "between 0 and 100"), ("", "between 0 and 100")],
)  # fmt: skip
def test_a_bad_number_is_refused_beside_the_field(owner_client, session, answer, words):
    response = owner_client.post(_url(session), {"answer": answer})
    assert response.status_code == 422
    body = response.content.decode()
    assert 'class="field-error"' in body and words in body
    assert not Prediction.objects.exists()


def test_a_breaker_state_question_takes_only_a_state(owner_client, session):
    url = _url(session, step=6)
    assert owner_client.post(url, {"answer": "ajar"}).status_code == 422
    assert "closed, open, half_open" in owner_client.post(url, {"answer": "ajar"}).content.decode()
    assert owner_client.post(url, {"answer": "half_open"}).status_code == 200


def test_a_step_without_a_question_is_404(owner_client, session):
    assert owner_client.post(_url(session, step=2), {"answer": "1"}).status_code == 404
    assert owner_client.get(_url(session, step=99)).status_code == 404


def test_only_the_owner_answers(client, session, instructor):
    client.force_login(instructor)
    assert client.post(_url(session), {"answer": "3"}).status_code == 403
    assert client.get(_url(session)).status_code == 200
    assert not Prediction.objects.exists()


def test_the_answer_is_final_once_the_step_ran(owner_client, session, student):
    owner_client.post(_url(session), {"answer": "24"})
    burst = Burst.objects.create(session=session, number=1, size=6, created_by=student)
    predictions.prediction_attach(session=session, step=str(DOWN_STEP), burst=burst)
    response = owner_client.post(_url(session), {"answer": "12"})
    assert response.status_code == 409
    assert "already ran" in response.content.decode()
    assert Prediction.objects.get(session=session).answer == "24"


def test_attaching_ignores_a_step_without_prediction_or_a_bad_step(session, student):
    burst = Burst.objects.create(session=session, number=1, size=6, created_by=student)
    assert predictions.prediction_attach(session=session, step="3", burst=burst) is None
    assert predictions.prediction_attach(session=session, step="x", burst=burst) is None
    assert predictions.prediction_attach(session=session, step=None, burst=burst) is None
