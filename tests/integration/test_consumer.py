"""The lab session websocket through the real ASGI application (origin check, session-cookie
auth, URL routing) and the real channels-redis layer (the settings' Redis, not the in-memory
layer): who may connect, replay after a sequence number, live pushes from services and from a
real Celery worker, duplicates and gaps, and malformed client messages.
"""

from __future__ import annotations

import json
import re

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import transaction
from django.test import Client

from lab_project.asgi import application
from labs.consumers import lab as consumers
from labs.journal import broadcast
from labs.journal import store as journal
from labs.models import Burst, JournalEvent, LabSession
from labs.selectors.lab import rows_after
from labs.services import bursts, lab
from tests.conftest import make_classroom, make_instructor, make_scenario, make_student
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TIMEOUT = 5


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # Sessions are logged in with force_login; nobody types a password here.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def world(db):
    scenario = make_scenario("tour", title="The tour")
    room = make_classroom("Resilience A", join_code="CLASSA01")
    room.scenarios.add(scenario)
    other_room = make_classroom("Resilience B", join_code="CLASSB02")
    other_room.scenarios.add(scenario)
    alice = make_student("alice", room)
    session = lab.session_open(user=alice, classroom=room, scenario=scenario)
    return {
        "session": session,
        "alice": alice,
        "bob": make_student("bob", other_room),
        "carol": make_student("carol", room),  # same class, not hers
        "teacher": make_instructor("teacher", room),
    }


def cookie_for(user) -> str:
    """A real logged-in session cookie, as a browser would send it."""
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def socket(session_id: int, user=None, *, after: int | None = None, origin="http://localhost"):
    headers = [(b"origin", origin.encode()), (b"host", b"localhost")]
    if user is not None:
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie_for(user)}".encode()))
    path = f"/ws/sessions/{session_id}/" + (f"?after={after}" if after is not None else "")
    return WebsocketCommunicator(application, path, headers=headers)


def add_rows(session: LabSession, count: int, *, push: bool = True) -> list[int]:
    entries = [
        journal.Entry(
            session_id=session.pk,
            classroom_id=session.classroom_id,
            kind="policy_set",
            message=f"row {i}",
        )
        for i in range(count)
    ]
    if push:
        return [row.seq for row in journal.record(entries)]
    with transaction.atomic():  # rows without a push: what a lost channel message leaves
        return [written.seq for written in journal.append_entries(entries)]


async def receive(comm: WebsocketCommunicator, timeout: float = TIMEOUT) -> dict:
    return json.loads(await comm.receive_from(timeout))


async def receive_events(comm: WebsocketCommunicator, until, timeout: float = 30) -> list[dict]:
    """Every event pushed until ``until(event)`` is true for one of them."""
    events: list[dict] = []
    while True:
        message = await receive(comm, timeout)
        if message["type"] != "events":
            continue
        events.extend(message["events"])
        if any(until(e) for e in message["events"]):
            return events


def run(coroutine_function) -> None:
    async_to_sync(coroutine_function)()


# --- who may connect ------------------------------------------------------------------------


def test_owner_connects_and_gets_the_current_breaker_badge(world):
    comm = socket(world["session"].pk, world["alice"])

    async def scenario():
        connected, _ = await comm.connect(TIMEOUT)
        assert connected
        state = await receive(comm)
        assert state["type"] == "state"
        assert state["last_seq"] == 0
        (badge,) = state["fragments"]
        assert badge["id"] == "breaker-badge"
        assert 'data-state="closed"' in badge["html"]
        await comm.disconnect()

    run(scenario)


@pytest.mark.parametrize("who", ["bob", "carol", None])
def test_anyone_who_may_not_see_the_session_is_closed_with_4403(world, who):
    comm = socket(world["session"].pk, world[who] if who else None)

    async def scenario():
        connected, _ = await comm.connect(TIMEOUT)
        assert connected  # accepted so that the close code reaches the browser
        assert await comm.receive_output(TIMEOUT) == {"type": "websocket.close", "code": 4403}
        await comm.disconnect()

    run(scenario)


def test_unknown_session_is_closed_with_4403(world):
    comm = socket(world["session"].pk + 1000, world["alice"])

    async def scenario():
        await comm.connect(TIMEOUT)
        assert (await comm.receive_output(TIMEOUT))["code"] == 4403
        await comm.disconnect()

    run(scenario)


