"""Beyond one dependency, in virtual time on both stores: per-host breakers, two
dependencies and a bulkhead, fallbacks, idempotency keys. Each lesson's test pins the figure
that makes its point; the settings' bad values are refused naming the field and its range,
and a session that configures none of it runs exactly as before."""

from __future__ import annotations

import copy

import pytest

from labs.engine import run_scenario, validate_scenario
from labs.engine.redis import RedisStore
from labs.engine.scenario import EngineExecutor
from labs.engine.validate import validate_dependency, validate_policy, validate_settings

from .helpers import load_scenario

LESSONS = ("per_host_breakers", "bulkhead", "fallback_cached", "idempotency_keys")


def run(script, store=None, **kw):
    executor = EngineExecutor(seed=script.get("seed", 0), store=store) if store else None
    return run_scenario(script, executor=executor, include_events=True, **kw)


@pytest.fixture(params=["memory", "redis"])
def store_of(request):
    """A fresh store per run: None (the executor's MemoryStore) or a RedisStore whose
    namespace carries a session's hash tag."""
    if request.param == "memory":
        return lambda: None
    client = request.getfixturevalue("redis_client")
    ns = request.getfixturevalue("namespace")
    counter = iter(range(1000))
    return lambda: RedisStore(client, f"{ns}:{{s{next(counter)}}}")


def _bursts(out):
    return out["bursts"]


def _failed_or_refused(bursts):
    return sum(b["failed"] + b["fast_failed"] for b in bursts)


def _transitions_in(out, bursts):
    numbers = {n for b in bursts for n in b["call_numbers"]}
    return [t for t in out["transitions"] if t["call"] in numbers]


# -- per-host breakers ------------------------------------------------------------------------


def test_one_host_down_a_global_breaker_flaps_per_host_breakers_isolate_it(store_of):
    out = run(load_scenario("per_host_breakers"), store_of())
    first, second = _bursts(out)[:3], _bursts(out)[3:]
    # one breaker for the dependency: opens, closes, opens again; 6 of 18 calls lost
    assert [t["to"] for t in _transitions_in(out, first)] == [
        "open", "half_open", "closed", "open", "half_open", "closed", "open",
    ]  # fmt: skip
    assert _failed_or_refused(first) == 6
    # one breaker per host: only host 1's opens, no call fails
    host_transitions = [e for e in out["events"] if e["kind"] == "transition" and e["burst"] > 3]
    assert [(e["data"]["host"], e["state_to"]) for e in host_transitions] == [(1, "open")]
    assert host_transitions[0]["explain"].startswith("host 1: breaker CLOSED -> OPEN")
    assert _failed_or_refused(second) == 0
    assert sum(b["succeeded"] for b in second) == 18


def test_every_attempt_names_its_host_round_robin_and_the_retry_moves_on():
    out = run(load_scenario("per_host_breakers"))
    attempts = [e for e in out["events"] if e["kind"] == "attempt" and e["burst"] == 1]
    assert [(e["call"], e["attempt"], e["data"]["host"]) for e in attempts[:4]] == [
        (1, 1, 0), (2, 1, 1), (2, 2, 2), (3, 1, 2),
    ]  # fmt: skip
    assert attempts[1]["explain"] == "call 2, attempt 1: host 1, 503 after 20 ms"


def test_random_spread_draws_hosts_from_the_seed():
    script = load_scenario("per_host_breakers")
    script["dependency"]["spread"] = "random"
    hosts = [
        [e["data"]["host"] for e in run(script)["events"] if e["kind"] == "attempt"]
        for _ in range(2)
    ]
    assert hosts[0] == hosts[1] and set(hosts[0]) == {0, 1, 2}
    assert hosts[0] != [
        e["data"]["host"]
        for e in run(load_scenario("per_host_breakers"))["events"]
        if e["kind"] == "attempt"
    ]


def test_host_breaker_keys_keep_the_session_hash_tag(redis_client, namespace):
    ns = f"{namespace}:{{s9}}"
    run(load_scenario("per_host_breakers"), RedisStore(redis_client, ns))
    keys = sorted(k.decode() for k in redis_client.scan_iter(match=f"{ns}:h*"))
    assert f"{ns}:h1:breaker" in keys and f"{ns}:h0:dependency" in keys
    assert all(k.startswith(f"{ns}:h") and "{s9}" in k for k in keys)
    RedisStore(redis_client, ns).clear()
    assert list(redis_client.scan_iter(match=f"{ns}:*")) == []


# -- two dependencies and a bulkhead ---------------------------------------------------------


def test_a_slow_b_drains_the_pool_and_a_bulkhead_keeps_a_healthy(store_of):
    out = run(load_scenario("bulkhead"), store_of())
    without, with_bulkhead = _bursts(out)
    assert without["by_dependency"]["a"]["succeeded"] == 4  # of 10, A never failed
    assert without["pool_timeout"] == 12 and without["wait_ms_total"] == 2435
    assert with_bulkhead["by_dependency"]["a"]["succeeded"] == 10
    assert with_bulkhead["rejected_bulkhead"] == 8 and with_bulkhead["pool_timeout"] == 0
    # A's success rate with the bulkhead is the one it has when B is healthy
    healthy = load_scenario("bulkhead")
    healthy["dependency"]["b"] = {"mode": "healthy", "latency_ms": 5}
    assert [b["by_dependency"]["a"]["succeeded"] for b in _bursts(run(healthy))] == [10, 10]


