"""What the pages, the websocket pushes and the exports show: one function per fact.

Views, consumers, exports and template tags all call these, so a journal row, the breaker
badge, the burst summary panel or a CSV cell looks the same wherever it appears. Nothing here
writes; the badge reads Redis (through :mod:`labs.live.runtime`), everything else formats the
data it is given.
"""

from __future__ import annotations

import csv
import json
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


def step_sentence(step: dict[str, Any]) -> str:
    """A scenario step as an instruction (``Run a burst of 6 calls``)."""
    if not isinstance(step, dict):
        return str(step)
    if "burst" in step:
        size = step.get("burst")
        concurrency = step.get("concurrency", 1)
        callers = f" with {concurrency} concurrent callers" if concurrency not in (1, None) else ""
        return f"Run a burst of {size} call{'s' if size != 1 else ''}{callers}."
    if "wait_ms" in step:
        ms = step.get("wait_ms") or 0
        return f"Wait {ms / 1000:g} s (let the breaker's cooldown run out)."
    if "set_dependency" in step:
        changes = step.get("set_dependency") or {}
        mode = changes.get("mode")
        rest = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in changes.items() if k != "mode")
        what = (
            f"Set the dependency to {str(mode).replace('_', ' ')}"
            if mode
            else "Change the dependency"
        )
        return f"{what}{' (' + rest + ')' if rest else ''}."
    if "set_policy" in step:
        changes = step.get("set_policy") or {}
        parts = []
        for key, value in changes.items():
            if isinstance(value, dict):
                parts += [f"{key} {k.replace('_', ' ')} {v}" for k, v in value.items()]
            else:
                parts.append(f"{key.replace('_', ' ')} {'off' if value is None else value}")
        return f"Change the policy: {', '.join(parts)}."
    return ", ".join(f"{k} {v}" for k, v in step.items())


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


def scenario_steps(scenario) -> list[dict[str, Any]]:
    """The scenario's steps with what the page needs to offer a "Do it" button (the form
    values a step sets, as the forms post them)."""
    script = scenario.script if isinstance(scenario.script, dict) else {}
    steps = []
    for index, step in enumerate(script.get("steps") or [], start=1):
        if not isinstance(step, dict):
            continue
        item: dict[str, Any] = {"index": index, "text": step_sentence(step), "action": None}
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
    lane. Of a shared-dependency attempt's decision it keeps the outcome the client saw (ok,
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
    "outcome", "arrival_us", "second_offered",
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
    tests/labs/test_pushed_fragments.py checks both give the same markup)."""
    e = _escape
    state = _text_or_blank(view.get("state"))
    open_until = view.get("open_until_ms")
    forced = view.get("forced")
    if open_until:
        cooldown = (
            'half-open in <span data-role="seconds">'
            f"{e(seconds_text(view.get('open_for_ms')))}</span> s"
        )
    elif forced == "open":
        cooldown = "held open by hand: Force close or Reset releases it"
    elif forced:
        cooldown = "held closed by hand: failures are not counted until Reset"
    else:
        cooldown = ""
    parts = [
        '<section id="breaker-badge" class="card breaker-card" aria-labelledby="breaker-heading"'
        f' data-state="{e(state)}" data-open-until-ms="{e(_text_or_blank(open_until))}"'
        f' data-server-now-ms="{e(_text_or_blank(view.get("server_now_ms")))}"'
        f' data-forced="{e(_text_or_blank(forced))}">'
        '<h2 id="breaker-heading" class="card-title">Circuit breaker</h2>'
        f'<p class="breaker-line"><strong class="breaker breaker-big breaker-{e(state)}"'
        ' data-role="state" aria-live="polite" aria-atomic="true">'
        f"{e(engine_state_label(view.get('state')))}</strong> "
        f'<span class="cooldown" data-role="cooldown">{cooldown}</span></p>'
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
    config = view.get("config") or {}
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
    panel["wall_ms"] = counts.get("wall_ms")
    panel["extra"] = {name: counts[name] for name in SUMMARY_EXTRAS if name in counts}
    panel.update(changes)
    return panel


def counts_from_events(payloads: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """A running burst's counts so far, from its journal rows (oldest first)."""
    counts: dict[str, Any] = dict.fromkeys(SUMMARY_COUNTS, 0)
    counts["backoff_ms_total"] = 0.0
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
        '<div><dt>Time waiting</dt><dd><span data-stat="backoff_ms_total">'
        f"{_float0(summary.get('backoff_ms_total'))}</span> ms</dd></div>"
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
                '<div><dt>Waiting for a slot</dt><dd><span data-stat="wait_ms_total">'
                f"{_float0(extra['wait_ms_total'])}</span> ms</dd></div>"
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
    if status == "done" and number:
        if summary.get("recorded"):
            parts.append(
                f'<p class="whatif-link"><a href="bursts/{e(str(number))}/replay/" '
                f'id="whatif-burst-{e(str(number))}" hx-get="bursts/{e(str(number))}/replay/" '
                f'hx-target="#whatif" hx-swap="innerHTML">What if burst {e(str(number))} had '
                "another policy?</a></p>"
            )
        else:
            parts.append(
                f'<p class="whatif-link hint" id="whatif-burst-{e(str(number))}-none">No '
                f"what-if for burst {e(str(number))}: it was recorded before replay existed.</p>"
            )
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


def dashboard_row_html(row, *, multi_scenario: bool) -> str:
    """One dashboard row as HTML (every value escaped), for the page and for the websocket's
    snapshot alike. A format string, not a template: the page renders a hundred of them and
    Django's template engine costs about 5x more (benchmarks/dashboard_bench.py)."""
    scenario = (
        format_html(' <span class="hint scenario-name">{}</span>', row.scenario)
        if multi_scenario
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
        steps = (scenario.script or {}).get("steps") or [] if isinstance(scenario.script, dict) else []
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
