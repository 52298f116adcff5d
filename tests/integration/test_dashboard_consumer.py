"""The class dashboard websocket (``ws/classes/<id>/``) through the real ASGI application:
origin check, session auth, the real channels-redis layer (never the in-memory one)."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import transaction
from django.test import Client

from lab_project.asgi import application
from labs.consumers.dashboard import REFRESH_INTERVAL_S, SETTLE_S
from labs.journal.broadcast import class_group
from labs.models import Burst
from labs.presenters.dashboard import dashboard_row_html
from labs.presenters.text import MODE_LABELS
from labs.selectors.dashboard import class_dashboard_rows
from labs.services import bursts, lab
from labs.services import classroom as class_services
from tests.conftest import make_student, tour_script
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TIMEOUT = 5


@pytest.fixture(autouse=True)
def _real_channel_layer():
    backend = settings.CHANNEL_LAYERS["default"]["BACKEND"]
    assert backend == "labs.live.channel_layer.LabChannelLayer", backend


@pytest.fixture
def sessions(classroom, scenario, student):
    bob = make_student("bob_a", classroom)
    return [
        lab.session_open(user=student, classroom=classroom, scenario=scenario),
        lab.session_open(user=bob, classroom=classroom, scenario=scenario),
    ]


def communicator(user, classroom_id: int) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if user is not None:
        client = Client()
        client.force_login(user)
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    return WebsocketCommunicator(application, f"/ws/classes/{classroom_id}/", headers=headers)


def warm_up_journal_writer(session) -> None:
    """Run a one-call burst to the end first: the worker's journal writer may start a process
    on first use, and until it runs a burst's rows only land at its end. Warm, rows land batch
    by batch while the burst runs, as on a running lab."""
    warm_up = bursts.burst_start(session=session, user=session.owner, size=1)
    wait_for(lambda: Burst.objects.get(pk=warm_up.pk).status == "done", message="warm-up burst")


def run(coro_fn, *args):
    return async_to_sync(coro_fn)(*args)


async def _connect_and_snapshot(ws: WebsocketCommunicator) -> dict:
    connected, _ = await ws.connect(timeout=TIMEOUT)
    assert connected
    message = await ws.receive_json_from(timeout=TIMEOUT)
    assert message["type"] == "snapshot"
    return message


async def _refused_code(ws: WebsocketCommunicator) -> int:
    connected, code = await ws.connect(timeout=TIMEOUT)
    if connected:  # accepted, then closed with the code
        output = await ws.receive_output(timeout=TIMEOUT)
        assert output["type"] == "websocket.close"
        code = output.get("code")
    await ws.disconnect()
    return code


# --- permissions ------------------------------------------------------------------------------------


def test_instructor_is_let_in_and_gets_a_snapshot_of_every_session(instructor, classroom, sessions):
    async def scenario(ws):
        snapshot = await _connect_and_snapshot(ws)
        await ws.disconnect()
        return snapshot

    snapshot = run(scenario, communicator(instructor, classroom.pk))
    assert sorted(r["session"] for r in snapshot["rows"]) == sorted(s.pk for s in sessions)
    row = snapshot["rows"][0]
    assert row["state"] == "closed" and row["activity"] == "idle" and row["mode"] == "flaky"


@pytest.mark.parametrize("who", ["student", "other_instructor", "other_student", None])
def test_anyone_else_is_closed_with_4403(request, classroom, sessions, who):
    user = request.getfixturevalue(who) if who else None
    assert run(_refused_code, communicator(user, classroom.pk)) == 4403


def test_refused_socket_gets_no_class_updates(student, classroom, sessions):
    async def scenario(ws):
        connected, _ = await ws.connect(timeout=TIMEOUT)
        assert connected
        close = await ws.receive_output(timeout=TIMEOUT)
        assert close == {"type": "websocket.close", "code": 4403}
        await get_channel_layer().group_send(
            class_group(classroom.pk), {"type": "class.session", "session": 1, "last_seq": 9}
        )
        assert await ws.receive_nothing(timeout=0.5)
        await ws.disconnect()

    run(scenario, communicator(student, classroom.pk))


def test_instructor_of_another_class_cannot_watch_this_one(other_instructor, classroom, sessions):
    assert run(_refused_code, communicator(other_instructor, classroom.pk)) == 4403


def test_superuser_is_let_in(superuser, classroom, sessions):
    async def scenario(ws):
        await _connect_and_snapshot(ws)
        await ws.disconnect()

    run(scenario, communicator(superuser, classroom.pk))


def test_socket_from_a_foreign_origin_is_refused(instructor, classroom):
    client = Client()
    client.force_login(instructor)
    ws = WebsocketCommunicator(
        application,
        f"/ws/classes/{classroom.pk}/",
        headers=[
            (b"origin", b"http://evil.example"),
            (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
        ],
    )

    async def scenario(ws):
        connected, _ = await ws.connect(timeout=TIMEOUT)
        await ws.disconnect()
        return connected

    assert run(scenario, ws) is False


# --- forwarding -----------------------------------------------------------------------------------


def test_class_group_updates_are_forwarded_and_other_classes_are_not(
    instructor, classroom, other_classroom, sessions
):
    async def scenario(ws):
        await _connect_and_snapshot(ws)
        layer = get_channel_layer()
        await layer.group_send(
            class_group(other_classroom.pk),
            {"type": "class.session", "session": 999, "last_seq": 3, "calls": 1},
        )
        assert await ws.receive_nothing(timeout=0.3)
        update = {"type": "class.session", "session": sessions[0].pk, "last_seq": 7,
                  "calls": 2, "attempts_total": 5, "fast_failed": 0, "succeeded": 2, "state": "open"}  # fmt: skip
        await layer.group_send(class_group(classroom.pk), update)
        received = await ws.receive_json_from(timeout=TIMEOUT)
        await ws.disconnect()
        return received

    received = run(scenario, communicator(instructor, classroom.pk))
    assert received["type"] == "session"
    assert received["session"] == sessions[0].pk
    assert (received["last_seq"], received["calls"], received["state"]) == (7, 2, "open")
    # The words come from the server with the field (the page makes up none of its own).
    assert received["state_label"] == "open"


def test_class_wide_down_reaches_the_dashboard_once_per_session(instructor, classroom, sessions):
    async def scenario(ws):
        await _connect_and_snapshot(ws)
        from channels.db import database_sync_to_async

        await database_sync_to_async(class_services.classroom_set_dependency)(
            classroom=classroom, user=instructor, changes={"mode": "down"}
        )
        updates = [await ws.receive_json_from(timeout=TIMEOUT) for _ in sessions]
        assert await ws.receive_nothing(timeout=0.3)
        await ws.disconnect()
        return updates

    updates = run(scenario, communicator(instructor, classroom.pk))
    assert sorted(u["session"] for u in updates) == sorted(s.pk for s in sessions)
    assert all(u["mode"] == "down" and u["type"] == "session" for u in updates)


def test_a_snapshot_follows_once_updates_stop_so_a_lost_update_heals(
    instructor, classroom, sessions
):
    """The channel layer may drop an update (a full channel): totals are deltas, so the
    consumer re-sends the truth once the stream goes quiet."""
    from labs.journal import store as journal

    alice = sessions[0]
    # Rows committed whose update never reaches the dashboard (as if it had been dropped).
    with transaction.atomic():
        journal.append_entries(
            [
                journal.Entry(session_id=alice.pk, classroom_id=classroom.pk, kind="call_result",
                              outcome="success", message=f"lost push {n}")
                for n in range(3)
            ]
        )  # fmt: skip

    async def flow(ws):
        await _connect_and_snapshot(ws)
        update = {"type": "class.session", "session": sessions[1].pk, "last_seq": 99,
                  "calls": 1, "attempts_total": 1, "fast_failed": 0, "succeeded": 1}  # fmt: skip
        await get_channel_layer().group_send(class_group(classroom.pk), update)
        forwarded = await ws.receive_json_from(timeout=TIMEOUT)
        assert await ws.receive_nothing(timeout=SETTLE_S - 0.5)  # not before the quiet period
        settled = await ws.receive_json_from(timeout=TIMEOUT)
        await ws.disconnect()
        return forwarded, settled

    forwarded, settled = run(flow, communicator(instructor, classroom.pk))
    assert forwarded["type"] == "session"
    assert settled["type"] == "snapshot"
    row = next(r for r in settled["rows"] if r["session"] == alice.pk)
    assert row["calls"] == 3 and row["succeeded"] == 3


def test_refresh_asks_for_a_new_snapshot(instructor, classroom, sessions, scenario):
    async def flow(ws):
        first = await _connect_and_snapshot(ws)
        from channels.db import database_sync_to_async

        newcomer = await database_sync_to_async(make_student)("carol", classroom)
        await database_sync_to_async(lab.session_open)(
            user=newcomer, classroom=classroom, scenario=scenario
        )
        await asyncio.sleep(REFRESH_INTERVAL_S)  # one snapshot per second at most
        await ws.send_json_to({"type": "refresh"})
        second = await ws.receive_json_from(timeout=TIMEOUT)
        await ws.disconnect()
        return first, second

    first, second = run(flow, communicator(instructor, classroom.pk))
    assert second["type"] == "snapshot"
    assert len(second["rows"]) == len(first["rows"]) + 1
    # The newcomer's row arrives rendered by the server, as the page renders its own rows.
    newcomer = next(r for r in second["rows"] if r["username"] == "carol")
    row = next(
        r for r in class_dashboard_rows(classroom_id=classroom.pk) if r.username == "carol"
    )
    assert newcomer["html"] == dashboard_row_html(row)
    assert f'id="row-{newcomer["session"]}"' in newcomer["html"]
    assert newcomer["state_label"] == "closed"
    assert newcomer["mode_label"] == MODE_LABELS[newcomer["mode"]]  # the lab page's button


def test_a_burst_on_a_real_worker_shows_bursting_totals_and_its_summary(
    instructor, classroom, scenario, student, celery_worker
):
    # Slow enough (6 x 300 ms) that burst_start and burst_end land in different writer batches.
    scenario.script = tour_script(dependency={"mode": "healthy", "latency_ms": 300})
    scenario.save()
    session = lab.session_open(user=student, classroom=classroom, scenario=scenario)
    warm_up_journal_writer(session)

    async def flow(ws):
        from channels.db import database_sync_to_async

        await _connect_and_snapshot(ws)
        await database_sync_to_async(bursts.burst_start)(session=session, user=student, size=6)
        updates = []
        while not any(u.get("activity") == "idle" for u in updates):
            message = await ws.receive_json_from(timeout=15)
            if message["type"] == "session":  # (a settle snapshot may come in between)
                updates.append(message)
        await ws.disconnect()
        return updates

    updates = run(flow, communicator(instructor, classroom.pk))
    assert any(u.get("activity") == "bursting" for u in updates)
    assert sum(u["calls"] for u in updates) == 6
    assert sum(u["succeeded"] for u in updates) == 6
    assert sum(u["attempts_total"] for u in updates) == 6
    seqs = [u["last_seq"] for u in updates]
    assert seqs == sorted(seqs)
    ended = next(u for u in updates if u.get("activity") == "idle")
    assert ended["burst_summary"]["calls"] == 6
    assert ended["burst_summary"]["succeeded"] == 6
    wait_for(
        lambda: not Burst.objects.filter(session=session, status__in=["queued", "running"]),
        message="burst done",
    )


# --- a timed class-wide fault ending while a burst runs -----------------------------------------


def test_timed_fault_ending_mid_burst_restores_between_calls_never_mid_attempt(
    instructor, classroom, scenario, student, celery_worker
):
    """Inject "down" for 1 s into a class while a slow burst runs on a real worker; the restore
    task (countdown 1 s) puts "healthy" back. From the journal: no call mixes modes (the burst
    switches at call boundaries), every attempt took its full latency, and the calls that
    started after the restore succeed."""
    from labs.models import JournalEvent

    scenario.script = tour_script(
        dependency={"mode": "healthy", "latency_ms": 100},
        policy={"max_attempts": 2, "backoff_base_ms": 0, "backoff_cap_ms": 0,
                "breaker": {"kind": "consecutive", "failure_threshold": 20}},
    )  # fmt: skip
    scenario.save()
    session = lab.session_open(user=student, classroom=classroom, scenario=scenario)
    warm_up_journal_writer(session)
    burst = bursts.burst_start(session=session, user=student, size=20)
    wait_for(
        lambda: JournalEvent.objects.filter(burst=burst, kind="call_result").count() >= 2,
        message="two calls done",
    )
    class_services.classroom_set_dependency(
        classroom=classroom, user=instructor, changes={"mode": "down"}, duration_s=1
    )
    wait_for(
        lambda: Burst.objects.get(pk=burst.pk).status == "done", timeout=60, message="burst done"
    )
    restored = wait_for(
        lambda: JournalEvent.objects.filter(session=session, kind="fault_restored").first(),
        message="the fault's restore",
    )
    assert restored.actor == instructor and "fault ended by teacher_a" in restored.message
    assert restored.data["mode"] == "healthy"

    attempts = list(JournalEvent.objects.filter(burst=burst, kind="attempt").order_by("seq"))
    calls = {
        e.call_no: e
        for e in JournalEvent.objects.filter(burst=burst, kind="call_result").order_by("seq")
    }
    by_call: dict[int, set[str]] = {}
    for attempt in attempts:
        by_call.setdefault(attempt.call_no, set()).add(attempt.outcome)
        # The dependency answered after its full latency: no attempt was cut by the switch.
        assert attempt.latency_ms >= 99, attempt
    assert all(len(outcomes) == 1 for outcomes in by_call.values()), by_call
    outcomes = [calls[n].outcome for n in sorted(calls)]
    assert len(outcomes) == 20
    first_failure = outcomes.index("failure")
    last_failure = len(outcomes) - 1 - outcomes[::-1].index("failure")
    assert set(outcomes[:first_failure]) == {"success"} and first_failure >= 2
    assert set(outcomes[first_failure : last_failure + 1]) == {"failure"}
    assert last_failure < 19, "no call after the restore"
    assert set(outcomes[last_failure + 1 :]) == {"success"}
    # Every call that started once the restore was committed (plus the Redis re-arm) succeeded.
    restore_ms = restored.created_at.timestamp() * 1000
    after = [c for c in calls.values() if c.data["start_ms"] > restore_ms + 250]
    assert after and all(c.outcome == "success" for c in after)


# --- simulated students ---------------------------------------------------------------------


def test_a_simulated_students_session_is_neither_listed_nor_forwarded(
    instructor, classroom, scenario, sessions
):
    from labs.models import Membership

    bot = make_student("bot-c1-000", None)
    Membership.objects.create(user=bot, classroom=classroom, simulated=True)
    bots = lab.session_open(user=bot, classroom=classroom, scenario=scenario)

    async def scenario_(ws):
        snapshot = await _connect_and_snapshot(ws)
        layer = get_channel_layer()
        group = class_group(classroom.pk)
        await layer.group_send(group, {"type": "class.session", "session": bots.pk, "last_seq": 9})
        assert await ws.receive_nothing(timeout=0.5)
        await layer.group_send(
            group, {"type": "class.session", "session": sessions[0].pk, "last_seq": 9}
        )
        update = await ws.receive_json_from(timeout=TIMEOUT)
        await ws.disconnect()
        return snapshot, update

    snapshot, update = run(scenario_, communicator(instructor, classroom.pk))
    assert sorted(r["session"] for r in snapshot["rows"]) == sorted(s.pk for s in sessions)
    assert update["type"] == "session" and update["session"] == sessions[0].pk