def test_a_page_from_another_origin_is_refused(world):
    comm = socket(world["session"].pk, world["alice"], origin="http://evil.example")

    async def scenario():
        connected, _ = await comm.connect(TIMEOUT)
        assert not connected
        await comm.disconnect()

    run(scenario)


def test_the_class_instructor_may_watch(world):
    comm = socket(world["session"].pk, world["teacher"])

    async def scenario():
        connected, _ = await comm.connect(TIMEOUT)
        assert connected
        assert (await receive(comm))["type"] == "state"
        await comm.disconnect()

    run(scenario)


# --- replay -----------------------------------------------------------------------------------


def test_replays_every_row_after_the_given_seq_in_order_then_the_state(world):
    session = world["session"]
    add_rows(session, 5)
    comm = socket(session.pk, world["alice"], after=2)

    async def scenario():
        assert (await comm.connect(TIMEOUT))[0]
        replay = await receive(comm)
        assert replay["type"] == "events"
        assert [e["seq"] for e in replay["events"]] == [3, 4, 5]
        for event in replay["events"]:
            # the row rendered with the page's own partial
            assert event["html"].startswith(f'<li id="ev-{event["seq"]}" class="journal-row')
            assert event["message"] in event["html"]
        state = await receive(comm)
        assert state["type"] == "state" and state["last_seq"] == 5
        assert await comm.receive_nothing(0.3)
        await comm.disconnect()

    run(scenario)


def test_long_replays_come_in_chunks_without_a_gap(world):
    session = world["session"]
    add_rows(session, consumers.REPLAY_CHUNK + 50)
    comm = socket(session.pk, world["alice"], after=0)

    async def scenario():
        assert (await comm.connect(TIMEOUT))[0]
        seqs = []
        while True:
            message = await receive(comm)
            if message["type"] == "state":
                break
            seqs += [e["seq"] for e in message["events"]]
        assert seqs == list(range(1, consumers.REPLAY_CHUNK + 51))
        await comm.disconnect()

    run(scenario)


def test_an_after_beyond_the_journal_replays_nothing(world):
    session = world["session"]
    add_rows(session, 3)
    comm = socket(session.pk, world["alice"], after=999)

    async def scenario():
        assert (await comm.connect(TIMEOUT))[0]
        state = await receive(comm)
        assert state["type"] == "state" and state["last_seq"] == 3
        await comm.disconnect()

    run(scenario)


# --- live pushes -------------------------------------------------------------------------------


def test_a_service_call_is_pushed_live_to_every_watcher(world):
    session, alice = world["session"], world["alice"]
    mine = socket(session.pk, alice, after=0)
    teachers = socket(session.pk, world["teacher"], after=0)

    async def scenario():
        for comm in (mine, teachers):
            assert (await comm.connect(TIMEOUT))[0]
            assert (await receive(comm))["type"] == "state"
        await database_sync_to_async(lab.session_set_dependency)(
            session=session, user=alice, changes={"mode": "down"}
        )
        for comm in (mine, teachers):
            pushed = await receive(comm)
            assert pushed["type"] == "events"
            (event,) = pushed["events"]
            assert event["seq"] == 1 and event["kind"] == "dependency_set"
            assert "dependency set by alice: down" in event["html"]
        for comm in (mine, teachers):
            await comm.disconnect()

    run(scenario)


def test_pages_watching_one_session_share_one_rendering_of_each_row(world, monkeypatch):
    """Three pages watch one session in this process: each row is rendered once for all of
    them (by journal_row, where the push is built), and each page gets the same row."""
    session = world["session"]
    rendered: list[int] = []
    real_row = consumers.rows.journal_row

    def counted(event):
        rendered.append(event["seq"])
        return real_row(event)

    monkeypatch.setattr(consumers.rows, "journal_row", counted)
    pages = [socket(session.pk, world[who], after=0) for who in ("alice", "teacher", "alice")]

    seqs: list[int] = []

    async def scenario():
        for comm in pages:
            assert (await comm.connect(TIMEOUT))[0]
            assert (await receive(comm))["type"] == "state"
        seqs.extend(await database_sync_to_async(add_rows)(session, 4))
        got = [await receive_events(comm, lambda e: e["seq"] == seqs[-1]) for comm in pages]
        for events in got:
            assert [e["seq"] for e in events] == seqs
            assert [e["html"] for e in events] == [e["html"] for e in got[0]]
            assert f'data-seq="{seqs[0]}"' in events[0]["html"]
        for comm in pages:
            await comm.disconnect()

    run(scenario)
    assert sorted(rendered) == seqs  # once each, not once per page


