"""The engine hub (labs.worker.hub) against a real Redis: callers' commands share pipelines,
each caller gets its own reply or error, the hub outlives a dead connection, and a chain of
sleeps absorbs each wake-up's lateness up to the bound, never more."""

from __future__ import annotations

import threading

import pytest
import redis
from django.conf import settings

from labs.worker import hub as hub_module
from labs.worker.hub import CATCH_UP_S, Hub, HubClock

pytestmark = [pytest.mark.integration]


@pytest.fixture
def hub():
    return Hub(name="test-hub")


@pytest.fixture
def client(hub):
    pool = redis.Redis.from_url(settings.LAB_ENGINE_REDIS_URL).connection_pool
    client = hub.redis(pool)
    client.flushdb()
    return client


def test_commands_of_callers_due_together_go_out_in_one_pipeline_with_their_own_replies(
    hub, client
):
    def many():
        def one(i):
            return lambda: client.incrby("counter", i)

        return hub.clock.run_concurrently([one(i) for i in range(1, 41)])

    before = hub.rounds
    replies = hub.run(many)
    assert hub.rounds == before + 1  # forty INCRBYs, one round trip
    assert hub.commands >= 40
    assert sorted(replies) == replies  # in the order the callers asked
    assert replies[-1] == sum(range(1, 41)) == int(client.get("counter"))


def test_an_error_reply_is_raised_in_its_own_caller_only(hub, client):
    client.set("text", "not a number")

    def both():
        def bad():
            try:
                client.incr("text")
            except redis.ResponseError as exc:
                return f"refused: {exc}"
            return "accepted"

        return hub.clock.run_concurrently([bad, lambda: client.incr("n")])

    refused, counted = hub.run(both)
    assert refused.startswith("refused:")
    assert counted == 1


def test_a_response_callback_applies_as_without_the_hub(hub, client):
    client.hset("h", mapping={"a": 1, "b": 2})
    assert hub.run(lambda: client.hgetall("h")) == {b"a": b"1", b"b": b"2"}
    assert hub.run(lambda: client.exists("h", "nope")) == 1


def test_a_dead_server_fails_the_callers_and_the_hub_goes_on(hub):
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2).connection_pool
    gone = hub.redis(dead)
    with pytest.raises(redis.ConnectionError):
        hub.run(lambda: gone.get("x"))
    live = hub.redis(redis.Redis.from_url(settings.LAB_ENGINE_REDIS_URL).connection_pool)
    assert hub.run(lambda: live.ping()) is True


def test_run_returns_the_result_and_raises_the_exception_of_its_function(hub):
    assert hub.run(lambda: 7) == 7

    def boom():
        hub.clock.sleep(0.001)
        raise ValueError("from the caller")

    with pytest.raises(ValueError, match="from the caller"):
        hub.run(boom)


def test_run_from_the_hubs_own_thread_is_refused(hub):
    def nested():
        return hub.run(lambda: 1)

    with pytest.raises(RuntimeError, match="own thread"):
        hub.run(nested)


def test_journal_entries_of_a_round_reach_the_writer_in_one_hand_off(hub):
    class Writer:
        def __init__(self):
            self.calls = []

        def submit(self, entry):
            self.calls.append([entry])

        def submit_many(self, entries):
            self.calls.append(list(entries))

    writer = Writer()

    def emit():
        for i in range(5):
            hub.journal(writer, i)
        hub.clock.sleep(0.001)
        hub.journal(writer, 5)

    hub.run(emit)
    assert writer.calls == [[0, 1, 2, 3, 4], [5]]
    hub.journal(writer, 6)  # outside the hub's callers: at once
    assert writer.calls[-1] == [6]


