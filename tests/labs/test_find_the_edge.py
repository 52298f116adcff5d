"""The "Find the edge" lesson's questions: whether the class's shared dependency comes back
within N s of the end of the first trigger fired after the answer was fixed, graded from the
counters recorded in the real Redis model by the storm panel's own recovery clock
(``storm_headline``): recovered, not recovered, not graded yet while the trigger has not
happened or not ended or the seconds are not up, and nothing graded (the step freed again)
when the class had no traffic through the trigger or another trigger cut it short."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from labs.journal import store as journal
from labs.live import runtime
from labs.models import Burst, JournalEvent, LabSession, Prediction
from labs.presenters.storm import storm_headline
from labs.services import lab, predictions
from labs.services import shared as shared_services
from tests.conftest import make_scenario, make_student

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clean_shared_model")]

ROOT = Path(__file__).resolve().parents[2]
LESSON = json.loads((ROOT / "scenarios" / "find_the_edge.json").read_text())
WITHIN_S = LESSON["steps"][0]["ask"]["within_s"]


@pytest.fixture
def session(classroom, instructor, student) -> LabSession:
    shared_services.classroom_set_shared(classroom=classroom, user=instructor, values={})
    runtime.configure_shared(classroom.pk)
    scenario = make_scenario("find_the_edge", title=LESSON["title"], script=LESSON)
    classroom.scenarios.add(scenario)
    session = lab.session_open(user=student, classroom=classroom, scenario=scenario)
    return lab.session_set_dependency(session=session, user=student, changes={"mode": "shared"})


def redis_now() -> int:
    return int(runtime.engine_redis().time()[0])


def record(classroom_id: int, first: int, last: int, *, calls: int, retries: int = 0,
           calls_ok: int | None = None) -> None:  # fmt: skip
    """Write the counters of the seconds ``first`` to ``last`` into the class's model in Redis,
    in the fields the model's attempt script writes (``<second>:<name>``)."""
    calls_ok = calls if calls_ok is None else calls_ok
    fields = {}
    for sec in range(first, last + 1):
        fields |= {
            f"{sec}:offered": calls + retries, f"{sec}:calls": calls, f"{sec}:retries": retries,
            f"{sec}:calls_ok": calls_ok, f"{sec}:ok": calls_ok,
            f"{sec}:error": calls + retries - calls_ok,
        }  # fmt: skip
    runtime.engine_redis().hset(runtime.shared_model(classroom_id).k_counters, mapping=fields)


def fixed_answer(session, student, answer: str, step: int = 1, ago_s: int = 120) -> Prediction:
    """``answer`` to the step's question, fixed by the step's Do it ``ago_s`` seconds ago."""
    predictions.prediction_submit(session=session, user=student, step=step, answer=answer)
    burst = Burst.objects.create(session=session, number=step, size=1)
    prediction = predictions.prediction_attach(session=session, step=step, burst=burst)
    ran_at = timezone.now() - timezone.timedelta(seconds=ago_s)
    Prediction.objects.filter(pk=prediction.pk).update(ran_at=ran_at)
    prediction.refresh_from_db()
    return prediction


def trigger_row(session, from_s: float, until_s: float) -> None:
    """A ``shared_trigger`` row as ``classroom_fire_trigger`` journals it, with its span."""
    journal.record([journal.entry(
        session, "shared_trigger", "shared dependency trigger: down for 8 s",
        data={"trigger": {"kind": "down", "duration_ms": round((until_s - from_s) * 1000)},
              "replaced": None,
              "span": {"from_us": int(from_s * 1e6), "until_us": int(until_s * 1e6)}},
    )])  # fmt: skip


def storm(classroom_id: int, now: int, *, back_after_s: int | None) -> tuple[int, int]:
    """A run of 30 calls/s: a 10 s baseline, an 8 s down trigger (every call spends 4
    attempts), then the storm for ``back_after_s`` seconds and 30 calls/s answered again, or
    (None) the storm to ``now``. Returns the trigger's span (whole seconds)."""
    start = now - 60
    trig_from, trig_until = start + 10, start + 18
    record(classroom_id, start, trig_from - 1, calls=30)
    record(classroom_id, trig_from, trig_until - 1, calls=30, retries=90, calls_ok=0)
    storm_end = now - 1 if back_after_s is None else trig_until + back_after_s - 1
    record(classroom_id, trig_until, storm_end, calls=30, retries=90, calls_ok=1)
    if back_after_s is not None:
        record(classroom_id, storm_end + 1, now - 1, calls=30)
    return trig_from, trig_until