def test_a_burst_on_a_real_worker_streams_every_event_in_order_with_badge_and_summary(
    world, worker_process
):
    # A worker in its own process, as in production (an embedded worker would share this
    # process's channel layer object between two event loops).
    worker_process()
    session, alice = world["session"], world["alice"]
    lab.session_set_dependency(session=session, user=alice, changes={"mode": "down"})
    comm = socket(session.pk, alice, after=1)

    async def scenario():
        assert (await comm.connect(TIMEOUT))[0]
        assert (await receive(comm))["type"] == "state"
        await database_sync_to_async(bursts.burst_start)(session=session, user=alice, size=6)
        events = await receive_events(comm, lambda e: e["kind"] == "burst_end")
        seqs = [e["seq"] for e in events]
        assert seqs == list(range(2, 2 + len(seqs)))  # no gap, no duplicate, in order
        kinds = [e["kind"] for e in events]
        assert kinds[0] == "burst_queued" and kinds[1] == "burst_start"
        assert kinds.count("attempt") == 12 and kinds.count("rejected") == 3
        (transition,) = [e for e in events if e["kind"] == "transition"]
        assert (transition["state_from"], transition["state_to"]) == ("closed", "open")
        # the badge comes with the transition, or with the last event of the same message
        badges = [
            f["html"]
            for e in events
            if e["seq"] >= transition["seq"]
            for f in e.get("fragments", [])
            if f["id"] == "breaker-badge"
        ]
        badge = {"html": badges[0]}
        assert 'data-state="open"' in badge["html"]
        until = re.search(r'data-open-until-ms="([\d.]+)"', badge["html"])
        assert until and float(until.group(1)) > transition["t_ms"]
        summaries = {e["kind"]: e["summary"] for e in events if "summary" in e}
        assert set(summaries) == {"burst_queued", "burst_start", "burst_end"}
        assert summaries["burst_start"]["status"] == "running"
        assert summaries["burst_end"]["fast_failed"] == 3
        assert all(e.get("emitted") for e in events if e["kind"] == "attempt")
        await comm.disconnect()

    run(scenario)
    db_seqs = list(JournalEvent.objects.filter(session=session).values_list("seq", flat=True))
    assert sorted(db_seqs) == list(range(1, len(db_seqs) + 1))
    # The worker marks the burst done once its writer has flushed, that is after the
    # burst_end row was pushed: wait for it rather than race it.
    wait_for(
        lambda: Burst.objects.get(session=session).status == "done", message="burst marked done"
    )


# --- duplicates, gaps, resync ------------------------------------------------------------------


def test_a_push_repeating_rows_is_dropped_and_a_gap_is_read_from_the_database(world):
    session = world["session"]
    add_rows(session, 2)
    comm = socket(session.pk, world["alice"], after=2)
    layer = get_channel_layer()
    group = broadcast.session_group(session.pk)

    async def scenario():
        assert (await comm.connect(TIMEOUT))[0]
        assert (await receive(comm))["type"] == "state"
        # an old push arriving late: nothing is sent again
        old = await database_sync_to_async(rows_after)(session.pk, 0, 10)
        await layer.group_send(
            group, {"type": "journal.events", "session": session.pk, "events": old}
        )
        assert await comm.receive_nothing(0.5)
        # rows 3 and 4 were written but their push was lost; row 5's push arrives
        await database_sync_to_async(add_rows)(session, 3, push=False)
        newest = await database_sync_to_async(rows_after)(session.pk, 4, 10)
        await layer.group_send(
            group, {"type": "journal.events", "session": session.pk, "events": newest}
        )
        message = await receive(comm)
        assert [e["seq"] for e in message["events"]] == [3, 4]  # read from the database
        message = await receive(comm)
        assert [e["seq"] for e in message["events"]] == [5]
        assert await comm.receive_nothing(0.3)
        await comm.disconnect()

    run(scenario)


def test_rows_whose_last_push_was_dropped_arrive_a_second_later(world):
    session = world["session"]
    comm = socket(session.pk, world["alice"], after=0)

    async def scenario():
        assert (await comm.connect(TIMEOUT))[0]
        assert (await receive(comm))["type"] == "state"
        await database_sync_to_async(add_rows)(session, 1)  # pushed
        assert [e["seq"] for e in (await receive(comm))["events"]] == [1]
        await database_sync_to_async(add_rows)(session, 2, push=False)  # pushes lost
        message = await receive(comm, timeout=consumers.SETTLE_SECONDS + 3)
        assert [e["seq"] for e in message["events"]] == [2, 3]
        await comm.disconnect()

    run(scenario)


