"""Validation: one problem per bad field, naming the field and the allowed range."""

from __future__ import annotations

import json

import pytest

from labs.engine import (
    LIMITS,
    BreakerConfig,
    DependencyConfig,
    Policy,
    ValidationError,
    parse_dependency,
    parse_policy,
    parse_scenario,
    validate_scenario,
)
from labs.engine.config import RetryBudgetConfig, default_dependency, default_policy
from labs.engine.validate import validate_dependency, validate_policy

from .helpers import SCENARIOS, load_scenario


def messages(problems):
    return [str(p) for p in problems]


def test_problem_names_field_and_range():
    assert messages(validate_policy({"max_attempts": 9})) == [
        "policy.max_attempts: must be between 1 and 5 (got 9)"
    ]


def test_defaults_are_the_documented_defaults():
    dep, pol = parse_dependency({}), parse_policy({})
    assert (dep.latency_ms, dep.fail_count) == (5, 3)
    assert (pol.max_attempts, pol.backoff_base_ms, pol.backoff_cap_ms, pol.jitter) == (
        4,
        25,
        500,
        "none",
    )
    assert pol.nesting == "breaker_outside"
    b = pol.breaker
    assert (
        b.kind,
        b.failure_threshold,
        b.cooldown_ms,
        b.half_open_max_probes,
        b.success_threshold,
    ) == (
        "consecutive",
        3,
        2000,
        1,
        1,
    )
    assert pol.retry_budget is None and pol.deadline_ms is None


def test_dataclass_defaults_match_the_limits_table():
    for cls, prefix in [
        (DependencyConfig, "dependency."),
        (Policy, "policy."),
        (BreakerConfig, "policy.breaker."),
        (RetryBudgetConfig, "policy.retry_budget."),
    ]:
        instance = cls()
        for path, limit in LIMITS.items():
            name = path[len(prefix) :]
            if path.startswith(prefix) and "." not in name and name != "outcomes":
                assert getattr(instance, name) == limit.default, path


def test_canonical_dicts_round_trip():
    assert parse_dependency(default_dependency()).to_dict() == default_dependency()
    assert parse_policy(default_policy()).to_dict() == default_policy()
    policy = {
        "retry_budget": {"token_ratio": 0.5, "max_tokens": 4},
        "deadline_ms": 300,
        "breaker": {"kind": "rolling_ratio", "window_calls": 20},
    }
    canonical = parse_policy(policy).to_dict()
    assert parse_policy(canonical).to_dict() == canonical
    dep = parse_dependency({"mode": "script", "outcomes": ["fail", "429", "ok"]}).to_dict()
    assert parse_dependency(dep).to_dict() == dep
    scenario = parse_scenario(load_scenario("tour")).to_dict()
    assert parse_scenario(scenario).to_dict() == scenario


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"mode": "sideways"},
            "dependency.mode: must be one of healthy, flaky, down, slow, error_rate, outage, rate_limited, script, shared, server (got 'sideways')",
        ),
        ({"latency_ms": 2001}, "dependency.latency_ms: must be between 0 and 2000 ms (got 2001)"),
        (
            {"latency_ms": "5"},
            "dependency.latency_ms: must be an integer between 0 and 2000 ms (got '5')",
        ),
        (
            {"fail_count": True},
            "dependency.fail_count: must be an integer between 1 and 100 (got True)",
        ),
        ({"rate": 1.5}, "dependency.rate: must be between 0 and 1 (got 1.5)"),
        (
            {"error": "418"},
            "dependency.error: must be one of 503, 500, timeout, 429, 400 (got '418')",
        ),
        (
            {"colour": "red"},
            "dependency.colour: unknown field (allowed: mode, latency_ms, fail_count, error, rate, down_for_ms, retry_after_ms, outcomes, hosts, spread, side_effect, honours_keys, fallbacks, b, b_every, server)",
        ),
        (
            {"mode": "script"},
            "dependency.outcomes: script mode needs 1 to 100 outcomes, each one of ok, fail, 503, 500, timeout, 429, 400",
        ),
        (
            {"mode": "script", "outcomes": ["ok", "meh"]},
            "dependency.outcomes[1]: must be one of ok, fail, 503, 500, timeout, 429, 400 (got 'meh')",
        ),
    ],
)
def test_dependency_problems(data, expected):
    assert messages(validate_dependency(data)) == [expected]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"backoff_base_ms": 100, "backoff_cap_ms": 50},
            "policy.backoff_cap_ms: must be between the backoff base (100 ms) and 2000 ms (got 50)",
        ),
        (
            {"jitter": "wild"},
            "policy.jitter: must be one of none, full, equal, decorrelated, proportional (got 'wild')",
        ),
        (
            {"nesting": "inside_out"},
            "policy.nesting: must be one of breaker_outside, retry_outside (got 'inside_out')",
        ),
        (
            {"deadline_ms": -1},
            "policy.deadline_ms: must be null (off) or between 0 and 10000 ms (got -1)",
        ),
        (
            {"breaker": {"cooldown_ms": 50}},
            "policy.breaker.cooldown_ms: must be between 100 and 60000 ms (got 50)",
        ),
        (
            {"breaker": {"half_open_max_probes": 6}},
            "policy.breaker.half_open_max_probes: must be between 1 and 5 (got 6)",
        ),
        (
            {"breaker": {"failure_ratio": 2}},
            "policy.breaker.failure_ratio: must be between 0 and 1 (got 2)",
        ),
        (
            {"breaker": {"kind": "vibes"}},
            "policy.breaker.kind: must be one of consecutive, rolling_ratio (got 'vibes')",
        ),
        (
            {"retry_budget": {"token_ratio": 0.1, "max_tokens": 0}},
            "policy.retry_budget.max_tokens: must be between 1 and 100 (got 0)",
        ),
        ({"retry_budget": 3}, "policy.retry_budget: must be null (off) or an object (got 3)"),
        ({"breaker": []}, "policy.breaker: must be an object (got list)"),
    ],
)
def test_policy_problems(data, expected):
    assert messages(validate_policy(data)) == [expected]


