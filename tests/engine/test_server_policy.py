"""Server policies of the shared dependency in virtual time: the defaults are the plain shared
model, the explicit queue agrees with it under FIFO, and each defence does what it says;
out-of-range settings are refused with the field and its range."""

from __future__ import annotations

import random

import pytest

from labs.engine import MemorySharedModel, SharedConfig, Trigger, ValidationError
from labs.engine.server import (
    SERVER_LIMITS,
    QueueServer,
    ServerPolicy,
    parse_server_policy,
    validate_server_policy,
)


def _workload(seed: int, n: int = 400, rate_per_ms: float = 0.2):
    rng = random.Random(f"server-policy:{seed}")
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate_per_ms)
        out.append((round(t * 1000), rng.choice((None, 150_000, 400_000)), rng.randint(1, 3)))
    return out


def _replies(server: QueueServer, workload, *, trigger_at=None, trigger=None):
    replies = []
    for at, timeout_us, attempt in workload:
        server.at(at, lambda a=attempt, tu=timeout_us: server.submit(
            replies.append, attempt=a, timeout_us=tu))  # fmt: skip
    if trigger is not None:
        server.at(trigger_at, server.trigger, trigger)
    server.run()
    return sorted((r.arrival_us, r.attempt, r.outcome, r.answer_us) for r in replies)


def _model_replies(config, workload, *, trigger_at=None, trigger=None):
    model = MemorySharedModel(config)
    out, fired = [], trigger is None
    for at, timeout_us, attempt in workload:
        if not fired and at >= trigger_at:
            model.trigger(trigger, trigger_at)
            fired = True
        d = model.decide(at, timeout_us=timeout_us, attempt=attempt)
        out.append((d.arrival_us, attempt, d.outcome, d.answer_us))
    return sorted(out), model


@pytest.mark.parametrize("seed", range(4))
def test_the_default_policy_is_the_plain_shared_model_reply_for_reply(seed):
    config = SharedConfig(servers=3, service_ms=20, max_queue_ms=200)
    trigger = Trigger("down", 2000)
    workload = _workload(seed)
    server = QueueServer(config)
    assert ServerPolicy().is_default and server.exact
    got = _replies(server, workload, trigger_at=500_000, trigger=trigger)
    want, model = _model_replies(config, workload, trigger_at=500_000, trigger=trigger)
    assert got == want
    assert {o for *_, o, _ in got} >= {"ok", "error", "shed", "timeout"}
    totals = server.totals()
    assert totals["offered"] == sum(s.offered for s in model.counters()) == len(workload)


@pytest.mark.parametrize("seed", range(4))
def test_the_explicit_queue_under_fifo_agrees_with_the_shared_model(seed):
    # nobody is shed (a long queue allowed): the explicit queue must give every attempt the
    # same outcome at the same microsecond as the shared model's decision at arrival
    config = SharedConfig(servers=3, service_ms=20, max_queue_ms=100_000)
    workload = _workload(seed)
    got = _replies(QueueServer(config, exact_model=False), workload)
    want, _ = _model_replies(config, workload)
    assert got == want
    assert any(o == "timeout" for *_, o, _ in got)


def _one_server(policy: ServerPolicy, arrivals_ms, service_ms=10, timeout_ms=None):
    server = QueueServer(SharedConfig(1, service_ms, 10_000), policy)
    replies = []
    for i, at in enumerate(arrivals_ms):
        server.at(at * 1000, lambda i=i: server.submit(
            lambda r, i=i: replies.append((i, r)),
            timeout_us=None if timeout_ms is None else timeout_ms * 1000))  # fmt: skip
    server.run()
    return server, replies


def test_lifo_serves_the_newest_waiting_attempt_first():
    _, fifo = _one_server(ServerPolicy(queue_limit=100), [0, 1, 2, 3])
    _, lifo = _one_server(ServerPolicy("lifo"), [0, 1, 2, 3])
    assert [i for i, _ in fifo] == [0, 1, 2, 3]
    assert [i for i, _ in lifo] == [0, 3, 2, 1]
    assert [r.answer_us for _, r in lifo] == [10_000, 20_000, 30_000, 40_000]


def test_adaptive_lifo_is_fifo_until_the_oldest_wait_passes_the_threshold():
    # at 10 ms the oldest waiting (arrived at 1 ms) has waited 9 ms: under 15 ms, FIFO; at
    # 20 ms the oldest (2 ms) has waited 18 ms: over, LIFO takes the newest (4 ms)
    _, out = _one_server(ServerPolicy("adaptive_lifo", lifo_after_ms=15), [0, 1, 2, 3, 4])
    assert [i for i, _ in out] == [0, 1, 4, 3, 2]


def test_codel_drops_what_waited_past_the_target_while_the_queue_stays_busy():
    policy = ServerPolicy(codel_target_ms=5, codel_interval_ms=30)
    server, out = _one_server(policy, list(range(0, 200, 5)))  # 2x overload for 200 ms
    reasons = [r.reason for _, r in out if r.outcome == "shed"]
    assert reasons and set(reasons) == {"codel"}
    served = [r for _, r in out if r.outcome == "ok"]
    # once congested, nothing that waited past the interval is served
    assert max(r.answer_us - r.arrival_us for r in served) <= (30 + 10) * 1000
    assert server.totals()["dropped"] == len(reasons)


