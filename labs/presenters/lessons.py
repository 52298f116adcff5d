"""A lesson's scenario in words: its steps, settings, checks and questions."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from labs.engine import state_label as engine_state_label
from labs.engine.breaker import STATES
from labs.grading import CLASS_MEASURES, RECOVERY_ANSWERS
from labs.presenters.server import CHOICE_WORDS, SERVER_LABELS

# --- scenario steps --------------------------------------------------------------------------


#: The modes as the dependency card names them.
MODE_WORDS = {
    "healthy": "healthy",
    "flaky": "flaky",
    "down": "down",
    "slow": "slow",
    "error_rate": "error rate",
    "outage": "outage",
    "rate_limited": "rate limited",
    "script": "script",
    "shared": "the class's shared dependency",
    "server": "your own server with a queue",
}


def _ms_words(value: Any) -> str:
    """Milliseconds as people read a duration: ``400 ms``, ``3 s``, ``1.5 s``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return str(value)
    if value >= 1000 and value % 100 == 0:
        return f"{value / 1000:g} s"
    return f"{value:g} ms"


def _percent(value: Any) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return str(value)
    return f"{value * 100:g} %"


def _on_off(value: Any) -> str:
    return "on" if value is True else "off" if value in (False, None) else str(value)


def _saved(value: Any) -> str:
    return f"{value} retry" if value == 1 else f"{value} retries"


def _off_or(value: Any, shown) -> str:
    return "off" if value is None else shown(value)


_FALLBACK_WORDS = {"cached": "the cached answer", "default": "a default answer"}


def _choice(value: Any) -> str:
    return "off" if value is None else str(value).replace("_", " ")


def _outcomes_words(outcomes: Any) -> str:
    """A script's outcomes with runs counted: ``ok 4 times, fail 6 times, then healthy``."""
    if not isinstance(outcomes, list):
        return str(outcomes)
    runs: list[list[Any]] = []
    for token in outcomes:
        if runs and runs[-1][0] == token:
            runs[-1][1] += 1
        else:
            runs.append([token, 1])
    text = ", ".join(f"{t} {n} times" if n > 1 else str(t) for t, n in runs)
    return f"{text}, then healthy"


def _hosts_words(hosts: Any) -> str:
    if not isinstance(hosts, list):
        return str(hosts)
    if not hosts:
        return "one host"
    words = []
    for host in hosts:
        host = host if isinstance(host, dict) else {}
        word = MODE_WORDS.get(host.get("mode"), "as the dependency")
        if "latency_ms" in host:
            word += f" ({_ms_words(host['latency_ms'])})"
        words.append(word)
    return ", ".join(words)