def test_bulkhead_rejections_and_pool_timeouts_are_journaled_as_such():
    events = run(load_scenario("bulkhead"))["events"]
    kinds = {(e["kind"], e["outcome"]) for e in events if e["kind"] == "rejected"}
    assert kinds == {("rejected", "pool_timeout"), ("rejected", "rejected_bulkhead")}
    refusal = next(e for e in events if e["outcome"] == "rejected_bulkhead")
    assert refusal["explain"] == (
        "rejected: dependency B already has 2 calls in flight (the bulkhead); not called"
    )
    results = [e for e in events if e["kind"] == "call_result"]
    assert {e["data"]["dependency"] for e in results} == {"a", "b"}
    assert all("waited_ms" in e["data"] for e in results)


# -- fallbacks ------------------------------------------------------------------------------


def _errors(out):
    return [b["failed"] + b["fast_failed"] for b in _bursts(out)]


def test_a_cached_fallback_leaves_only_the_calls_with_no_usable_answer(store_of):
    script = load_scenario("fallback_cached")
    plain = copy.deepcopy(script)
    plain["policy"]["fallback"] = None
    assert _errors(run(plain, store_of())) == [6, 4]
    out = run(script, store_of())
    assert _errors(out) == [0, 4]
    assert [b["degraded"] for b in _bursts(out)] == [6, 0]
    degraded = [e for e in out["events"] if e["kind"] == "call_result" and e["outcome"] == "degraded"]
    assert degraded[0]["call"] == 5
    assert degraded[0]["explain"] == (
        "call 5: degraded, answered by the cached answer, 45 ms old (max age 3.0 s) instead "
        "of failure (last error 503); all 2 attempts used"
    )
    assert degraded[0]["data"]["fallback"]["age_ms"] == 45
    stale = [e for e in out["events"] if e["kind"] == "call_result" and e["burst"] == 2]
    assert stale[0]["explain"].endswith(
        "no fallback: the cached answer is 3.6 s old, past the max age 3.0 s"
    )
    assert [e["data"]["fallback_expired_ms"] for e in stale] == [3645, 3645, 3645, 3645]
    # degraded is never a success: the breaker counted the failures and opened
    assert out["transitions"][0]["to"] == "open"


def test_a_default_fallback_answers_even_before_any_success():
    script = load_scenario("fallback_cached")
    script["dependency"] = {"mode": "down", "fallbacks": ["default"]}
    script["steps"][0] = {"set_dependency": {"mode": "down"}}
    script["policy"]["fallback"] = "default"
    out = run(script)
    assert [b["degraded"] for b in _bursts(out)] == [10, 4]
    assert sum(b["succeeded"] for b in _bursts(out)) == 0


def test_a_fallback_the_dependency_does_not_offer_is_refused_naming_both():
    script = load_scenario("fallback_cached")
    script["dependency"]["fallbacks"] = []
    assert [str(p) for p in validate_scenario(script)] == [
        "policy.fallback: cached is not offered by the dependency (offered: none)"
    ]
    script = load_scenario("fallback_cached")
    script["steps"].insert(1, {"set_policy": {"fallback": "default"}})
    assert [str(p) for p in validate_scenario(script)] == [
        "steps[1].set_policy.fallback: default is not offered by the dependency "
        "(offered: cached)"
    ]
    problems = validate_settings({"fallbacks": ["cached"], "b": {}}, {"fallback": "cached"})
    assert [str(p) for p in problems] == [
        "policy.fallback: cached is not offered by dependency B (offered: none)"
    ]


# -- idempotency keys -------------------------------------------------------------------------


def test_without_keys_a_timeout_and_retry_charges_twice_with_keys_once(store_of):
    out = run(load_scenario("idempotency_keys"), store_of())
    without, with_keys = _bursts(out)
    assert without["effects"] == {"applied": 9, "calls": 6}
    assert with_keys["effects"] == {"applied": 6, "calls": 6}
    timed_out = next(e for e in out["events"] if e["kind"] == "attempt" and e["error"])
    assert timed_out["explain"] == (
        "call 1, attempt 1: host 0, timeout after 200 ms; charge applied (the work was done; "
        "the client stopped waiting)"
    )
    repeat = [e for e in out["events"] if e["kind"] == "attempt" and e["call"] == 7]
    assert [e["data"]["effect"] for e in repeat] == ["applied", "duplicate"]
    assert repeat[1]["explain"].endswith("charge not applied again: key call-7 was seen before")


def test_keys_a_dependency_does_not_honour_change_nothing():
    script = load_scenario("idempotency_keys")
    script["dependency"]["honours_keys"] = False
    assert [b["effects"]["applied"] for b in _bursts(run(script))] == [9, 9]


