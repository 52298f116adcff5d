"""Clocks: virtual time is deterministic, cheap, and drives many callers."""

from __future__ import annotations

import random

import pytest

from labs.engine import SystemClock, VirtualClock

BACKENDS = ["greenlet", "thread"]


def _callers(clock, n, sleeps, seed=1):
    log = []

    def make(i):
        def caller():
            rng = random.Random(seed + i)
            for k in range(sleeps):
                clock.sleep(rng.random() / 10)
                log.append((round(clock.now(), 9), i, k))
            return i * 10

        return caller

    return [make(i) for i in range(n)], log


@pytest.mark.parametrize("backend", BACKENDS)
def test_sleep_advances_virtual_time_instantly(backend):
    clock = VirtualClock(start=5.0, backend=backend)
    clock.sleep(2.5)
    assert clock.now() == 7.5


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_concurrently_returns_results_in_input_order_and_interleaves_by_time(backend):
    clock = VirtualClock(backend=backend)
    fns, log = _callers(clock, 20, 5)
    assert clock.run_concurrently(fns) == [i * 10 for i in range(20)]
    times = [t for t, _, _ in log]
    assert times == sorted(times)
    assert len(log) == 100


def test_both_backends_give_the_same_interleaving():
    logs = []
    for backend in BACKENDS:
        clock = VirtualClock(backend=backend)
        fns, log = _callers(clock, 30, 6)
        clock.run_concurrently(fns)
        logs.append((log, clock.now()))
    assert logs[0] == logs[1]


def test_hundreds_of_callers_are_deterministic():
    runs = []
    for _ in range(2):
        clock = VirtualClock()
        fns, log = _callers(clock, 300, 8, seed=42)
        clock.run_concurrently(fns)
        runs.append(log)
    assert runs[0] == runs[1]
    assert len(runs[0]) == 2400


def test_ties_wake_in_the_order_callers_went_to_sleep():
    clock = VirtualClock()
    order = []

    def caller(i):
        def run():
            clock.sleep(1.0)
            order.append(i)

        return run

    clock.run_concurrently([caller(i) for i in range(5)])
    assert order == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_exception_is_reraised_after_every_caller_finished(backend):
    clock = VirtualClock(backend=backend)
    finished = []

    def bad():
        clock.sleep(0.1)
        raise KeyError("boom")

    def good():
        clock.sleep(1.0)
        finished.append(clock.now())

    with pytest.raises(KeyError):
        clock.run_concurrently([bad, good])
    assert finished == [1.0]


def test_nested_run_concurrently_waits_in_virtual_time():
    clock = VirtualClock()

    def parent():
        return clock.run_concurrently([lambda: clock.sleep(1) or 1, lambda: clock.sleep(2) or 2])

    assert clock.run_concurrently([parent, parent]) == [[1, 2], [1, 2]]
    assert clock.now() == 2.0


def test_call_at_runs_callbacks_in_time_then_scheduling_order():
    clock = VirtualClock()
    seen = []
    clock.call_at(2.0, seen.append, "b")
    clock.call_at(1.0, seen.append, "a")
    clock.call_at(2.0, seen.append, "c")
    handle = clock.call_later(1.5, seen.append, "cancelled")
    handle.cancel()
    assert clock.run() == 4
    assert seen == ["a", "b", "c"]
    assert clock.now() == 2.0


def test_callbacks_can_chain_and_run_until_stops_on_time():
    clock = VirtualClock()
    ticks = []

    def tick():
        ticks.append(clock.now())
        clock.call_later(0.25, tick)

    clock.call_later(0, tick)
    clock.run(until=1.0)
    assert ticks == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert clock.now() == 1.0


def test_sleep_of_the_owner_runs_what_falls_due_on_the_way():
    clock = VirtualClock()
    seen = []
    clock.call_at(0.5, lambda: seen.append(clock.now()))
    task = clock.spawn(lambda: clock.sleep(0.2) or "done", at=0.1)
    clock.sleep(1.0)
    assert seen == [0.5]
    assert task.done and task.result == "done"
    assert clock.now() == 1.0


def test_a_callback_that_sleeps_is_refused():
    clock = VirtualClock()
    clock.call_later(0, clock.sleep, 1.0)
    with pytest.raises(RuntimeError, match="cannot sleep"):
        clock.run()


def test_scheduling_in_the_past_and_negative_sleeps_are_refused():
    clock = VirtualClock(start=10)
    with pytest.raises(ValueError):
        clock.call_at(9, print)
    with pytest.raises(ValueError):
        clock.sleep(-1)
    with pytest.raises(ValueError):
        SystemClock().sleep(-1)


def test_system_clock_runs_callers_in_threads_and_reraises():
    clock = SystemClock()
    assert clock.run_concurrently([lambda: 1, lambda: 2]) == [1, 2]
    with pytest.raises(ZeroDivisionError):
        clock.run_concurrently([lambda: 1 / 0, lambda: 2])
    assert SystemClock("wall").now() > 1e9
    with pytest.raises(ValueError):
        SystemClock("sundial")  # type: ignore[arg-type]