# (label, how the value reads), per JSON key: the lab page's field labels, in sentences.
_DEPENDENCY_WORDS: dict[str, tuple[str, Any]] = {
    "latency_ms": ("Latency per attempt", _ms_words),
    "fail_count": ("Flaky: fails the next {} attempts", str),
    "error": ("Failure kind", str),
    "rate": ("Error rate: {} of attempts fail", _percent),
    "down_for_ms": ("Outage: down for {}", _ms_words),
    "retry_after_ms": ("Rate limited: 429s for {}", _ms_words),
    "outcomes": ("Script: {}", _outcomes_words),
    "hosts": ("Hosts", _hosts_words),
    "spread": ("Hosts: spread", _choice),
    "side_effect": ("Side effect per processed attempt", _choice),
    "honours_keys": ("Honours idempotency keys", lambda v: "yes" if v is True else "no"),
    "fallbacks": ("Fallbacks it offers", lambda v: ", ".join(map(str, v)) if v else "none"),
    "b_every": ("Dependency B takes every n-th call", str),
}
_SERVER_SHOWN: dict[str, Any] = {
    "servers": str,
    "service_ms": _ms_words,
    "max_queue_ms": _ms_words,
    "discipline": lambda v: CHOICE_WORDS.get(v, _choice(v)),
    "lifo_after_ms": _ms_words,
    "rate_per_s": lambda v: _off_or(v, lambda x: f"{x:g} attempts/s"),
    "queue_limit": lambda v: _off_or(v, lambda x: f"{x} attempts"),
    "concurrency_limit": lambda v: _off_or(v, lambda x: f"{x} attempts"),
    "codel_target_ms": lambda v: _off_or(v, _ms_words),
}
_SERVER_WORDS: dict[str, tuple[str, Any]] = {
    key: (label, _SERVER_SHOWN[key]) for key, label in SERVER_LABELS.items()
}
_POLICY_WORDS: dict[str, tuple[str, Any]] = {
    "max_attempts": ("Max attempts per call", str),
    "backoff_base_ms": ("Backoff base", _ms_words),
    "backoff_cap_ms": ("Backoff cap", _ms_words),
    "jitter": ("Jitter", _choice),
    "nesting": ("Nesting", _choice),
    "deadline_ms": ("Per-call deadline", lambda v: _off_or(v, _ms_words)),
    "attempt_timeout_ms": ("Attempt timeout", lambda v: _off_or(v, _ms_words)),
    "retry_after": ("Retry-After handling", _choice),
    "breaker_scope": ("One breaker per", _choice),
    "bulkhead": ("Bulkhead", lambda v: "off" if v is None else f"{v} in flight per dependency"),
    "pool_wait_ms": ("Pool: longest wait for a slot", lambda v: _off_or(v, _ms_words)),
    "fallback": ("Fallback", lambda v: _FALLBACK_WORDS.get(v, _choice(v))),
    "fallback_max_age_ms": ("Fallback: cached answer's max age", _ms_words),
    "idempotency_keys": ("Idempotency keys", _on_off),
}
_BREAKER_WORDS: dict[str, tuple[str, Any]] = {
    "kind": ("Breaker kind", _choice),
    "failure_threshold": ("Failure threshold: {} failed calls in a row", str),
    "cooldown_ms": ("Cooldown", _ms_words),
    "cooldown_jitter_pct": ("Cooldown jitter", lambda v: f"{v} %"),
    "half_open_max_probes": ("Half-open probes", str),
    "success_threshold": ("Successes to close", str),
    "failure_ratio": ("Rolling: failure ratio", _percent),
    "min_calls": ("Rolling: minimum calls", str),
    "window_ms": ("Rolling: time window", _ms_words),
    "buckets": ("Rolling: buckets", str),
    "window_calls": ("Rolling: count window", lambda v: "off" if v is None else f"{v} calls"),
    "cooldown_edge": ("Cooldown edge", _choice),
    "cooldown_multiplier": ("Cooldown multiplier", str),
    "cooldown_max_ms": ("Cooldown ceiling", lambda v: "off" if v is None else _ms_words(v)),
    "ratio_checked_on": ("Rolling: ratio checked on", _choice),
    "half_open_calls": ("Half-open: probes per period", lambda v: "off" if v is None else str(v)),
    "half_open_decision": ("Half-open: decided by", _choice),
    "slow_call_ms": ("Rolling: slow call above", lambda v: "off" if v is None else _ms_words(v)),
    "slow_call_ratio": ("Rolling: slow-call ratio", _percent),
    "admission": ("Admission", _choice),
    "counts": ("Counts kept", _choice),
    "count_interval_ms": ("Counts clear every", lambda v: "off" if v is None else _ms_words(v)),
}
_BUDGET_WORDS: dict[str, tuple[str, Any]] = {
    "kind": ("Retry budget: kind", _choice),
    "token_ratio": ("Retry budget: retries up to {} of calls", _percent),
    "max_tokens": ("Retry budget: at most {} saved", _saved),
    "ttl_ms": ("Finagle: deposit lifetime", _ms_words),
    "min_retries_per_sec": ("Finagle: minimum retries per second", str),
    "percent_can_retry": ("Finagle: retries per request", str),
}