def test_recovered_within_the_seconds_grades_yes(session, student):
    prediction = fixed_answer(session, student, "yes")
    trig_from, trig_until = storm(session.classroom_id, redis_now(), back_after_s=3)
    trigger_row(session, trig_from, trig_until)
    graded = predictions.prediction_grade(prediction=prediction)
    assert graded.correct is True
    assert graded.observed["recovered"] == "yes" and graded.observed["recovery_s"] == 3
    # The storm panel's own clock over the same recorded seconds says the same.
    now = redis_now()
    seconds = runtime.shared_now(session.classroom_id, back_s=100)["seconds"]
    trigger = {"kind": "down", "from_s": trig_from, "until_s": trig_until}
    panel = storm_headline(seconds, trigger, now)
    assert (panel["state"], panel["recovery_s"]) == ("recovered", 3)


def test_recovered_graded_against_no_is_wrong(session, student):
    prediction = fixed_answer(session, student, "no")
    trig_from, trig_until = storm(session.classroom_id, redis_now(), back_after_s=1)
    trigger_row(session, trig_from, trig_until)
    graded = predictions.prediction_grade(prediction=prediction)
    assert graded.correct is False and graded.observed["recovered"] == "yes"


def test_not_recovered_after_the_seconds_grades_no(session, student):
    prediction = fixed_answer(session, student, "no")
    trig_from, trig_until = storm(session.classroom_id, redis_now(), back_after_s=None)
    assert redis_now() - trig_until > WITHIN_S + 1
    trigger_row(session, trig_from, trig_until)
    graded = predictions.prediction_grade(prediction=prediction)
    assert graded.correct is True
    assert graded.observed["recovered"] == "no"
    assert graded.observed["recovery_s"] >= WITHIN_S


def test_back_only_after_the_seconds_were_up_is_no(session, student):
    prediction = fixed_answer(session, student, "yes")
    trig_from, trig_until = storm(session.classroom_id, redis_now(), back_after_s=WITHIN_S + 5)
    trigger_row(session, trig_from, trig_until)
    graded = predictions.prediction_grade(prediction=prediction)
    assert graded.correct is False and graded.observed["recovered"] == "no"


def test_before_any_trigger_it_is_not_graded_yet_and_says_so(client, session, student):
    prediction = fixed_answer(session, student, "yes")
    now = redis_now()
    record(session.classroom_id, now - 30, now - 1, calls=30)
    assert predictions.prediction_grade(prediction=prediction).correct is None
    client.force_login(student)
    body = client.get(reverse("labs:session_step_prediction", args=[session.pk, 1])).content
    text = body.decode()
    assert "Not graded yet: waiting for the instructor&#x27;s trigger" in text
    assert 'hx-trigger="every 5s"' in text and "data-grade" not in text  # a slower poll


def test_a_trigger_still_running_is_not_graded_yet(client, session, student):
    prediction = fixed_answer(session, student, "no")
    now = redis_now()
    record(session.classroom_id, now - 20, now - 1, calls=30)
    trigger_row(session, now - 2, now + 30)
    assert predictions.prediction_grade(prediction=prediction).correct is None
    client.force_login(student)
    text = client.get(reverse("labs:session_step_prediction", args=[session.pk, 1])).content
    assert "Not graded yet: the trigger is running" in text.decode()


def test_not_back_yet_with_seconds_left_is_not_graded_yet(client, session, student):
    prediction = fixed_answer(session, student, "no")
    now = redis_now()
    start = now - 25
    record(session.classroom_id, start, start + 9, calls=30)
    record(session.classroom_id, start + 10, now - 1, calls=30, retries=90, calls_ok=0)
    trigger_row(session, start + 10, start + 18)  # ended 7 s ago, 20 s to come back
    graded = predictions.prediction_grade(prediction=prediction)
    assert graded.correct is None and graded.ran_at is not None
    client.force_login(student)
    text = client.get(reverse("labs:session_step_prediction", args=[session.pk, 1])).content
    assert "the dependency is not back yet" in text.decode()


def test_a_trigger_fired_before_the_answer_was_fixed_is_not_the_one_graded(session, student):
    trig_from, trig_until = storm(session.classroom_id, redis_now(), back_after_s=2)
    trigger_row(session, trig_from, trig_until)
    prediction = fixed_answer(session, student, "yes", ago_s=0)
    assert predictions.prediction_grade(prediction=prediction).correct is None


