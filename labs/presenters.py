"""What the pages, the websocket pushes and the exports show: one function per fact.

Views, consumers, exports and template tags all call these, so a journal row, the breaker
badge, the burst summary panel or a CSV cell looks the same wherever it appears. Nothing here
writes; the badge reads Redis (through :mod:`labs.live.runtime`), everything else formats the
data it is given.
"""

from __future__ import annotations

import csv
import json
import math
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from html import escape as _escape
from typing import Any

import redis
from django.db import InterfaceError, OperationalError
from django.template.loader import get_template
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from labs.engine import STATES
from labs.engine import state_label as engine_state_label
from labs.engine.events import is_fast_fail
from labs.engine.replay import diff_rows
from labs.live import runtime
from labs.live.journal import BURST_END_KINDS
from labs.live.rows import kind_label, row_tone, summary_delta

SESSION_TEMPLATE = "labs/session.html"


# --- people ----------------------------------------------------------------------------------


def actor_name(user) -> str:
    """Who did something, as a journal message says it (``the lab`` for no one)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return "the lab"
    return user.get_username()


# --- what-if ---------------------------------------------------------------------------------
# (A journal row's HTML and JSON are labs.live.rows': the journal writer renders each once.)


#: A network address in an error's text (``127.0.0.1:6379``, ``redis:6379``, ``[::1]:5432``):
#: internal, never shown to a student.
_ADDRESS = re.compile(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):\d{2,5}")


def lab_error(exc: BaseException) -> str:
    """Why a run stopped, in words for the student's journal: a lost connection to Redis or
    to the database is said as such, and no internal address (``host:port``) is ever shown."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return (
            "the lab lost its connection to Redis (it restarted or is unreachable); "
            "a call in flight may or may not have reached the dependency"
        )
    if isinstance(exc, (OperationalError, InterfaceError)):
        return "the lab lost its connection to the database (it restarted or is unreachable)"
    text = _ADDRESS.sub("(an internal address)", str(exc)).strip()
    return text or type(exc).__name__


def whatif_refusal(number: Any, status: str, recorded: bool) -> str:
    """Why burst ``number`` (its ``status``, whether its start state was ``recorded``) has no
    what-if, as the what-if view says it; "" when it can be replayed."""
    status = str(status)
    if status == "done":
        if recorded:
            return ""
        return (
            f"Burst {number} was recorded before replay existed: the lab did not keep the "
            "state it started from (the dependency's counters, the breaker, the retry budget, "
            "the seed), so it cannot be replayed. Bursts run since then can."
        )
    if status in ("queued", "running"):
        return (
            f"Burst {number} is still {status}: its what-if opens once it has finished "
            "(follow the link again then)."
        )
    if status == "interrupted":
        return (
            f"Burst {number} was interrupted before it finished (its worker stopped), so "
            "there is no finished burst to replay; only a finished burst can be replayed."
        )
    return (
        f"Burst {number} stopped on an error in the lab before it finished; only a finished "
        "burst can be replayed."
    )


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
        return f"Run a burst of {size} call{'s' if size != 1 else ''}{callers}."
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


def check_rows(checks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """A scenario run's expectation checks with their values as text (admin, run results)."""
    return [
        dict(
            check,
            expected_text=measure_value(check["expected"])
            + (f" ± {check['tolerance']:g}" if check.get("tolerance") else ""),
            observed_text=measure_value(check["observed"]),
        )
        for check in checks
    ]


#: How a question's measure reads beside the answer field.
MEASURE_UNITS = {
    "calls": "calls",
    "succeeded": "calls",
    "failed": "calls",
    "fast_failed": "calls",
    "attempts_total": "attempts",
    "dependency_hits": "attempts",
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
    breaker states to choose from for a choice, and the explanation shown after the run."""
    measure = ask.get("measure")
    return {
        "question": ask.get("question", ""),
        "measure": measure,
        "unit": MEASURE_UNITS.get(measure, ""),
        "choices": [(s, engine_state_label(s)) for s in STATES]
        if measure == "breaker_after"
        else [],
        "tolerance": ask.get("tolerance") or 0,
        "explanation": ask.get("explanation", ""),
    }


#: The home page's groups of lessons, in order: (key, heading, a sentence under it).
LESSON_GROUPS: tuple[tuple[str, str, str], ...] = (
    ("start", "Start here", ""),
    ("one", "Retries and circuit breakers", "One dependency, one client: each lesson changes one setting and shows what it does."),
    ("beyond", "Beyond one dependency", "Several hosts, a second dependency, a fallback, side effects: what a breaker or a retry does to them."),
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
    tour first, the class's shared dependency, a dependency beyond one host and one service."""
    if scenario.slug == "tour":
        return "start"
    script = scenario.script if isinstance(scenario.script, dict) else {}
    dependency = script.get("dependency") if isinstance(script.get("dependency"), dict) else {}
    if dependency.get("mode") == "shared":
        return "class"
    if any(dependency.get(key) for key in _BEYOND_ONE_DEPENDENCY):
        return "beyond"
    return "one"


def lesson_description(scenario: Any) -> str:
    """The sentence the home page shows under a lesson's title."""
    if scenario.description:
        return scenario.description
    return TOUR_DESCRIPTION if scenario.slug == "tour" else ""


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
)  # fmt: skip


def step_watch(step: dict[str, Any]) -> list[str]:
    """What a step asks the student to watch, as places on the page: from the measures its
    checks and its question name (never their expected values), else from what it does."""
    keys = set(step.get("expect") or {}) if isinstance(step.get("expect"), dict) else set()
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


# --- the timeline ----------------------------------------------------------------------------


def chart_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The part of an event the timeline and the traffic strip need (no message, no actor).

    ``data.burst`` is the burst's number on its ``burst_queued`` and ``burst_end`` rows (the
    timeline's what-if link names it); ``host`` and ``dependency`` place an attempt in its
    lane; ``breakers: host`` on a ``burst_start`` says the burst ran with a breaker per host. Of a shared-dependency attempt's decision it keeps the outcome the client saw (ok,
    error, shed, skipped, timeout), the arrival and the arrival second's offered count
    (``second_offered``: the session's share of the class's load, see docs/engine.md).
    """
    keep = (
        "seq", "kind", "burst", "t_ms", "at", "call", "attempt", "outcome", "error",
        "latency_ms", "backoff_ms", "state_from", "state_to",
    )  # fmt: skip
    data = payload.get("data") or {}
    small = {k: payload.get(k) for k in keep}
    small["data"] = {k: data[k] for k in _CHART_DATA if k in data}
    if "whatif" in payload:  # the burst cannot be replayed (see labs.live.rows.journal_row)
        small["whatif"] = payload["whatif"]
    return small


_CHART_DATA = (
    "probe", "size", "first_call", "start_ms", "end_ms", "burst", "host", "dependency",
    "outcome", "arrival_us", "second_offered", "breakers",
)  # fmt: skip


# --- the breaker badge -----------------------------------------------------------------------


def badge_for(session_id: int, policy: dict[str, Any]) -> dict[str, Any]:
    """The breaker badge's data: the breaker read from Redis (the live truth) at now, plus the
    server's clock, so the page counts the cooldown down against its own clock
    (``server_now_ms`` corrects for skew)."""
    view = runtime.breaker_view_of(session_id, policy)
    view["server_now_ms"] = round(time.time() * 1000)
    view["threshold"] = (view.get("config") or {}).get("failure_threshold")
    return view


def render_badge(view: dict[str, Any]) -> str:
    """The breaker badge through the page's template partial (``breaker-badge``)."""
    return _partial("breaker-badge").render({"breaker": view}).strip()


