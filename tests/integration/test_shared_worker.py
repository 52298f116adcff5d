"""The class's shared dependency through the real stack: a burst in ``shared`` mode on a
real worker process reaches the class's Redis model, and the model's per-second counters
equal the journal's attempts, second by second and outcome by outcome."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from labs.live import runtime
from labs.models import Burst, JournalEvent, LabSession
from labs.services import bursts, lab
from labs.services import shared as shared_services
from tests.conftest import make_classroom, make_instructor, make_scenario, make_student, tour_script
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def shared_class(students: int = 1, *, servers: int = 1, service_ms: int = 20):
    scenario = make_scenario("shared-tour", script=tour_script())
    room = make_classroom("Shared class", join_code="SHARED01")
    room.scenarios.add(scenario)
    teacher = make_instructor("teacher_s", room)
    shared_services.classroom_set_shared(
        classroom=room, user=teacher, values={"servers": servers, "service_ms": service_ms}
    )
    sessions = []
    for i in range(students):
        student = make_student(f"s{i}", room)
        session = lab.session_open(user=student, classroom=room, scenario=scenario)
        lab.session_set_dependency(session=session, user=student, changes={"mode": "shared"})
        sessions.append(LabSession.objects.get(pk=session.pk))
    return room, teacher, sessions


def journal_attempts(session_ids) -> list[JournalEvent]:
    return list(JournalEvent.objects.filter(session_id__in=session_ids, kind="attempt"))


def counters_agree_with_journal(
    classroom_id: int | None, rows: list[JournalEvent], *, model=None
) -> None:
    """Each attempt the journal holds is counted once by the model (the class's, or
    ``model``), under the outcome its client saw, in the second the model counts it in."""
    seconds = (model or runtime.shared_model(classroom_id)).counters()
    model_offered = Counter({s.second: s.offered for s in seconds if s.offered})
    model_answers = Counter()
    for s in seconds:
        for outcome in ("ok", "error", "shed", "skipped", "timeout"):
            if getattr(s, outcome):
                model_answers[(s.second, outcome)] += getattr(s, outcome)
    journal_offered = Counter()
    journal_answers = Counter()
    for row in rows:
        decision = row.data
        journal_offered[decision["arrival_us"] // 1_000_000] += 1
        outcome = decision["outcome"]
        # shed and skipped are counted at the arrival, the answers at the second they arrive
        at = decision["arrival_us"] if outcome in ("shed", "skipped") else decision["answer_us"]
        journal_answers[(at // 1_000_000, outcome)] += 1
    assert journal_offered == model_offered
    assert journal_answers == model_answers


def test_shared_mode_burst_on_a_worker_process_reaches_the_class_model(worker_process):
    worker_process()
    room, _teacher, (session,) = shared_class(servers=1, service_ms=20)
    burst = bursts.burst_start(session=session, user=session.owner, size=12, concurrency=4)

    def done():
        burst.refresh_from_db()
        return burst.status not in Burst.ACTIVE_STATUSES

    wait_for(done, 120, message="the shared-mode burst to finish")
    assert burst.status == Burst.Status.DONE, burst.error
    rows = journal_attempts([session.pk])
    assert len(rows) >= 12
    assert all(row.data.get("outcome") for row in rows), "attempts carry the model's reply"
    # one server: no two attempts held it at overlapping times
    served = sorted(
        (r.data["start_us"], r.data["finish_us"]) for r in rows if r.data["server"] >= 0
    )
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(served))
    counters_agree_with_journal(room.pk, rows)


def test_students_bursting_on_the_shared_dependency_draw_their_own_jitter(worker_process):
    """Every session of a class has the scenario's seed; on the shared dependency a burst's
    rng (recorded in its start state) mixes in the session, so two students bursting together
    do not back off in lock-step. A private dependency's burst keeps the scenario's draws."""
    worker_process()
    _room, _teacher, sessions = shared_class(2, servers=4, service_ms=5)
    started = [bursts.burst_start(session=s, user=s.owner, size=2) for s in sessions]

    def done():
        return not Burst.objects.filter(
            pk__in=[b.pk for b in started], status__in=Burst.ACTIVE_STATUSES
        ).exists()

    wait_for(done, 120, message="both shared-mode bursts to finish")
    seeds = [Burst.objects.get(pk=b.pk).start_state["rng_seed"] for b in started]
    assert seeds[0] != seeds[1]
    assert seeds == [f"{s.seed}:s{s.pk}:1" for s in sessions]
    private = LabSession.objects.get(pk=sessions[0].pk)
    private.dependency = {"mode": "healthy"}
    assert runtime.burst_rng_seed(private) == f"{private.seed}:{private.burst_count}"