def test_a_ping_also_checks_the_journal(world):
    session = world["session"]
    comm = socket(session.pk, world["alice"], after=0)

    async def scenario():
        assert (await comm.connect(TIMEOUT))[0]
        assert (await receive(comm))["type"] == "state"
        await database_sync_to_async(add_rows)(session, 2, push=False)
        await comm.send_json_to({"type": "ping"})
        assert [e["seq"] for e in (await receive(comm))["events"]] == [1, 2]
        pong = await receive(comm)
        assert pong == {"type": "pong", "last_seq": 2}
        await comm.disconnect()

    run(scenario)


def test_resync_replays_after_the_given_seq(world):
    session = world["session"]
    add_rows(session, 4)
    comm = socket(session.pk, world["alice"], after=4)

    async def scenario():
        assert (await comm.connect(TIMEOUT))[0]
        assert (await receive(comm))["type"] == "state"
        await comm.send_json_to({"type": "resync", "after": 2})
        message = await receive(comm)
        assert [e["seq"] for e in message["events"]] == [3, 4]
        await comm.disconnect()

    run(scenario)


def test_resyncs_in_a_row_coalesce_into_a_bounded_replay(world, monkeypatch):
    """Twenty resyncs from one socket re-read the journal a few times, not twenty: the replay
    running and one more from the lowest point asked for (on a loaded machine, a resync read
    only after that one started may add one more). Another student's pushes still come."""
    session = world["session"]
    rows = 600
    add_rows(session, rows, push=False)
    other = lab.session_open(
        user=world["carol"], classroom=session.classroom, scenario=session.scenario
    )
    read_rows: list[int] = []
    def counting_rows_after(session_id, after, limit):
        found = rows_after(session_id, after, limit)
        if session_id == session.pk:
            read_rows.append(len(found))
        return found

    monkeypatch.setattr(consumers, "rows_after", counting_rows_after)
    comm = socket(session.pk, world["alice"], after=rows)
    watcher = socket(other.pk, world["carol"])

    async def scenario():
        for ws in (comm, watcher):
            assert (await ws.connect(TIMEOUT))[0]
            assert (await receive(ws))["type"] == "state"
        for _ in range(20):
            await comm.send_json_to({"type": "resync", "after": 0})
        # Another student's row, pushed while the replays run, reaches her page.
        (pushed,) = await database_sync_to_async(add_rows)(other, 1)
        got = await receive_events(watcher, lambda e: e["seq"] == pushed)
        assert [e["seq"] for e in got] == [pushed]
        replayed: list[int] = []
        while not await comm.receive_nothing(timeout=3):
            message = await receive(comm)
            if message["type"] == "events":
                replayed.extend(e["seq"] for e in message["events"])
        await comm.disconnect()
        await watcher.disconnect()
        return replayed

    replayed = async_to_sync(scenario)()
    assert set(replayed) == set(range(1, rows + 1))  # every row was replayed
    assert sum(read_rows) <= 3 * rows, read_rows  # twenty replays read 12,000
    assert len(replayed) <= 3 * rows


def test_a_resync_further_back_than_the_replay_limit_answers_reload(world, monkeypatch):
    session = world["session"]
    add_rows(session, 30, push=False)
    monkeypatch.setattr(consumers, "MAX_REPLAY", 10)
    comm = socket(session.pk, world["alice"], after=30)

    async def scenario():
        assert (await comm.connect(TIMEOUT))[0]
        assert (await receive(comm))["type"] == "state"
        await comm.send_json_to({"type": "resync", "after": 5})
        message = await receive(comm)
        await comm.disconnect()
        return message

    assert async_to_sync(scenario)()["type"] == "reload"


# --- bad input from the browser ---------------------------------------------------------------


