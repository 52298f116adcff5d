"""The class's live view of predictions and step progress through the real ASGI application
and the real channels-redis layer: an answer, a ticked step or a graded run announced after
its commit (``class.progress``) reaches the class dashboard as the student's step and score,
and the predictions page (``?view=predictions``) as its re-rendered histograms; nobody else
hears of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from lab_project.asgi import application
from labs.consumers.dashboard import SETTLE_S
from labs.journal.broadcast import class_group
from labs.models import Prediction, StepProgress
from labs.services import lab, predictions
from tests.conftest import make_student
from tests.integration.test_dashboard_consumer import (
    TIMEOUT,
    _connect_and_snapshot,
    _refused_code,
    run,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TOUR = json.loads((Path(__file__).resolve().parents[2] / "scenarios" / "tour.json").read_text())
DOWN_STEP = 3  # the tour's step with a question (dependency hits against a dead dependency)


@pytest.fixture
def sessions(classroom, scenario, student):
    scenario.script = TOUR
    scenario.save()
    bob = make_student("bob_a", classroom)
    return [
        lab.session_open(user=student, classroom=classroom, scenario=scenario),
        lab.session_open(user=bob, classroom=classroom, scenario=scenario),
    ]


def communicator(user, classroom_id: int, view: str = "") -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if user is not None:
        client = Client()
        client.force_login(user)
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    path = f"/ws/classes/{classroom_id}/" + (f"?view={view}" if view else "")
    return WebsocketCommunicator(application, path, headers=headers)


async def _next(ws, kind: str) -> dict:
    """The next message of type ``kind`` (the journal's own ``session`` updates and settle
    snapshots may come in between)."""
    while True:
        message = await ws.receive_json_from(timeout=TIMEOUT)
        if message["type"] == kind:
            return message


submit = database_sync_to_async(predictions.prediction_submit)
mark = database_sync_to_async(predictions.step_mark)


# --- the class dashboard: each student's step and score -------------------------------------


def test_an_answer_and_a_ticked_step_reach_the_dashboard_as_step_and_score(
    instructor, classroom, sessions
):
    alice = sessions[0]

    async def flow(ws):
        snapshot = await _connect_and_snapshot(ws)
        await submit(session=alice, user=alice.owner, step=DOWN_STEP, answer="24")
        answered = await _next(ws, "progress")
        await mark(session=alice, step=1, done=True)
        ticked = await _next(ws, "progress")
        await ws.disconnect()
        return snapshot, answered, ticked

    snapshot, answered, ticked = run(flow, communicator(instructor, classroom.pk))
    row = next(r for r in snapshot["rows"] if r["session"] == alice.pk)
    assert (row["progress"]["done"], row["progress"]["answered"]) == (0, 0)
    assert row["progress_text"] == "0/6 steps · 0/0 right"
    assert answered["session"] == alice.pk
    assert (answered["progress"]["answered"], answered["progress"]["done"]) == (1, 0)
    assert answered["progress_text"] == "0/6 steps · 0/1 right"
    assert ticked["progress"]["done"] == 1
    assert ticked["progress_text"] == "1/6 steps · 0/1 right"


def test_a_progress_change_whose_push_was_lost_heals_with_the_settle_snapshot(
    instructor, classroom, sessions
):
    alice, bob = sessions

    async def flow(ws):
        await _connect_and_snapshot(ws)
        # Committed without a push (as if the channel layer had dropped it).
        await database_sync_to_async(StepProgress.objects.create)(session=alice, attempt=1, step=2)
        await mark(session=bob, step=1, done=True)
        forwarded = await _next(ws, "progress")
        settled = await _next(ws, "snapshot")
        await ws.disconnect()
        return forwarded, settled

    forwarded, settled = run(flow, communicator(instructor, classroom.pk))
    assert forwarded["session"] == bob.pk
    row = next(r for r in settled["rows"] if r["session"] == alice.pk)
    assert row["progress"]["done"] == 1
    assert SETTLE_S < TIMEOUT


def test_a_progress_message_about_another_class_is_not_forwarded(
    instructor, classroom, other_classroom, scenario, sessions
):
    stranger = make_student("zed", other_classroom)
    theirs = lab.session_open(user=stranger, classroom=other_classroom, scenario=scenario)

    async def flow(ws):
        await _connect_and_snapshot(ws)
        # Even sent to this class's group by mistake, a session of another class is not shown.
        await get_channel_layer().group_send(
            class_group(classroom.pk), {"type": "class.progress", "session": theirs.pk}
        )
        quiet = await ws.receive_nothing(timeout=0.5)
        await ws.disconnect()
        return quiet

    assert run(flow, communicator(instructor, classroom.pk))


# --- the predictions page: histograms pushed, not polled ------------------------------------


def test_the_predictions_view_gets_its_histograms_on_connect_and_after_each_answer(
    instructor, classroom, sessions
):
    alice, bob = sessions

    async def flow(ws):
        connected, _ = await ws.connect(timeout=TIMEOUT)
        assert connected
        first = await ws.receive_json_from(timeout=TIMEOUT)
        await submit(session=alice, user=alice.owner, step=DOWN_STEP, answer="24")
        one = await ws.receive_json_from(timeout=TIMEOUT)
        # Burst traffic (the dashboard's ``session`` updates) is not sent to this page.
        await get_channel_layer().group_send(
            class_group(classroom.pk),
            {"type": "class.session", "session": alice.pk, "last_seq": 99, "calls": 1},
        )
        await submit(session=bob, user=bob.owner, step=DOWN_STEP, answer="24")
        two = await ws.receive_json_from(timeout=TIMEOUT)
        await ws.disconnect()
        return first, one, two

    first, one, two = run(flow, communicator(instructor, classroom.pk, view="predictions"))
    assert [m["type"] for m in (first, one, two)] == ["predictions"] * 3
    assert first["html"].strip().startswith('<div id="prediction-histograms">')
    assert "No student has answered a question yet." in first["html"]
    bar = '<tr data-answer="24">'
    assert bar in one["html"] and bar in two["html"]
    assert '<td class="count" data-count>1</td>' in one["html"].split(bar)[1].split("</tr>")[0]
    assert '<td class="count" data-count>2</td>' in two["html"].split(bar)[1].split("</tr>")[0]
    assert '<strong data-total>2</strong> answers' in two["html"]


def test_the_predictions_view_reads_the_truth_again_after_a_gap(instructor, classroom, sessions):
    alice = sessions[0]

    async def flow(ws):
        connected, _ = await ws.connect(timeout=TIMEOUT)
        assert connected
        await ws.receive_json_from(timeout=TIMEOUT)
        # An answer committed while this process heard nothing (no push reached it) ...
        await database_sync_to_async(Prediction.objects.create)(
            session=alice, owner=alice.owner, attempt=1, step=DOWN_STEP,
            measure="dependency_hits", answer="7",
        )  # fmt: skip
        # ... then the channel layer subscribes again (labs.live.channel_layer tells every
        # consumer with ``layer.reconnected``).
        await get_channel_layer().group_send(class_group(classroom.pk), {"type": "layer.reconnected"})
        healed = await ws.receive_json_from(timeout=TIMEOUT)
        await ws.disconnect()
        return healed

    healed = run(flow, communicator(instructor, classroom.pk, view="predictions"))
    assert healed["type"] == "predictions"
    assert '<tr data-answer="7">' in healed["html"]


@pytest.mark.parametrize("who", ["student", "other_instructor", "other_student", None])
def test_nobody_but_the_class_instructors_gets_the_predictions_view(
    request, classroom, sessions, who
):
    user = request.getfixturevalue(who) if who else None
    assert run(_refused_code, communicator(user, classroom.pk, view="predictions")) == 4403


def test_a_refused_socket_hears_no_answer(student, classroom, sessions):
    alice = sessions[0]

    async def flow(ws):
        connected, _ = await ws.connect(timeout=TIMEOUT)
        assert connected
        close = await ws.receive_output(timeout=TIMEOUT)
        assert close == {"type": "websocket.close", "code": 4403}
        await submit(session=alice, user=alice.owner, step=DOWN_STEP, answer="24")
        quiet = await ws.receive_nothing(timeout=0.5)
        await ws.disconnect()
        return quiet

    assert run(flow, communicator(student, classroom.pk, view="predictions"))
