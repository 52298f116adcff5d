"""Validation of settings and scenarios: one problem per bad field, nothing half-applied.

``validate_*`` return a list of :class:`Problem` (empty when valid); ``parse_*`` apply the
defaults and return typed configs, or raise :class:`ValidationError` carrying the problems.
The web forms, the admin and the CLI all go through these functions, so a message such as
``policy.max_attempts: must be between 1 and 5 (got 9)`` reads the same everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from labs.engine.config import (
    HOST_KEYS,
    LIMITS,
    MAX_HOSTS,
    BreakerConfig,
    DependencyConfig,
    Limit,
    Policy,
    RetryBudgetConfig,
    Scenario,
    Step,
)
from labs.engine.expect import validate_expect, validate_situation
from labs.engine.shared import SharedConfig, Trigger

__all__ = [
    "STEP_ACTIONS",
    "Problem",
    "ValidationError",
    "merge_settings",
    "parse_dependency",
    "parse_policy",
    "parse_scenario",
    "validate_dependency",
    "validate_policy",
    "validate_scenario",
    "validate_settings",
]

_DEPENDENCY_KEYS = tuple(k.split(".", 1)[1] for k in LIMITS if k.startswith("dependency."))
_BREAKER_KEYS = tuple(k.rsplit(".", 1)[1] for k in LIMITS if k.startswith("policy.breaker."))
_BUDGET_KEYS = tuple(k.rsplit(".", 1)[1] for k in LIMITS if k.startswith("policy.retry_budget."))
_POLICY_KEYS = (
    "max_attempts",
    "backoff_base_ms",
    "backoff_cap_ms",
    "jitter",
    "nesting",
    "breaker",
    "retry_budget",
    "deadline_ms",
    "attempt_timeout_ms",
    "retry_after",
    "breaker_scope",
    "bulkhead",
    "pool_wait_ms",
    "fallback",
    "fallback_max_age_ms",
    "idempotency_keys",
)
_SCENARIO_KEYS = (
    "name",
    "title",
    "description",
    "instructions",
    "seed",
    "dependency",
    "policy",
    "steps",
    "traffic",
)
_TRAFFIC_KEYS = ("rate", "duration_s", "arrivals")
#: A step's actions: a step has exactly one.
STEP_ACTIONS = ("burst", "wait_ms", "set_dependency", "set_policy")
#: What a burst step may carry beside its size. ``ask``, a lesson's question, is carried
#: unread: the classroom checks it (``labs.grading.validate_lesson``) and grades the answer.
_BURST_EXTRAS = ("concurrency", "expect", "ask", "situation")
_MAX_STEPS = 100
_MAX_TEXT = {"name": 100, "title": 200, "description": 2000, "instructions": 20000}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input: the field's path and what is allowed. ``label`` is
    the field in people's words where a page shows the problem as it is (``Calls per
    second`` for ``rate``); ``str()`` starts with it then, else with the path."""

    field: str
    message: str
    label: str = field(default="", compare=False)

    def __str__(self) -> str:
        name = self.label or self.field
        return f"{name}: {self.message}" if name else self.message


