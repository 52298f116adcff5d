"""The live lab page of one session, and the small htmx views behind its controls.

Reads go through ``LabSession.objects.visible_to`` (a session the user may not see is a 404,
never a 403, so ids do not leak); writes additionally need the session's owner: anyone else
who may see it (an instructor drilling down) gets the same page with every control disabled
(``read_only`` in the context) and a 403 from the write views. Every write calls a service in
``labs.services``; the page learns what happened from the websocket (journal rows, badge,
summary), so the write views only answer with the form they were posted from (Run burst
clicked in its form while it shows no error: only the form's message line).

htmx requests get the named partial of ``labs/session.html`` for the element that made them
(partials are named after their DOM ids). A refused value answers 422 (settings) or 400
(burst) with the re-rendered form, errors beside the fields. Run burst also answers 409 when a
burst is already running and 429 past the per-user limit, both with only the form's message
line (retargeted, so typed values stay), and 503 with the form while Redis is unreachable.
Without JavaScript the forms post normally: success redirects back to the page,
an error renders the whole page with the same messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpResponse,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import reswap, retarget

from labs.clicks import start_burst_for
from labs.engine.breaker import STATE_LABELS
from labs.forms.lab import (
    MODE_PARAMS,
    BurstForm,
    DependencyForm,
    PolicyForm,
    describe_limit,
)
from labs.journal import kinds
from labs.journal.rows import clock_text
from labs.journal.store import event_payload
from labs.models import Classroom, JournalEvent, LabSession, Scenario
from labs.presenters.exports import csv_lines
from labs.presenters.lab_page import badge, burst_panel, chart_payload, summary_prototype
from labs.presenters.lessons import scenario_steps
from labs.presenters.storm import OVERLOAD_WAIT_MS
from labs.presenters.text import MODE_LABELS, mode_label
from labs.selectors.access import owned_session, visible_session
from labs.selectors.lab import (
    breaker_now,
    burst_rows,
    chain_place_of,
    chart_events,
    journal_items,
    journal_page,
    latest_burst,
    latest_traffic,
    second_rows,
    session_traffic_defaults,
    strip_seconds,
)
from labs.selectors.predictions import session_steps
from labs.services import bursts as burst_services
from labs.services import lab as lab_services
from labs.services import traffic as traffic_services
from labs.services.lab import session_open as session_open_service
from labs.views import ERRORS_SHOWN, HtmxHttpRequest

TEMPLATE = "labs/session.html"
#: Seconds a client is told to wait before trying again while Redis is unreachable.
RECONNECT_RETRY_AFTER = 5


def is_read_only(user, session: LabSession) -> bool:
    """Only the owner drives a session; everyone else who may see it only watches."""
    return session.owner_id != user.pk


def writable_session(request: HtmxHttpRequest, pk: int, *, related: bool = True) -> LabSession:
    """The session for a write view: 404 if invisible, 403 if the user only watches it
    (``related``: see :func:`labs.selectors.access.owned_session`)."""
    session = owned_session(request.user, pk, related=related)
    if session is None:
        visible_session(request.user, pk)  # 404 for a session the user may not see
        raise PermissionDenied("This session belongs to someone else: you can only watch it.")
    return session


def breaker_for_page(session: LabSession) -> dict[str, Any]:
    return badge(breaker_now(session.pk, session.policy))


def page_context(
    request: HtmxHttpRequest,
    session: LabSession,
    *,
    dependency_form: DependencyForm | None = None,
    policy_form: PolicyForm | None = None,
    burst_form: BurstForm | None = None,
    burst_error: str = "",
) -> dict[str, Any]:
    """Everything ``labs/session.html`` renders."""
    rows, older = journal_page(session)
    steps = session_steps(session, scenario_steps(session.scenario))
    burst = latest_burst(session)
    return {
        "session": session,
        "chain_place": chain_place_of(session),
        "read_only": is_read_only(request.user, session),
        "breaker": breaker_for_page(session),
        "journal_rows": journal_items(session.pk, rows),
        "older_before": older,
        "last_seq": rows[0]["seq"] if rows else 0,
        "summary": burst_panel(burst, burst_rows(burst)),
        "summary_prototype": summary_prototype(),
        "chart_events": [chart_payload(e) for e in chart_events(session)],
        "strip_seconds": strip_seconds(session.pk),
        "steps": steps,
        **lesson_context(steps),
        "ws_path": f"/ws/sessions/{session.pk}/",
        "state_labels": STATE_LABELS,
        "count_rules": kinds.count_rules(),
        **traffic_context(session),
        **form_context(
            session,
            dependency_form=dependency_form,
            policy_form=policy_form,
            burst_form=burst_form,
            burst_error=burst_error,
        ),
    }


def lesson_context(steps: list[dict]) -> dict[str, Any]:
    """Lesson mode (a scenario with steps): the page shows the current step's controls and
    what it asks to watch, every other setting under one closed "All settings". Each step that
    changes settings gets its own small form of just the fields it changes, filled with the
    step's values (ids prefixed ``step<n>_``, so they never clash with the full forms); the page
    shows the current step's (the first not done) and moves on as steps are ticked."""
    current = next((step["index"] for step in steps if not step.get("done")), None)
    for step in steps:
        step["current"] = step["index"] == current
        form_class = {"dependency": DependencyForm, "policy": PolicyForm}.get(step["action"])
        if form_class is None:
            continue
        values = {
            name: value.lower() if value in ("True", "False") else value
            for name, value in json.loads(step["vals"]).items()
        }
        form = form_class(initial=values, auto_id=f"step{step['index']}_%s")
        step["fields"] = [form[name] for name in values if name in form.fields]
    return {"lesson": bool(steps), "current_step": current}


