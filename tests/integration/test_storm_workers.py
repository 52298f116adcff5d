"""The retry storm through the real stack: two classes of bots (``classroom_simulate``, the
service behind ``manage.py simulate_class``) on two worker processes, each class on its own
small shared dependency, an outage fired in both at once. Naive bots (immediate retries, an
attempt timeout below the queue wait the outage builds, no breaker, no budget) keep the
dependency collapsed after the outage ends; resilient bots (full jitter, a retry budget, a
breaker) bring it back. In both classes the model's per-second counters equal the journal's
attempts exactly, each attempt under the outcome its client saw.

Sizes: 6 bots x 5 calls/s = 30 calls/s against 2 servers x 50 ms (40 attempts/s), about 75 %
of the capacity, as in the virtual-time storm (``labs.experiments.metastable``).
"""

from __future__ import annotations

import time

import pytest

from labs.live import runtime
from labs.models import JournalEvent, Traffic
from labs.services import shared as shared_services
from labs.services.simulate import classroom_simulate
from tests.conftest import make_classroom, make_instructor, make_scenario, tour_script
from tests.integration.conftest import wait_for
from tests.integration.test_shared_worker import counters_agree_with_journal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BOTS = 6
RATE = 5
#: Long enough for a few seconds after each class's outage even when a loaded machine fires the
#: second class's trigger late. Seen once in CI, with the outage timed from before both fires:
#: the resilient class's goodput after it 1.7 calls/s against a baseline of 30 (alone, and
#: beside four CPU-bound loops, it reads 30).
FOR_S = 26
OUTAGE_S = 5


def storm_class(name: str, code: str, teacher_name: str):
    scenario = make_scenario(f"storm-{code.lower()}", script=tour_script())
    room = make_classroom(name, join_code=code)
    room.scenarios.add(scenario)
    teacher = make_instructor(teacher_name, room)
    shared_services.classroom_set_shared(
        classroom=room,
        user=teacher,
        values={"servers": 2, "service_ms": 50, "max_queue_ms": 2000},
    )
    return room, teacher


def goodput(room, first: int, last: int) -> float:
    """Mean attempts answered ok per second over the seconds ``first..last`` (inclusive)."""
    seconds = {s.second: s.ok for s in runtime.shared_model(room.pk).counters()}
    return sum(seconds.get(s, 0) for s in range(first, last + 1)) / (last - first + 1)


def test_naive_bots_keep_the_dependency_down_resilient_ones_bring_it_back(worker_process):
    worker_process()
    worker_process()
    naive, naive_teacher = storm_class("Naive class", "NAIVE001", "teacher_naive")
    resilient, resilient_teacher = storm_class("Resilient class", "RESIL001", "teacher_resil")
    runs = []
    for room in (naive, resilient):
        policy = "naive" if room is naive else "resilient"
        sim = classroom_simulate(
            classroom=room, students=BOTS, policy=policy, rate=RATE, duration_s=FOR_S,
            arrivals="even",
        )  # fmt: skip
        runs += [t.pk for t in sim.traffic]

    def all_running():
        return Traffic.objects.filter(pk__in=runs, status=Traffic.Status.RUNNING).count() == len(
            runs
        )

    wait_for(all_running, 60, interval=0.1, message="every bot's traffic to start")
    started = time.time()
    time.sleep(6)  # a healthy baseline first
    spans = {}
    for room, teacher in ((naive, naive_teacher), (resilient, resilient_teacher)):
        shared_services.classroom_fire_trigger(
            classroom=room, user=teacher, values={"kind": "down", "duration_ms": OUTAGE_S * 1000}
        )
        # each class's outage as its Redis model stamped it (a loaded machine may fire the
        # second one late)
        spans[room.pk] = runtime.shared_trigger_span(room.pk)

    def all_ended():
        return not Traffic.objects.filter(pk__in=runs, status__in=Traffic.ACTIVE_STATUSES).exists()

    wait_for(all_ended, 120, interval=0.2, message="the bots' traffic to end")
    assert set(Traffic.objects.filter(pk__in=runs).values_list("status", flat=True)) == {
        Traffic.Status.DONE
    }

    # Counters equal the journal, second by second and outcome by outcome, in both classes.
    for room in (naive, resilient):
        attempts = list(JournalEvent.objects.filter(session__classroom=room, kind="attempt"))
        assert attempts and all("outcome" in a.data for a in attempts)
        counters_agree_with_journal(room.pk, attempts)

    # The qualitative storm, with generous margins: the baseline is the healthy seconds before
    # the class's outage, "after" the seconds from 3 s after its end (by the model's clock) to
    # the last arrival.
    first_full, last = int(started) + 2, int(started) + FOR_S - 2
    figures, seconds = {}, {}
    for label, room in (("naive", naive), ("resilient", resilient)):
        span = spans[room.pk]
        before = span["from_us"] // 1_000_000 - 1
        after_from = span["until_us"] // 1_000_000 + 3
        assert last - after_from >= 3, (label, "too few seconds after the outage", span, started)
        figures[label] = (goodput(room, first_full, before), goodput(room, after_from, last))
        counted = {c.second: (c.offered, c.ok) for c in runtime.shared_model(room.pk).counters()}
        seconds[label] = [counted.get(sec) for sec in range(first_full, last + 1)]
    print("goodput per second (baseline, after the outage):", figures)
    shown = (figures, seconds)  # a failure shows each second's (offered, ok) too
    for label, (baseline, _after) in figures.items():
        assert baseline >= 0.5 * BOTS * RATE, (label, shown)
    assert figures["naive"][1] < 0.5 * figures["naive"][0], shown
    assert figures["resilient"][1] > 0.7 * figures["resilient"][0], shown