class ValidationError(ValueError):
    """Raised by the ``parse_*`` functions; ``.problems`` lists every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


def _words(value: Any) -> str:
    """A choice as people read it (``rolling ratio``), for messages that name another field's
    value; anything else as :func:`_shown` shows it."""
    return value.replace("_", " ") if isinstance(value, str) else _shown(value)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (dict, list)):
        return type(value).__name__
    return "null" if value is None else str(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check(path: str, value: Any, limit: Limit, problems: list[Problem]) -> None:
    """Append a problem if ``value`` does not fit ``limit``."""
    if value is None and limit.nullable:
        return
    if limit.type == "bool":
        if not isinstance(value, bool):
            problems.append(Problem(path, f"must be {limit.describe()} (got {_shown(value)})"))
        return
    if limit.type == "choice":
        if value not in limit.choices:
            problems.append(Problem(path, f"must be {limit.describe()} (got {_shown(value)})"))
        return
    ok_type = _is_int(value) if limit.type == "int" else _is_number(value)
    if not ok_type:
        what = "an integer" if limit.type == "int" else "a number"
        problems.append(Problem(path, f"must be {what} {limit.describe()} (got {_shown(value)})"))
        return
    assert limit.min is not None and limit.max is not None
    if not limit.min <= value <= limit.max:
        problems.append(Problem(path, f"must be {limit.describe()} (got {_shown(value)})"))


def _unknown(path: str, data: Mapping[str, Any], allowed: tuple[str, ...]) -> list[Problem]:
    prefix = f"{path}." if path else ""
    return [
        Problem(f"{prefix}{key}", f"unknown field (allowed: {', '.join(allowed)})")
        for key in data
        if key not in allowed
    ]


def _not_object(path: str, value: Any) -> list[Problem]:
    return [Problem(path, f"must be an object (got {_shown(value)})")]


_LIST_KEYS = ("outcomes", "hosts", "fallbacks", "b", "server")


def validate_dependency(d: Any, prefix: str = "dependency") -> list[Problem]:
    """Problems with a dependency dict; missing keys take their defaults."""
    if not isinstance(d, Mapping):
        return _not_object(prefix, d)
    problems = _unknown(prefix, d, _DEPENDENCY_KEYS)
    for key in _DEPENDENCY_KEYS:
        if key in d and key not in _LIST_KEYS:
            _check(f"{prefix}.{key}", d[key], LIMITS[f"dependency.{key}"], problems)
    problems += _outcomes_problems(d, prefix)
    problems += _hosts_problems(d, prefix)
    fallbacks = d.get("fallbacks", [])
    allowed = ", ".join(LIMITS["dependency.fallbacks"].choices)
    if (
        not isinstance(fallbacks, list)
        or len(set(fallbacks)) != len(fallbacks)
        or any(f not in LIMITS["dependency.fallbacks"].choices for f in fallbacks)
    ):
        problems.append(
            Problem(
                f"{prefix}.fallbacks", f"must be a list of distinct values, each one of {allowed}"
            )
        )
    b = d.get("b")
    if b is not None:
        if prefix.endswith(".b"):
            problems.append(Problem(f"{prefix}.b", "must be null: B has no second dependency"))
        elif not isinstance(b, Mapping):
            problems.append(
                Problem(
                    f"{prefix}.b",
                    f"must be null (one dependency) or a dependency object (got {_shown(b)})",
                )
            )
        else:
            problems += validate_dependency(b, f"{prefix}.b")
            if b.get("hosts"):
                problems.append(Problem(f"{prefix}.b.hosts", "must be [] (B is one host)"))
    return problems + _server_problems(d, prefix)


#: What a server with a queue (mode ``server``) is not: it is one pool of servers answering
#: one caller, so hosts, a B, a side effect and fallbacks belong to the other modes.
_NOT_WITH_SERVER = (
    ("hosts", "[] (one host)"),
    ("b", "null (no dependency B)"),
    ("side_effect", "null (none)"),
    ("fallbacks", "[] (none)"),
)


def _server_problems(d: Mapping[str, Any], prefix: str) -> list[Problem]:
    """Problems of mode ``server``: its settings (the shared model's ranges, under
    ``dependency.server``), and the parts of a dependency it cannot have."""
    problems: list[Problem] = []
    server = d.get("server")
    if server is not None:
        problems += validate_shared(server, f"{prefix}.server")
    if d.get("mode") != "server":
        return problems
    if prefix.endswith(".b"):
        problems.append(Problem(f"{prefix}.mode", "dependency B cannot be a server with a queue"))
    for key, allowed in _NOT_WITH_SERVER:
        if d.get(key):
            problems.append(
                Problem(f"{prefix}.{key}", f"must be {allowed} for a server with a queue")
            )
    return problems


def _outcomes_problems(d: Mapping[str, Any], prefix: str) -> list[Problem]:
    problems: list[Problem] = []
    outcomes = d.get("outcomes", [])
    limit = LIMITS["dependency.outcomes"]
    allowed = ", ".join(limit.choices)
    if not isinstance(outcomes, list) or len(outcomes) > 100:
        problems.append(Problem(f"{prefix}.outcomes", f"must be a list of up to 100 of: {allowed}"))
    else:
        for i, token in enumerate(outcomes):
            if token not in limit.choices:
                problems.append(
                    Problem(
                        f"{prefix}.outcomes[{i}]", f"must be one of {allowed} (got {_shown(token)})"
                    )
                )
        if d.get("mode") == "script" and not outcomes:
            problems.append(
                Problem(
                    f"{prefix}.outcomes",
                    f"script mode needs 1 to 100 outcomes, each one of {allowed}",
                )
            )
    return problems


_NOT_A_HOST = {"shared": "the shared dependency", "server": "a server with a queue"}


def _hosts_problems(d: Mapping[str, Any], prefix: str) -> list[Problem]:
    """Each host: an object of the fields a host may set (HOST_KEYS), checked merged over
    the dependency's own (``dependency.hosts[1].mode``)."""
    hosts = d.get("hosts", [])
    if not isinstance(hosts, list) or len(hosts) > MAX_HOSTS:
        return [
            Problem(
                f"{prefix}.hosts",
                f"must be [] (one host) or a list of 1 to {MAX_HOSTS} hosts (got "
                f"{len(hosts) if isinstance(hosts, list) else _shown(hosts)})",
            )
        ]
    problems: list[Problem] = []
    base = {k: d[k] for k in HOST_KEYS if k in d}
    for i, host in enumerate(hosts):
        path = f"{prefix}.hosts[{i}]"
        if not isinstance(host, Mapping):
            problems += _not_object(path, host)
            continue
        problems += _unknown(path, host, HOST_KEYS)
        merged = {**base, **{k: v for k, v in host.items() if k in HOST_KEYS}}
        if merged.get("mode") in _NOT_A_HOST:
            problems.append(
                Problem(f"{path}.mode", f"a host cannot be {_NOT_A_HOST[merged['mode']]}")
            )
            continue
        for p in validate_dependency(merged, path):
            if p.field.split(".")[-1].split("[")[0] in host or p.field == f"{path}.outcomes":
                problems.append(p)
    return problems