def form_context(
    session: LabSession,
    *,
    dependency_form: DependencyForm | None = None,
    policy_form: PolicyForm | None = None,
    burst_form: BurstForm | None = None,
    burst_error: str = "",
) -> dict[str, Any]:
    """The three forms (fresh from the session's settings unless given) and their layout."""
    dependency_form = dependency_form or DependencyForm(
        initial=DependencyForm.initial_from(session.dependency or {})
    )
    policy_form = policy_form or PolicyForm(initial=PolicyForm.initial_from(session.policy or {}))
    burst_form = burst_form or BurstForm(initial={"size": 6, "concurrency": 1})
    current_mode = (session.dependency or {}).get("mode", "healthy")
    return {
        "dependency_form": dependency_form,
        "policy_form": policy_form,
        "burst_form": burst_form,
        "burst_error": burst_error,
        "modes": [
            {
                "value": mode,
                "label": label,
                "current": mode == current_mode,
                "params": " ".join(MODE_PARAMS[mode]),
            }
            for mode, label in MODE_LABELS.items()
        ],
        "current_mode": current_mode,
        "current_mode_label": mode_label(current_mode),
        "current_mode_params": MODE_PARAMS.get(current_mode, ()),
        "mode_help": describe_limit("dependency.mode"),
    }


def traffic_context(session: LabSession, **extra) -> dict[str, Any]:
    """What the traffic controls show: the latest run, the ranges, the values to start with."""
    low_rate, high_rate = traffic_services.RATE_RANGE
    low_s, high_s = traffic_services.DURATION_RANGE
    context = {
        "traffic": latest_traffic(session),
        "traffic_rate_range": (low_rate, high_rate),
        "traffic_duration_range": (low_s, high_s),
        "traffic_values": session_traffic_defaults(session),
        "traffic_problems": [],
        "traffic_message": "",
        "overload_wait_ms": OVERLOAD_WAIT_MS,
    }
    context.update(extra)
    return context


def _plain_int(raw: str) -> Any:
    text = (raw or "").strip()
    return int(text) if text.isascii() and text.isdigit() else text