def test_a_fixed_concurrency_limit_refuses_at_once_past_the_limit():
    _, out = _one_server(ServerPolicy(concurrency="fixed", concurrency_limit=2), [0, 0, 0, 0])
    assert [(r.outcome, r.reason, r.answer_us) for _, r in out][:2] == [
        ("shed", "concurrency", 0),
        ("shed", "concurrency", 0),
    ]
    assert sorted(r.outcome for _, r in out) == ["ok", "ok", "shed", "shed"]


def test_aimd_cuts_the_limit_on_slow_answers_and_grows_it_on_fast_ones():
    slow = ServerPolicy(concurrency="aimd", concurrency_limit=50, limit_latency_ms=30)
    server, _ = _one_server(slow, [0] * 20)  # a queue: latencies 10, 20, ... 200 ms
    assert server.limit < 50
    fast = ServerPolicy(concurrency="aimd", concurrency_limit=2, limit_latency_ms=500)
    server, _ = _one_server(fast, list(range(0, 400, 10)))
    assert server.limit > 2


def test_the_gradient_limit_shrinks_when_latency_grows_past_the_fastest_seen():
    policy = ServerPolicy(concurrency="gradient", concurrency_limit=100)
    server, _ = _one_server(policy, [0] * 60)
    assert server.limit < 100
    assert all(1 <= limit <= 200 for _, limit in server.limits_seen)


def test_a_token_bucket_answers_429_with_the_time_until_the_next_token():
    policy = ServerPolicy(rate_per_s=10, rate_burst=2)
    _, out = _one_server(policy, [0, 0, 0, 150])
    limited = [r for _, r in out if r.outcome == "limited"]
    assert len(limited) == 1
    assert (limited[0].status, limited[0].reason, limited[0].retry_after_us) == (
        "429",
        "rate",
        100_000,
    )
    # by 150 ms one token came back (10 per s): the fourth attempt is served
    assert sorted(r.outcome for _, r in out) == ["limited", "ok", "ok", "ok"]


def test_a_queue_limit_refuses_when_every_worker_is_busy_and_the_queue_is_full():
    _, out = _one_server(ServerPolicy(queue_limit=1), [0, 0, 0])
    assert [(i, r.outcome, r.reason) for i, r in out] == [
        (2, "shed", "queue_full"),
        (0, "ok", ""),
        (1, "ok", ""),
    ]


# -- validation ------------------------------------------------------------------------------


def test_the_defaults_validate_and_parse_to_the_plain_policy():
    defaults = {k.removeprefix("server."): v.default for k, v in SERVER_LIMITS.items()}
    assert validate_server_policy(defaults) == []
    assert parse_server_policy({}) == ServerPolicy() == parse_server_policy(defaults)
    assert parse_server_policy({}).is_default


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"discipline": "random"}, "server.discipline: must be one of fifo, lifo, adaptive_lifo"),
        ({"lifo_after_ms": 0}, "server.lifo_after_ms: must be between 1 and 10000 ms (got 0)"),
        ({"codel_target_ms": 6000}, "server.codel_target_ms: must be null (off) or between 1 and 5000 ms"),
        ({"codel_interval_ms": 5}, "server.codel_interval_ms: must be between 10 and 10000 ms"),
        ({"concurrency": "vegas"}, "server.concurrency: must be one of none, fixed, aimd, gradient"),
        ({"concurrency_limit": 0}, "server.concurrency_limit: must be between 1 and 1000 attempts"),
        ({"rate_per_s": 0}, "server.rate_per_s: must be null (off) or between 0.1 and 100000 attempts/s"),
        ({"rate_burst": 10001}, "server.rate_burst: must be between 1 and 10000 attempts"),
        ({"queue_limit": -1}, "server.queue_limit: must be null (off) or between 1 and 100000 attempts"),
        ({"concurrency": "aimd", "concurrency_limit": 300, "concurrency_max": 100},
         "server.concurrency_limit: must be between 1 and 100 attempts (at most concurrency_max"),
        ({"bogus": 1}, "server.bogus: unknown field (allowed: discipline, lifo_after_ms"),
    ],
)  # fmt: skip
def test_out_of_range_settings_are_refused_with_the_field_and_its_range(data, message):
    problems = validate_server_policy(data)
    assert len(problems) == 1
    assert str(problems[0]).startswith(message)
    with pytest.raises(ValidationError):
        parse_server_policy(data)


def test_only_the_default_policy_runs_on_the_plain_model():
    with pytest.raises(ValueError, match="default policy"):
        QueueServer(SharedConfig(), ServerPolicy("lifo"), exact_model=True)


def test_with_a_hand_off_an_arrival_takes_a_just_freed_worker_before_the_full_queue():
    # one worker, a queue of 1: at 10 ms the worker finishes; for 1 ms it is not back at the
    # queue, and an attempt arriving at 10.5 ms takes it (the queueing simulator's tick order)
    server = QueueServer(SharedConfig(1, 10, 10_000), ServerPolicy(queue_limit=1), pickup_us=1000)
    replies = []
    for i, at in enumerate((0, 1_000, 10_500)):
        server.at(at, lambda i=i: server.submit(lambda r, i=i: replies.append((i, r))))
    server.run()
    order = [(i, r.outcome, r.answer_us) for i, r in replies]
    # the queued one starts 1 ms after that worker is free again (20.5 ms + 1 ms hand-off)
    assert order == [(0, "ok", 10_000), (2, "ok", 20_500), (1, "ok", 31_500)]