def badge_html(view: dict[str, Any]) -> str:
    """The breaker badge (``view`` as :func:`badge_for` gives it) as the page's
    ``breaker-badge`` partial renders it, built in Python: a push carries it after every
    state change and at every burst's end (see :func:`summary_html`;
    tests/labs/test_pushed_fragments.py checks both give the same markup).

    With a breaker per host (``view["per_host"]``) it shows each host's breaker, with its
    own cooldown, and no breaker for the dependency as a whole: no call asks that one."""
    e = _escape
    config = view.get("config") or {}
    if view.get("per_host"):
        return _per_host_badge_html(view, config)
    state = _text_or_blank(view.get("state"))
    open_until = view.get("open_until_ms")
    forced = view.get("forced")
    parts = [
        '<section id="breaker-badge" class="card breaker-card" aria-labelledby="breaker-heading"'
        f' data-state="{e(state)}" data-open-until-ms="{e(_text_or_blank(open_until))}"'
        f' data-server-now-ms="{e(_text_or_blank(view.get("server_now_ms")))}"'
        f' data-forced="{e(_text_or_blank(forced))}">'
        '<h2 id="breaker-heading" class="card-title">Circuit breaker</h2>'
        f'<p class="breaker-line"><strong class="breaker breaker-big breaker-{e(state)}"'
        ' data-role="state" aria-live="polite" aria-atomic="true">'
        f"{e(engine_state_label(view.get('state')))}</strong> "
        f'<span class="cooldown" data-role="cooldown">'
        f"{_cooldown_html(state, open_until, view.get('open_for_ms'), forced)}</span></p>"
    ]
    if view.get("parts"):
        parts.append(
            '<ul class="breaker-parts" data-role="parts" aria-label="Each host\'s and B\'s'
            ' breaker">'
        )
        for part in view["parts"]:
            part_state = _text_or_blank(part.get("state"))
            parts.append(
                f'<li data-part="{e(_text_or_blank(part.get("key")))}" '
                f'data-state="{e(part_state)}">{e(_text_or_blank(part.get("name")))} '
                f'<strong class="breaker breaker-{e(part_state)}">'
                f"{e(engine_state_label(part.get('state')))}</strong></li>"
            )
        parts.append("</ul>")
    if config.get("kind") == "rolling_ratio":
        detail = (
            f"window: {e(_text_or_blank(view.get('window_failures')))} failed, "
            f"{e(_text_or_blank(view.get('window_successes')))} succeeded"
        )
    else:
        detail = (
            f"failure streak {e(_text_or_blank(view.get('failure_streak')))} of "
            f"{e(_text_or_blank(view.get('threshold')))}"
        )
    parts.append(
        f'<p class="breaker-detail">{detail} · cooldown '
        f"{e(ms_text(config.get('cooldown_ms')))}</p></section>"
    )
    return "".join(parts)


def _cooldown_html(state: str, open_until: Any, open_for: Any, forced: Any) -> str:
    """The words after a breaker's state: its cooldown counting down while OPEN; once the
    cooldown is over (HALF-OPEN), that the next call is the probe; a breaker held by hand."""
    if open_until and state == "open":
        return f'half-open in <span data-role="seconds">{_escape(seconds_text(open_for))}</span> s'
    if open_until and state == "half_open":
        return "cooldown over: the next call is the probe"
    if forced == "open":
        return "held open by hand: Force close or Reset releases it"
    if forced:
        return "held closed by hand: failures are not counted until Reset"
    return ""


def _per_host_badge_html(view: dict[str, Any], config: dict[str, Any]) -> str:
    """:func:`badge_html` with a breaker per host: a row per host (and B), each with its
    state and cooldown; the page counts each cooldown down (``data-open-until-ms``)."""
    e = _escape
    parts = [
        '<section id="breaker-badge" class="card breaker-card" aria-labelledby="breaker-heading"'
        ' data-state="" data-scope="host" data-open-until-ms=""'
        f' data-server-now-ms="{e(_text_or_blank(view.get("server_now_ms")))}" data-forced="">'
        '<h2 id="breaker-heading" class="card-title">Circuit breakers, one per host</h2>'
        '<ul class="breaker-parts breaker-hosts" data-role="parts" aria-label="Each host\'s'
        ' breaker" aria-live="polite">'
    ]
    for part in view.get("parts") or []:
        part_state = _text_or_blank(part.get("state"))
        open_until = part.get("open_until_ms")
        parts.append(
            f'<li data-part="{e(_text_or_blank(part.get("key")))}" data-state="{e(part_state)}"'
            f' data-open-until-ms="{e(_text_or_blank(open_until))}">'
            f"{e(_text_or_blank(part.get('name')))} "
            f'<strong class="breaker breaker-{e(part_state)}" data-role="state">'
            f"{e(engine_state_label(part.get('state')))}</strong> "
            f'<span class="cooldown" data-role="cooldown">'
            f"{_cooldown_html(part_state, open_until, part.get('open_for_ms'), None)}</span></li>"
        )
    parts.append(
        "</ul>"
        '<p class="breaker-detail">Each host\'s breaker opens on that host\'s failures alone; '
        "an attempt skips a host whose breaker is open · cooldown "
        f"{e(ms_text(config.get('cooldown_ms')))}</p></section>"
    )
    return "".join(parts)


def seconds_text(ms: Any) -> str:
    """Milliseconds as seconds with one decimal (the ``seconds`` template filter): ``1940``
    -> ``1.9``; "" for None."""
    if ms is None:
        return ""
    return f"{max(0.0, float(ms)) / 1000:.1f}"


# --- the burst summary panel -----------------------------------------------------------------

#: The counts the summary panel shows; a finished burst's summary (``Burst.summary``, the
#: ``burst_end`` row's data) has them all, a running one's are counted from its rows.
SUMMARY_COUNTS = (
    "calls", "succeeded", "failed", "fast_failed", "attempts_total", "backoff_ms_total",
)  # fmt: skip
BURST_FACTS = ("id", "number", "size", "concurrency", "status", "error")
#: What a finished burst's summary adds when hosts, B, a bulkhead, a fallback or side effects
#: are configured (labs.engine.routes); the panel shows each one present.
SUMMARY_EXTRAS = (
    "degraded", "wait_ms_total", "rejected_bulkhead", "pool_timeout", "by_dependency", "effects",
)  # fmt: skip