def _phrase(words: dict[str, tuple[str, Any]], key: str, value: Any) -> str:
    """``Label: value`` in the lab page's words (a label with ``{}`` takes the value in its
    place: ``Rate limited: 429s for 1.5 s``); an unknown key reads as its words."""
    label, shown = words.get(key, (key.replace("_", " ").capitalize(), _choice))
    return label.format(shown(value)) if "{}" in label else f"{label}: {shown(value)}"


def setting_phrases(kind: str, changes: dict[str, Any]) -> list[str]:
    """What a ``set_dependency`` (``kind`` "dependency") or ``set_policy`` step changes, one
    ``Label: value`` per field in the words of the lab page's forms (``Retry budget: retries
    up to 10 % of calls``, ``Idempotency keys: on``), never the JSON names."""
    parts: list[str] = []
    for key, value in changes.items():
        if kind == "dependency":
            if key == "mode":
                continue
            if key == "b":
                if value is None:
                    parts.append("Dependency B: none")
                elif isinstance(value, dict):
                    b = [f"mode {MODE_WORDS.get(value.get('mode'), _choice(value.get('mode')))}"]
                    b += [
                        _phrase(_DEPENDENCY_WORDS, k, v).lower()
                        for k, v in value.items()
                        if k != "mode"
                    ]
                    parts.append("Dependency B: " + ", ".join(b))
                continue
            if key == "server" and isinstance(value, dict):
                parts += [_phrase(_SERVER_WORDS, k, v) for k, v in value.items()]
                continue
            parts.append(_phrase(_DEPENDENCY_WORDS, key, value))
        elif key == "breaker" and isinstance(value, dict):
            parts += [_phrase(_BREAKER_WORDS, k, v) for k, v in value.items()]
        elif key == "retry_budget":
            if not isinstance(value, dict):
                parts.append("Retry budget: off")
            else:
                parts += [_phrase(_BUDGET_WORDS, k, v) for k, v in value.items()]
        else:
            parts.append(_phrase(_POLICY_WORDS, key, value))
    return parts


def step_sentence(step: dict[str, Any]) -> str:
    """A scenario step as an instruction in the lab page's words (``Run a burst of 6
    calls.``, ``Change the policy. Idempotency keys: on.``)."""
    if not isinstance(step, dict):
        return str(step)
    if "burst" in step:
        size = step.get("burst")
        concurrency = step.get("concurrency", 1)
        callers = f" with {concurrency} concurrent callers" if concurrency not in (1, None) else ""
        text = f"Run a burst of {size} call{'s' if size != 1 else ''}{callers}"
        ask = step.get("ask")
        if isinstance(ask, dict) and ask.get("measure") in CLASS_MEASURES:
            return f"{text}: it fixes your answer before the instructor's trigger."
        return f"{text}."
    if "wait_ms" in step:
        ms = step.get("wait_ms") or 0
        return f"Wait {ms / 1000:g} s (start the timer; run the next step once it has run out)."
    if "set_dependency" in step:
        changes = step.get("set_dependency") or {}
        mode = changes.get("mode")
        parts = setting_phrases("dependency", changes)
        if mode:
            word = MODE_WORDS.get(mode, _choice(mode))
            own = f"{word.capitalize()}: "  # the mode's own parameter reads after the mode
            parts = [p.removeprefix(own) for p in parts]
            return f"Set the dependency to {word}{': ' + '; '.join(parts) if parts else ''}."
        return f"Change the dependency. {'; '.join(parts)}." if parts else "Change the dependency."
    if "set_policy" in step:
        parts = setting_phrases("policy", step.get("set_policy") or {})
        return f"Change the policy. {'; '.join(parts)}." if parts else "Change the policy."
    return "A step this lab cannot show."


