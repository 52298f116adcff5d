"""What if: a finished burst replayed with another policy; the session's burst history; the
compare page (two policies against one scenario, the whole comparison in the URL).

A replay runs in virtual time inside the request from the burst's recorded start state
(:mod:`labs.engine.replay`): no worker, no Redis, nothing written, so anyone who may see the
session may replay its bursts. A policy out of range answers 422 with the form; a burst that
cannot be replayed (still running, interrupted, failed, or recorded before replay existed)
409 with a sentence saying which. Pages and addresses: docs/engine.md, "Replay and compare".
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods
from django_htmx.http import reswap, retarget

from labs.engine import LIMITS, Problem, ValidationError, merge_settings
from labs.engine.replay import parse_start, scenario_metrics, waiting_ms
from labs.forms.lab import POLICY_GROUPS, PolicyForm, coerce, limit_of
from labs.models import Burst, LabSession
from labs.presenters.replay import (
    burst_event_rows,
    diff_table,
    policy_choice_label,
    replay_agreement,
    replay_rows_html,
    replay_timelines,
    shared_diff_table,
    shared_goodput_series,
    shared_goodput_summary,
)
from labs.presenters.text import whatif_refusal
from labs.selectors import replay as replay_reads
from labs.selectors.access import visible_burst, visible_session
from labs.selectors.replay import (
    burst_events,
    comparable_scenarios,
    compare_choices,
    compare_policy,
    compare_shown_policy,
    dependency_comparison,
    policy_comparison,
    session_burst,
)
from labs.views import ERRORS_SHOWN, HtmxHttpRequest

TEMPLATE = "labs/burst_replay.html"
WHATIF_AUTO_ID = "whatif_%s"
HISTORY_TEMPLATE = "labs/burst_history.html"


def _policy_context(form: PolicyForm) -> dict[str, Any]:
    return {
        "policy_form": form,
        "policy_groups": [
            (legend, [form[name] for name in names]) for legend, names in POLICY_GROUPS
        ],
    }


@require_http_methods(["GET", "POST"])
@login_required
def burst_replay(request: HtmxHttpRequest, pk: int, number: int) -> HttpResponse:
    """GET: the burst and the what-if form; POST: run the replay with the posted policy."""
    session = visible_session(request.user, pk)
    return _whatif(request, session, session_burst(session, number))


@require_http_methods(["GET", "POST"])
@login_required
def burst_whatif(request: HtmxHttpRequest, burst_id: int) -> HttpResponse:
    """The same what-if, found by the burst's id: the link every journal row of a burst and
    the timeline's bursts carry (a row knows its burst's id, not its number)."""
    burst = visible_burst(request.user, burst_id)
    return _whatif(request, burst.session, burst)


def _whatif(request: HtmxHttpRequest, session: LabSession, burst: Burst) -> HttpResponse:
    refusal = whatif_refusal(burst.number, burst.status, bool(burst.start_state))
    if refusal:
        # The burst exists but cannot be replayed (yet): say why (409), run nothing. One that
        # has ended (interrupted, failed, recorded before replay existed) still shows its
        # timeline and its journal rows as it ran.
        context = {"session": session, "burst": burst, "refusal": refusal}
        if burst.status not in Burst.ACTIVE_STATUSES:
            events = burst_events(burst)
            context["original_rows_html"] = _rows_html(events)
            context["timelines"] = replay_timelines([_as_ran(burst, events)])
        if request.htmx:
            return render(request, f"{TEMPLATE}#replay-result", context, status=409)
        return render(request, TEMPLATE, context, status=409)
    recorded = parse_start(burst.start_state)
    original_events = burst_events(burst)
    same = replay_reads.burst_replay(burst, None)
    context: dict[str, Any] = {
        "session": session,
        "burst": burst,
        "fidelity": same.fidelity,
        "agreement": replay_agreement(
            original_events, [e.to_dict() for e in same.events]
        ),
        "original_rows_html": _rows_html(original_events),
    }
    status = 200
    charts_input = [_as_ran(burst, original_events)]
    if request.method == "POST":
        form = PolicyForm.from_post(request.POST, recorded.policy)
        form.is_valid()  # parsing only; the engine's validator has the ranges
        result = None
        if not form.too_long:
            try:
                result = replay_reads.burst_replay(burst, form.changes())
            except ValidationError as exc:
                form.add_problems(exc.problems)
        if result is None:
            status = 422
        else:
            replay_events = [e.to_dict() for e in result.events]
            charts_input.append(("replay with the policy below (virtual time)", replay_events))
            context |= {
                "replayed": True,
                "replay_rows_html": _rows_html(replay_events),
                "diff": diff_table(_real_metrics(burst, same), result.metrics()),
            }
    else:
        form = PolicyForm(initial=PolicyForm.initial_from(recorded.policy))
    # Its own ids: on the lab page this form sits beside the session's policy form.
    form.auto_id = WHATIF_AUTO_ID
    context["timelines"] = replay_timelines(charts_input)
    if request.htmx and request.method == "POST":
        # The form posted stays on the page as typed: the answer is the replay's output, or
        # on 422 the form with its errors (retargeted there). Rendering the form's fields
        # again would be most of a what-if's server time (docs/scaling.md). A form
        # that showed errors posts ERRORS_SHOWN and, corrected, gets the whole panel back
        # in place of the panel, clean.
        if status == 422:
            response = render(request, f"{TEMPLATE}#replay-form", context | _policy_context(form),
                              status=status)  # fmt: skip
            return reswap(retarget(response, "#replay-form"), "outerHTML")
        if ERRORS_SHOWN not in request.POST:
            return render(request, f"{TEMPLATE}#replay-output", context, status=status)
        response = render(request, f"{TEMPLATE}#replay-result", context | _policy_context(form))
        return reswap(retarget(response, "#replay-result"), "outerHTML")
    context |= _policy_context(form)
    if request.htmx:
        return render(request, f"{TEMPLATE}#replay-result", context, status=status)
    return render(request, TEMPLATE, context, status=status)


def _rows_html(events: list[dict[str, Any]]) -> str:
    """A journal's rows (the what-if panel's two journals), rendered once in Python."""
    return replay_rows_html(burst_event_rows(events))


def _as_ran(burst: Burst, events: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The timeline of ``burst`` as it ran: (title, events) for replay_timelines."""
    return (f"burst {burst.number} (as it ran)", events)