def burst_facts(burst: Any) -> dict[str, Any]:
    """The panel's heading facts from a ``Burst`` (or a dict with the same names), and
    ``recorded``: whether its start state was recorded (the what-if link needs it; a dict
    without the key says yes, see :meth:`labs.consumers.lab.LabSessionConsumer._learn_burst`)."""
    if isinstance(burst, dict):
        facts = {name: burst.get(name) for name in BURST_FACTS}
        facts["recorded"] = bool(burst.get("recorded", True))
    else:
        facts = {name: getattr(burst, "pk" if name == "id" else name) for name in BURST_FACTS}
        facts["recorded"] = bool(burst.start_state)
    facts["status"] = str(facts["status"])
    return facts


def summary_panel(
    facts: dict[str, Any], counts: dict[str, Any] | None = None, **changes: Any
) -> dict[str, Any]:
    """The summary panel's data: the burst's ``facts``, its ``counts`` (zeros when missing),
    ``wall_ms`` (None until it ends) and any ``changes`` (``status="done"``)."""
    counts = counts or {}
    panel = dict(facts)
    panel.update({name: counts.get(name, 0) for name in SUMMARY_COUNTS})
    panel["waiting_ms_total"] = waiting_ms(counts)
    panel["wall_ms"] = counts.get("wall_ms")
    panel["extra"] = {name: counts[name] for name in SUMMARY_EXTRAS if name in counts}
    panel.update(changes)
    return panel


def waiting_ms(counts: dict[str, Any]) -> float:
    """The summary's "Time waiting": backoff sleeps and waits for a pool slot together, so it
    is never less than either part the panel shows beside it. A running burst's counts carry
    it (each sleep and each pooled call's wait adds to it, :func:`labs.live.rows.summary_delta`);
    a finished burst's summary has the two parts (``backoff_ms_total``, ``wait_ms_total``)."""
    if "waiting_ms_total" in counts:
        return counts["waiting_ms_total"] or 0
    return (counts.get("backoff_ms_total") or 0) + (counts.get("wait_ms_total") or 0)