def test_every_problem_is_reported_not_just_the_first():
    problems = validate_policy(
        {"max_attempts": 0, "jitter": "x", "breaker": {"failure_threshold": 99}}
    )
    assert [p.field for p in problems] == [
        "policy.max_attempts",
        "policy.jitter",
        "policy.breaker.failure_threshold",
    ]


def test_parse_raises_validation_error_with_problems():
    with pytest.raises(ValidationError) as info:
        parse_policy({"max_attempts": 6, "backoff_cap_ms": 3000})
    assert isinstance(info.value, ValueError)
    assert [p.field for p in info.value.problems] == [
        "policy.max_attempts",
        "policy.backoff_cap_ms",
    ]


def test_scenario_steps_are_checked_after_merging_into_current_settings():
    scenario = {
        "name": "s",
        "policy": {"backoff_base_ms": 100, "backoff_cap_ms": 200},
        "steps": [
            {"set_policy": {"backoff_cap_ms": 50}},
            {"set_dependency": {"latency_ms": 9999}},
            {"burst": 21, "concurrency": 11},
            {"wait_ms": 5, "burst": 1},
            {"jump": 1},
            "burst",
        ],
    }
    assert messages(validate_scenario(scenario)) == [
        "steps[0].set_policy.backoff_cap_ms: must be between the backoff base (100 ms) and 2000 ms (got 50)",
        "steps[1].set_dependency.latency_ms: must be between 0 and 2000 ms (got 9999)",
        "steps[2].burst: must be between 1 and 20 calls (got 21)",
        "steps[2].concurrency: must be between 1 and 10 callers (got 11)",
        "steps[3]: must have exactly one of burst, wait_ms, set_dependency, set_policy (got burst, wait_ms)",
        "steps[4]: must have exactly one of burst, wait_ms, set_dependency, set_policy (got none)",
        "steps[4].jump: unknown field (allowed: burst, wait_ms, set_dependency, set_policy, concurrency, expect, ask, situation)",
        "steps[5]: must be an object (got 'burst')",
    ]


