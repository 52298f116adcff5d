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


def _graded(session, student, answer, observed_hits, number):
    burst = Burst.objects.create(
        session=session, number=number, size=6, created_by=student, status=Burst.Status.DONE
    )
    Prediction.objects.filter(session=session, step=DOWN_STEP).delete()
    return Prediction.objects.create(
        session=session, owner=student, step=DOWN_STEP, measure="dependency_hits",
        answer=answer, burst=burst, ran_at=burst.created_at,
        observed={"dependency_hits": observed_hits}, correct=answer == str(observed_hits),
    )  # fmt: skip


def test_the_instructor_sees_the_class_histogram_and_exports_it(
    client, session, student, instructor, classroom, scenario, factory
):
    _graded(session, student, "24", 12, 1)
    bob = factory.student("bob2", classroom)
    bobs = lab.session_open(user=bob, classroom=classroom, scenario=scenario)
    _graded(bobs, bob, "12", 12, 1)
    carol = factory.student("carol", classroom)
    carols = lab.session_open(user=carol, classroom=classroom, scenario=scenario)
    predictions.prediction_submit(session=carols, user=carol, step=DOWN_STEP, answer="24")
    client.force_login(instructor)

    response = client.get(reverse("labs:class_predictions", args=[classroom.pk]))
    assert response.status_code == 200
    (question,) = response.context["questions"]
    assert [(b["value"], b["count"]) for b in question["answer_bars"]] == [("12", 1), ("24", 2)]
    assert [(b["value"], b["count"]) for b in question["observed_bars"]] == [("12", 2)]
    assert (question["right"], question["graded"], question["total"]) == (1, 2, 3)
    scores = {
        r["session"].owner.username: (r["right"], r["answered"])
        for r in response.context["progress"]
    }
    assert scores == {"alice": (0, 1), "bob2": (1, 1), "carol": (0, 1)}
    body = response.content.decode()
    assert "How many attempts reach it during these 6 calls?" in body
    # Live over the class's websocket, not polled.
    assert "hx-trigger" not in body
    assert f'data-ws-path="/ws/classes/{classroom.pk}/?view=predictions"' in body

    csv_text = b"".join(
        client.get(reverse("labs:class_predictions_csv", args=[classroom.pk])).streaming_content
    ).decode()
    lines = csv_text.strip().splitlines()
    assert lines[0].startswith("student,username,scenario,attempt,step,question,measure,answer")
    assert len(lines) == 4
    assert any(",24," in ln and ln.endswith(",12,wrong") for ln in lines)
    assert any(ln.endswith(",,") for ln in lines)  # carol's step has not run


def test_a_student_cannot_see_the_class_predictions(owner_client, classroom, session):
    assert (
        owner_client.get(reverse("labs:class_predictions", args=[classroom.pk])).status_code == 404
    )
    url = reverse("labs:class_predictions_csv", args=[classroom.pk])
    assert owner_client.get(url).status_code == 404


def _done_url(session, step):
    return reverse("labs:session_step_done", args=[session.pk, step])


def _checked(client, session):
    body = client.get(session.get_absolute_url()).content.decode()
    return [n for n in range(1, 7) if f'id="step-{n}" class="step-check" checked' in body]


def test_step_ticks_are_kept_on_the_server_and_a_reset_starts_a_new_attempt(
    owner_client, session, student, instructor, classroom
):
    assert owner_client.post(_done_url(session, 1)).status_code == 204
    assert owner_client.post(_done_url(session, 2), {"done": "1"}).status_code == 204
    assert _checked(owner_client, session) == [1, 2]
    assert owner_client.post(_done_url(session, 2), {"done": "0"}).status_code == 204
    assert _checked(owner_client, session) == [1]
    owner_client.post(_url(session), {"answer": "24"})
    burst = Burst.objects.create(session=session, number=1, size=6, created_by=student)
    predictions.prediction_attach(session=session, step=DOWN_STEP, burst=burst)
    burst.status = Burst.Status.DONE
    burst.save()

    lab.session_reset(session=session, user=student)

    # A new attempt: no tick, no prediction, and the step's question can be answered again.
    assert _checked(owner_client, session) == []
    assert owner_client.post(_url(session), {"answer": "12"}).status_code == 200
    assert list(Prediction.objects.filter(session=session).values_list("attempt", "answer")) == [
        (1, "24"),
        (2, "12"),
    ]
    # The instructor still sees the first attempt.
    owner_client.logout()
    owner_client.force_login(instructor)
    page = owner_client.get(reverse("labs:class_predictions", args=[classroom.pk]))
    assert [(p.attempt, p.answer) for p in page.context["predictions"]] == [(1, "24"), (2, "12")]
    # Each student's step and score, in the current attempt.
    (row,) = page.context["progress"]
    assert (row["attempt"], row["done"], row["steps"], row["answered"], row["right"]) == (
        2, 0, 6, 1, 0,
    )  # fmt: skip
    assert "0 of 6" in page.content.decode()