def counts_from_events(payloads: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """A running burst's counts so far, from its journal rows (oldest first)."""
    counts: dict[str, Any] = dict.fromkeys(SUMMARY_COUNTS, 0)
    counts["backoff_ms_total"] = 0.0
    counts["waiting_ms_total"] = 0.0
    for payload in payloads:
        for name, value in summary_delta(payload).items():
            counts[name] = counts.get(name, 0) + value
    return counts


def render_summary(summary: dict[str, Any] | None) -> str:
    """The summary panel through the page's template partial (``burst-summary``)."""
    return _partial("burst-summary").render({"summary": summary}).strip()


_STATUS_TEXT = {"done": "done", "running": "running…", "queued": "queued…"}


def summary_html(summary: dict[str, Any]) -> str:
    """The summary panel of a burst (``summary`` as :func:`summary_panel` builds it) as the
    page's ``burst-summary`` partial renders it, built in Python.

    A push carries the panel three times a burst (queued, started, done) for every page
    watching; through the template that was about a tenth of the web process's CPU per event
    delivered (push_bench under py-spy; 140 to 200 us a render warm, against 10 to 20 here).
    The page's first render keeps the template; tests/labs/test_pushed_fragments.py checks
    that both give the same markup for every part the panel can show."""
    status = str(summary.get("status") or "none")
    number = summary.get("number")
    e = _escape
    parts = [
        '<section id="burst-summary" class="card summary-card" aria-labelledby="summary-heading"'
        f' data-burst-id="{e(_text_or_blank(summary.get("id")))}" data-status="{e(status)}">'
        f'<h2 id="summary-heading" class="card-title">Burst {e(str(number))}'
        f' <span class="summary-status status-{e(status)}" data-role="status">'
        f"{e(_STATUS_TEXT.get(status, status))}</span></h2>"
        '<dl class="stats">'
        '<div><dt>Succeeded</dt><dd class="stat-ok" data-stat="succeeded">'
        f"{e(str(summary.get('succeeded')))}</dd></div>"
        '<div><dt>Failed</dt><dd class="stat-bad" data-stat="failed">'
        f"{e(str(summary.get('failed')))}</dd></div>"
        '<div><dt>Failed fast</dt><dd class="stat-fast" data-stat="fast_failed">'
        f"{e(str(summary.get('fast_failed')))}</dd></div>"
        '<div><dt>Attempts spent</dt><dd data-stat="attempts_total">'
        f"{e(str(summary.get('attempts_total')))}</dd></div>"
        '<div><dt>Time waiting</dt><dd><span data-stat="waiting_ms_total">'
        f"{_float0(summary.get('waiting_ms_total'))}</span> ms</dd></div>"
        '<div><dt>Calls done</dt><dd><span data-stat="calls">'
        f"{e(str(summary.get('calls')))}</span> of {e(str(summary.get('size')))}</dd></div>"
        "</dl>"
    ]
    extra = summary.get("extra")
    if extra:
        parts.append('<dl class="stats stats-extra" data-role="summary-extra">')
        if "degraded" in extra:
            parts.append(
                '<div><dt>Degraded (fallback)</dt><dd class="stat-degraded" data-stat="degraded">'
                f"{e(str(extra['degraded']))}</dd></div>"
            )
        if "wait_ms_total" in extra:
            parts.append(
                '<div><dt>Of it, for a pool slot</dt><dd><span data-stat="wait_ms_total">'
                f"{_float0(extra['wait_ms_total'])}</span> ms</dd></div>"
                '<div><dt>Of it, backing off</dt><dd><span data-stat="backoff_ms_total">'
                f"{_float0(summary.get('backoff_ms_total'))}</span> ms</dd></div>"
                '<div><dt>Refused by the bulkhead</dt><dd class="stat-bad" '
                f'data-stat="rejected_bulkhead">{e(_text_or_blank(extra.get("rejected_bulkhead")))}'
                "</dd></div>"
                '<div><dt>Gave up waiting</dt><dd class="stat-bad" data-stat="pool_timeout">'
                f"{e(_text_or_blank(extra.get('pool_timeout')))}</dd></div>"
            )
        effects = extra.get("effects")
        if effects:
            parts.append(
                '<div><dt>Effects applied / calls</dt><dd data-stat="effects">'
                f'<span data-role="effects-applied">{e(_text_or_blank(effects.get("applied")))}'
                f"</span> / {e(_text_or_blank(effects.get('calls')))}</dd></div>"
            )
        parts.append("</dl>")
        by_dependency = extra.get("by_dependency")
        if by_dependency:
            parts.append(
                '<table class="by-dependency" data-role="by-dependency">'
                "<caption>Each dependency</caption><thead><tr>"
                '<th scope="col">Dependency</th><th scope="col">Calls</th>'
                '<th scope="col">Succeeded</th><th scope="col">Failed</th>'
                '<th scope="col">Failed fast</th><th scope="col">Degraded</th>'
                '<th scope="col">Waited (ms)</th></tr></thead><tbody>'
            )
            for name, counts in by_dependency.items():
                cells = "".join(
                    f"<td>{e(_text_or_blank(counts.get(k)))}</td>"
                    for k in ("calls", "succeeded", "failed", "fast_failed", "degraded")
                )
                parts.append(
                    f'<tr data-dependency="{e(str(name))}"><th scope="row">'
                    f"{e(str(name).upper())}</th>{cells}"
                    f"<td>{_float0(counts.get('waited_ms'))}</td></tr>"
                )
            parts.append("</tbody></table>")
    wall_ms = summary.get("wall_ms")
    if wall_ms:
        concurrency = summary.get("concurrency")
        parts.append(
            f'<p class="help">Took {e(ms_text(wall_ms))} from first call to last answer, '
            f"{e(str(concurrency))} caller{'' if concurrency == 1 else 's'}.</p>"
        )
    if summary.get("error"):
        parts.append(f'<p class="field-error">{e(str(summary["error"]))}</p>')
    parts.append("</section>")
    return "".join(parts)


def _text_or_blank(value: Any) -> str:
    """A template's ``{{ value }}``: "" for None."""
    return "" if value is None else str(value)


def _float0(value: Any) -> str:
    """Django's ``floatformat:0``: rounded half up to a whole number ("" for no number)."""
    try:
        rounded = Decimal(repr(float(value))).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    except (TypeError, ValueError, InvalidOperation):
        return ""
    text = str(rounded)
    return "0" if text == "-0" else text


def ms_text(value: Any) -> str:
    """A duration in ms as the pages write it (the ``ms`` template filter): ``175.0`` ->
    ``175 ms``, ``12.25`` -> ``12.3 ms``, None -> ``-``."""
    if value is None:
        return "-"
    value = float(value)
    return f"{value:.0f} ms" if value.is_integer() or value >= 100 else f"{value:.1f} ms"


#: Journal kinds after which the summary panel changes.
SUMMARY_KINDS = ("burst_queued", "burst_start", *BURST_END_KINDS)


def summary_fragment(event: dict[str, Any], facts: dict[str, Any]) -> str:
    """The summary panel as of ``event`` (not as of now: a replay must add up); "" when the
    event leaves the panel as it is (an interrupted or failed burst keeps its counts)."""
    kind = event["kind"]
    if kind == "burst_end":
        return summary_html(summary_panel(facts, event.get("data") or {}, status="done"))
    if kind in ("burst_queued", "burst_start"):
        status = "queued" if kind == "burst_queued" else "running"
        return summary_html(summary_panel(facts, status=status, error=""))
    return ""


def _partial(name: str):
    # The cached loader keeps parsed templates, so this is a dictionary lookup after the first.
    return get_template(f"{SESSION_TEMPLATE}#{name}")


# --- the class dashboard --------------------------------------------------------------------


def burst_summary_text(summary: dict[str, Any] | None) -> str:
    """A finished burst in one line, as the dashboard shows it ("" for no burst)."""
    if not summary:
        return ""
    return (
        f"{summary.get('succeeded', 0)}/{summary.get('calls', 0)} ok, "
        f"{summary.get('fast_failed', 0)} fast-failed, {summary.get('attempts_total', 0)} "
        f"attempts, {round(summary.get('wall_ms') or 0)} ms"
    )


def dashboard_state_label(state: str | None) -> str:
    """The breaker state as the dashboard's table writes it (``half-open``)."""
    return engine_state_label(state).lower()


def mode_label(mode: str | None) -> str:
    return (mode or "").replace("_", " ")


def dashboard_labels(update: dict[str, Any]) -> dict[str, Any]:
    """The words the dashboard shows for the fields an update (or a row) carries: the page
    writes these and never makes up its own."""
    labels: dict[str, Any] = {}
    if update.get("state"):
        labels["state_label"] = dashboard_state_label(update["state"])
    if update.get("mode"):
        labels["mode_label"] = mode_label(update["mode"])
    if update.get("burst_summary"):
        labels["summary_text"] = burst_summary_text(update["burst_summary"])
    return labels


DASHBOARD_ROW_HTML = (
    '<tr id="row-{id}" data-session="{id}" data-state="{state}" data-activity="{activity}" '
    'data-mode="{mode}"><th scope="row" class="c-student"><a href="{url}" data-field="student" '
    'title="Open {student}\'s lab page (read-only, live)">{student}</a>{scenario}</th>'
    '<td class="c-state"><span class="breaker breaker-{state}" data-field="state">{state_label}'
    '</span></td><td class="c-mode"><span data-field="mode">{mode_label}</span></td>'
    '<td class="c-activity"><span class="activity activity-{activity}" data-field="activity">'
    '{activity}</span></td><td class="c-summary" data-field="summary">{summary}</td>'
    '<td class="num" data-field="calls">{calls}</td>'
    '<td class="num" data-field="attempts">{attempts}</td>'
    '<td class="num" data-field="fast_fails">{fast_fails}</td>'
    '<td class="c-progress" data-field="progress">{progress}</td></tr>\n'
)


def progress_text(progress: dict[str, Any] | None) -> str:
    """A session's step and score as the dashboard writes it: ``3/5 steps · 1/2 right``
    (the score only for a scenario with questions; ``attempt 2`` after a reset)."""
    if not progress or not progress.get("steps"):
        return ""
    text = f"{progress['done']}/{progress['steps']} steps"
    if progress.get("questions"):
        text += f" · {progress['right']}/{progress['answered']} right"
    if progress.get("attempt", 1) > 1:
        text += f" (attempt {progress['attempt']})"
    return text


def dashboard_row_html(row) -> str:
    """One dashboard row as HTML (every value escaped), for the page and for the websocket's
    snapshot alike, named by its student and its scenario (a student with several sessions
    has one row each, told apart by the scenario). A format string, not a template: the page
    renders a hundred of them and Django's template engine costs about 5x more
    (benchmarks/dashboard_bench.py)."""
    scenario = (
        format_html(' <span class="hint scenario-name">{}</span>', row.scenario)
        if row.scenario
        else ""
    )
    return format_html(
        DASHBOARD_ROW_HTML,
        id=row.session_id,
        state=row.state,
        activity=row.activity,
        mode=row.mode,
        url=reverse("labs:session_detail", args=[row.session_id]),
        student=row.student,
        scenario=scenario,
        state_label=dashboard_state_label(row.state),
        mode_label=mode_label(row.mode),
        summary=burst_summary_text(row.last_summary) or "no burst yet",
        calls=row.calls,
        attempts=row.attempts,
        fast_fails=row.fast_fails,
        progress=progress_text(row.progress),
    )


# --- CSV exports -----------------------------------------------------------------------------


def csv_safe(value: Any) -> Any:
    """A cell a spreadsheet will not run: text starting with ``= + - @`` (a formula, and the
    way CSV injection works) gets a leading apostrophe; None becomes ""."""
    if value is None:
        return ""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


class _Echo:
    """A file-like object whose ``write`` returns the line (csv.writer into a generator)."""

    def write(self, value: str) -> str:
        return value


def csv_lines(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Iterator[str]:
    """CSV text line by line (for a streaming response), every cell through :func:`csv_safe`."""
    writer = csv.writer(_Echo())
    yield writer.writerow(header)
    for row in rows:
        yield writer.writerow([csv_safe(value) for value in row])


# --- replay and compare ----------------------------------------------------------------------

#: The replay timeline's drawing area (SVG user units): left margin for call labels.
REPLAY_CHART_WIDTH = 960
REPLAY_CHART_LEFT = 64
REPLAY_ROW = 16


def burst_event_rows(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One burst's events (journal payloads, or a replay's engine events as dicts) as the
    replay page lists them, oldest first: time from the burst's start, kind, tone and the
    explanation sentence."""
    items = list(events)
    times = [_event_ms(e) for e in items]
    t0 = next((t for e, t in zip(items, times, strict=True) if e.get("kind") == "burst_start"), 0)
    t0 = t0 if t0 is not None else (min((t for t in times if t is not None), default=0))
    return [
        {
            "n": i,
            "kind": e.get("kind") or "",
            "kind_label": kind_label(e.get("kind")),
            "tone": row_tone(e),
            "t_ms": round((t or t0) - t0, 1),
            "message": e.get("message") or e.get("explain") or "",
        }
        for i, (e, t) in enumerate(zip(items, times, strict=True), 1)
    ]


def replay_rows_html(rows: Iterable[dict[str, Any]]) -> SafeString:
    """The ``<li>`` of each :func:`burst_event_rows` row, escaped, in one string: a replay
    lists a hundred or more rows, and a template partial per row was most of a what-if
    answer's time (benchmarks/replay_bench.py)."""
    return mark_safe(  # noqa: S308 - every value below is escaped
        "".join(
            f'<li class="journal-row tone-{_escape(r["tone"])}" data-kind="{_escape(r["kind"])}">'
            f'<span class="j-time">+{r["t_ms"]} ms</span> '
            f'<span class="j-kind">{_escape(str(r["kind_label"]))}</span> '
            f'<span class="j-msg">{_escape(r["message"])}</span></li>'
            for r in rows
        )
    )


def replay_chart_svg(chart: dict[str, Any]) -> SafeString:
    """The inside of one :func:`replay_timelines` chart's ``<svg>``: a label per call, the
    burst's end line, a bar per attempt, a cross per fast-failed call (numbers and tones
    only, from the geometry; the labels escaped)."""
    parts = [
        f'<text class="replay-label" x="4" y="{label["y"]}">{_escape(label["text"])}</text>'
        for label in chart["labels"]
    ]
    parts.append(
        f'<line class="replay-end" x1="{chart["end_x"]}" x2="{chart["end_x"]}" y1="12" '
        f'y2="{chart["height"]}"></line>'
    )
    parts.extend(
        f'<rect class="replay-bar replay-{bar["tone"]}" x="{bar["x"]}" y="{bar["y"]}" '
        f'width="{bar["w"]}" height="12"><title>call {bar["call"]}, attempt '
        f"{bar['attempt']}</title></rect>"
        for bar in chart["bars"]
    )
    parts.extend(
        f'<text class="replay-fast" x="{cross["x"]}" y="{cross["y"]}">\u2715</text>'
        for cross in chart["crosses"]
    )
    return mark_safe("".join(parts))  # noqa: S308 - numbers, fixed tones, escaped labels


def _event_ms(event: dict[str, Any]) -> float | None:
    value = event.get("t_ms", event.get("at_ms"))
    return float(value) if value is not None else None


def _burst_span(events: list[dict[str, Any]]) -> tuple[float, float]:
    """(start, end) in the events' own clock's ms: the first burst_start, the last burst_end
    (a scenario run has several bursts)."""
    times = [t for t in (_event_ms(e) for e in events) if t is not None]
    start = next((_event_ms(e) for e in events if e.get("kind") == "burst_start"), None)
    ends = [_event_ms(e) for e in events if e.get("kind") == "burst_end"]
    end = ends[-1] if ends else None
    start = start if start is not None else min(times, default=0.0)
    end = end if end is not None else max(times, default=start)
    return start, end


def replay_timelines(bursts: Sequence[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """SVG geometry of several bursts drawn on one time axis (the same ms per unit), so a
    replay lines up under the burst it replays: per call a row, per attempt a bar (ok or
    failed, its latency long), per fast-failed call a cross.

    ``bursts`` is (title, events) pairs; the events are journal payloads or engine event dicts.
    """
    spans = [_burst_span(events) for _, events in bursts]
    longest = max([end - start for start, end in spans] + [1.0])
    scale = (REPLAY_CHART_WIDTH - REPLAY_CHART_LEFT - 8) / longest
    charts = []
    for (title, events), (start, end) in zip(bursts, spans, strict=True):
        calls = sorted({e["call"] for e in events if e.get("call") is not None})
        row_of = {call: i for i, call in enumerate(calls)}
        bars, crosses = [], []
        for e in events:
            call, t = e.get("call"), _event_ms(e)
            if call is None or t is None:
                continue
            y = 20 + row_of[call] * REPLAY_ROW
            if e.get("kind") == "attempt":
                latency = float(e.get("latency_ms") or 0)
                x = REPLAY_CHART_LEFT + (t - latency - start) * scale
                bars.append(
                    {
                        "x": round(max(x, REPLAY_CHART_LEFT), 1),
                        "y": y,
                        "w": round(max(latency * scale, 3), 1),
                        "tone": "ok" if e.get("outcome") == "ok" else "bad",
                        "call": call,
                        "attempt": e.get("attempt"),
                    }
                )
            elif e.get("kind") == "call_result" and is_fast_fail(e.get("outcome") or ""):
                crosses.append(
                    {"x": round(REPLAY_CHART_LEFT + (t - start) * scale, 1), "y": y + 10}
                )
        charts.append(
            {
                "title": title,
                "height": 28 + len(calls) * REPLAY_ROW,
                "width": REPLAY_CHART_WIDTH,
                "left": REPLAY_CHART_LEFT,
                "labels": [
                    {"y": 20 + i * REPLAY_ROW + 10, "text": f"#{c}"} for i, c in enumerate(calls)
                ],
                "bars": bars,
                "crosses": crosses,
                "end_x": round(REPLAY_CHART_LEFT + (end - start) * scale, 1),
                "total_ms": round(end - start, 1),
                "attempts": sum(1 for e in events if e.get("kind") == "attempt"),
            }
        )
        charts[-1]["svg"] = replay_chart_svg(charts[-1])
    return charts


def diff_table(a: dict[str, float], b: dict[str, float]) -> list[dict[str, Any]]:
    """The diff table of two runs' metrics (:meth:`labs.engine.replay.Replay.metrics`), its
    numbers as text (``+2``, ``-350 ms``), each row with a tone saying which way the change
    went (fewer attempts or failures reads as better)."""
    better_when_lower = {"failed", "attempts", "dependency_hits", "waiting_ms", "total_ms"}
    out = []
    for row in diff_rows(a, b):
        unit = f" {row['unit']}" if row["unit"] else ""

        def num(x):
            return f"{x:g}" if isinstance(x, (int, float)) else str(x)

        delta = row["delta"]
        tone = "same"
        if delta:
            lower = delta < 0
            tone = "better" if lower == (row["key"] in better_when_lower) else "worse"
            if row["key"] == "fast_failed":
                tone = "note"
        out.append(
            {
                "key": row["key"],
                "label": row["label"],
                "a": num(row["a"]) + unit,
                "b": num(row["b"]) + unit,
                "delta": ("+" if delta > 0 else "") + num(delta) + unit,
                "tone": tone,
            }
        )
    return out


#: The comparison presets (labs.engine.replay.PRESETS) in words: each is a change over the
#: scenario's own policy.
PRESET_LABELS = {
    "defaults": "The lesson's own policy, unchanged",
    "no-retries": "No retries: one attempt per call",
    "retries-no-jitter": "Up to 4 attempts, backoff without jitter",
    "full-jitter": "Up to 4 attempts, backoff with full jitter",
    "retry-budget": "Up to 4 attempts within a retry budget (10 % of calls)",
    "threshold-1": "The breaker opens after 1 failure",
    "threshold-5": "The breaker opens after 5 failures",
}


def policy_choice_label(token: str, choices: dict[str, Any]) -> str:
    """The words for a comparison's picked policy (``token``, as the pickers offer it, see
    :func:`labs.selectors.compare_choices`); "a policy written as JSON" for the rest."""
    for group in ("presets", "mine", "bursts"):
        for value, label in choices.get(group, ()):
            if value == token:
                return label
    for title, options in choices.get("steps", ()):
        for value, label in options:
            if value == token:
                return f"{title}: {label}"
    return "a policy written as JSON"


def shared_diff_table(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures of two runs on the shared dependency's model
    (:func:`labs.experiments.metastable.figures_for`) side by side, each row with a tone
    saying which way B went (a quicker recovery, fewer retries and less waste read better)."""

    def recovery(m: dict[str, Any]) -> str:
        return "not within the run" if m["recovery_s"] is None else f"after {m['recovery_s']}\u00a0s"

    def rank(m: dict[str, Any]) -> float:
        return math.inf if m["recovery_s"] is None else m["recovery_s"]

    rows = [
        ("recovery_s", "back to 90 % of the healthy goodput", recovery(a), recovery(b),
         rank(b) - rank(a) if rank(a) != rank(b) else 0),
        ("below_20_s", "goodput under 20 % after the trigger", f"{a['below_20_s']}\u00a0s",
         f"{b['below_20_s']}\u00a0s", b["below_20_s"] - a["below_20_s"]),
        ("retries_per_call", "retries per call", f"{a['retries_per_call']:g}",
         f"{b['retries_per_call']:g}", b["retries_per_call"] - a["retries_per_call"]),
        ("peak_over_baseline", "busiest second's load over the healthy load",
         f"{a['peak_over_baseline']:g}\u00a0x", f"{b['peak_over_baseline']:g}\u00a0x",
         b["peak_over_baseline"] - a["peak_over_baseline"]),
        ("shed", "attempts shed by the queue", f"{a['shed']:,}", f"{b['shed']:,}",
         b["shed"] - a["shed"]),
        ("wasted_ms", "server time spent for callers who had given up",
         f"{a['wasted_ms'] / 1000:.1f}\u00a0s", f"{b['wasted_ms'] / 1000:.1f}\u00a0s",
         b["wasted_ms"] - a["wasted_ms"]),
        ("calls_ok", "calls that succeeded", f"{a['calls_ok']:,}", f"{b['calls_ok']:,}",
         -(b["calls_ok"] - a["calls_ok"])),
    ]  # fmt: skip
    out = []
    for key, label, left, right, worse_by in rows:
        tone = "same" if not worse_by else ("worse" if worse_by > 0 else "better")
        out.append({"key": key, "label": label, "a": left, "b": right, "tone": tone})
    return out


#: The shared comparison's goodput chart (SVG user units).
SHARED_CHART_WIDTH = 960
SHARED_CHART_HEIGHT = 180
SHARED_CHART_LEFT = 48


def shared_goodput_chart(result: dict[str, Any]) -> SafeString:
    """The inside of the shared comparison's ``<svg>``: calls succeeded per second for A
    and B over the run, the trigger as a band, the healthy baseline as a dashed line (numbers
    and fixed classes only)."""
    params = result["params"]
    a, b = result["a"], result["b"]
    top = max([*a["goodput_per_s"], *b["goodput_per_s"], a["baseline_goodput"], 1])
    width = SHARED_CHART_WIDTH - SHARED_CHART_LEFT - 8
    bottom = SHARED_CHART_HEIGHT - 20

    def x(second: float) -> float:
        return round(SHARED_CHART_LEFT + second * width / params.duration_s, 1)

    def y(value: float) -> float:
        return round(bottom - value * (bottom - 10) / top, 1)

    def line(values: list[int], tone: str) -> str:
        points = " ".join(f"{x(s + 0.5)},{y(v)}" for s, v in enumerate(values))
        return f'<polyline class="shared-line shared-line-{tone}" points="{points}"></polyline>'

    start, end = params.trigger_at_s, params.trigger_at_s + params.trigger_s
    parts = [
        f'<rect class="shared-trigger" x="{x(start)}" y="10" width="{x(end) - x(start)}" '
        f'height="{bottom - 10}"><title>the trigger: {params.trigger} for '
        f"{params.trigger_s} s</title></rect>",
        f'<line class="shared-baseline" x1="{SHARED_CHART_LEFT}" x2="{x(params.duration_s)}" '
        f'y1="{y(a["baseline_goodput"])}" y2="{y(a["baseline_goodput"])}"></line>',
        f'<text class="replay-label" x="4" y="{y(top) + 4}">{top:g}/s</text>',
        f'<text class="replay-label" x="4" y="{bottom}">0</text>',
        line(a["goodput_per_s"], "a"),
        line(b["goodput_per_s"], "b"),
        f'<text class="replay-label" x="{SHARED_CHART_LEFT}" y="{SHARED_CHART_HEIGHT - 4}">0 s'
        f'</text><text class="replay-label" x="{x(params.duration_s) - 30}" '
        f'y="{SHARED_CHART_HEIGHT - 4}">{params.duration_s} s</text>',
    ]
    return mark_safe("".join(parts))  # noqa: S308 - numbers and fixed classes only


def replay_agreement(real: Sequence[dict[str, Any]], replayed: Sequence[dict[str, Any]]) -> str:
    """A sentence saying whether a same-policy replay made the real burst's attempts per
    call, outcomes and transitions, and where it first differs if not."""

    def calls(events):
        return {
            e.get("call"): (e.get("data") or {}).get("attempts", e.get("attempt")) or 0
            for e in events
            if e.get("kind") == "call_result"
        }, {e.get("call"): e.get("outcome") for e in events if e.get("kind") == "call_result"}

    def transitions(events):
        return [
            (e.get("state_from"), e.get("state_to"), e.get("call"))
            for e in events
            if e.get("kind") == "transition"
        ]

    (real_attempts, real_outcomes), (rep_attempts, rep_outcomes) = calls(real), calls(replayed)
    for call in sorted(set(real_attempts) | set(rep_attempts), key=lambda c: c or 0):
        if real_attempts.get(call) != rep_attempts.get(call):
            return (
                f"Replayed with its own policy, call {call} makes {rep_attempts.get(call)} "
                f"attempt(s) where the real burst made {real_attempts.get(call)}."
            )
        if real_outcomes.get(call) != rep_outcomes.get(call):
            return (
                f"Replayed with its own policy, call {call} ends {rep_outcomes.get(call)} where "
                f"the real burst ended {real_outcomes.get(call)}."
            )
    if transitions(real) != transitions(replayed):
        return "Replayed with its own policy, the breaker changes state at other calls."
    return (
        "Replayed with its own policy, this burst makes the same attempts per call, outcomes "
        "and breaker transitions as it did."
    )


# --- predictions, per class ------------------------------------------------------------------

PREDICTION_COLUMNS = (
    "student", "username", "scenario", "attempt", "step", "question", "measure", "answer",
    "predicted_at",
    "burst", "observed", "correct",
)  # fmt: skip


def _bars(counts: dict[str, int]) -> list[dict[str, Any]]:
    """Histogram bars in value order (numbers numerically), each with its count and the
    tallest count (for ``<meter max>``)."""

    def key(value: str) -> tuple[int, float, str]:
        try:
            return (0, float(value), value)
        except ValueError:
            return (1, 0.0, value)

    top = max(counts.values(), default=0)
    return [{"value": v, "count": counts[v], "max": top} for v in sorted(counts, key=key)]


def prediction_histograms(predictions: Iterable[Any]) -> list[dict[str, Any]]:
    """One entry per question (scenario and step): the question, the class's answers as a
    histogram beside the observed values, and how many were right."""
    questions: dict[tuple[int, int], dict[str, Any]] = {}
    for p in predictions:
        scenario = p.session.scenario
        steps = (
            (scenario.script or {}).get("steps") or [] if isinstance(scenario.script, dict) else []
        )
        ask = steps[p.step - 1].get("ask", {}) if 0 < p.step <= len(steps) else {}
        entry = questions.setdefault(
            (scenario.pk, p.step),
            {
                "scenario": scenario.title,
                "step": p.step,
                "question": ask.get("question", ""),
                "measure": p.measure,
                "answers": {},
                "observed": {},
                "right": 0,
                "graded": 0,
                "total": 0,
            },
        )
        entry["total"] += 1
        entry["answers"][p.answer] = entry["answers"].get(p.answer, 0) + 1
        if p.correct is not None:
            entry["graded"] += 1
            entry["right"] += int(p.correct)
            seen = measure_value(p.observed_value)
            entry["observed"][seen] = entry["observed"].get(seen, 0) + 1
    result = []
    for entry in questions.values():
        entry["answer_bars"] = _bars(entry.pop("answers"))
        entry["observed_bars"] = _bars(entry.pop("observed"))
        result.append(entry)
    return result


def prediction_row(p: Any) -> list[Any]:
    """A prediction as a CSV row (:data:`PREDICTION_COLUMNS`)."""
    scenario = p.session.scenario
    steps = (scenario.script or {}).get("steps") or [] if isinstance(scenario.script, dict) else []
    ask = steps[p.step - 1].get("ask", {}) if 0 < p.step <= len(steps) else {}
    return [
        actor_name(p.owner), p.owner.username, scenario.title, p.attempt, p.step,
        ask.get("question", ""),
        p.measure, p.answer, p.created_at.isoformat(), p.burst.number if p.burst else "",
        "" if p.correct is None else measure_value(p.observed_value),
        "" if p.correct is None else ("right" if p.correct else "wrong"),
    ]  # fmt: skip


# --- the shared dependency, as a student's lab page sees it ---------------------------------

#: A queue wait p99 at or above this (ms) in the last complete second counts as overloaded.
OVERLOAD_WAIT_MS = 250
#: The per-second counters a lab page gets: the class's totals, never anyone's identity.
SHARED_PAGE_FIELDS = (
    "second", "offered", "calls", "retries", "ok", "calls_ok", "error", "shed", "skipped",
    "timeout", "wait_p99_ms",
)  # fmt: skip


def shared_status(seconds: Sequence[dict[str, Any]], model: dict[str, Any], now_us: int) -> dict:
    """The shared dependency's state for a student: ``triggered`` while a trigger runs (by
    the model's clock); else ``overloaded`` when, in the last complete second, an attempt was
    shed, skipped (it could not start before its deadline) or timed out at its client, or the
    queue wait p99 was at least :data:`OVERLOAD_WAIT_MS`; else ``healthy``. With the reason
    in words."""
    trigger = model.get("trigger")
    if trigger and trigger["from_us"] <= now_us < trigger["until_us"]:
        left = (trigger["until_us"] - now_us) / 1e6
        return {"state": "triggered", "reason": f"{trigger['kind']} trigger, {left:.0f} s left"}
    last = now_us // 1_000_000 - 1
    second = next((s for s in seconds if s["second"] == last), None)
    if second is not None:
        refused = second["shed"] + second["skipped"]
        p99 = second.get("wait_p99_ms")
        if refused or second["timeout"]:
            parts = []
            if refused:
                parts.append(f"{refused} shed")
            if second["timeout"]:
                parts.append(f"{second['timeout']} timed out")
            return {"state": "overloaded", "reason": " and ".join(parts) + " in the last second"}
        if p99 is not None and p99 >= OVERLOAD_WAIT_MS:
            return {"state": "overloaded", "reason": f"queue wait p99 {p99:g} ms"}
    return {"state": "healthy", "reason": "answering within its capacity"}


def shared_page_message(recent: dict[str, Any]) -> dict[str, Any]:
    """What a lab page in ``shared`` mode gets each second (``labs.selectors.storm_recent``):
    the class's per-second totals (:data:`SHARED_PAGE_FIELDS`), the capacity, the latest
    trigger's span and the state (:func:`shared_status`). No session or student is named:
    the page works out its own share from its own journal rows."""
    model = recent["model"]
    trigger = model.get("trigger")
    return {
        "type": "shared",
        "active": True,
        "now": recent["now"],
        "seconds": [{k: s[k] for k in SHARED_PAGE_FIELDS} for s in recent["seconds"]],
        "capacity_per_s": model["capacity_per_s"],
        "trigger": (
            {"kind": trigger["kind"], "from_s": trigger["from_s"], "until_s": trigger["until_s"]}
            if trigger
            else None
        ),
        **shared_status(recent["seconds"], model, recent["now_us"]),
    }


# --- the class's live numbers: one session's window, the panel's headline -------------------

#: Complete seconds over which a session's retry ratio, rate and share are measured: the
#: panel's table, the student's card and the students export all use this window.
SESSION_WINDOW_S = 5
#: The retry budget the panel measures against (retries per attempt).
RETRY_BUDGET = 0.1
#: Complete seconds the headline tiles average over.
HEADLINE_SECONDS = 3
#: Seconds before a trigger whose goodput is the healthy baseline.
BASELINE_SECONDS = 10
#: Goodput back to this share of the baseline (with retries within budget) is recovered.
RECOVERED_GOODPUT = 0.9
#: Seconds without a single attempt that end a run of traffic (a new start is a new run).
RUN_GAP_S = 5


def offered_load_text(sessions: int, rate: int, capacity_per_s: float) -> str:
    """What a class-wide Start traffic will offer, against the capacity, before it starts:
    ``31 sessions x 5 calls/s = 155 calls/s, capacity 200 attempts/s`` (static/js/storm.js
    writes the same sentence as the form's numbers change)."""
    noun = "session" if sessions == 1 else "sessions"
    offered = sessions * rate
    over = ": over capacity before any trigger" if offered > capacity_per_s else ""
    return (
        f"{sessions} {noun} x {rate} calls/s = {offered} calls/s, "
        f"capacity {round(capacity_per_s)} attempts/s{over}"
    )


def session_window(
    own: Sequence[dict[str, Any]], class_offered: int, window_s: int = SESSION_WINDOW_S
) -> dict[str, Any]:
    """One session's figures over complete seconds, from its own per-second counters in
    Redis (``RedisSharedModel.session_seconds``) and the class's offered attempts over the
    same seconds: attempts, retries, their ratio, attempts per second, calls refused by its
    breaker, the latest breaker state seen (None when it made no call) and its share of the
    class's load. The one computation behind the panel's table, the card and the export."""
    attempts = sum(r["offered"] for r in own)
    retries = sum(r["retries"] for r in own)
    state = next((r["state"] for r in reversed(own) if r.get("state")), None)
    return {
        "attempts": attempts,
        "retries": retries,
        "retry_ratio": round(retries / attempts, 4) if attempts else None,
        "attempts_per_s": round(attempts / window_s, 2),
        "fast": sum(r["fast"] for r in own),
        "ok": sum(r["ok"] for r in own),
        "failed": sum(r["error"] + r["shed"] + r["skipped"] + r["timeout"] for r in own),
        "state": state,
        "share": round(attempts / class_offered, 4) if class_offered else None,
        "class_offered": class_offered,
    }


def _run_start(active: list[int], newest: int) -> int:
    """The first second of the run of traffic ending at ``newest`` (no gap of RUN_GAP_S)."""
    start = newest
    for sec in reversed(active):
        if start - sec > RUN_GAP_S:
            break
        start = sec
    return start


def storm_headline(
    seconds: Sequence[dict[str, Any]], trigger: dict[str, Any] | None, now: int
) -> dict[str, Any]:
    """The storm panel's four tiles from the class's per-second counters, complete seconds
    only (before ``now``), and the recovery clock's state:

    - ``no_traffic``: no attempt in the last RUN_GAP_S complete seconds; nothing else is
      measured (no clock, no baseline);
    - else the *run* is the stretch of seconds with traffic up to now with no gap of
      RUN_GAP_S; only a trigger that overlaps the run counts (one from a previous run, or
      from before a restart, is history);
    - ``healthy``: no such trigger; ``triggered``: it is running; ``not_recovered``: it has
      ended and no second since has been back (``recovery_s`` counts up from its end);
      ``recovered``: the first second after its end with retries within the budget and
      goodput at RECOVERED_GOODPUT of the baseline (``recovery_s`` from the end to it).

    The baseline is the mean goodput of the BASELINE_SECONDS of the run before the trigger;
    with none (no trigger, or one fired as the run began) the calls asked for per second.
    Goodput is None while no call is asked for (the end of a run, before it counts as
    stopped), rather than a 0 % that reads as an outage."""
    rows = sorted((r for r in seconds if r["second"] < now), key=lambda r: r["second"])
    active = [r["second"] for r in rows if r["offered"] > 0]
    out: dict[str, Any] = {
        "state": "no_traffic",
        "amplification": None,
        "retry_ratio": None,
        "goodput_share": None,
        "recovery_s": None,
        "run_start": None,
        "baseline": None,
        "trigger": None,
        "now": now,
    }
    if not active or now - 1 - active[-1] >= RUN_GAP_S:
        return out
    run_start = _run_start(active, active[-1])
    run = [r for r in rows if r["second"] >= run_start]
    recent = rows[-HEADLINE_SECONDS:]
    offered = sum(r["offered"] for r in recent)
    calls = sum(r["calls"] for r in recent)
    retries = sum(r["retries"] for r in recent)
    goodput = sum(r["calls_ok"] for r in recent) / len(recent)
    current = trigger if trigger and trigger["until_s"] > run_start else None
    base = None
    if current:
        before = [
            r for r in run
            if current["from_s"] - BASELINE_SECONDS <= r["second"] < current["from_s"]
            and r["calls"] > 0
        ]  # fmt: skip
        if before:
            base = sum(r["calls_ok"] for r in before) / len(before)
    if not base:
        asked = [r for r in run if r["calls"] > 0][-HEADLINE_SECONDS:]
        base = sum(r["calls"] for r in asked) / len(asked) if asked else None
    out.update(
        run_start=run_start,
        baseline=base,
        amplification=offered / calls if calls else None,
        retry_ratio=retries / offered if offered else None,
        goodput_share=goodput / base if base and calls else None,
        state="healthy",
    )
    if current is None:
        return out
    out["trigger"] = {k: current[k] for k in ("kind", "from_s", "until_s")}
    if now < current["until_s"]:
        out["state"] = "triggered"
        out["recovery_s"] = None
        return out
    end = current["until_s"]
    back = next(
        (
            r for r in run
            if r["second"] >= int(end) and r["offered"] > 0
            and r["retries"] / r["offered"] <= RETRY_BUDGET
            and base and r["calls_ok"] >= RECOVERED_GOODPUT * base
        ),
        None,
    )  # fmt: skip
    if back is not None:
        out["state"] = "recovered"
        out["recovery_s"] = max(0, round(back["second"] - end))
    else:
        out["state"] = "not_recovered"
        out["recovery_s"] = max(0, round(now - end))
    return out