def _validate_breaker(breaker: Any, prefix: str, problems: list[Problem]) -> None:
    """Append the problems of a policy's ``breaker`` object: its fields, then the settings
    that do not go together."""
    if not isinstance(breaker, Mapping):
        problems += _not_object(prefix, breaker)
        return
    problems += _unknown(prefix, breaker, _BREAKER_KEYS)
    for key in _BREAKER_KEYS:
        if key in breaker:
            _check(f"{prefix}.{key}", breaker[key], LIMITS[f"policy.breaker.{key}"], problems)
    problems += _breaker_combinations(prefix, breaker, problems)


def validate_policy(d: Any, prefix: str = "policy") -> list[Problem]:
    """Problems with a policy dict (including ``breaker`` and ``retry_budget``)."""
    if not isinstance(d, Mapping):
        return _not_object(prefix, d)
    problems = _unknown(prefix, d, _POLICY_KEYS)
    for key in _POLICY_KEYS:
        if key in ("breaker", "retry_budget") or key not in d:
            continue
        _check(f"{prefix}.{key}", d[key], LIMITS[f"policy.{key}"], problems)
    base = d.get("backoff_base_ms", LIMITS["policy.backoff_base_ms"].default)
    cap = d.get("backoff_cap_ms", LIMITS["policy.backoff_cap_ms"].default)
    if _is_number(base) and _is_int(cap) and 0 <= cap <= 2000 and cap < base:
        problems.append(
            Problem(
                f"{prefix}.backoff_cap_ms",
                f"must be between the backoff base ({_shown(base)} ms) and 2000 ms (got {cap})",
            )
        )
    scope = d.get("breaker_scope", "dependency")
    nesting = d.get("nesting", LIMITS["policy.nesting"].default)
    if scope == "host" and nesting != "retry_outside":
        problems.append(
            Problem(
                f"{prefix}.breaker_scope",
                "one breaker per host needs the retries outside the breaker (nesting: retry "
                "outside): each attempt goes to one host and asks that host's breaker (got "
                f"nesting: {_words(nesting)})",
            )
        )
    _validate_breaker(d.get("breaker", {}), f"{prefix}.breaker", problems)
    budget = d.get("retry_budget")
    if budget is not None:
        if not isinstance(budget, Mapping):
            problems.append(
                Problem(
                    f"{prefix}.retry_budget",
                    f"must be null (off) or an object (got {_shown(budget)})",
                )
            )
        else:
            problems += _unknown(f"{prefix}.retry_budget", budget, _BUDGET_KEYS)
            for key in _BUDGET_KEYS:
                if key in budget:
                    _check(
                        f"{prefix}.retry_budget.{key}",
                        budget[key],
                        LIMITS[f"policy.retry_budget.{key}"],
                        problems,
                    )
    return problems