def test_no_traffic_through_the_trigger_grades_nothing_and_frees_the_step(client, session, student):
    prediction = fixed_answer(session, student, "yes")
    now = redis_now()
    trigger_row(session, now - 50, now - 42)  # no counters at all: nobody called
    released = predictions.prediction_grade(prediction=prediction)
    assert released.correct is None and released.ran_at is None and released.burst is None
    assert "no steady traffic through the trigger" in released.missed
    client.force_login(student)
    text = client.get(reverse("labs:session_step_prediction", args=[session.pk, 1])).content
    text = text.decode()
    assert "Nothing graded.</strong> The class had no steady traffic through the trigger" in text
    do_it = text.split('id="step-do-1"')[1].split(">")[0]
    assert "disabled" not in do_it


def test_another_trigger_before_the_seconds_were_up_grades_nothing(session, student):
    prediction = fixed_answer(session, student, "no")
    now = redis_now()
    trig_from, trig_until = storm(session.classroom_id, now, back_after_s=None)
    trigger_row(session, trig_from, trig_until)
    trigger_row(session, trig_until + 5, trig_until + 13)
    released = predictions.prediction_grade(prediction=prediction)
    assert released.correct is None and released.ran_at is None
    assert "Another trigger fired" in released.missed


def test_a_recovery_seen_before_the_next_trigger_still_counts(session, student):
    prediction = fixed_answer(session, student, "yes")
    trig_from, trig_until = storm(session.classroom_id, redis_now(), back_after_s=2)
    trigger_row(session, trig_from, trig_until)
    trigger_row(session, trig_until + 10, trig_until + 18)
    assert predictions.prediction_grade(prediction=prediction).correct is True


def test_the_page_shows_the_grade_in_words(client, session, student, instructor):
    fixed_answer(session, student, "yes")
    trig_from, trig_until = storm(session.classroom_id, redis_now(), back_after_s=2)
    trigger_row(session, trig_from, trig_until)
    url = reverse("labs:session_step_prediction", args=[session.pk, 1])
    client.force_login(student)
    text = client.get(url).content.decode()
    assert "Your prediction: <strong data-answer>Yes, it comes back</strong>" in text
    assert "yes: back 2 s after the trigger ended" in text and "right." in text
    assert 'data-grade="right"' in text and "every 2s" not in text
    client.force_login(instructor)  # the class's instructor watches read-only
    assert "yes: back 2 s after the trigger ended" in client.get(url).content.decode()


def test_the_sweep_grades_without_a_page(session, student, classroom):
    bob = make_student("bob_edge", classroom)
    other = lab.session_open(user=bob, classroom=classroom, scenario=session.scenario)
    first = fixed_answer(session, student, "no")
    second = fixed_answer(other, bob, "yes")
    trig_from, trig_until = storm(session.classroom_id, redis_now(), back_after_s=None)
    trigger_row(session, trig_from, trig_until)
    trigger_row(other, trig_from, trig_until)
    assert predictions.recovery_predictions_grade() == 2
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.correct, second.correct) == (True, False)
    assert first.observed == second.observed
    assert predictions.recovery_predictions_grade() == 0


def test_an_answer_is_yes_or_no(client, session, student):
    client.force_login(student)
    url = reverse("labs:session_step_prediction", args=[session.pk, 2])
    refused = client.post(url, {"answer": "maybe"})
    assert refused.status_code == 422 and "Choose one of: yes, no." in refused.content.decode()
    assert not Prediction.objects.exists()
    assert client.post(url, {"answer": "no"}).status_code == 200
    row = JournalEvent.objects.filter(session=session, kind="prediction_submitted").get()
    assert "stays down within 20 s of the end of the next trigger (step 2)" in row.message


def test_a_fired_trigger_journals_the_span_the_model_stamped(session, instructor):
    shared_services.classroom_fire_trigger(
        classroom=session.classroom, user=instructor, values={"kind": "down", "duration_ms": 8000}
    )
    row = JournalEvent.objects.filter(session=session, kind="shared_trigger").get()
    model = runtime.shared_model(session.classroom_id).state()["trigger"]
    assert row.data["span"] == {"from_us": model["from_us"], "until_us": model["until_us"]}
    assert abs(row.data["span"]["from_us"] / 1e6 - time.time()) < 5


def test_the_lesson_page_asks_yes_or_no_and_points_at_the_recovery(client, session, student):
    client.force_login(student)
    text = client.get(session.get_absolute_url()).content.decode()
    assert text.count("Run a burst of 1 call: it fixes your answer before the instructor") == 6
    assert '<option value="yes">Yes, it comes back</option>' in text
    assert '<option value="no">No, it stays down</option>' in text
    panel = text.split('data-step-panel="1"')[1].split('data-step-panel="2"')[0]
    assert "the storm panel&#x27;s time to recovery" in panel
    assert "burst summary" not in panel
