"""The storm panel's websocket (``ws/classes/<id>/storm/``) through the real ASGI application
(origin check, session auth) against the real Redis model: 4403 for a student and for another
class's instructor; for the class's instructor a snapshot of the window on connect, then a
tick a second whose seconds equal the model's counters in Redis."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from lab_project.asgi import application
from labs.consumers.storm import RESEND_S
from labs.live import runtime
from labs.selectors.storm import STORM_WINDOW_S
from labs.services import shared as shared_services

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("clean_shared_model"),
]

#: Generous: a tick is due every half second.
TIMEOUT = 10


@pytest.fixture
def configured(classroom, instructor):
    shared_services.classroom_set_shared(
        classroom=classroom, user=instructor, values={"servers": 2, "service_ms": 50}
    )
    runtime.configure_shared(classroom.pk)
    return classroom


def communicator(user, classroom_id: int) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if user is not None:
        client = Client()
        client.force_login(user)
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    return WebsocketCommunicator(application, f"/ws/classes/{classroom_id}/storm/", headers=headers)


async def closed_with(ws: WebsocketCommunicator) -> int:
    connected, _ = await ws.connect(timeout=TIMEOUT)
    assert connected
    message = await ws.receive_output(timeout=TIMEOUT)
    await ws.disconnect()
    assert message["type"] == "websocket.close", message
    return message["code"]


def test_student_other_instructor_and_anonymous_are_closed_with_4403(
    configured, student, other_instructor
):
    sockets = [communicator(u, configured.pk) for u in (student, other_instructor, None)]

    async def scenario():
        return [await closed_with(ws) for ws in sockets]

    assert asyncio.run(scenario()) == [4403, 4403, 4403]


def test_snapshot_then_ticks_equal_the_redis_counters(configured, instructor):
    model = runtime.shared_model(configured.pk)
    for attempt in (1, 1, 2):
        model.decide(attempt=attempt)

    ws = communicator(instructor, configured.pk)

    async def scenario():
        connected, _ = await ws.connect(timeout=TIMEOUT)
        assert connected
        snapshot = await ws.receive_json_from(timeout=TIMEOUT)
        # More attempts after the snapshot: a tick must bring them.
        await sync_to_async(model.decide)(attempt=1)
        await sync_to_async(model.decide)(attempt=3)
        ticks = [await ws.receive_json_from(timeout=TIMEOUT) for _ in range(5)]
        await ws.disconnect()
        return snapshot, ticks

    snapshot, ticks = asyncio.run(scenario())
    assert snapshot["type"] == "snapshot"
    assert snapshot["window_s"] == STORM_WINDOW_S
    assert len(snapshot["seconds"]) == STORM_WINDOW_S
    assert snapshot["model"]["capacity_per_s"] == 40
    assert sum(s["offered"] for s in snapshot["seconds"]) == 3
    assert sum(s["retries"] for s in snapshot["seconds"]) == 1
    assert all(t["type"] == "tick" for t in ticks)
    # The table comes whenever the second has moved on since it last went out (2.5 s of
    # ticks: at least twice), each time for a later second; the tiles come with every tick.
    tables = [snapshot["students"] and snapshot["now"]] + [
        t["now"] for t in ticks if "students" in t
    ]
    assert len(tables) >= 3 and tables[1:] == sorted(set(tables[1:]))
    assert all(t["headline"]["now"] == t["now"] for t in ticks)
    assert snapshot["headline"]["state"] in ("no_traffic", "healthy")

    stored = {s.second: s.to_dict() for s in model.counters()}
    last = ticks[-1]
    assert len(last["seconds"]) == RESEND_S + 1
    for sent in last["seconds"]:
        expected = stored.get(sent["second"])
        if expected is None:
            assert sent["offered"] == 0
            continue
        for name in ("offered", "ok", "calls", "retries", "waits", "wait_p99_ms"):
            assert sent[name] == expected[name], (sent["second"], name)
    # Every attempt so far, snapshot and ticks together, per second as Redis has it.
    merged = {s["second"]: s for s in snapshot["seconds"]}
    for tick in ticks:
        merged.update({s["second"]: s for s in tick["seconds"]})
    assert sum(s["offered"] for s in merged.values()) == 5
    assert sum(s["retries"] for s in merged.values()) == 2


def test_a_refresh_request_gets_a_snapshot(configured, instructor):
    ws = communicator(instructor, configured.pk)

    async def scenario():
        await ws.connect(timeout=TIMEOUT)
        first = await ws.receive_json_from(timeout=TIMEOUT)
        await asyncio.sleep(1.1)  # past the refresh interval
        await ws.send_json_to({"type": "refresh"})
        kinds = []
        for _ in range(4):
            kinds.append((await ws.receive_json_from(timeout=TIMEOUT))["type"])
            if kinds[-1] == "snapshot":
                break
        await ws.disconnect()
        return first["type"], kinds

    first, kinds = asyncio.run(scenario())
    assert first == "snapshot"
    assert "snapshot" in kinds


def test_the_layers_reconnected_message_gets_a_snapshot_and_the_stream_goes_on(
    configured, instructor
):
    """The channel layer sends ``layer.reconnected`` to every channel of the process after it
    has lost Redis; the storm consumer must handle it (a missing handler ends the socket)."""
    ws = communicator(instructor, configured.pk)

    async def scenario():
        await ws.connect(timeout=TIMEOUT)
        kinds = [(await ws.receive_json_from(timeout=TIMEOUT))["type"]]
        await ws.send_input({"type": "layer.reconnected"})
        for _ in range(3):
            kinds.append((await ws.receive_json_from(timeout=TIMEOUT))["type"])
        await ws.disconnect()
        return kinds

    kinds = asyncio.run(scenario())
    assert kinds[0] == "snapshot"
    assert "snapshot" in kinds[1:]
    assert kinds[-1] == "tick"


def test_the_ticks_carry_the_stable_line_and_follow_a_policy_change(
    configured, instructor, student, scenario
):
    """The class's largest retry count comes from the list of sessions the consumer reads
    every SESSIONS_EVERY_S (no read of its own); a student's new policy reaches the ticks'
    stable line within that, with no reconnect."""
    from labs.consumers.storm import SESSIONS_EVERY_S
    from labs.services import lab

    session = lab.session_open(user=student, classroom=configured, scenario=scenario)
    lab.session_set_dependency(session=session, user=student, changes={"mode": "shared"})
    lab.session_set_policy(session=session, user=student, changes={"max_attempts": 4})
    ws = communicator(instructor, configured.pk)
    wait_s = SESSIONS_EVERY_S + 10  # the list's period, with a wide margin

    async def scenario_():
        await ws.connect(timeout=TIMEOUT)
        snapshot = await ws.receive_json_from(timeout=TIMEOUT)
        await sync_to_async(lab.session_set_policy)(
            session=session, user=student, changes={"max_attempts": 2}
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        seen = []
        while loop.time() < deadline:
            tick = await ws.receive_json_from(timeout=TIMEOUT)
            seen.append(tick["headline"]["edge"])
            if tick["headline"]["edge"]["retries"] == 1:
                break
        await ws.disconnect()
        return snapshot, seen

    snapshot, seen = asyncio.run(scenario_())
    edge = snapshot["headline"]["edge"]
    # 2 servers x 50 ms: 40 attempts/s; 4 attempts per call are 3 retries: stable below 10.
    assert edge["capacity_per_s"] == 40 and edge["retries"] == 3 and edge["stable_per_s"] == 10
    assert edge["region"] is None and edge["load_per_s"] is None  # no traffic yet
    assert seen[-1]["retries"] == 1 and seen[-1]["stable_per_s"] == 20, seen