def _breaker_value(breaker: Mapping[str, Any], key: str) -> Any:
    return breaker.get(key, LIMITS[f"policy.breaker.{key}"].default)


def _breaker_combinations(
    path: str, breaker: Mapping[str, Any], found: list[Problem]
) -> list[Problem]:
    """Settings that are each in range but cannot work together, named both ways.

    Only checked once each field alone is valid (``found`` holds the problems so far)."""
    bad = {p.field for p in found}
    problems: list[Problem] = []

    def valid(*keys: str) -> bool:
        return not any(f"{path}.{k}" in bad for k in keys)

    kind = _breaker_value(breaker, "kind")
    window_calls = _breaker_value(breaker, "window_calls")
    min_calls = _breaker_value(breaker, "min_calls")
    if (
        kind == "rolling_ratio"
        and window_calls is not None
        and valid("window_calls", "min_calls")
        and min_calls > window_calls
    ):
        # resilience4j clamps minimumNumberOfCalls to the window size instead; refusing
        # keeps what the student typed and what runs the same thing.
        problems.append(
            Problem(
                f"{path}.min_calls",
                f"must be at most the count window ({window_calls} calls), "
                f"or the breaker can never open (got {min_calls})",
            )
        )
    cooldown = _breaker_value(breaker, "cooldown_ms")
    ceiling = _breaker_value(breaker, "cooldown_max_ms")
    multiplier = _breaker_value(breaker, "cooldown_multiplier")
    if ceiling is not None and valid("cooldown_ms", "cooldown_max_ms") and ceiling < cooldown:
        problems.append(
            Problem(
                f"{path}.cooldown_max_ms",
                f"must be at least the cooldown ({_shown(cooldown)} ms), the schedule's "
                f"first step (got {_shown(ceiling)})",
            )
        )
    if ceiling is None and valid("cooldown_multiplier") and multiplier != 1:
        problems.append(
            Problem(
                f"{path}.cooldown_multiplier",
                "a multiplier above 1 needs a cooldown ceiling (between 100 and "
                f"3600000 ms) to cap the cooldown (got {_shown(multiplier)})",
            )
        )
    calls = _breaker_value(breaker, "half_open_calls")
    decision = _breaker_value(breaker, "half_open_decision")
    if calls is None and decision == "ratio":
        problems.append(
            Problem(
                f"{path}.half_open_decision",
                "ratio needs the probes per half-open period (between 1 and 100), the probes "
                "whose failure ratio decides",
            )
        )
    successes = _breaker_value(breaker, "success_threshold")
    if (
        calls is not None
        and decision == "first_failure"
        and valid("half_open_calls", "success_threshold")
        and successes > calls
    ):
        problems.append(
            Problem(
                f"{path}.success_threshold",
                f"must be at most the probes per half-open period ({calls}), or the breaker "
                "can never "
                f"close (got {successes})",
            )
        )
    slow_ms = _breaker_value(breaker, "slow_call_ms")
    slow_ratio = _breaker_value(breaker, "slow_call_ratio")
    checked_on = _breaker_value(breaker, "ratio_checked_on")
    if slow_ms is not None and valid("slow_call_ms", "kind") and kind != "rolling_ratio":
        problems.append(
            Problem(
                f"{path}.slow_call_ms",
                "needs the breaker kind rolling ratio: the slow-call rate is a ratio over the "
                f"rolling window (got kind: {_words(kind)})",
            )
        )
    elif (
        slow_ms is not None
        and valid("slow_call_ms", "ratio_checked_on")
        and checked_on != "every_result"
    ):
        problems.append(
            Problem(
                f"{path}.slow_call_ms",
                "needs the ratio checked on every result: a slow success can open the "
                f"breaker (got {_words(checked_on)})",
            )
        )
    admission = _breaker_value(breaker, "admission")
    if admission == "strict" and valid("admission", "kind") and kind != "consecutive":
        problems.append(
            Problem(
                f"{path}.admission",
                "strict needs the breaker kind consecutive: it holds calls back by the failure "
                f"streak and the calls in flight (got kind: {_words(kind)})",
            )
        )
    interval = _breaker_value(breaker, "count_interval_ms")
    if interval is not None and valid("count_interval_ms", "kind") and kind != "consecutive":
        problems.append(
            Problem(
                f"{path}.count_interval_ms",
                "needs the breaker kind consecutive: a rolling window clears itself "
                f"(got kind: {_words(kind)})",
            )
        )
    if slow_ms is None and valid("slow_call_ratio") and slow_ratio != 1:
        problems.append(
            Problem(
                f"{path}.slow_call_ratio",
                "a slow-call rate below 1 needs a slow-call duration (between 1 and 600000 ms), "
                f"the duration above which a call is slow (got {_shown(slow_ratio)})",
            )
        )
    return problems