def measure_value(value: Any) -> str:
    """An expected or observed measure as a person reads it: a list of attempts as
    ``[4, 1, 1]``, transitions as ``closed→open (call 9)``, a number without trailing ``.0``."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return ", ".join(
            f"{t.get('from', '*')}→{t.get('to')}"
            + (f" (call {t['call']})" if t.get("call") is not None else "")
            for t in value
        )
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def observed_text(measure: str, value: Any) -> str:
    """A graded measure as the step shows it: milliseconds whole (``1475``, not
    ``1475.386``), a breaker state as its word, anything else as :func:`measure_value`."""
    if value is None:
        return ""
    if measure.endswith("_ms_total") and isinstance(value, (int, float)):
        return str(round(value))
    return measure_value(value)


def expected_text(check: dict[str, Any]) -> str:
    """A scenario run's expectation as text, with its tolerance (admin, run results)."""
    tolerance = f" ± {check['tolerance']:g}" if check.get("tolerance") else ""
    return measure_value(check["expected"]) + tolerance


#: How a question's measure reads beside the answer field.
MEASURE_UNITS = {
    "calls": "calls",
    "succeeded": "calls",
    "failed": "calls",
    "fast_failed": "calls",
    "attempts_total": "attempts",
    "dependency_hits": "attempts",
    "leaf_hits": "attempts",
    "backoff_ms_total": "ms",
    "errors": "calls",
    "degraded": "calls",
    "a_succeeded": "calls",
    "b_succeeded": "calls",
    "rejected_bulkhead": "calls",
    "pool_timeout": "calls",
    "fallback_expired": "calls",
    "wait_ms_total": "ms",
    "throttled": "attempts",
    "effects_applied": "side effects",
    "transition_count": "transitions",
}


def step_question(ask: dict[str, Any]) -> dict[str, Any]:
    """A step's ``ask`` as the page shows it: the question, the measure, its unit, the
    choices for a choice (breaker states; yes or no for whether the class's dependency comes
    back, ``class_measure``, with its ``within_s``), and the explanation shown after the run."""
    measure = ask.get("measure")
    choices: list[tuple[str, str]] = []
    if measure == "breaker_after":
        choices = [(s, engine_state_label(s)) for s in STATES]
    elif measure in CLASS_MEASURES:
        choices = list(RECOVERY_ANSWERS)
    return {
        "question": ask.get("question", ""),
        "measure": measure,
        "unit": MEASURE_UNITS.get(measure, ""),
        "choices": choices,
        "class_measure": measure in CLASS_MEASURES,
        "within_s": ask.get("within_s"),
        "tolerance": ask.get("tolerance") or 0,
        "explanation": ask.get("explanation", ""),
    }


def answer_text(measure: str, answer: str) -> str:
    """A stored answer as the page shows it: ``yes`` as "Yes, it comes back" for a recovery
    question, anything else as stored."""
    if measure in CLASS_MEASURES:
        return dict(RECOVERY_ANSWERS).get(answer, answer)
    return answer


def recovery_text(observed: dict[str, Any] | None) -> str:
    """What the storm panel's recovery clock showed for a graded recovery question:
    ``yes: back 3 s after the trigger ended`` or ``no: not back within 20 s of the
    trigger's end``."""
    observed = observed or {}
    within, seconds = observed.get("within_s"), observed.get("recovery_s")
    if observed.get("recovered") == "yes":
        return f"yes: back {seconds} s after the trigger ended"
    if observed.get("recovered") == "no":
        return f"no: not back within {within} s of the trigger's end"
    return ""


def recovery_wait_text(check: dict[str, Any] | None) -> str:
    """Why a recovery question is not graded yet, from
    :func:`labs.selectors.predictions.recovery_check`'s stage."""
    if not check:
        return "Not graded yet: the grade comes from the storm panel's recovery clock."
    within = check.get("within_s")
    if check["stage"] == "no_trigger":
        return (
            "Not graded yet: waiting for the instructor's trigger. The grade comes from the "
            f"storm panel's recovery clock, {within} s after the trigger ends at the latest."
        )
    if check["stage"] == "running":
        return f"Not graded yet: the trigger is running ({check['left_s']} s left)."
    if check["stage"] == "waiting":
        left = max(0, within - check["since_s"])
        return (
            f"Not graded yet: the trigger ended {check['since_s']} s ago and the dependency is "
            f"not back yet; {left} s left of the {within} s it has."
        )
    return "Not graded yet: the grade comes from the storm panel's recovery clock."