# -- nothing configured: the tour's semantics, byte for byte -----------------------------------


def test_the_defaults_written_out_give_the_tours_very_events():
    tour = load_scenario("tour")
    explicit = copy.deepcopy(tour)
    explicit["dependency"].update(hosts=[], spread="round_robin", side_effect=None, b=None)
    explicit["policy"].update(
        breaker_scope="dependency", bulkhead=None, pool_wait_ms=None, fallback=None,
        idempotency_keys=False,
    )  # fmt: skip
    assert run(explicit)["events"] == run(tour)["events"]


@pytest.mark.parametrize("name", LESSONS)
def test_each_lesson_runs_the_same_on_redis_as_in_memory(name, redis_client, namespace):
    script = load_scenario(name)
    assert run(script, RedisStore(redis_client, f"{namespace}:{{s1}}")) == run(script)


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dependency", "expected"),
    [
        ({"hosts": [{}] * 9}, "dependency.hosts: must be [] (one host) or a list of 1 to 8 hosts (got 9)"),
        ({"hosts": [{"mode": "sideways"}]}, "dependency.hosts[0].mode: must be one of healthy, flaky, down, slow, error_rate, outage, rate_limited, script, shared, server (got 'sideways')"),
        ({"hosts": [{"latency_ms": 5000}]}, "dependency.hosts[0].latency_ms: must be between 0 and 2000 ms (got 5000)"),
        ({"hosts": [{"side_effect": "charge"}]}, "dependency.hosts[0].side_effect: unknown field (allowed: mode, latency_ms, fail_count, error, rate, down_for_ms, retry_after_ms, outcomes)"),
        ({"spread": "nearest"}, "dependency.spread: must be one of round_robin, random (got 'nearest')"),
        ({"side_effect": "refund"}, "dependency.side_effect: must be null (off) or one of charge (got 'refund')"),
        ({"honours_keys": "yes"}, "dependency.honours_keys: must be true or false (got 'yes')"),
        ({"fallbacks": ["stale"]}, "dependency.fallbacks: must be a list of distinct values, each one of cached, default"),
        ({"b_every": 0}, "dependency.b_every: must be between 1 and 20 (got 0)"),
        ({"b": {"latency_ms": -1}}, "dependency.b.latency_ms: must be between 0 and 2000 ms (got -1)"),
        ({"b": {"hosts": [{}, {}]}}, "dependency.b.hosts: must be [] (B is one host)"),
    ],
)  # fmt: skip
def test_bad_dependency_settings_name_the_field_and_range(dependency, expected):
    assert [str(p) for p in validate_dependency(dependency)] == [expected]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ({"bulkhead": 11}, "policy.bulkhead: must be null (off) or between 1 and 10 calls (got 11)"),
        ({"pool_wait_ms": 20000}, "policy.pool_wait_ms: must be null (off) or between 0 and 10000 ms (got 20000)"),
        ({"fallback_max_age_ms": 0}, "policy.fallback_max_age_ms: must be between 1 and 3600000 ms (got 0)"),
        ({"fallback": "stale"}, "policy.fallback: must be null (off) or one of cached, default (got 'stale')"),
        ({"idempotency_keys": 1}, "policy.idempotency_keys: must be true or false (got 1)"),
        ({"breaker_scope": "host"}, "policy.breaker_scope: one breaker per host needs the retries outside the breaker (nesting: retry outside): each attempt goes to one host and asks that host's breaker (got nesting: breaker outside)"),
    ],
)  # fmt: skip
def test_bad_policy_settings_name_the_field_and_range(policy, expected):
    assert [str(p) for p in validate_policy(policy)] == [expected]


def test_a_replay_spreads_over_the_hosts_and_says_their_state_starts_fresh():
    from labs.engine.replay import capture_start, replay

    script = load_scenario("idempotency_keys")
    start = capture_start(
        dependency=script["dependency"],
        policy=script["policy"],
        store_state=None,
        now_us=0,
        rng_seed="4:0",
        size=6,
        concurrency=1,
        first_call=1,
        burst=1,
    )
    again = replay(start)
    assert again.output["bursts"][0]["effects"] == {"applied": 9, "calls": 6}
    assert {e.data.get("host") for e in again.events if e.kind == "attempt"} == {0, 1}
    assert again.fidelity["exact"] is False
    assert again.fidelity["reasons"][-1].endswith("the replay starts them fresh")


def test_two_dependencies_without_a_bulkhead_still_record_the_wait_for_a_slot():
    script = load_scenario("bulkhead")
    script["policy"]["pool_wait_ms"] = None
    (burst,) = _bursts(run({**script, "steps": script["steps"][:1]}))
    # nobody gives up: the calls behind B's wait their turn, a second and more each
    assert burst["by_dependency"]["a"]["succeeded"] == 10 and burst["pool_timeout"] == 0
    assert burst["by_dependency"]["a"]["waited_ms"] > 5000
