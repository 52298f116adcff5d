"""Lab services against real Redis and the real database: validate first, change nothing on
bad input, journal every change with who made it, Redis touched only after commit."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from labs.journal import store as journal
from labs.live import runtime
from labs.models import Burst, JournalEvent, LabSession
from labs.services import bursts, lab
from tests.conftest import make_classroom, make_scenario, make_student, tour_script
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def session() -> LabSession:
    scenario = make_scenario("svc", script=tour_script())
    room = make_classroom("Services", join_code="SERVICES")
    room.scenarios.add(scenario)
    student = make_student("carol", room)
    return lab.session_open(user=student, classroom=room, scenario=scenario)


def test_out_of_range_dependency_is_refused_naming_field_and_range_and_changes_nothing(session):
    before = dict(session.dependency)
    with pytest.raises(lab.SettingsInvalid) as info:
        lab.session_set_dependency(
            session=session, user=session.owner, changes={"mode": "flaky", "fail_count": 500}
        )
    assert [p.field for p in info.value.problems] == ["dependency.fail_count"]
    assert "1" in info.value.problems[0].message and "100" in info.value.problems[0].message
    session.refresh_from_db()
    assert session.dependency == before
    assert not JournalEvent.objects.filter(session=session).exists()


def test_unknown_mode_is_refused(session):
    with pytest.raises(lab.SettingsInvalid) as info:
        lab.session_set_dependency(session=session, user=session.owner, changes={"mode": "meh"})
    assert info.value.problems[0].field == "dependency.mode"


def test_policy_problems_are_all_reported_and_nothing_is_half_applied(session):
    before = dict(session.policy)
    with pytest.raises(lab.SettingsInvalid) as info:
        lab.session_set_policy(
            session=session,
            user=session.owner,
            changes={"max_attempts": 3, "backoff_base_ms": 9999, "breaker": {"cooldown_ms": 5}},
        )
    fields = {p.field for p in info.value.problems}
    # The cap (500) is below the new base too: "base to 2000 ms".
    assert fields == {"policy.backoff_base_ms", "policy.backoff_cap_ms", "policy.breaker.cooldown_ms"}
    session.refresh_from_db()
    assert session.policy == before  # max_attempts=3 was valid but not applied alone


def test_a_fallback_the_dependency_does_not_offer_is_refused_naming_both(session):
    before = (dict(session.dependency), dict(session.policy))
    with pytest.raises(lab.SettingsInvalid) as info:
        lab.session_set_policy(session=session, user=session.owner, changes={"fallback": "cached"})
    assert [str(p) for p in info.value.problems] == [
        "policy.fallback: cached is not offered by the dependency (offered: none)"
    ]
    lab.session_set_dependency(
        session=session, user=session.owner, changes={"fallbacks": ["cached"]}
    )
    lab.session_set_policy(session=session, user=session.owner, changes={"fallback": "cached"})
    with pytest.raises(lab.SettingsInvalid) as info:
        lab.session_set_dependency(session=session, user=session.owner, changes={"fallbacks": []})
    assert [p.field for p in info.value.problems] == ["policy.fallback"]
    session.refresh_from_db()
    assert (session.dependency["fallbacks"], session.policy["fallback"]) == (["cached"], "cached")
    assert before[0]["fallbacks"] == [] and before[1]["fallback"] is None


def test_hosts_are_armed_each_in_its_own_scope_of_the_session_namespace(session):
    lab.session_set_dependency(
        session=session,
        user=session.owner,
        changes={"mode": "flaky", "fail_count": 2, "hosts": [{}, {"fail_count": 5}]},
    )
    store = runtime.session_store(session.pk)
    assert store.scoped("h0").export_state()["dependency"]["fail_left"] == 2
    assert store.scoped("h1").export_state()["dependency"]["fail_left"] == 5
    assert store.scoped("h1").namespace == f"fl:{{s{session.pk}}}:h1"


def test_dependency_change_is_journaled_with_the_user_and_rearms_the_dependency(session):
    lab.session_set_dependency(
        session=session, user=session.owner, changes={"mode": "flaky", "fail_count": 2}
    )
    event = JournalEvent.objects.get(session=session, kind="dependency_set")
    assert event.actor == session.owner
    assert "carol" in event.message and "flaky" in event.message
    assert event.seq == 1
    exported = runtime.session_store(session.pk).export_state()
    assert exported["dependency"]["fail_left"] == 2


def test_forcing_the_breaker_open_is_a_journaled_transition(session):
    state = lab.session_force_breaker(session=session, user=session.owner, action="open")
    assert state == "open"
    transition = JournalEvent.objects.get(session=session, kind="transition")
    assert (transition.state_from, transition.state_to) == ("closed", "open")
    assert "forced by carol" in transition.message
    session.refresh_from_db()
    assert session.breaker_snapshot["state"] == "open"
    assert lab.session_force_breaker(session=session, user=session.owner, action="closed") == "closed"


def test_reset_brings_back_scenario_settings_and_a_closed_breaker(session):
    lab.session_set_dependency(session=session, user=session.owner, changes={"mode": "down"})
    lab.session_force_breaker(session=session, user=session.owner, action="open")
    lab.session_reset(session=session, user=session.owner)
    session.refresh_from_db()
    assert session.dependency["mode"] == "flaky"
    assert runtime.breaker_view(session)["state"] == "closed"
    assert JournalEvent.objects.filter(session=session, kind="session_reset").count() == 1


def test_concurrent_journal_writers_get_unique_gap_free_sequence_numbers(session):
    def write(n):
        for i in range(n):
            journal.record([journal.Entry(session_id=session.pk, classroom_id=session.classroom_id,
                                          kind="policy_set", message=f"w{i}")])  # fmt: skip
        connections.close_all()

    threads = [threading.Thread(target=write, args=(15,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = sorted(JournalEvent.objects.filter(session=session).values_list("seq", flat=True))
    assert seqs == list(range(1, 61))
    session.refresh_from_db()
    assert session.next_seq == 61


def test_a_dependency_change_reaches_a_running_burst_between_calls(session, celery_worker):
    lab.session_set_dependency(
        session=session, user=session.owner, changes={"mode": "healthy", "latency_ms": 120}
    )
    burst = bursts.burst_start(session=session, user=session.owner, size=8)
    wait_for(lambda: JournalEvent.objects.filter(burst=burst, kind="call_result").count() >= 2,
             message="two calls done")  # fmt: skip
    lab.session_set_dependency(session=session, user=session.owner, changes={"mode": "down"})
    change = JournalEvent.objects.get(session=session, kind="dependency_set", data__mode="down")
    wait_for(lambda: Burst.objects.get(pk=burst.pk).status == "done", message="burst done")
    attempts = list(JournalEvent.objects.filter(burst=burst, kind="attempt").order_by("seq"))
    # Every attempt is wholly old mode (ok) or wholly new mode (503): none straddles.
    assert {a.outcome for a in attempts} <= {"ok", "error"}
    ok_calls = {a.call_no for a in attempts if a.outcome == "ok"}
    failed_calls = {a.call_no for a in attempts if a.outcome == "error"}
    assert ok_calls and failed_calls
    assert not ok_calls & failed_calls, "a call mixed modes between its attempts"
    assert max(ok_calls) < min(failed_calls)
    # The first call that failed started after the change was committed.
    first_failed = min(failed_calls)
    started = JournalEvent.objects.filter(burst=burst, kind="attempt", call_no=first_failed)
    assert started.order_by("seq").first().seq > change.seq


def test_a_page_idle_for_longer_than_a_redis_socket_timeout_still_gets_its_pushes(
    transactional_db,
):
    """redis-py 8 times a socket read out after 5 s unless told otherwise, and a page's
    subscription sits idle far longer than that between bursts. After 7 s of silence, a push
    must still reach a receive that has been waiting all along."""
    import asyncio

    from channels.layers import get_channel_layer

    async def idle_then_receive():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add("fl-idle", channel)
        receiving = asyncio.ensure_future(layer.receive(channel))
        await asyncio.sleep(7)
        assert not receiving.done()
        await layer.group_send("fl-idle", {"type": "ping"})
        message = await asyncio.wait_for(receiving, timeout=5)
        await layer.flush()
        return message

    assert asyncio.run(idle_then_receive())["type"] == "ping"


def test_snapshots_of_several_sessions_are_saved_together_and_a_stateless_one_is_left_alone(
    session,
):
    other = lab.session_open(
        user=make_student("dave", session.classroom),
        classroom=session.classroom,
        scenario=session.scenario,
    )
    runtime.session_store(other.pk).clear()  # nothing in Redis for this one
    LabSession.objects.filter(pk=other.pk).update(breaker_snapshot={"state": "kept"})
    runtime.build_engine(session).breaker.force_open("by the test")
    runtime.save_snapshots([other.pk, session.pk, session.pk])
    session.refresh_from_db()
    other.refresh_from_db()
    assert session.breaker_snapshot["state"] == "open"
    assert session.breaker_snapshot["store"] == runtime.session_store(session.pk).export_state()
    assert other.breaker_snapshot == {"state": "kept"}


def test_a_start_blocked_by_a_dead_workers_burst_reaps_it_and_starts(session, settings):
    from datetime import timedelta

    from django.utils import timezone

    blocked = bursts.burst_start(session=session, user=session.owner, size=2)
    Burst.objects.filter(pk=blocked.pk).update(
        status=Burst.Status.RUNNING, heartbeat_at=timezone.now() - timedelta(seconds=60)
    )
    session.refresh_from_db()
    nxt = bursts.burst_start(session=session, user=session.owner, size=2)
    assert Burst.objects.get(pk=blocked.pk).status == Burst.Status.INTERRUPTED
    assert Burst.objects.get(pk=nxt.pk).status == Burst.Status.QUEUED
    assert JournalEvent.objects.filter(burst=blocked, kind="burst_interrupted").count() == 1
    # A live one (fresh heartbeat) is not reaped: the start is refused.
    Burst.objects.filter(pk=nxt.pk).update(status=Burst.Status.RUNNING, heartbeat_at=timezone.now())
    session.refresh_from_db()
    with pytest.raises(bursts.BurstAlreadyRunning):
        bursts.burst_start(session=session, user=session.owner, size=2)
    assert Burst.objects.get(pk=nxt.pk).status == Burst.Status.RUNNING