#: The home page's groups of lessons, in order: (key, heading, a sentence under it).
LESSON_GROUPS: tuple[tuple[str, str, str], ...] = (
    ("start", "Start here", ""),
    ("one", "Retries and circuit breakers", "One dependency, one client: each lesson changes one setting and shows what it does."),
    ("beyond", "Beyond one dependency", "Several hosts, a second dependency, a fallback, side effects: what a breaker or a retry does to them."),
    ("server", "The server's side", "A server of your own with a queue: overload it with your own calls and see what its queue order and defences do."),
    ("class", "The whole class", "Everyone's sessions call one shared dependency; the instructor runs it from the storm panel."),
)  # fmt: skip
#: The tour's sentence on the home page when its scenario has no description of its own.
TOUR_DESCRIPTION = (
    "The guided first lesson: a flaky dependency retried with backoff, then a circuit breaker "
    "that opens and closes again. Predict each burst before you run it."
)
_BEYOND_ONE_DEPENDENCY = ("hosts", "b", "fallbacks", "side_effect")


def lesson_group(scenario: Any) -> str:
    """Which of :data:`LESSON_GROUPS` a scenario belongs to, from what its script sets up: the
    tour first, the class's shared dependency, a server of one's own, a dependency beyond one
    host and one service."""
    if scenario.slug == "tour":
        return "start"
    script = scenario.script if isinstance(scenario.script, dict) else {}
    dependency = script.get("dependency") if isinstance(script.get("dependency"), dict) else {}
    if dependency.get("mode") == "shared":
        return "class"
    if dependency.get("mode") == "server":
        return "server"
    if any(dependency.get(key) for key in _BEYOND_ONE_DEPENDENCY):
        return "beyond"
    return "one"


def lesson_description(scenario: Any) -> str:
    """The sentence the home page shows under a lesson's title."""
    if scenario.description:
        return scenario.description
    return TOUR_DESCRIPTION if scenario.slug == "tour" else ""


def lesson_progress(item: Any) -> str:
    """A lesson's progress on the home page (``StudentScenario``): :func:`step_progress_text`."""
    return step_progress_text(item.steps_done, item.steps_total, item.session is not None)


def lesson_groups(items: Iterable[Any]) -> list[dict[str, Any]]:
    """A class's lessons (``StudentScenario``) in the home page's groups
    (:data:`LESSON_GROUPS`), in order, empty groups left out."""
    items = list(items)
    groups = []
    for key, heading, blurb in LESSON_GROUPS:
        found = [s for s in items if lesson_group(s.scenario) == key]
        if found:
            groups.append({"key": key, "heading": heading, "blurb": blurb, "items": found})
    return groups


def step_progress_text(done: int, total: int, opened: bool) -> str:
    """A lesson's progress on the home page: "3 of 6 steps done", "6 steps", "every step done"."""
    if not total:
        return ""
    if not opened or not done:
        return f"{total} step{'s' if total != 1 else ''}"
    if done >= total:
        return f"every step done ({total} of {total})"
    return f"{done} of {total} steps done"


#: Where on the lab page each measure a step checks can be seen, in the page's own words.
WATCH_PLACES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("succeeded", "failed", "fast_failed", "calls"), "Succeeded, Failed and Failed fast in the burst summary"),
    (("attempts", "attempts_total", "dependency_hits"), "Attempts spent, and each call's attempts on the timeline"),
    (("backoff_ms_total",), "Time waiting in the burst summary, and the backoff gaps on the timeline"),
    (("breaker_after", "transitions", "transition_count"), "The circuit breaker's state: the badge and the timeline's band"),
    (("degraded",), "Degraded (fallback) in the burst summary"),
    (("effects_applied",), "Effects applied / calls in the burst summary"),
    (("a_succeeded", "b_succeeded"), "The table of each dependency in the burst summary"),
    (("rejected_bulkhead", "pool_timeout"), "Refused by the bulkhead and Gave up waiting in the burst summary"),
    (("recovered",), "The Shared dependency card after the trigger, and the storm panel's time to recovery"),
    (("leaf_hits",), "The storm panel's chain of students: each user request's hits on the shared dependency"),
)  # fmt: skip


