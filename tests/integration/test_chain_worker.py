"""A chain of students through the real stack: three tiers of sessions, a real worker, the
front tier's steady traffic; each tier retries the next through its own policy, and with
three attempts at every tier one user request reaches the shared dependency 27 times."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from labs.live import runtime
from labs.models import JournalEvent, LabSession, Traffic
from labs.services import bursts, lab
from labs.services import chain as chain_services
from labs.services import shared as shared_services
from labs.services import traffic as traffic_services
from labs.services.lab import SettingsInvalid
from labs.services.simulate import bot_policy
from tests.integration.conftest import wait_for, wait_run_ended
from tests.integration.test_shared_worker import shared_class

pytestmark = [
    pytest.mark.integration,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

ATTEMPTS = 3
ROOT = Path(__file__).resolve().parents[2]


def naive(session: LabSession, *, attempts: int = ATTEMPTS, timeout_ms: int = 5000) -> None:
    """Retries at once, no budget, no breaker: the chain's amplification alone."""
    policy, _ = bot_policy("naive")
    policy.update(max_attempts=attempts, attempt_timeout_ms=timeout_ms)
    lab.session_set_policy(session=session, user=session.owner, changes=policy)
    session = LabSession.objects.get(pk=session.pk)
    lab.session_force_breaker(session=session, user=session.owner, action="closed")


def test_three_tiers_of_three_attempts_reach_the_leaf_27_times_per_request(celery_worker):
    room, teacher, sessions = shared_class(6, service_ms=5)
    for session in sessions:
        naive(session)
    layout = chain_services.classroom_set_chain(
        classroom=room, user=teacher, values={"tiers": 3, "order": "even"}
    )
    assert [len(t) for t in layout] == [2, 2, 2]
    front = [LabSession.objects.get(pk=pk) for pk in layout[0]]
    middle = layout[1]
    shared_services.classroom_fire_trigger(
        classroom=room, user=teacher, values={"kind": "down", "duration_ms": 60_000}
    )
    runs = [
        traffic_services.traffic_start(
            session=s, user=s.owner, rate=2, duration_s=3, arrivals="even"
        )
        for s in front
    ]
    # The tiers cannot change under running calls.
    with pytest.raises(chain_services.ChainBusy, match="stop them"):
        chain_services.classroom_set_chain(classroom=room, user=teacher, values={"tiers": 2})
    runs = [wait_run_ended(run) for run in runs]
    assert all(run.status == Traffic.Status.DONE for run in runs)
    calls = sum(run.calls for run in runs)

    stats = runtime.chain_now(room.pk, 3, now=int(time.time()) + 1, window_s=60)
    per_tier = {t["tier"]: t for t in stats["tiers"]}
    assert per_tier[1]["calls_per_s"] * 60 == pytest.approx(calls)
    assert [per_tier[n]["amplification"] for n in (1, 2, 3)] == [3.0, 3.0, 3.0]
    assert stats["leaf_per_request"] == 27.0

    # The middle tier answered three calls per front call, each journaled with its parent.
    answered = JournalEvent.objects.filter(session_id__in=middle, kind="call_result")
    assert answered.count() == ATTEMPTS * calls
    row = answered.order_by("pk").first()
    assert row.data["parent"]["service"].startswith("tier 1, service ")
    assert row.data["parent"]["attempt"] in (1, 2, 3)
    assert "(answering tier 1, service" in row.message
    # ...numbered from its own counter, past its own calls.
    numbers = sorted(answered.filter(session_id=middle[0]).values_list("call_no", flat=True))
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))

    # The leaf counted every attempt of the back tier.
    seconds = runtime.shared_model(room.pk).counters()
    assert sum(s.offered for s in seconds) == 27 * calls

    # A burst at the front says in its summary how many attempts reached the leaf (what a
    # lesson's step asks), and a burst one tier back a third of that.
    front_burst = wait_run_ended(bursts.burst_start(session=front[0], user=front[0].owner, size=1))
    mid = LabSession.objects.get(pk=middle[0])
    mid_burst = wait_run_ended(bursts.burst_start(session=mid, user=mid.owner, size=1))
    assert front_burst.summary["leaf_hits"] == 27 and front_burst.summary["tier"] == 1
    assert mid_burst.summary["leaf_hits"] == 9 and mid_burst.summary["attempts_total"] == 3
    # The panel counts each burst's call as a user's request where it entered.
    after = runtime.chain_now(room.pk, 3, now=int(time.time()) + 1, window_s=120)
    assert after["requests"] == calls + 2
    assert after["leaf_per_request"] == round((27 * calls + 27 + 9) / (calls + 2), 2)