#: Policy settings that need the fake dependency's routes, and their off value.
_ROUTED_POLICY = (
    ("breaker_scope", "dependency"),
    ("bulkhead", None),
    ("pool_wait_ms", None),
    ("idempotency_keys", False),
)


def validate_settings(
    dependency: Mapping[str, Any],
    policy: Mapping[str, Any],
    dependency_prefix: str = "dependency",
    policy_prefix: str = "policy",
) -> list[Problem]:
    """Problems of a dependency and a policy that are each valid but do not fit together:
    a policy's fallback that the dependency (or its B) does not offer, named both ways; a
    per-host breaker, a pool or idempotency keys in front of a server with a queue (one host,
    no side effect: those belong to the fake dependency's modes)."""
    problems = []
    if dependency.get("mode") == "server":
        for key, off in _ROUTED_POLICY:
            value = policy.get(key)
            if value not in (None, False, off):
                problems.append(
                    Problem(
                        f"{policy_prefix}.{key}",
                        f"must be {off or 'off'} while the dependency is a server with a queue "
                        f"(got {_shown(value)})",
                    )
                )
    fallback = policy.get("fallback")
    if fallback is None:
        return problems
    for path, dep in (
        (dependency_prefix, dependency),
        (f"{dependency_prefix}.b", dependency.get("b")),
    ):
        if dep is None:
            continue
        offered = list(dep.get("fallbacks") or [])
        if fallback not in offered:
            problems.append(
                Problem(
                    f"{policy_prefix}.fallback",
                    f"{fallback} is not offered by "
                    f"{'dependency B' if path.endswith('.b') else 'the dependency'} (offered: "
                    f"{', '.join(offered) or 'none'})",
                )
            )
    return problems