def step_watch(step: dict[str, Any]) -> list[str]:
    """What a step asks the student to watch, as places on the page: from the measures its
    checks and its question name (never their expected values), else from what it does. A
    question about the class's dependency names only where its recovery shows."""
    keys = set(step.get("expect") or {}) if isinstance(step.get("expect"), dict) else set()
    if isinstance(step.get("ask"), dict) and step["ask"].get("measure") in CLASS_MEASURES:
        keys = {step["ask"]["measure"]}  # the question is about the trigger, not the burst
    if isinstance(step.get("ask"), dict) and step["ask"].get("measure"):
        keys.add(step["ask"]["measure"])
    places = [place for measures, place in WATCH_PLACES if keys & set(measures)]
    if places:
        return places
    if "set_dependency" in step or "set_policy" in step:
        return ["The journal's newest row: it records the change"]
    if "wait_ms" in step:
        return ["The circuit breaker's badge while the time passes"]
    if "burst" in step:
        return ["The burst summary and the timeline as the calls finish"]
    return []


def scenario_steps(scenario) -> list[dict[str, Any]]:
    """The scenario's steps with what the page needs to offer a "Do it" button (the form
    values a step sets, as the forms post them)."""
    script = scenario.script if isinstance(scenario.script, dict) else {}
    steps = []
    for index, step in enumerate(script.get("steps") or [], start=1):
        if not isinstance(step, dict):
            continue
        item: dict[str, Any] = {"index": index, "text": step_sentence(step), "action": None}
        item["watch"] = step_watch(step)
        if "burst" in step:
            item["action"] = "burst"
            vals = {"size": step.get("burst"), "concurrency": step.get("concurrency", 1)}
            if isinstance(step.get("ask"), dict):
                item["ask"] = step_question(step["ask"])
                vals["step"] = index
            item["vals"] = json.dumps(vals)
        elif "set_dependency" in step and isinstance(step["set_dependency"], dict):
            item["action"] = "dependency"
            item["vals"] = json.dumps(_form_values_of_dependency(step["set_dependency"]))
        elif "set_policy" in step and isinstance(step["set_policy"], dict):
            item["action"] = "policy"
            item["vals"] = json.dumps(_form_values_of_policy(step["set_policy"]))
        elif "wait_ms" in step:
            item["action"] = "wait"
            item["wait_ms"] = step.get("wait_ms") or 0
        steps.append(item)
    return steps


def _form_values_of_dependency(changes: dict[str, Any]) -> dict[str, str]:
    values = {}
    for key, value in changes.items():
        if key == "outcomes" and isinstance(value, list):
            values[key] = ", ".join(str(v) for v in value)
        elif key == "server" and isinstance(value, dict):
            values |= {f"server_{k}": "" if v is None else str(v) for k, v in value.items()}
        else:
            values[key] = "" if value is None else str(value)
    return values


def _form_values_of_policy(changes: dict[str, Any]) -> dict[str, str]:
    values: dict[str, str] = {}
    for key, value in changes.items():
        if key == "breaker" and isinstance(value, dict):
            values |= {f"breaker_{k}": "" if v is None else str(v) for k, v in value.items()}
        elif key == "retry_budget":
            if value is None:
                values["budget"] = "off"
            elif isinstance(value, dict):
                values["budget"] = "on"
                values |= {f"budget_{k}": str(v) for k, v in value.items()}
        else:
            values[key] = "" if value is None else str(value)
    return values
