"""The lab page's shared-dependency messages (``ws/sessions/<id>/``, "shared") through the real
ASGI application against the real Redis model: pushed once a second while the session is in
shared mode (the page asks for nothing), equal to the model's counters, the state healthy
then triggered, and never naming another student; a session that leaves shared mode is told
so once and gets no more."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from lab_project.asgi import application
from labs.consumers.lab import SHARED_FIRST_S, SHARED_RESEND_S
from labs.engine.validate import parse_trigger
from labs.live import runtime
from labs.services import lab
from labs.services import shared as shared_services
from tests.conftest import make_student

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TIMEOUT = 10


@pytest.fixture
def shared_session(classroom, instructor, student, scenario):
    shared_services.classroom_set_shared(
        classroom=classroom, user=instructor, values={"servers": 2, "service_ms": 50}
    )
    runtime.configure_shared(classroom.pk)
    runtime.shared_model(classroom.pk).reset()
    session = lab.session_open(user=student, classroom=classroom, scenario=scenario)
    lab.session_set_dependency(session=session, user=student, changes={"mode": "shared"})
    # A classmate whose name must never reach this student's page.
    other = make_student("zelda_classmate", classroom)
    theirs = lab.session_open(user=other, classroom=classroom, scenario=scenario)
    lab.session_set_dependency(session=theirs, user=other, changes={"mode": "shared"})
    session.classmate_id = theirs.pk
    yield session
    runtime.shared_model(classroom.pk).clear()


def communicator(user, session_id: int) -> WebsocketCommunicator:
    client = Client()
    client.force_login(user)
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
    ]
    return WebsocketCommunicator(application, f"/ws/sessions/{session_id}/", headers=headers)


async def next_shared(ws: WebsocketCommunicator, texts: list[str]) -> dict:
    while True:
        text = (await ws.receive_output(timeout=TIMEOUT))["text"]
        texts.append(text)
        message = json.loads(text)
        if message["type"] == "shared":
            return message


def test_shared_messages_carry_the_state_and_the_class_totals_and_no_name(
    shared_session, student, classroom
):
    model = runtime.shared_model(classroom.pk)
    ws = communicator(student, shared_session.pk)
    texts: list[str] = []

    async def scenario():
        connected, _ = await ws.connect(timeout=TIMEOUT)
        assert connected
        # two attempts of this session (a call and its retry), one of the classmate's
        for attempt, whose in ((1, shared_session.pk), (2, shared_session.pk), (1, None)):
            whose = str(whose or shared_session.classmate_id)
            await sync_to_async(model.decide)(attempt=attempt, session=whose)
        first = await next_shared(ws, texts)
        healthy = await next_shared(ws, texts)
        while healthy["now"] <= first["now"]:
            healthy = await next_shared(ws, texts)
        await sync_to_async(model.trigger)(parse_trigger({"kind": "down", "duration_ms": 30000}, 2))
        triggered = await next_shared(ws, texts)
        await ws.disconnect()
        return first, healthy, triggered

    first, healthy, triggered = asyncio.run(scenario())
    assert first["active"] and len(first["seconds"]) == SHARED_FIRST_S + 1
    assert len(healthy["seconds"]) == SHARED_RESEND_S + 1
    assert healthy["state"] == "healthy" and healthy["capacity_per_s"] == 40
    assert triggered["state"] == "triggered" and triggered["trigger"]["kind"] == "down"
    assert "down trigger" in triggered["reason"]
    stored = {s.second: s.to_dict() for s in model.counters()}
    sent = {s["second"]: s for s in healthy["seconds"]}
    assert sum(s["offered"] for s in sent.values()) == 3
    for second, counters in stored.items():
        for name in ("offered", "calls", "retries", "ok", "shed", "timeout"):
            assert sent[second][name] == counters[name], (second, name)
    # Class totals only: no classmate's name, no per-student table.
    for text in texts:
        message = json.loads(text)
        if message["type"] == "shared":
            assert "zelda_classmate" not in text and "students" not in message
            assert set(message) == {
                "type", "active", "now", "seconds", "capacity_per_s", "trigger", "state", "reason",
                "mine",
            }  # fmt: skip
            # Its own counters only, for the seconds before the class's ``now``.
            mine = message["mine"]
            assert mine["now"] == message["now"]
            assert all(r["second"] < message["now"] for r in mine["seconds"])
    # This session's two attempts (one retry) out of the class's three, from its own counters.
    mine = healthy["mine"]
    assert sum(r["offered"] for r in mine["seconds"]) == 2
    assert sum(r["retries"] for r in mine["seconds"]) == 1
    window = mine["window"]
    if window["attempts"]:  # the attempts' second is within the window's last 5 s
        assert window["attempts"] == 2 and window["retry_ratio"] == 0.5
        assert window["share"] == round(2 / 3, 4)


def test_leaving_shared_mode_says_so_once(shared_session, student):
    ws = communicator(student, shared_session.pk)

    async def scenario():
        await ws.connect(timeout=TIMEOUT)
        texts: list[str] = []
        before = await next_shared(ws, texts)
        await sync_to_async(lab.session_set_dependency)(
            session=shared_session, user=student, changes={"mode": "healthy"}
        )
        after = await next_shared(ws, texts)
        while after["active"]:  # a tick already on its way when the mode changed
            after = await next_shared(ws, texts)
        # No further shared message (a tick is due every second): only the change's rows.
        while not await ws.receive_nothing(timeout=2.5):
            text = (await ws.receive_output(timeout=TIMEOUT))["text"]
            assert json.loads(text)["type"] != "shared", text
        await ws.disconnect()
        return before, after

    before, after = asyncio.run(scenario())
    assert before["active"] is True
    assert after == {"type": "shared", "active": False}


def test_a_private_session_gets_no_shared_message(classroom, student, scenario):
    session = lab.session_open(user=student, classroom=classroom, scenario=scenario)
    ws = communicator(student, session.pk)

    async def run():
        await ws.connect(timeout=TIMEOUT)
        kinds = []
        while not await ws.receive_nothing(timeout=2.5):
            kinds.append(json.loads((await ws.receive_output(timeout=TIMEOUT))["text"])["type"])
        await ws.disconnect()
        return kinds

    assert "shared" not in asyncio.run(run())


def test_a_class_pages_tick_is_one_read_and_each_page_gets_its_own_counters(
    shared_session, student, classroom, monkeypatch
):
    """Pages of one class in a process tick together: one read of every page's own counters
    a second (``labs.consumers.lab.shared_tick_text``), and each page's ``mine`` is its own
    session's, never its classmate's."""
    from labs.consumers import lab as lab_consumer
    from labs.models import LabSession

    reads: list[list[int]] = []
    real = lab_consumer.storm_sessions_now

    def counted(classroom_id, session_ids, now, back_s):
        reads.append(list(session_ids))
        return real(classroom_id, session_ids, now, back_s)

    monkeypatch.setattr(lab_consumer, "storm_sessions_now", counted)
    model = runtime.shared_model(classroom.pk)
    classmate = LabSession.objects.select_related("owner").get(pk=shared_session.classmate_id)
    mine_ws = communicator(student, shared_session.pk)
    theirs_ws = communicator(classmate.owner, classmate.pk)

    async def scenario():
        for ws in (mine_ws, theirs_ws):
            connected, _ = await ws.connect(timeout=TIMEOUT)
            assert connected
        # three attempts of this session, one of the classmate's
        for whose in (shared_session.pk,) * 3 + (classmate.pk,):
            await sync_to_async(model.decide)(attempt=1, session=str(whose))
        got: dict[str, list[dict]] = {"mine": [], "theirs": []}
        for _ in range(4):  # the first message and three ticks
            got["mine"].append(await next_shared(mine_ws, []))
            got["theirs"].append(await next_shared(theirs_ws, []))
        for ws in (mine_ws, theirs_ws):
            await ws.disconnect()
        return got

    got = asyncio.run(scenario())
    offered = {
        whose: sum(r["offered"] for r in messages[-1]["mine"]["seconds"])
        for whose, messages in got.items()
    }
    assert offered == {"mine": 3, "theirs": 1}
    # After each page's first message (read alone), a tick reads both pages at once.
    both = sorted([shared_session.pk, classmate.pk])
    ticks = [ids for ids in reads if len(ids) > 1]
    assert ticks and all(sorted(ids) == both for ids in ticks)
    assert len([ids for ids in reads if len(ids) == 1]) <= 2 + 1  # the two first messages
    assert not lab_consumer._shared_pages  # both pages left the class's tick
