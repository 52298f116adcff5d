"""The class's shared dependency is one exact FIFO queue across worker processes.

Two real ``celery worker`` processes run steady traffic of several bot sessions (each run
with many calls in flight) against one class's small shared dependency, overloaded so a
queue builds, attempts are shed and clients time out. What the model recorded for every
journaled attempt (server, arrival, start, finish: the decision's reply in the row's
``data``) must show that no two attempts ever held one server at overlapping times and that
an attempt that arrived earlier never started later than one that arrived after it.

No timing window: each worker takes at most ``CONCURRENCY`` runs at once and reserves at
most ``CONCURRENCY`` more (prefetch multiplier 1, acknowledged when a run starts), so with
``3 x CONCURRENCY`` runs queued each worker runs some; the test waits until runs are RUNNING
on both workers, then until the model has served ``SERVED_AFTER`` more attempts, then stops
every run (the calls in flight finish) and reads the journal.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from labs.live import runtime
from labs.models import JournalEvent, Traffic
from labs.services import shared as shared_services
from labs.services.simulate import classroom_simulate
from labs.services.traffic import traffic_stop
from tests.conftest import make_classroom, make_instructor, make_scenario, tour_script
from tests.integration.conftest import wait_for
from tests.integration.test_shared_worker import counters_agree_with_journal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CONCURRENCY = 2
RUNS = 3 * CONCURRENCY
#: Attempts the model must serve (give a server) after runs are going on both workers,
#: before the stop.
SERVED_AFTER = 300


def totals(room) -> Counter:
    """The model's counters summed over every second."""
    out: Counter = Counter()
    for second in runtime.shared_model(room.pk).counters():
        out.update(offered=second.offered, shed=second.shed, timeout=second.timeout)
        out["served"] += second.offered - second.shed - second.skipped
    return out


def test_two_workers_many_callers_never_overlap_on_a_server_and_keep_fifo(worker_process):
    worker_process(CONCURRENCY)
    worker_process(CONCURRENCY)
    # 2 servers x 50 ms: 40 attempts/s. Four runs at once at 20 calls/s (Poisson) with naive
    # retries overload it: the 1 s queue fills, attempts are shed, clients time out at 500 ms
    # while their attempts keep the servers busy.
    scenario = make_scenario("queue-tour", script=tour_script())
    room = make_classroom("Queue class", join_code="QUEUE001")
    room.scenarios.add(scenario)
    teacher = make_instructor("teacher_queue", room)
    shared_services.classroom_set_shared(
        classroom=room, user=teacher, values={"servers": 2, "service_ms": 50, "max_queue_ms": 1000}
    )
    sim = classroom_simulate(
        classroom=room, students=RUNS, policy="naive", rate=20, duration_s=300,
        arrivals="poisson",
    )  # fmt: skip
    runs = [t.pk for t in sim.traffic]

    def running_workers() -> set[str]:
        return set(
            Traffic.objects.filter(pk__in=runs, status=Traffic.Status.RUNNING).values_list(
                "worker", flat=True
            )
        )

    wait_for(lambda: len(running_workers()) == 2, 120, interval=0.1,
             message="traffic runs going on both worker processes")  # fmt: skip
    target = totals(room)["served"] + SERVED_AFTER

    def contended() -> bool:
        now = totals(room)
        return now["served"] >= target and now["shed"] > 0 and now["timeout"] > 0

    wait_for(contended, 120, interval=0.1,
             message=f"{SERVED_AFTER} more attempts served, some shed, some timed out")  # fmt: skip
    for session in sim.sessions:
        traffic_stop(session=session, user=session.owner)
    wait_for(
        lambda: not Traffic.objects.filter(pk__in=runs, status__in=Traffic.ACTIVE_STATUSES).exists(),
        120, interval=0.2, message="every run to finish its calls in flight",
    )  # fmt: skip
    assert set(Traffic.objects.filter(pk__in=runs).values_list("status", flat=True)) <= {
        Traffic.Status.STOPPED
    }

    worker_of = dict(
        Traffic.objects.filter(pk__in=runs).exclude(worker="").values_list("session_id", "worker")
    )
    assert len(set(worker_of.values())) == 2, worker_of
    rows = list(JournalEvent.objects.filter(session__classroom=room, kind="attempt"))
    # every attempt the model counted is journaled, with the model's reply
    counters_agree_with_journal(room.pk, rows)
    decisions = [(row.session_id, row.data) for row in rows]
    outcomes = Counter(d["outcome"] for _s, d in decisions)
    served = [(s, d) for s, d in decisions if d["server"] >= 0]
    # the run really contended: both processes' attempts queued, and some were shed
    assert outcomes["shed"] > 0 and outcomes["timeout"] > 0, outcomes
    waited_by = Counter(worker_of[s] for s, d in served if d["wait_us"] > 0)
    assert len(waited_by) == 2 and min(waited_by.values()) >= 20, waited_by

    by_server: dict[int, list[tuple[int, int, str]]] = {}
    for session_id, d in served:
        by_server.setdefault(d["server"], []).append(
            (d["start_us"], d["finish_us"], worker_of[session_id])
        )
    assert sorted(by_server) == [0, 1]
    handovers = 0  # a server passing from one process's attempt to the other's
    for server, held in by_server.items():
        held.sort()
        for (_s1, end, w1), (start, _f2, w2) in itertools.pairwise(held):
            assert start >= end, f"server {server}: an attempt started before the last ended"
            handovers += w1 != w2
    assert len(served) >= SERVED_AFTER and handovers >= 20, (len(served), handovers)
    print(f"{len(rows)} attempts ({dict(outcomes)}), {len(served)} served, waits by worker "
          f"{dict(waited_by)}, {handovers} handovers between the processes")  # fmt: skip

    # FIFO: in arrival order, start times never go down (ties in arrival: any order)
    ordered = sorted((d["arrival_us"], d["start_us"]) for _s, d in served)
    starts = [start for _arrival, start in ordered]
    late = [(a, b) for a, b in itertools.pairwise(ordered) if b[1] < a[1]]
    assert starts == sorted(starts), f"later arrivals started earlier: {late[:5]}"