def test_scenario_top_level_problems():
    assert messages(validate_scenario([])) == ["scenario: must be a JSON object (got list)"]
    assert messages(validate_scenario({"steps": [], "extra": 1})) == [
        "extra: unknown field (allowed: name, title, description, instructions, seed, "
        "dependency, policy, steps, traffic)",
        "name: must be a non-empty string of at most 100 characters (got null)",
        "steps: must be a list of 1 to 100 steps (got list)",
    ]


def test_a_scenario_s_traffic_is_checked_field_by_field_and_gives_the_forms_defaults():
    from labs.engine.validate import traffic_defaults

    base = {"name": "t", "steps": [{"burst": 1}]}
    assert validate_scenario({**base, "traffic": {"rate": 5, "duration_s": 300}}) == []
    assert messages(
        validate_scenario({**base, "traffic": {"rate": 50, "arrivals": "burst", "x": 1}})
    ) == [
        "traffic.x: unknown field (allowed: rate, duration_s, arrivals)",
        "traffic.rate: must be between 1 and 20 calls/s (got 50)",
        "traffic.arrivals: must be one of poisson, even (got 'burst')",
    ]
    assert traffic_defaults({"traffic": {"rate": 5, "duration_s": 300}}) == {
        "rate": 5, "duration_s": 300, "arrivals": "poisson",
    }  # fmt: skip
    # No traffic object, or one that does not validate: the table's defaults.
    assert traffic_defaults({}) == {"rate": 5, "duration_s": 60, "arrivals": "poisson"}
    assert traffic_defaults({"traffic": {"rate": 99}})["rate"] == 5
    assert traffic_defaults(load_scenario("storm_lesson"))["duration_s"] == 300


def test_a_step_may_turn_the_retry_budget_off_with_null():
    scenario = {
        "name": "b",
        "policy": {"retry_budget": {"token_ratio": 0.1, "max_tokens": 5}},
        "steps": [{"set_policy": {"retry_budget": None}}, {"burst": 1}],
    }
    assert validate_scenario(scenario) == []


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.json")), ids=lambda p: p.stem)
def test_every_shipped_scenario_validates_and_has_a_title(path):
    data = json.loads(path.read_text())
    assert validate_scenario(data) == []
    assert data["name"] == path.stem
    if path.stem != "tour":  # the tour is the documented example, verbatim
        assert data.get("title")
        assert 0 < len(data.get("description", "")) <= 300


def test_required_scenarios_are_shipped():
    names = {p.stem for p in SCENARIOS.glob("*.json")}
    assert {
        "tour",
        "success_threshold",
        "rolling_ratio",
        "retry_budget",
        "deadline",
        "rate_limited_retry_after",
    } <= names


def test_a_count_window_smaller_than_min_calls_is_refused_naming_both_fields():
    """Such a breaker could never open: the window never holds min_calls results."""
    problems = validate_policy(
        {"breaker": {"kind": "rolling_ratio", "window_calls": 3, "min_calls": 5}}
    )
    assert messages(problems) == [
        "policy.breaker.min_calls: must be at most the count window (3 calls), "
        "or the breaker can never open (got 5)"
    ]
    assert (
        validate_policy({"breaker": {"kind": "rolling_ratio", "window_calls": 5, "min_calls": 5}})
        == []
    )


def test_a_wait_step_may_step_past_an_hour_long_cooldown_but_no_further():
    base = {"name": "w", "steps": [{"wait_ms": 3_600_000}]}
    assert validate_scenario(base) == []
    base["steps"] = [{"wait_ms": 3_600_001}]
    assert messages(validate_scenario(base)) == [
        "steps[0].wait_ms: must be between 0 and 3600000 ms (got 3600001)"
    ]