def merge_settings(current: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` updated with ``changes``; nested objects (``breaker``, ``retry_budget``)
    merge one level deeper, and ``null`` replaces (so ``"retry_budget": null`` turns it off)."""
    merged = dict(current)
    for key, value in changes.items():
        old = merged.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            merged[key] = {**old, **value}
        else:
            merged[key] = value
    return merged


def validate_scenario(d: Any) -> list[Problem]:
    """Problems with a whole scenario script, including every step.

    ``set_dependency`` / ``set_policy`` steps are checked after merging into the settings
    in force at that step, so a step may change one field; problems are reported under the
    step's path (``steps[3].set_policy.max_attempts``).
    """
    if not isinstance(d, Mapping):
        return [Problem("scenario", f"must be a JSON object (got {_shown(d)})")]
    problems = _unknown("", d, _SCENARIO_KEYS)
    _validate_texts(d, problems)
    if "seed" in d:
        _check("seed", d["seed"], LIMITS["seed"], problems)
    dependency = d.get("dependency", {})
    policy = d.get("policy", {})
    dep_problems = validate_dependency(dependency)
    pol_problems = validate_policy(policy)
    problems += dep_problems + pol_problems
    if not dep_problems and not pol_problems:
        problems += validate_settings(dependency, policy)
    if "traffic" in d:
        problems += validate_traffic_defaults(d["traffic"])
    steps = d.get("steps")
    if not isinstance(steps, list) or not 1 <= len(steps) <= _MAX_STEPS:
        problems.append(
            Problem("steps", f"must be a list of 1 to {_MAX_STEPS} steps (got {_shown(steps)})")
        )
        return problems
    current_dep = dict(dependency) if not dep_problems else None
    current_pol = dict(policy) if not pol_problems else None
    for i, step in enumerate(steps):
        path = f"steps[{i}]"
        if not isinstance(step, Mapping):
            problems += _not_object(path, step)
            continue
        actions = [a for a in STEP_ACTIONS if a in step]
        if len(actions) != 1:
            got = ", ".join(actions) if actions else "none"
            problems.append(
                Problem(path, f"must have exactly one of {', '.join(STEP_ACTIONS)} (got {got})")
            )
            problems += _unknown(path, step, (*STEP_ACTIONS, *_BURST_EXTRAS))
            continue
        action = actions[0]
        allowed = ("burst", *_BURST_EXTRAS) if action == "burst" else (action,)
        problems += _unknown(path, step, allowed)
        if action == "burst":
            _validate_burst_step(path, step, problems)
        elif action == "wait_ms":
            _check(f"{path}.wait_ms", step["wait_ms"], LIMITS["steps[].wait_ms"], problems)
        elif action == "set_dependency":
            where = f"{path}.set_dependency"
            current_dep = _set_dependency(where, step[action], current_dep, current_pol, problems)
        else:
            where = f"{path}.set_policy"
            current_pol = _set_policy(where, step[action], current_dep, current_pol, problems)
    return problems


def _validate_texts(d: Mapping[str, Any], problems: list[Problem]) -> None:
    """Append the problems of a scenario's name, title, description and instructions."""
    name = d.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > _MAX_TEXT["name"]:
        problems.append(
            Problem(
                "name", f"must be a non-empty string of at most 100 characters (got {_shown(name)})"
            )
        )
    for key in ("title", "description", "instructions"):
        if key in d and (not isinstance(d[key], str) or len(d[key]) > _MAX_TEXT[key]):
            problems.append(
                Problem(key, f"must be a string of at most {_MAX_TEXT[key]} characters")
            )


def _validate_burst_step(path: str, step: Mapping[str, Any], problems: list[Problem]) -> None:
    """Append the problems of a burst step: its size, concurrency, expectations and
    situation (its question is the classroom's to check)."""
    if "expect" in step:
        problems += [Problem(f, m) for f, m in validate_expect(step["expect"], f"{path}.expect")]
    if "situation" in step:
        found = validate_situation(step["situation"], f"{path}.situation")
        problems += [Problem(f, m) for f, m in found]
    _check(f"{path}.burst", step["burst"], LIMITS["steps[].burst"], problems)
    if "concurrency" in step:
        limit = LIMITS["steps[].concurrency"]
        _check(f"{path}.concurrency", step["concurrency"], limit, problems)


def _set_dependency(
    where: str, changes: Any, dependency: dict | None, policy: dict | None, problems: list
) -> dict | None:
    """Check a ``set_dependency`` step merged into the dependency in force; return the
    dependency in force after it (None once the settings are invalid)."""
    if not isinstance(changes, Mapping):
        problems += _not_object(where, changes)
        return dependency
    if dependency is None:  # earlier settings are invalid: check the step alone
        problems += validate_dependency(changes, where)
        return None
    merged = merge_settings(dependency, changes)
    found = validate_dependency(merged, where)
    if not found and policy is not None and {"fallbacks", "b"} & set(changes):
        found = validate_settings(merged, policy, where, "policy")
    problems += found
    return merged if not found else None


def _set_policy(
    where: str, changes: Any, dependency: dict | None, policy: dict | None, problems: list
) -> dict | None:
    """Check a ``set_policy`` step merged into the policy in force; return the policy in
    force after it (None once the settings are invalid)."""
    if not isinstance(changes, Mapping):
        problems += _not_object(where, changes)
        return policy
    if policy is None:
        problems += validate_policy(changes, where)
        return None
    merged = merge_settings(policy, changes)
    found = validate_policy(merged, where)
    if not found and dependency is not None and "fallback" in changes:
        found = validate_settings(dependency, merged, "dependency", where)
    problems += found
    return merged if not found else None


def _raise_if(problems: list[Problem]) -> None:
    if problems:
        raise ValidationError(problems)


def parse_dependency(d: Mapping[str, Any]) -> DependencyConfig:
    """A :class:`DependencyConfig` from a dict, defaults applied. Raises ValidationError."""
    _raise_if(validate_dependency(d))
    values = dict(d)
    if "outcomes" in values:
        values["outcomes"] = tuple(values["outcomes"])
    if values.get("b") is not None:
        values["b"] = parse_dependency(values["b"])
    if values.get("server") is not None or values.get("mode") == "server":
        values["server"] = SharedConfig(**(values.get("server") or {})).to_dict()
    return DependencyConfig(**values)


def parse_breaker(d: Mapping[str, Any]) -> BreakerConfig:
    """A :class:`BreakerConfig` from a dict, defaults applied. Raises ValidationError."""
    _raise_if(validate_policy({"breaker": d}))
    return BreakerConfig(**d)


def parse_policy(d: Mapping[str, Any]) -> Policy:
    """A :class:`Policy` from a dict, defaults applied. Raises ValidationError."""
    _raise_if(validate_policy(d))
    values = dict(d)
    values["breaker"] = BreakerConfig(**values.get("breaker", {}))
    budget = values.get("retry_budget")
    values["retry_budget"] = None if budget is None else RetryBudgetConfig(**budget)
    return Policy(**values)


def parse_step(d: Mapping[str, Any]) -> Step:
    """A :class:`Step` from a (validated) step dict."""
    if "burst" in d:
        return Step(
            "burst",
            burst=d["burst"],
            concurrency=d.get("concurrency", 1),
            expect=dict(d["expect"]) if "expect" in d else None,
            ask=dict(d["ask"]) if "ask" in d else None,
            situation=dict(d["situation"]) if "situation" in d else None,
        )
    if "wait_ms" in d:
        return Step("wait", wait_ms=d["wait_ms"])
    if "set_dependency" in d:
        return Step("set_dependency", changes=dict(d["set_dependency"]))
    return Step("set_policy", changes=dict(d["set_policy"]))


def validate_traffic_defaults(d: Any, prefix: str = "traffic") -> list[Problem]:
    """Problems with a scenario's ``traffic`` object: the steady traffic its lesson asks for
    (``rate`` calls/s per session, ``duration_s``, ``arrivals``), which the lab page's and the
    storm panel's traffic forms offer as their defaults. Every key optional."""
    if not isinstance(d, Mapping):
        return _not_object(prefix, d)
    problems = _unknown(prefix, d, _TRAFFIC_KEYS)
    for key in _TRAFFIC_KEYS:
        if key in d:
            _check(f"{prefix}.{key}", d[key], LIMITS[f"traffic.{key}"], problems)
    return problems


def traffic_defaults(script: Any) -> dict[str, Any]:
    """The steady traffic a scenario script asks for (its ``traffic`` object over the
    ``traffic.*`` defaults of :data:`LIMITS`); the defaults alone for a script without one or
    with one that does not validate."""
    out = {key: LIMITS[f"traffic.{key}"].default for key in _TRAFFIC_KEYS}
    given = script.get("traffic") if isinstance(script, Mapping) else None
    if given is not None and not validate_traffic_defaults(given):
        out.update({k: given[k] for k in _TRAFFIC_KEYS if k in given})
    return out


def parse_scenario(d: Mapping[str, Any]) -> Scenario:
    """A :class:`Scenario` from a dict, defaults applied. Raises ValidationError."""
    _raise_if(validate_scenario(d))
    return Scenario(
        name=d["name"],
        title=d.get("title", ""),
        description=d.get("description", ""),
        seed=d.get("seed", 0),
        dependency=parse_dependency(d.get("dependency", {})),
        policy=parse_policy(d.get("policy", {})),
        steps=tuple(parse_step(s) for s in d["steps"]),
    )


# -- the shared dependency (labs/engine/shared.py) ------------------------------------------

_SHARED_KEYS = (
    "servers", "service_ms", "max_queue_ms", "rate_per_s", "rate_burst", "queue_limit",
    "concurrency_limit", "concurrency", "concurrency_max", "limit_latency_ms", "codel_target_ms",
    "codel_interval_ms", "discipline", "lifo_after_ms",
)  # fmt: skip
_TRIGGER_KEYS = ("kind", "duration_ms", "factor", "servers")


def validate_shared(d: Any, prefix: str = "shared") -> list[Problem]:
    """Problems with a shared-dependency dict (``servers``, ``service_ms``,
    ``max_queue_ms`` and the server's defences, :class:`~labs.engine.shared.SharedConfig`);
    missing keys take their defaults."""
    if not isinstance(d, Mapping):
        return _not_object(prefix, d)
    problems = _unknown(prefix, d, _SHARED_KEYS)
    for key in _SHARED_KEYS:
        if key in d:
            _check(f"{prefix}.{key}", d[key], LIMITS[f"shared.{key}"], problems)
    if problems:
        return problems
    discipline = d.get("discipline", "fifo")
    arrival_only = [
        words
        for key, words in (
            ("concurrency_limit", "a concurrency limit"),
            ("codel_target_ms", "CoDel"),
        )
        if d.get(key) is not None
    ]
    if discipline != "fifo" and arrival_only:
        problems.append(
            Problem(
                f"{prefix}.discipline",
                f"must be fifo (first come, first served) while {' and '.join(arrival_only)} "
                f"{'are' if len(arrival_only) > 1 else 'is'} on: "
                f"{'they decide' if len(arrival_only) > 1 else 'it decides'} on the wait an "
                f"attempt has at its arrival, which only a FIFO queue knows then "
                f"(got {discipline})",
            )
        )
    if problems or d.get("concurrency", "fixed") == "fixed":
        return problems
    start = d.get("concurrency_limit")
    high = d.get("concurrency_max", LIMITS["shared.concurrency_max"].default)
    if start is None:
        problems.append(
            Problem(
                f"{prefix}.concurrency_limit",
                f"is needed for an adaptive limit to start from: between 1 and {high} attempts",
            )
        )
    elif start > high:
        problems.append(
            Problem(
                f"{prefix}.concurrency_limit",
                f"must be between 1 and {high} attempts (at most the highest; got {start})",
            )
        )
    return problems


def parse_shared(d: Mapping[str, Any]) -> SharedConfig:
    """A :class:`~labs.engine.shared.SharedConfig` from a dict. Raises ValidationError."""
    _raise_if(validate_shared(d))
    return SharedConfig(**d)


def validate_trigger(d: Any, servers: int | None = None, prefix: str = "trigger") -> list[Problem]:
    """Problems with a trigger dict (``kind``, ``duration_ms``, ``factor`` for slow,
    ``servers`` for capacity). ``servers`` is the model's server count: a capacity drop must
    leave fewer (0 to servers - 1)."""
    if not isinstance(d, Mapping):
        return _not_object(prefix, d)
    problems = _unknown(prefix, d, _TRIGGER_KEYS)
    if "kind" not in d:
        problems.append(
            Problem(f"{prefix}.kind", f"is required: {LIMITS['shared.trigger.kind'].describe()}")
        )
    for key in _TRIGGER_KEYS:
        if key in d:
            _check(f"{prefix}.{key}", d[key], LIMITS[f"shared.trigger.{key}"], problems)
    kept = d.get("servers", LIMITS["shared.trigger.servers"].default)
    if (
        d.get("kind") == "capacity"
        and servers is not None
        and _is_int(kept)
        and not 0 <= kept < servers
    ):
        problems.append(
            Problem(
                f"{prefix}.servers",
                f"must be between 0 and {servers - 1} servers (fewer than the {servers} "
                f"the shared dependency has; got {kept})",
            )
        )
    return problems


def parse_trigger(d: Mapping[str, Any], servers: int | None = None) -> Trigger:
    """A :class:`~labs.engine.shared.Trigger` from a dict. Raises ValidationError."""
    _raise_if(validate_trigger(d, servers))
    values = {key: d[key] for key in _TRIGGER_KEYS if key in d}
    values.setdefault("duration_ms", LIMITS["shared.trigger.duration_ms"].default)
    values.setdefault("factor", LIMITS["shared.trigger.factor"].default)
    values.setdefault("servers", LIMITS["shared.trigger.servers"].default)
    return Trigger(**values)