def test_many_threads_share_one_hub(hub, client):
    results = []

    def student(i):
        results.append(hub.run(lambda: client.incr("shared")))

    threads = [threading.Thread(target=student, args=(i,)) for i in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == list(range(1, 31))


class _Wall:
    """A wall clock the test moves by hand."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _sleep_twice(clock: HubClock, late: float) -> float:
    """A caller sleeps 10 ms; the hub gets to it ``late`` seconds after its due instant;
    it sleeps 10 ms again. Returns the instant its second sleep is due."""
    wall = clock._wall
    clock.spawn(lambda: (clock.sleep(0.010), clock.sleep(0.010)))
    clock._step()  # the caller starts and goes to sleep at 100.0
    due = clock.due()
    assert due == pytest.approx(100.010)
    wall.t = due + late
    clock._step()  # woken, late
    return clock.due()


def test_a_sleep_absorbs_the_lateness_of_the_wake_up_before_it():
    clock = HubClock(wall=_Wall(100.0))
    # woken 0.4 ms late: the next 10 ms end 20 ms after the first sleep began
    assert _sleep_twice(clock, 0.0004) == pytest.approx(100.020)


def test_lateness_beyond_the_bound_is_not_absorbed():
    clock = HubClock(wall=_Wall(100.0))
    # woken 5 ms late: only CATCH_UP_S of it comes off the next sleep
    assert _sleep_twice(clock, 0.005) == pytest.approx(100.015 - CATCH_UP_S + 0.010)


def test_get_hub_is_one_per_process():
    assert hub_module.get_hub() is hub_module.get_hub()


def test_a_command_sent_without_waiting_goes_out_with_the_callers_next_round_in_order(
    hub, client
):
    def caller():
        assert client.send_nowait(("SET", "k", "first")) is None  # the caller goes on at once
        return client.getset("k", "second")

    before = hub.rounds
    assert hub.run(caller) == b"first"  # the SET ran before the GETSET, in one round
    assert hub.rounds == before + 1
    assert client.get("k") == b"second"
    assert client.send_nowait(("INCR", "n")) == 1  # outside the hub's callers: at once


def test_a_script_sent_without_waiting_runs_by_its_text_when_redis_does_not_know_it(hub, client):
    script = "return redis.call('INCRBY', KEYS[1], ARGV[1])"
    sha = client.script_load(script)
    client.script_flush()

    def caller():
        client.send_nowait(("EVALSHA", sha, 1, "counted", 5), script)
        hub.clock.sleep(0.001)

    hub.run(caller)
    hub.run(lambda: hub.clock.sleep(0.001))  # the EVAL goes out in the round after
    assert client.get("counted") == b"5"


def test_a_sequential_burst_on_the_hub_is_one_round_trip_per_healthy_call(hub, client):
    """Admission with the first attempt in one script; the call's success recorded without
    waiting, so it travels with the next call's admission."""
    import random

    from labs.engine import Breaker, FakeDependency, GuardedClient, parse_dependency, parse_policy
    from labs.engine.redis import RedisStore

    store = RedisStore(client, "fl:{hubtest}")
    policy = parse_policy({"max_attempts": 3})
    breaker = Breaker(policy.breaker, store=store, clock=hub.clock)
    dependency = FakeDependency(
        parse_dependency({"mode": "healthy", "latency_ms": 2}),
        store=store, clock=hub.clock, rng=random.Random(1),
    )  # fmt: skip
    guarded = GuardedClient(
        policy, breaker=breaker, dependency=dependency, clock=hub.clock, rng=random.Random(1),
        store=store,
    )  # fmt: skip
    client.script_flush()  # Redis knows no script: the first calls load them (SCRIPT LOAD)
    hub.run(lambda: guarded.run_burst(2))
    before = hub.rounds
    result = hub.run(lambda: guarded.run_burst(10, first_call=3))
    assert result.succeeded == 10
    # ten admissions (each with the previous call's result) and the last call's result
    assert hub.rounds - before == 11
    assert store.export_state()["dependency"]["attempts"] == 12
    store.clear()


def test_the_worker_ready_hook_opens_the_hubs_connection_and_loads_the_scripts(monkeypatch):
    """The first burst after a worker starts pays neither the hub's connect nor a script load
    (labs.worker.boot._start_engine_hub, run here on a hub of this test's own)."""
    import hashlib

    from labs.engine.redis.store import _LUA, _source
    from labs.live import runtime
    from labs.worker import boot

    own = Hub(name="ready-hub")
    monkeypatch.setattr(hub_module, "get_hub", lambda: own)
    monkeypatch.setattr(boot, "get_hub", lambda: own)
    engine = runtime.engine_redis()
    engine.script_flush()
    assert own.redis(engine.connection_pool)._hub_connection is None
    boot._start_engine_hub()
    assert own.rounds == 1  # the PING went through the hub's own round
    assert own.redis(engine.connection_pool)._hub_connection is not None
    shas = [hashlib.sha1(_source(p.stem).encode()).hexdigest() for p in _LUA.glob("*.lua")]  # noqa: S324
    assert all(engine.script_exists(*shas))


def test_a_read_command_naming_its_keys_goes_out_on_the_hubs_own_connection(hub, client):
    """redis-py's GET and HGET pass ``keys=`` (for its client-side cache only): they take
    the hub's write on its own connection like every other command, not a pipeline on a
    connection of the pool."""
    client.set("k", "v")
    client.hset("h", "f", "1")
    hub.run(lambda: client.ping())  # the hub's own connection is open
    pool = client.connection_pool
    created = pool._created_connections
    assert hub.run(lambda: (client.get("k"), client.hget("h", "f"))) == (b"v", b"1")
    assert pool._created_connections == created  # no connection but the hub's


def test_the_first_command_after_a_redis_restart_goes_out_on_a_new_connection(hub, own_redis):
    """A restart closes the hub's idle connection; the next batch must not be written on it
    (it would be answered "Connection closed by server" without having run)."""
    client = hub.redis(redis.Redis.from_url(own_redis.url).connection_pool)
    assert hub.run(lambda: client.incr("n")) == 1
    for restart in range(3):
        own_redis.restart()  # empty again: persistence is off
        assert hub.run(lambda: client.incr("n")) == 1, f"after restart {restart + 1}"
        assert hub.run(lambda: [client.incr("n"), client.incr("n")]) == [2, 3]