@require_POST
@login_required
def session_traffic(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Start (``action=start``: rate, duration_s, arrivals) or stop (``action=stop``) the
    session's steady traffic; 400 naming the fields and ranges, 409 while one runs."""
    session = writable_session(request, pk)
    values = {
        "rate": _plain_int(request.POST.get("rate", "")),
        "duration_s": _plain_int(request.POST.get("duration_s", "")),
        "arrivals": request.POST.get("arrivals", "poisson").strip(),
    }
    status = 200
    extra: dict[str, Any] = {}
    if request.POST.get("action") == "stop":
        stopped = traffic_services.traffic_stop(session=session, user=request.user)
        extra["traffic_message"] = (
            "Stopping: the calls in flight finish, no new call starts."
            if stopped
            else "No traffic is running."
        )
    else:
        try:
            run = traffic_services.traffic_start(session=session, user=request.user, **values)
            extra["traffic_message"] = f"Traffic started: {run.calls} calls scheduled."
        except traffic_services.TrafficInvalid as exc:
            status = 400
            extra["traffic_problems"] = [str(p) for p in exc.problems]
            extra["traffic_values"] = values
        except traffic_services.TrafficAlreadyRunning as exc:
            status = 409
            extra["traffic_problems"] = [str(exc)]
    context = {"session": session, **traffic_context(session, **extra)}
    if request.htmx:
        return render_partial(request, "traffic-form", context, status)
    if status != 200:
        return render(
            request, TEMPLATE, {**page_context(request, session), **context}, status=status
        )
    return redirect(session)


def render_partial(
    request: HtmxHttpRequest, partial: str, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    return render(request, f"{TEMPLATE}#{partial}", context, status=status)


# --- pages -----------------------------------------------------------------------------------


@require_POST
@login_required
def session_open(request: HtmxHttpRequest, classroom_id: int, scenario_id: int) -> HttpResponse:
    """Open (create on first use) the student's session for a scenario; presets applied."""
    classroom = get_object_or_404(Classroom, pk=classroom_id)
    scenario = get_object_or_404(Scenario, pk=scenario_id)
    session = session_open_service(user=request.user, classroom=classroom, scenario=scenario)
    return redirect(session)


@require_GET
@login_required
def session_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The live lab page (read-only for anyone but the owner)."""
    session = visible_session(request.user, pk)
    burst_services.bursts_reap_stale(session_id=session.pk)
    lab_services.session_ensure_state(session=session)
    return render(request, TEMPLATE, page_context(request, session))


@require_GET
@login_required
def session_journal(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Older journal rows (htmx paging): the 100 rows before ``?before=<seq>``."""
    session = visible_session(request.user, pk)
    try:
        before = int(request.GET.get("before", ""))
    except ValueError:
        return HttpResponse("before must be a sequence number", status=400)
    rows, older = journal_page(session, before)
    context = {
        "session": session,
        "journal_rows": journal_items(session.pk, rows),
        "older_before": older,
    }
    if request.htmx:
        return render_partial(request, "journal-older", context)
    return render(request, "labs/session_journal.html", context)


@require_GET
@login_required
def session_second(request: HtmxHttpRequest, pk: int, second: int) -> HttpResponse:
    """Every journal row of one second of the session's steady traffic (the lab page pushes
    its counts; a student who opens the second gets its rows here). Whoever may see the page
    may see its rows: the session's owner and its class's instructors; a 404 for anyone else."""
    session = visible_session(request.user, pk)
    rows, total = second_rows(session.pk, second)
    moment = datetime.fromtimestamp(second, tz=UTC)
    context = {"session": session, "second_rows": rows, "second_total": total,
               "second": second, "second_clock": clock_text(moment)[:8]}  # fmt: skip
    if request.htmx:
        return render_partial(request, "second-rows", context)
    return render(request, "labs/session_second.html", context)


# --- writes (owner only) ---------------------------------------------------------------------


def _after_write(request: HtmxHttpRequest, session: LabSession, partial: str, context: dict):
    if request.htmx:
        return render_partial(request, partial, context)
    return redirect(session)


def _refused(request: HtmxHttpRequest, session: LabSession, partial: str, status: int, **forms):
    if request.htmx:
        return render_partial(
            request, partial, {"session": session, **form_context(session, **forms)}, status
        )
    return render(request, TEMPLATE, page_context(request, session, **forms), status=status)


def _settings_write(
    request: HtmxHttpRequest, pk: int, *, form_class, field: str, service, partial: str, saved: str
) -> HttpResponse:
    """Merge a settings form into the session through ``service``; 422 with the form's errors
    (field and range beside each) when the service refuses, and nothing changed."""
    session = writable_session(request, pk)
    form = form_class.from_post(request.POST, getattr(session, field) or {})
    form.is_valid()  # parsing only; the service is the validator
    if form.too_long:  # refused before the engine sees (and quotes) an over-long value
        return _refused(request, session, partial, 422, **{f"{field}_form": form})
    try:
        session = service(session=session, user=request.user, changes=form.changes())
    except lab_services.SettingsInvalid as exc:
        form.add_problems(exc.problems)
        return _refused(request, session, partial, 422, **{f"{field}_form": form})
    context = {"session": session, **form_context(session)}
    context["saved"] = saved
    return _after_write(request, session, partial, context)


@require_POST
@login_required
def session_dependency(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Set the fake dependency (a mode button and its parameters)."""
    return _settings_write(
        request, pk, form_class=DependencyForm, field="dependency",
        service=lab_services.session_set_dependency, partial="dependency-form",
        saved="Dependency set.",
    )  # fmt: skip


@require_POST
@login_required
def session_policy(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Change the client policy (every field of the engine's policy, docs/engine.md)."""
    return _settings_write(
        request, pk, form_class=PolicyForm, field="policy",
        service=lab_services.session_set_policy, partial="policy-form",
        saved="Policy saved; it applies from the next burst or traffic run.",
    )  # fmt: skip


@require_POST
@login_required
def session_burst(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Run a burst: 400 with the ranges for bad numbers, 409 while one is running, 429 past
    the per-user limit and 503 while Redis is unreachable (nothing queued, try again). The
    page sends a click in a form showing no error over its websocket instead when that is
    open (:func:`labs.clicks.socket_run_burst`); this view is the way without it, and for
    every other click."""
    session = writable_session(request, pk, related=False)
    form = BurstForm(request.POST)
    form.is_valid()
    if form.too_long:
        return _refused(request, session, "burst-form", 400, burst_form=form)
    size, concurrency = form.values()
    answer = start_burst_for(request, session, size, concurrency, request.POST.get("step"))
    if answer.status == 400:
        form.add_problems(list(answer.problems))
        return _refused(request, session, "burst-form", 400, burst_form=form)
    if answer.status == 503:
        return _burst_unavailable(request, session, form, answer.message)
    if answer.status != 200:
        response = _burst_message(request, session, answer.status, answer.message)
        if answer.retry_after is not None:
            response["Retry-After"] = str(answer.retry_after)
        return response
    saved = answer.message
    if request.htmx and request.htmx.trigger == "burst-form" and ERRORS_SHOWN not in request.POST:
        # Clicked in the form while it shows no field error: only its message line changes
        # (the values typed stay as they are), so only that line is rendered. A form that
        # shows errors posts ERRORS_SHOWN and gets the whole form back, clean; a step's "Do
        # it" button gets the form back with the step's values in it.
        response = render_partial(
            request, "burst-message", {"session": session, "burst_error": "", "saved": saved}
        )
        return reswap(retarget(response, "#burst-message"), "outerHTML")
    # Only what the burst form's partial shows: the other two forms are not built.
    context = {"session": session, "burst_form": form, "burst_error": "", "saved": saved}
    return _after_write(request, session, "burst-form", context)


def _burst_message(
    request: HtmxHttpRequest, session: LabSession, status: int, message: str
) -> HttpResponse:
    """A refusal that needs no field errors: htmx gets only the form's message line (retargeted
    there, so the values typed stay as they are); without JavaScript, the whole page."""
    if not request.htmx:
        return render(
            request, TEMPLATE, page_context(request, session, burst_error=message), status=status
        )
    context = {
        "session": session,
        "burst_error": message,
        "burst_refusal": "running" if status == 409 else "",
    }
    response = render_partial(request, "burst-message", context, status)
    return reswap(retarget(response, "#burst-message"), "outerHTML")


def _burst_unavailable(
    request: HtmxHttpRequest, session: LabSession, form: BurstForm, message: str
) -> HttpResponse:
    """503 with the form (ready to click again) and the reconnecting sentence."""
    if request.htmx:
        response = render_partial(
            request, "burst-form",
            {"session": session, **form_context(session, burst_form=form, burst_error=message)},
            503,
        )  # fmt: skip
    else:
        response = render(
            request, TEMPLATE,
            page_context(request, session, burst_form=form, burst_error=message), status=503,
        )  # fmt: skip
    response["Retry-After"] = str(RECONNECT_RETRY_AFTER)
    return response


@require_POST
@login_required
def session_reset(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Start over with the scenario's settings (refused while a burst runs)."""
    session = writable_session(request, pk)
    try:
        session = lab_services.session_reset(session=session, user=request.user)
    except burst_services.BurstAlreadyRunning as exc:
        return _action_status(request, session, str(exc), status=409, error=True)
    return _action_status(
        request, session, "Session reset: scenario settings back, breaker CLOSED.", forms=True
    )


@require_POST
@login_required
def session_breaker(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Force the breaker open or closed (``action``)."""
    session = writable_session(request, pk)
    action = request.POST.get("action", "")
    if action not in ("open", "closed"):
        return _action_status(
            request, session, "action must be one of open, closed", status=400, error=True
        )
    state = lab_services.session_force_breaker(session=session, user=request.user, action=action)
    return _action_status(request, session, f"Breaker forced {state.replace('_', '-').upper()}.")


def _action_status(
    request: HtmxHttpRequest,
    session: LabSession,
    message: str,
    *,
    status: int = 200,
    error: bool = False,
    forms: bool = False,
) -> HttpResponse:
    if not request.htmx:
        if error:
            return render(
                request,
                TEMPLATE,
                page_context(request, session) | {"action_message": message, "action_error": True},
                status=status,
            )
        return redirect(session)
    context = {
        "session": session,
        "action_message": message,
        "action_error": error,
        "oob_forms": forms,
        "oob": True,
        "breaker": breaker_for_page(session),
    }
    if forms:
        session.refresh_from_db()
        context |= form_context(session)
    return render_partial(request, "action-status", context, status)


# --- export ----------------------------------------------------------------------------------

EXPORT_COLUMNS = (
    "seq", "at", "kind", "burst", "t_ms", "call", "attempt", "outcome", "error", "latency_ms",
    "backoff_ms", "state_from", "state_to", "actor", "message", "data",
)  # fmt: skip


@require_GET
@login_required
def session_export(request: HtmxHttpRequest, pk: int, fmt: str) -> HttpResponse:
    """The whole journal of a session, oldest first, as CSV or JSON (anyone who may see it)."""
    if fmt not in ("csv", "json"):
        raise Http404("Export formats: csv, json.")
    session = visible_session(request.user, pk)
    rows = JournalEvent.objects.filter(session=session).order_by("seq")
    filename = f"failure-lab-session-{session.pk}-journal.{fmt}"
    if fmt == "json":
        response = JsonResponse(
            {
                "session": session.pk,
                "owner": session.owner.get_username(),
                "classroom": session.classroom.name,
                "scenario": session.scenario.slug,
                "events": [event_payload(r) for r in rows.iterator(chunk_size=2000)],
            },
            json_dumps_params={"indent": 1},
        )
    else:
        response = StreamingHttpResponse(_csv_lines(rows), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _csv_lines(rows) -> Iterator[str]:
    def cells():
        for row in rows.iterator(chunk_size=2000):
            p = event_payload(row)
            p["data"] = json.dumps(p["data"], sort_keys=True) if p["data"] else ""
            yield [p.get(c) for c in EXPORT_COLUMNS]

    return csv_lines(EXPORT_COLUMNS, cells())