def test_a_tick_for_a_step_the_scenario_lacks_is_refused(owner_client, session):
    response = owner_client.post(_done_url(session, 7))
    assert response.status_code == 422
    assert "1 to 6" in response.content.decode()


def test_a_watcher_cannot_tick(client, session, instructor):
    client.force_login(instructor)
    assert client.post(_done_url(session, 1)).status_code == 403
    assert "data-done-url" not in client.get(session.get_absolute_url()).content.decode()


# --- the journal row and the class's live view -----------------------------------------------


def test_an_answer_is_journaled_in_the_session_with_its_words(owner_client, session, student):
    from labs.models import JournalEvent

    owner_client.post(_url(session), {"answer": "24"})
    owner_client.post(_url(session), {"answer": "12"})
    rows = list(JournalEvent.objects.filter(session=session, kind="prediction_submitted").order_by("seq"))
    assert [r.message for r in rows] == [
        "alice predicted 24 dependency hits for step 3",
        "alice changed the prediction: predicted 12 dependency hits for step 3",
    ]
    assert rows[0].actor == student
    assert rows[1].data == {"step": 3, "attempt": 1, "measure": "dependency_hits", "answer": "12"}
    # The lab page's journal shows it like any other row.
    body = owner_client.get(session.get_absolute_url()).content.decode()
    assert "alice predicted 24 dependency hits for step 3" in body


def test_a_refused_or_final_answer_journals_nothing(owner_client, session, student):
    from labs.models import JournalEvent

    assert owner_client.post(_url(session), {"answer": "lots"}).status_code == 422
    owner_client.post(_url(session), {"answer": "24"})
    burst = Burst.objects.create(session=session, number=1, size=6, created_by=student)
    predictions.prediction_attach(session=session, step=DOWN_STEP, burst=burst)
    assert owner_client.post(_url(session), {"answer": "12"}).status_code == 409
    rows = JournalEvent.objects.filter(session=session, kind="prediction_submitted")
    assert [r.data["answer"] for r in rows] == ["24"]


def test_progress_changes_are_announced_to_the_class_after_the_commit(
    owner_client, session, student, classroom, monkeypatch, django_capture_on_commit_callbacks
):
    from labs.journal import broadcast

    sent = []
    monkeypatch.setattr(broadcast, "send_all", lambda pushes: sent.extend(pushes))
    progress = (f"lab-class-{classroom.pk}", {"type": "class.progress", "session": session.pk})

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        predictions.prediction_submit(session=session, user=student, step=DOWN_STEP, answer="24")
    assert sent == []  # nothing before the commit
    for callback in callbacks:
        callback()
    assert progress in sent

    for change in (
        lambda: predictions.step_mark(session=session, step=1, done=True),
        lambda: predictions.step_mark(session=session, step=1, done=False),
    ):
        sent.clear()
        with django_capture_on_commit_callbacks(execute=True):
            change()
        assert sent == [progress]
    # Unticking a step that was not ticked changes nothing and announces nothing.
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        predictions.step_mark(session=session, step=2, done=False)
    assert sent == []


def test_the_dashboard_rows_carry_each_students_step_and_score(
    client, session, student, instructor, classroom
):
    from labs.presenters.dashboard import row_json
    from labs.selectors.dashboard import class_dashboard_rows

    predictions.step_mark(session=session, step=1, done=True)
    predictions.step_mark(session=session, step=2, done=True)
    predictions.prediction_submit(session=session, user=student, step=DOWN_STEP, answer="24")
    (row,) = class_dashboard_rows(classroom_id=classroom.pk)
    assert row.progress == {
        "attempt": 1, "done": 2, "steps": 6, "questions": row.progress["questions"],
        "answered": 1, "right": 0,
    }  # fmt: skip
    assert row.progress["questions"] >= 1
    assert row_json(row)["progress_text"] == "2/6 steps · 0/1 right"
    client.force_login(instructor)
    body = client.get(reverse("labs:class_dashboard", args=[classroom.pk])).content.decode()
    assert "Step / score" in body
    assert '<td class="c-progress" data-field="progress">2/6 steps · 0/1 right</td>' in body
    # A reset starts a new attempt: the row says so and counts from zero.
    lab.session_reset(session=session, user=student)
    (row,) = class_dashboard_rows(classroom_id=classroom.pk)
    assert (row.progress["attempt"], row.progress["done"], row.progress["answered"]) == (2, 0, 0)
    assert row_json(row)["progress_text"] == "0/6 steps · 0/0 right (attempt 2)"