def test_a_chain_refuses_bad_layouts_and_its_back_tier_runs_its_own_traffic(celery_worker):
    room, teacher, _ = shared_class(3)
    for tiers, words in (
        (7, "Tiers: must be blank (no chain) or between 2 and 3 tiers (got 7)"),
        (1, "Tiers: must be blank (no chain) or between 2 and 3 tiers (got 1)"),
        ("three", "Tiers: must be blank (no chain) or between 2 and 3 tiers (got three)"),
    ):
        with pytest.raises(SettingsInvalid) as refused:
            chain_services.classroom_set_chain(classroom=room, user=teacher,
                                               values={"tiers": tiers})  # fmt: skip
        assert str(refused.value.problems[0]) == words
    assert not LabSession.objects.filter(classroom=room, tier__isnull=False).exists()

    layout = chain_services.classroom_set_chain(
        classroom=room, user=teacher, values={"tiers": 3, "order": "random"}
    )
    back = LabSession.objects.get(pk=layout[2][0])
    row = JournalEvent.objects.filter(session=back, kind="chain_set").latest("pk")
    assert "this service is tier 3 of 3, the back" in row.message
    # The back tier's own run calls the shared dependency, as its answers do.
    run = traffic_services.traffic_start(session=back, user=back.owner, rate=2, duration_s=1)
    assert wait_run_ended(run).status == Traffic.Status.DONE

    chain_services.classroom_set_chain(classroom=room, user=teacher, values={"tiers": None})
    assert not LabSession.objects.filter(classroom=room, tier__isnull=False).exists()
    run = traffic_services.traffic_start(session=back, user=back.owner, rate=1, duration_s=1)
    assert wait_run_ended(run).status == Traffic.Status.DONE


def test_a_tier_stops_waiting_at_its_timeout_and_the_tier_behind_goes_on(celery_worker):
    room, teacher, sessions = shared_class(2, service_ms=400)  # each answer takes 400 ms
    front, back = sessions
    naive(front, attempts=1, timeout_ms=100)
    naive(back, attempts=1, timeout_ms=2000)
    layout = chain_services.classroom_set_chain(
        classroom=room, user=teacher, values={"tiers": 2, "order": "even"}
    )
    assert layout == [[front.pk], [back.pk]]
    front = LabSession.objects.get(pk=front.pk)
    burst = wait_run_ended(bursts.burst_start(session=front, user=front.owner, size=1))
    attempt = JournalEvent.objects.get(session=front, burst_id=burst.pk, kind="attempt")
    assert attempt.error == "timeout"
    assert 100 <= attempt.latency_ms < 390, attempt.latency_ms  # its own timeout, not 400 ms
    # The back tier's call went on to its answer after the front stopped waiting.
    answered = wait_for(
        lambda: JournalEvent.objects.filter(session=back, kind="call_result").first(),
        timeout=30,
        message="the back tier's answer",
    )
    assert answered.outcome == "success"
    assert answered.data["parent"] == {
        "service": "tier 1, service 1",
        "call": attempt.call_no,
        "attempt": 1,
    }
    back_attempt = JournalEvent.objects.get(session=back, kind="attempt")
    assert back_attempt.latency_ms >= 390


def test_the_lessons_first_step_for_a_class_of_30_at_once(celery_worker):
    """Step 1 of "A chain of students" as a class does it: 30 students in 3 tiers on the
    default shared dependency during a down trigger, each pressing Do it (one call) at the
    same moment. Every front call puts 27 attempts on the dependency, a middle one 9, a back
    one 3: the count each student is graded on."""
    lesson = json.loads((ROOT / "scenarios" / "chain_of_students.json").read_text())
    room, teacher, sessions = shared_class(30, servers=8, service_ms=40)
    for session in sessions:
        lab.session_set_policy(session=session, user=session.owner, changes=lesson["policy"])
    layout = chain_services.classroom_set_chain(
        classroom=room, user=teacher, values={"tiers": 3, "order": "random"}
    )
    shared_services.classroom_fire_trigger(
        classroom=room, user=teacher, values={"kind": "down", "duration_ms": 120_000}
    )
    tier_of = {pk: n for n, tier in enumerate(layout, start=1) for pk in tier}
    started = [
        bursts.burst_start(session=s, user=s.owner, size=lesson["steps"][0]["burst"])
        for s in LabSession.objects.filter(pk__in=tier_of)
    ]
    ended = [wait_run_ended(b, timeout=120) for b in started]
    leaf = {b.session_id: b.summary["leaf_hits"] for b in ended}
    assert {pk: leaf[pk] for pk in tier_of} == {pk: 3 ** (4 - n) for pk, n in tier_of.items()}
