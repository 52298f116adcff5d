"""A student's own server with a queue (dependency mode ``server``): the shared model's
settings and defences on a private dependency, validated with the class's ranges and run in
virtual time by the scenario runner and the replay."""

from __future__ import annotations

from collections import Counter

from labs.engine import parse_dependency, validate_settings
from labs.engine.replay import fidelity, parse_start
from labs.engine.scenario import run_scenario
from labs.engine.validate import validate_dependency


def fields(problems) -> dict[str, str]:
    return {p.field: p.message for p in problems}


def test_a_server_dependency_takes_the_class_models_defaults_and_ranges():
    config = parse_dependency({"mode": "server"})
    assert config.server["servers"] == 8 and config.server["service_ms"] == 40
    assert config.server["discipline"] == "fifo" and config.server["rate_per_s"] is None
    assert config.to_dict()["server"] == config.server
    problems = fields(
        validate_dependency({"mode": "server", "server": {"service_ms": 0, "servers": 65}})
    )
    assert problems == {
        "dependency.server.service_ms": "must be between 1 and 2000 ms (got 0)",
        "dependency.server.servers": "must be between 1 and 64 servers (got 65)",
    }
    # the class model's own refusal, under the dependency's field
    lifo = validate_dependency(
        {"mode": "server", "server": {"discipline": "lifo", "codel_target_ms": 20}}
    )
    assert [p.field for p in lifo] == ["dependency.server.discipline"]
    assert "while CoDel is on" in lifo[0].message
    # kept, checked and unused while another mode is set (the student may come back to it)
    assert parse_dependency({"mode": "down", "server": {"servers": 2}}).server["servers"] == 2
    assert parse_dependency({"mode": "down"}).server is None


def test_a_server_has_no_hosts_b_side_effect_or_fallback_and_is_no_host_or_b():
    problems = fields(
        validate_dependency(
            {
                "mode": "server",
                "hosts": [{}, {"mode": "down"}],
                "b": {"mode": "healthy"},
                "side_effect": "charge",
                "fallbacks": ["cached"],
            }
        )
    )
    assert problems == {
        "dependency.hosts": "must be [] (one host) for a server with a queue",
        # the first host takes the dependency's own mode
        "dependency.hosts[0].mode": "a host cannot be a server with a queue",
        "dependency.b": "must be null (no dependency B) for a server with a queue",
        "dependency.side_effect": "must be null (none) for a server with a queue",
        "dependency.fallbacks": "must be [] (none) for a server with a queue",
    }
    assert fields(validate_dependency({"hosts": [{"mode": "server"}]})) == {
        "dependency.hosts[0].mode": "a host cannot be a server with a queue"
    }
    assert fields(validate_dependency({"b": {"mode": "server"}})) == {
        "dependency.b.mode": "dependency B cannot be a server with a queue"
    }


def test_a_policy_that_needs_the_fake_dependencys_routes_is_refused_in_front_of_a_server():
    server = {"mode": "server"}
    assert validate_settings(server, {"max_attempts": 3}) == []
    problems = fields(
        validate_settings(
            server, {"bulkhead": 2, "idempotency_keys": True, "breaker_scope": "host"}
        )
    )
    assert problems == {
        "policy.breaker_scope": "must be dependency while the dependency is a server with a "
        "queue (got 'host')",
        "policy.bulkhead": "must be off while the dependency is a server with a queue (got 2)",
        "policy.idempotency_keys": "must be off while the dependency is a server with a queue "
        "(got True)",
    }
    # the same policy is fine with the fake dependency
    assert validate_settings({"mode": "healthy"}, {"bulkhead": 2}) == []


def overloaded(discipline: str, **server) -> dict:
    """One server of 100 ms, ten callers at once, each call one attempt: ten times what the
    server takes, so most attempts wait past the longest wait of 300 ms."""
    return {
        "name": f"own server, {discipline}",
        "seed": 1,
        "dependency": {
            "mode": "server",
            "server": {
                "servers": 1,
                "service_ms": 100,
                "max_queue_ms": 300,
                "discipline": discipline,
                **server,
            },
        },
        "policy": {"max_attempts": 1, "breaker": {"failure_threshold": 20}},
        "steps": [{"burst": 20, "concurrency": 10}],
    }


def outcomes(scenario: dict) -> Counter:
    out = run_scenario(scenario)
    return Counter(c["error"] or "ok" for c in out["calls"])


def test_newest_first_serves_more_calls_in_time_than_first_come_first_served():
    """At ten times the server's rate, FIFO knows each arrival's wait: the four that fit in
    300 ms are served and every later arrival is shed at once (its caller's next call meets
    the same full queue). LIFO queues them all and a freed server takes the newest, which its
    caller sent the moment its previous call was answered: twelve are served."""
    fifo_out, lifo_out = outcomes(overloaded("fifo")), outcomes(overloaded("lifo"))
    assert fifo_out == Counter({"ok": 4, "503": 16})
    assert lifo_out == Counter({"ok": 12, "503": 8})
    assert outcomes(overloaded("adaptive_lifo", lifo_after_ms=50)) == lifo_out


def test_the_servers_rate_limit_answers_429_with_a_retry_after_the_policy_can_honour():
    scenario = overloaded("fifo", rate_per_s=5, rate_burst=2, servers=4)
    scenario["policy"] = {"max_attempts": 3, "backoff_base_ms": 10, "retry_after": "capped"}
    scenario["steps"] = [{"burst": 6, "concurrency": 1}]
    out = run_scenario(scenario)
    retried = [c for c in out["calls"] if c["attempts"] > 1]
    # a token every 200 ms, a bucket of 2: from the fourth call on, each first attempt meets
    # a 429 whose Retry-After (the 100 ms until the next token) the policy waits, then gets in
    assert [c["call"] for c in retried] == [4, 5, 6]
    assert [c["backoff_ms"] for c in retried] == [100.0, 100.0, 100.0]
    assert all(c["outcome"] == "success" for c in out["calls"])


def test_a_replay_of_a_burst_on_the_students_own_server_says_what_may_differ():
    start = parse_start(
        {
            "version": 1,
            "dependency": parse_dependency({"mode": "server"}).to_dict(),
            "policy": {},
            "store": {},
            "size": 3,
            "concurrency": 1,
            "first_call": 1,
            "burst": 1,
            "now_us": 0,
            "rng_seed": "0:1",
            "probe_lease_ms": 1000,
        }
    )
    said = fidelity(start)
    assert not said["exact"]
    assert any("your server's queue starts empty" in r for r in said["reasons"])