def _real_metrics(burst: Burst, same) -> dict[str, float]:
    """The diff table's "as it ran" column: the real burst's stored summary, its dependency
    hits from the same-policy replay's count when the summary has none."""
    s = burst.summary or {}
    metrics = same.metrics()
    metrics.update(
        {
            "succeeded": s.get("succeeded", metrics["succeeded"]),
            "failed": s.get("failed", metrics["failed"]),
            "fast_failed": s.get("fast_failed", metrics["fast_failed"]),
            "attempts": s.get("attempts_total", metrics["attempts"]),
            "waiting_ms": waiting_ms(s) if "backoff_ms_total" in s else metrics["waiting_ms"],
            "total_ms": s.get("wall_ms", metrics["total_ms"]),
        }
    )
    return metrics


@require_http_methods(["GET"])
@login_required
def burst_history(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One page of the session's bursts (htmx: the ``burst-history`` partial)."""
    session = visible_session(request.user, pk)
    try:
        page = int(request.GET.get("page", "1"))
    except ValueError:
        return HttpResponse("page must be a whole number from 1", status=400)
    context = history_context(session, page)
    context["embedded"] = bool(request.htmx)
    if request.htmx:
        return render(request, f"{HISTORY_TEMPLATE}#burst-history", context)
    return render(request, HISTORY_TEMPLATE, context)


def history_context(session: LabSession, page: int = 1) -> dict[str, Any]:
    """What the ``burst-history`` partial renders (the lab page includes it too)."""
    rows, page, pages = replay_reads.burst_history(session, page)
    return {
        "session": session,
        "history": rows,
        "history_page": page,
        "history_pages": pages,
        "history_newer": page - 1 if page > 1 else None,
        "history_older": page + 1 if page < pages else None,
    }


# --- compare ---------------------------------------------------------------------------------

COMPARE_TEMPLATE = "labs/compare.html"
#: The longest query value a comparison reads (a policy as JSON is far shorter).
COMPARE_VALUE_MAX = 2000
COMPARE_KEYS = ("scenario", "dependency", "calls", "seed", "a", "b", "a_json", "b_json")
#: What a link into the page may fill the form with, running nothing: the session whose
#: lesson and current policy it starts from (the lab page's link), or a burst whose policy
#: it starts from (the burst history's).
PREFILL_KEYS = ("from", "burst")


@require_http_methods(["GET"])
@login_required
def compare(request: HtmxHttpRequest) -> HttpResponse:
    """Two policies against one scenario with a seed, both in virtual time.

    Each policy is a preset, a session's, a burst's or a step's, or JSON (``a_json``/``b_json``),
    edited field by field in the lab page's grouped policy form (:func:`_edit_form`); a submitted
    form redirects to the address holding only the edits. The query string is the whole
    comparison (``scenario`` or ``dependency`` with ``calls``, ``seed``, ``a``, ``b``); ``from``
    or ``burst`` alone only fill the form in. A scenario on the class's shared dependency is
    compared on its model (:func:`labs.selectors.replay.shared_comparison`). A malformed value
    answers 400 with a sentence per parameter, and runs nothing.
    """
    query = {key: request.GET.get(key, "") for key in COMPARE_KEYS}
    run = any(query.values())
    if not run:
        query |= _prefill(request.user, {key: request.GET.get(key, "") for key in PREFILL_KEYS})
    choices = compare_choices(request.user, also=(query["a"], query["b"]))
    edit_forms = {key: _edit_form(request.user, request.GET, query, key) for key in ("a", "b")}
    short = _short_url(request.GET, edit_forms)
    if short is not None:
        return redirect(f"{request.path}?{short}")
    context: dict[str, Any] = {
        "query": query,
        "scenarios": comparable_scenarios(),
        "choices": choices,
        "picked": {key: _picked(query, key) for key in ("a", "b")},
        "advanced_open": any(
            query[key].strip() for key in ("a_json", "b_json", "dependency", "calls")
        ) or any(query[key].strip().startswith("{") for key in ("a", "b")),
        "edit_forms": [
            {"key": key, "name": key.upper(), "form": form, "from": _chosen(query, key),
             "open": bool(form.changes()) or bool(form.is_bound and form.errors)}
            for key, form in edit_forms.items()
        ],
        "edits_on": "" if query["dependency"] else query["scenario"],
    }  # fmt: skip
    if not run:
        return render(request, COMPARE_TEMPLATE, context)
    problems, seed, policies = _compare_inputs(request.user, query)
    for key, form in edit_forms.items():
        form.is_valid()  # lengths only; the engine's validator has the ranges
        if form.too_long:
            problems += [f"Policy {key.upper()}, {m}" for m in form.problems_summary()]
        elif key in policies:
            policies[key] = merge_settings(policies[key], form.changes())
    result = None
    if not problems:
        try:
            if query["dependency"]:
                result = dependency_comparison(
                    dependency=policies["dependency"], calls=policies["calls"], seed=seed,
                    policy_a=policies["a"], policy_b=policies["b"],
                )  # fmt: skip
            else:
                result = policy_comparison(
                    scenario_slug=query["scenario"], seed=seed, policy_a=policies["a"],
                    policy_b=policies["b"],
                )  # fmt: skip
        except ValidationError as exc:
            problems = [_edit_problem(p, edit_forms) for p in exc.problems]
    if result is None:
        context["problems"] = problems
        return render(request, COMPARE_TEMPLATE, context, status=400)
    context |= {
        "result": result,
        "labels": {
            key: _edits_label(policy_choice_label(_chosen(query, key), choices), form)
            for key, form in edit_forms.items()
        },
    }
    if result.get("shared"):
        context |= {
            "shared_diff": shared_diff_table(result["a"], result["b"]),
            "shared_goodput": shared_goodput_series(result),
            "shared_goodput_summary": shared_goodput_summary(result),
        }
        return render(request, COMPARE_TEMPLATE, context)
    context |= {
        "diff": diff_table(scenario_metrics(result["a"]), scenario_metrics(result["b"])),
        "timelines": replay_timelines(
            [("policy A", result["a"]["events"]), ("policy B", result["b"]["events"])]
        ),
    }
    return render(request, COMPARE_TEMPLATE, context)


def _edit_form(user, get: QueryDict, query: dict[str, str], key: str) -> PolicyForm:
    """The form editing policy ``key`` field by field (prefix ``key``: ``a-max_attempts``),
    bound to the policy the comparison runs (the pick merged over the lesson's own), with
    the edits typed into it on top; its ``changes()`` are the edits only.

    An edit is a field whose value differs from what the form showed when the page was drawn:
    the policy ``<key>_from`` on the lesson ``edits_on`` (hidden in the form), else the
    current pick. So a pick changed in the same submit keeps the edits, and only them, and
    a link holding just the edited fields means the same comparison."""
    lesson = "" if query["dependency"] else query["scenario"]
    current = _shown(user, lesson, _chosen(query, key))
    prefix = f"{key}-"
    typed = {name[len(prefix):]: get[name] for name in get if name.startswith(prefix)}
    if f"{key}_from" in get:
        basis = _shown(user, get.get("edits_on", ""), get[f"{key}_from"].strip() or "defaults")
    else:
        basis = current
    shown = PolicyForm.initial_from(basis or {})
    edits = QueryDict(mutable=True)
    for name, value in typed.items():
        if name in shown and _differs(name, value, shown[name]):
            edits[prefix + name] = value
    return PolicyForm.from_post(edits, current or {}, prefix=key)


def _shown(user, lesson: str, token: str) -> dict[str, Any] | None:
    """The whole policy ``token`` stands for on ``lesson`` (None when it does not parse)."""
    try:
        changes = compare_policy(user, token, "policy")
    except ValidationError:
        return None
    return compare_shown_policy(lesson, changes)


def _differs(name: str, typed: str, shown: Any) -> bool:
    """Whether the value typed into field ``name`` is another value than the one shown."""
    path = next((p for n, p, _ in PolicyForm.spec if n == name), None)
    shown_text = "" if shown is None else str(shown)
    if path is None:  # the budget switch
        return typed.strip() != shown_text
    limit = limit_of(path)
    return coerce(typed, limit) != coerce(shown_text, limit)


def _edit_problem(problem: Problem, edit_forms: dict[str, PolicyForm]) -> str:
    """A comparison's problem as a sentence; one naming a setting of policy A or B is put
    beside that field of its form too, in the form's words (its label and range)."""
    key, dot, rest = problem.field.partition(".")
    form = edit_forms.get(key) if dot else None
    name = form.field_for_path(f"policy.{rest}") if form is not None else None
    if name is None:
        return str(problem)
    form.add_problems([Problem(f"policy.{rest}", problem.message)])
    return f"Policy {key.upper()}, {form.fields[name].label}: {problem.message}"


def _edits_label(label: str, form: PolicyForm) -> str:
    """The picked policy's ``label`` with what was edited field by field, for the result's
    "A: …" line (``The lesson's own policy, edited: Max attempts per call 1``)."""
    edited = [f"{form.fields[name].label} {form.raw(name).strip() or 'off'}"
              for name in form.fields if form.posted(name)]  # fmt: skip
    if not edited:
        return label
    return f"{label.removesuffix(', unchanged')}, edited: {'; '.join(edited)}"


def _short_url(get: QueryDict, edit_forms: dict[str, PolicyForm]) -> str | None:
    """The comparison's query string with only the edited fields, when ``get`` holds more (a
    submitted form sends every field of both policies): the page redirects there, so the
    address stays short enough to send. None when ``get`` is already that."""
    extra = [k for k in get if k not in COMPARE_KEYS and k not in PREFILL_KEYS]
    edited = [(f"{key}-{name}", form.raw(name)) for key, form in edit_forms.items()
              for name in form.fields if form.posted(name)]  # fmt: skip
    if not extra or sorted(extra) == sorted(k for k, _ in edited):
        return None
    short = QueryDict(mutable=True)
    for k in COMPARE_KEYS:
        if k in get:
            short[k] = get[k]
    for k, v in edited:
        short[k] = v
    return short.urlencode()


def _prefill(user, prefill: dict[str, str]) -> dict[str, str]:
    """The form's scenario and policy A from a lab page's (``from``: the session's lesson and
    its current policy) or a burst's link (``burst``: its lesson and the policy it ran
    with); policy B starts as the lesson's own. An id the user may not see fills nothing."""
    session = None
    token = ""
    if prefill["burst"].isdigit():
        burst = (
            Burst.objects.filter(
                pk=int(prefill["burst"]), session__in=LabSession.objects.visible_to(user)
            )
            .select_related("session__scenario")
            .first()
        )
        if burst is not None:
            session, token = burst.session, f"burst:{burst.pk}"
    elif prefill["from"].isdigit():
        session = LabSession.objects.visible_to(user).filter(pk=int(prefill["from"])).first()
        token = f"mine:{prefill['from']}" if session is not None else ""
    if session is None:
        return {}
    return {"scenario": session.scenario.slug, "a": token, "b": "defaults"}


def _chosen(query: dict[str, str], key: str) -> str:
    """The policy a comparison uses for ``key``: the JSON written for it, else the pick."""
    return query[f"{key}_json"].strip() or query[key].strip() or "defaults"


def _picked(query: dict[str, str], key: str) -> str:
    """The picker's selected value (a policy written straight into ``a``/``b`` as JSON, by an
    older link, shows in the JSON field instead)."""
    value = query[key].strip()
    if value.startswith("{"):
        query[f"{key}_json"] = query[f"{key}_json"] or value
        return "defaults"
    return value or "defaults"


def _compare_inputs(
    user, query: dict[str, str]
) -> tuple[list[str], int | None, dict[str, Any]]:
    problems: list[str] = []
    for key, value in query.items():
        if len(value) > COMPARE_VALUE_MAX:
            problems.append(f"{key}: at most {COMPARE_VALUE_MAX} characters (got {len(value)})")
    if problems:
        return problems, None, {}
    policies: dict[str, Any] = {}
    if query["scenario"] and query["dependency"]:
        problems.append("scenario: give a scenario or a dependency script, not both")
    elif query["dependency"]:
        problems += _dependency_inputs(query, policies)
    elif not query["scenario"]:
        problems.append("scenario: pick one of the scenarios, or give a dependency script")
    seed = None
    low, high = int(LIMITS["seed"].min), int(LIMITS["seed"].max)
    if query["seed"]:
        try:
            seed = int(query["seed"])
        except ValueError:
            seed = None
        if seed is None or not low <= seed <= high:
            problems.append(f"seed: must be a whole number between {low} and {high}")
            seed = None
    for key in ("a", "b"):
        try:
            policies[key] = compare_policy(user, _chosen(query, key), key)
        except ValidationError as exc:
            problems += [str(p) for p in exc.problems]
    return problems, seed, policies


def _dependency_inputs(query: dict[str, str], parsed: dict[str, Any]) -> list[str]:
    """Parse ``dependency`` (a JSON object) and ``calls`` into ``parsed``; the problems."""
    problems = []
    try:
        dependency = json.loads(query["dependency"])
    except json.JSONDecodeError as exc:
        problems.append(f"dependency: is not valid JSON (column {exc.colno}: {exc.msg})")
    else:
        if not isinstance(dependency, dict):
            problems.append('dependency: must be a JSON object, e.g. {"mode": "down"}')
        elif dependency.get("mode") == "shared":
            problems.append(
                "dependency: the shared dependency behaves as the whole class's load makes it "
                "behave, which a dependency script alone cannot simulate; pick the storm "
                "lesson as the scenario instead, to compare on the shared dependency's model"
            )
        else:
            parsed["dependency"] = dependency
    low, high = int(LIMITS["steps[].burst"].min), int(LIMITS["steps[].burst"].max)
    try:
        calls = int(query["calls"] or "6")
    except ValueError:
        calls = 0
    if not low <= calls <= high:
        problems.append(f"calls: must be a whole number between {low} and {high}")
    parsed["calls"] = calls
    return problems