def test_malformed_messages_are_logged_and_ignored_and_nobody_is_disconnected(
    world, caplog, monkeypatch
):
    monkeypatch.setattr(consumers.logger, "propagate", True)  # let caplog see the warnings
    session, alice = world["session"], world["alice"]
    sender = socket(session.pk, alice, after=0)
    bystander = socket(session.pk, world["teacher"], after=0)

    async def scenario():
        for comm in (sender, bystander):
            assert (await comm.connect(TIMEOUT))[0]
            assert (await receive(comm))["type"] == "state"
        for junk in (
            "not json at all",
            "[1, 2, 3]",
            '{"type": "explode"}',
            '{"no_type": true}',
            '{"type": "resync", "after": "yesterday"}',
            '{"type": "resync", "after": -5}',
            '{"type": "resync", "after": true}',
            "null",
            "{" * 5000,
        ):
            await sender.send_to(text_data=junk)
        await sender.send_to(bytes_data=b"\x00\xff binary")
        assert await sender.receive_nothing(0.5)  # no reply, and above all no close
        assert await bystander.receive_nothing(0.1)
        await sender.send_json_to({"type": "ping"})
        assert (await receive(sender))["type"] == "pong"
        await database_sync_to_async(lab.session_set_dependency)(
            session=session, user=alice, changes={"mode": "healthy"}
        )
        for comm in (sender, bystander):
            (event,) = (await receive(comm))["events"]
            assert event["kind"] == "dependency_set"
        for comm in (sender, bystander):
            await comm.disconnect()

    with caplog.at_level("WARNING", logger="labs.consumers.lab"):
        run(scenario)
    ignored = [r for r in caplog.records if "ignored a malformed websocket message" in r.message]
    assert len(ignored) == 10


def test_a_malformed_after_in_the_url_replays_from_the_start(world, caplog, monkeypatch):
    monkeypatch.setattr(consumers.logger, "propagate", True)
    session = world["session"]
    add_rows(session, 2)
    comm = socket(session.pk, world["alice"])
    comm.scope["query_string"] = b"after=%3Cscript%3E"

    async def scenario():
        assert (await comm.connect(TIMEOUT))[0]
        assert [e["seq"] for e in (await receive(comm))["events"]] == [1, 2]
        await comm.disconnect()

    with caplog.at_level("WARNING", logger="labs.consumers.lab"):
        run(scenario)
    assert any("malformed after" in r.message for r in caplog.records)


def test_messages_are_dispatched_without_a_hop_to_the_sync_thread(world, monkeypatch):
    """Channels' own dispatch runs close_old_connections in the one sync thread before every
    handler: thousands of hops a second at a hundred pages. Ours dispatches directly; the
    consumer's queries still close old connections around themselves."""
    import channels.consumer

    hops: list[None] = []
    original = channels.consumer.aclose_old_connections

    async def counting():
        hops.append(None)
        await original()

    monkeypatch.setattr(channels.consumer, "aclose_old_connections", counting)
    session, alice = world["session"], world["alice"]
    page = socket(session.pk, alice, after=0)
    dashboard = WebsocketCommunicator(
        application,
        f"/ws/classes/{session.classroom_id}/",
        headers=[
            (b"origin", b"http://localhost"),
            (b"host", b"localhost"),
            (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie_for(world['teacher'])}".encode()),
        ],
    )

    async def scenario():
        assert (await page.connect(TIMEOUT))[0]
        assert (await receive(page))["type"] == "state"
        assert (await dashboard.connect(TIMEOUT))[0]
        assert (await receive(dashboard))["type"] == "snapshot"
        await page.send_json_to({"type": "ping"})
        assert (await receive(page))["type"] == "pong"
        await database_sync_to_async(lab.session_set_dependency)(
            session=session, user=alice, changes={"mode": "down"}
        )
        (event,) = (await receive(page))["events"]
        assert event["kind"] == "dependency_set"
        assert (await receive(dashboard))["type"] == "session"
        for comm in (page, dashboard):
            await comm.disconnect()

    run(scenario)
    assert hops == []


def test_the_badge_follows_a_policy_change_without_reading_the_session_per_push(world):
    """The consumer keeps the session's policy for the badge and reads it again only after an
    event that can change it: here the threshold goes from 3 to 7, then a forced transition
    makes the consumer render the badge."""
    session, alice = world["session"], world["alice"]
    page = socket(session.pk, alice, after=0)

    async def scenario():
        assert (await page.connect(TIMEOUT))[0]
        state = await receive(page)
        assert "of 3" in state["fragments"][0]["html"]
        await database_sync_to_async(lab.session_set_policy)(
            session=session, user=alice, changes={"breaker": {"failure_threshold": 7}}
        )
        (changed,) = (await receive(page))["events"]
        assert changed["kind"] == "policy_set"
        await database_sync_to_async(lab.session_force_breaker)(
            session=session, user=alice, action="open"
        )
        events = await receive_events(page, lambda e: e["kind"] == "transition")
        badge = [f for e in events for f in e.get("fragments", []) if f["id"] == "breaker-badge"]
        await page.disconnect()
        return badge

    (badge,) = async_to_sync(scenario)()
    assert 'data-state="open"' in badge["html"]
    assert "of 7" in badge["html"]