@pytest.mark.parametrize(
    ("breaker", "expected"),
    [
        (
            {"cooldown_ms": 2000, "cooldown_max_ms": 1000},
            "policy.breaker.cooldown_max_ms: must be at least the cooldown "
            "(2000 ms), the schedule's first step (got 1000)",
        ),
        (
            {"cooldown_multiplier": 2},
            "policy.breaker.cooldown_multiplier: a multiplier above 1 needs "
            "a cooldown ceiling (between 100 and 3600000 ms) to cap the cooldown "
            "(got 2)",
        ),
        (
            {"half_open_decision": "ratio"},
            "policy.breaker.half_open_decision: ratio needs the probes per half-open period "
            "(between 1 and 100), the probes whose failure ratio decides",
        ),
        (
            {"half_open_calls": 2, "success_threshold": 3},
            "policy.breaker.success_threshold: must be at most the probes per half-open period "
            "(2), or the breaker can never close (got 3)",
        ),
        (
            {"cooldown_edge": "sometimes"},
            "policy.breaker.cooldown_edge: must be one of inclusive, strict (got 'sometimes')",
        ),
        (
            {"cooldown_multiplier": 11, "cooldown_max_ms": 5000},
            "policy.breaker.cooldown_multiplier: must be between 1 and 10 (got 11)",
        ),
        (
            {"slow_call_ms": 500},
            "policy.breaker.slow_call_ms: needs the breaker kind rolling ratio: the "
            "slow-call rate is a ratio over the rolling window (got kind: consecutive)",
        ),
        (
            {"kind": "rolling_ratio", "slow_call_ms": 500, "ratio_checked_on": "failure"},
            "policy.breaker.slow_call_ms: needs the ratio checked on every result: "
            "a slow success can open the breaker (got failure)",
        ),
        (
            {"kind": "rolling_ratio", "slow_call_ratio": 0.5},
            "policy.breaker.slow_call_ratio: a slow-call rate below 1 needs "
            "a slow-call duration (between 1 and 600000 ms), the duration above which "
            "a call is slow (got 0.5)",
        ),
        (
            {"kind": "rolling_ratio", "slow_call_ms": 0, "slow_call_ratio": 0.5},
            "policy.breaker.slow_call_ms: must be null (off) or between 1 and 600000 ms (got 0)",
        ),
        (
            {"kind": "rolling_ratio", "slow_call_ms": 500, "slow_call_ratio": 1.5},
            "policy.breaker.slow_call_ratio: must be between 0 and 1 (got 1.5)",
        ),
        (
            {"kind": "rolling_ratio", "count_interval_ms": 30000},
            "policy.breaker.count_interval_ms: needs the breaker kind consecutive: a rolling "
            "window clears itself (got kind: rolling ratio)",
        ),
        (
            {"count_interval_ms": 50},
            "policy.breaker.count_interval_ms: must be null (off) or between 100 and 3600000 ms "
            "(got 50)",
        ),
        (
            {"kind": "rolling_ratio", "admission": "strict"},
            "policy.breaker.admission: strict needs the breaker kind consecutive: it holds "
            "calls back by the failure streak and the calls in flight (got kind: rolling ratio)",
        ),
        (
            {"admission": "eventually"},
            "policy.breaker.admission: must be one of two_step, strict (got 'eventually')",
        ),
        (
            {"counts": "hystrix"},
            "policy.breaker.counts: must be one of engine, gobreaker (got 'hystrix')",
        ),
    ],
)
def test_peer_options_are_checked_alone_and_together(breaker, expected):
    assert messages(validate_policy({"breaker": breaker})) == [expected]


def test_peer_budget_fields_are_checked():
    assert messages(validate_policy({"retry_budget": {"kind": "finagle", "ttl_ms": 500}})) == [
        "policy.retry_budget.ttl_ms: must be between 1000 and 60000 ms (got 500)"
    ]
    assert (
        validate_policy(
            {"retry_after": "pushback", "retry_budget": {"kind": "grpc", "max_tokens": 10}}
        )
        == []
    )


def test_a_rolling_breaker_with_slow_calls_is_valid_and_parses():
    breaker = {"kind": "rolling_ratio", "slow_call_ms": 4000, "slow_call_ratio": 0.5}
    assert validate_policy({"breaker": breaker}) == []
    parsed = parse_policy({"breaker": breaker}).breaker
    assert (parsed.slow_call_ms, parsed.slow_call_ratio) == (4000, 0.5)