def live_rows(session: LabSession) -> list[dict]:
    """A queued burst's row and a breaker transition, written without a push, as a worker's
    journal writer would push them (with the ``emitted`` stamp of a live event)."""
    burst = Burst.objects.create(session=session, number=1, size=3, concurrency=1)
    entries = [
        journal.Entry(
            session_id=session.pk, classroom_id=session.classroom_id, kind="burst_queued",
            message="burst 1 queued", burst_id=burst.pk,
            data={"burst": 1, "size": 3, "concurrency": 1}, emitted=1.0e9,
        ),
        journal.Entry(
            session_id=session.pk, classroom_id=session.classroom_id, kind="transition",
            message="closed -> open", state_from="closed", state_to="open", emitted=1.0e9,
        ),
    ]  # fmt: skip
    with transaction.atomic():
        written = journal.append_entries(entries)
    return [journal.entry_payload(w) for w in written]


def test_pages_watching_one_session_share_one_summary_render_and_one_badge_read(
    world, monkeypatch
):
    """Three pages watch one session: a live push's summary panel is made once and its
    breaker badge read from Redis and rendered once for all of them, and every page gets the
    same bytes (a replayed row still reads the badge afresh: see rendered_badge)."""
    session = world["session"]
    summaries: list[int] = []
    badges: list[int] = []
    real_summary, real_badge = consumers.summary_update, consumers.breaker_now

    def counted_summary(event, facts):
        summaries.append(event["seq"])
        return real_summary(event, facts)

    def counted_badge(session_id, policy):
        badges.append(session_id)
        return real_badge(session_id, policy)

    monkeypatch.setattr(consumers, "summary_update", counted_summary)
    monkeypatch.setattr(consumers, "breaker_now", counted_badge)
    pages = [socket(session.pk, world[who], after=0) for who in ("alice", "teacher", "alice")]
    layer = get_channel_layer()

    async def scenario():
        for comm in pages:
            assert (await comm.connect(TIMEOUT))[0]
            assert (await receive(comm))["type"] == "state"
        badges.clear()  # the state message on connect reads the badge for each page
        events = await database_sync_to_async(live_rows)(session)
        await layer.group_send(
            broadcast.session_group(session.pk),
            {"type": "journal.events", "session": session.pk, "events": events},
        )
        got = [await receive_events(comm, lambda e: e["kind"] == "transition") for comm in pages]
        for comm in pages:
            await comm.disconnect()
        return got

    got = async_to_sync(scenario)()
    first = got[0]
    assert [e["kind"] for e in first] == ["burst_queued", "transition"]
    assert first[0]["summary"]["status"] == "queued" and "fragments" not in first[0]
    assert [f["id"] for f in first[1]["fragments"]] == ["breaker-badge"]
    assert 'id="breaker-badge"' in first[1]["fragments"][0]["html"]  # read from Redis
    for events in got[1:]:
        assert events == first
    assert summaries == [first[0]["seq"]]  # once, not once per page
    assert badges == [session.pk]


def test_a_live_push_without_a_gap_reads_nothing_from_the_database(world, monkeypatch):
    """A push that follows the page's last row, of a burst whose queued row the page saw,
    is forwarded with no query: only the journal check a second later reads the database."""
    session = world["session"]
    page = socket(session.pk, world["alice"], after=0)
    layer = get_channel_layer()
    reads: list[str] = []
    real_read = consumers.read

    def counted_read(function):
        reads.append(function.__name__)
        return real_read(function)

    async def scenario():
        assert (await page.connect(TIMEOUT))[0]
        assert (await receive(page))["type"] == "state"
        events = await database_sync_to_async(live_rows)(session)
        monkeypatch.setattr(consumers, "read", counted_read)
        await layer.group_send(
            broadcast.session_group(session.pk),
            {"type": "journal.events", "session": session.pk, "events": events},
        )
        got = await receive_events(page, lambda e: e["kind"] == "transition")
        forwarded_with = list(reads)
        await page.disconnect()
        return got, forwarded_with

    got, forwarded_with = async_to_sync(scenario)()
    assert [e["seq"] for e in got] == [1, 2]
    assert forwarded_with == []
