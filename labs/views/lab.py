"""The live lab page of one session, and the small htmx views behind its controls.

Reads go through ``LabSession.objects.visible_to`` (a session the user may not see is a 404,
never a 403, so ids do not leak); writes additionally need the session's owner: anyone else
who may see it (an instructor drilling down) gets the same page with every control disabled
(``read_only`` in the context) and a 403 from the write views. Every write calls a service in
``labs.services``; the page learns what happened from the websocket (journal rows, badge,
summary), so the write views only answer with the form they were posted from.

htmx requests get the named partial of ``labs/session.html`` for the element that made them
(partials are named after their DOM ids). A refused value answers 422 (settings) or 400
(burst) with the re-rendered form, errors beside the fields; 409 when a burst is already
running. Without JavaScript the forms post normally: success redirects back to the page,
an error renders the whole page with the same messages.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Iterator
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from labs import runtime
from labs.engine import is_fast_fail
from labs.forms_lab import (
    MODE_LABELS,
    MODE_PARAMS,
    POLICY_GROUPS,
    BurstForm,
    DependencyForm,
    PolicyForm,
    describe_limit,
)
from labs.journal import event_payload
from labs.models import Burst, Classroom, JournalEvent, LabSession, Scenario
from labs.services import bursts as burst_services
from labs.services import lab as lab_services
from labs.services.lab import session_open as session_open_service

JOURNAL_PAGE = 100
#: Bursts the timeline chart shows (older ones scroll out).
CHART_BURSTS = 4
CHART_MAX_EVENTS = 3000
TEMPLATE = "labs/session.html"


# --- helpers ---------------------------------------------------------------------------------


def visible_session(user, pk: int) -> LabSession:
    """The session ``pk`` if ``user`` may see it, else 404."""
    return get_object_or_404(
        LabSession.objects.visible_to(user).select_related("scenario", "classroom", "owner"),
        pk=pk,
    )


def is_read_only(user, session: LabSession) -> bool:
    """Only the owner drives a session; everyone else who may see it only watches."""
    return session.owner_id != user.pk


def writable_session(request: HttpRequest, pk: int) -> LabSession:
    """The session for a write view: 404 if invisible, 403 if the user only watches it."""
    session = visible_session(request.user, pk)
    if is_read_only(request.user, session):
        raise PermissionDenied("This session belongs to someone else: you can only watch it.")
    return session


def breaker_for_page(session: LabSession) -> dict[str, Any]:
    """``runtime.breaker_view`` plus the server's clock, so the page can count down the
    cooldown against its own clock (``server_now_ms`` corrects for clock skew)."""
    return badge_for(session.pk, session.policy)


def badge_for(session_id: int, policy: dict[str, Any]) -> dict[str, Any]:
    """:func:`breaker_for_page` from the session's id and policy (Redis only)."""
    view = runtime.breaker_view_of(session_id, policy)
    view["server_now_ms"] = round(time.time() * 1000)
    view["threshold"] = (view.get("config") or {}).get("failure_threshold")
    return view


def summary_from_events(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """A running burst's summary so far, from its journal rows (oldest first)."""
    summary = {
        "calls": 0,
        "succeeded": 0,
        "failed": 0,
        "fast_failed": 0,
        "attempts_total": 0,
        "backoff_ms_total": 0.0,
    }
    for p in payloads:
        if p["kind"] == "attempt":
            summary["attempts_total"] += 1
        elif p["kind"] == "sleep":
            summary["backoff_ms_total"] += p.get("backoff_ms") or 0
        elif p["kind"] == "call_result":
            summary["calls"] += 1
            outcome = p.get("outcome") or ""
            if outcome == "success":
                summary["succeeded"] += 1
            elif is_fast_fail(outcome):
                summary["fast_failed"] += 1
            else:
                summary["failed"] += 1
    return summary


def burst_summary(burst: Burst | None) -> dict[str, Any] | None:
    """What the summary panel shows for ``burst`` (None: no burst yet)."""
    if burst is None:
        return None
    base = {
        "id": burst.pk,
        "number": burst.number,
        "size": burst.size,
        "concurrency": burst.concurrency,
        "status": burst.status,
        "error": burst.error,
    }
    if burst.status == Burst.Status.DONE and burst.summary:
        s = burst.summary
        return base | {
            "calls": s.get("calls", 0),
            "succeeded": s.get("succeeded", 0),
            "failed": s.get("failed", 0),
            "fast_failed": s.get("fast_failed", 0),
            "attempts_total": s.get("attempts_total", 0),
            "backoff_ms_total": s.get("backoff_ms_total", 0),
            "wall_ms": s.get("wall_ms"),
        }
    rows = [event_payload(r) for r in burst.events.order_by("seq")]
    return base | summary_from_events(rows) | {"wall_ms": None}


def summary_from_end_event(burst: dict[str, Any], end: dict[str, Any]) -> dict[str, Any]:
    """The summary panel's data from a ``burst_end`` payload (used by the consumer)."""
    s = end.get("data") or {}
    return burst | {
        "status": "done",
        "calls": s.get("calls", 0),
        "succeeded": s.get("succeeded", 0),
        "failed": s.get("failed", 0),
        "fast_failed": s.get("fast_failed", 0),
        "attempts_total": s.get("attempts_total", 0),
        "backoff_ms_total": s.get("backoff_ms_total", 0),
        "wall_ms": s.get("wall_ms"),
    }


def chart_events(session: LabSession) -> list[dict[str, Any]]:
    """The journal rows the timeline draws: everything since the start of the last few bursts
    (oldest first, at most ``CHART_MAX_EVENTS``)."""
    oldest = (
        Burst.objects.filter(session=session).order_by("-number").values_list("pk", flat=True)
    )[:CHART_BURSTS]
    ids = list(oldest)
    if not ids:
        return []
    first_seq = (
        JournalEvent.objects.filter(session=session, burst_id__in=ids)
        .order_by("seq")
        .values_list("seq", flat=True)
        .first()
    )
    if first_seq is None:
        return []
    rows = JournalEvent.objects.filter(session=session, seq__gte=first_seq).order_by("-seq")[
        :CHART_MAX_EVENTS
    ]
    payloads = [chart_payload(event_payload(r)) for r in rows]
    payloads.reverse()
    return payloads


def chart_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The part of an event the timeline needs (no message, no actor)."""
    keep = (
        "seq", "kind", "burst", "t_ms", "at", "call", "attempt", "outcome", "error",
        "latency_ms", "backoff_ms", "state_from", "state_to",
    )  # fmt: skip
    data = payload.get("data") or {}
    small = {k: payload.get(k) for k in keep}
    small["data"] = {
        k: data[k] for k in ("probe", "size", "first_call", "start_ms", "end_ms") if k in data
    }
    return small


def journal_page(session: LabSession, before: int | None = None) -> tuple[list[dict], int | None]:
    """One page of the journal, newest first, and the seq to page on from (None: no older)."""
    rows = JournalEvent.objects.filter(session=session)
    if before is not None:
        rows = rows.filter(seq__lt=before)
    page = list(rows.order_by("-seq")[: JOURNAL_PAGE + 1])
    older = page[JOURNAL_PAGE - 1].seq if len(page) > JOURNAL_PAGE else None
    return [event_payload(r) for r in page[:JOURNAL_PAGE]], older


def scenario_steps(scenario: Scenario) -> list[dict[str, Any]]:
    """The scenario's steps with what the page needs to offer a "Do it" button."""
    from labs.templatetags.lab_tags import step_sentence

    script = scenario.script if isinstance(scenario.script, dict) else {}
    steps = []
    for index, step in enumerate(script.get("steps") or [], start=1):
        if not isinstance(step, dict):
            continue
        item: dict[str, Any] = {"index": index, "text": step_sentence(step), "action": None}
        if "burst" in step:
            item["action"] = "burst"
            item["vals"] = json.dumps(
                {"size": step.get("burst"), "concurrency": step.get("concurrency", 1)}
            )
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


def page_context(
    request: HttpRequest,
    session: LabSession,
    *,
    dependency_form: DependencyForm | None = None,
    policy_form: PolicyForm | None = None,
    burst_form: BurstForm | None = None,
    burst_error: str = "",
) -> dict[str, Any]:
    """Everything ``labs/session.html`` renders."""
    rows, older = journal_page(session)
    latest = Burst.objects.filter(session=session).order_by("-number").first()
    return {
        "session": session,
        "read_only": is_read_only(request.user, session),
        "breaker": breaker_for_page(session),
        "journal_rows": rows,
        "older_before": older,
        "last_seq": rows[0]["seq"] if rows else 0,
        "summary": burst_summary(latest),
        "chart_events": chart_events(session),
        "steps": scenario_steps(session.scenario),
        "ws_path": f"/ws/sessions/{session.pk}/",
        **form_context(
            session,
            dependency_form=dependency_form,
            policy_form=policy_form,
            burst_form=burst_form,
            burst_error=burst_error,
        ),
    }


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
        "current_mode_label": MODE_LABELS.get(current_mode, current_mode),
        "current_mode_params": MODE_PARAMS.get(current_mode, ()),
        "policy_groups": [
            (legend, [policy_form[name] for name in names]) for legend, names in POLICY_GROUPS
        ],
        "mode_help": describe_limit("dependency.mode"),
    }


def render_partial(
    request: HttpRequest, partial: str, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    return render(request, f"{TEMPLATE}#{partial}", context, status=status)


# --- pages -----------------------------------------------------------------------------------


@require_POST
@login_required
def session_open(request: HttpRequest, classroom_id: int, scenario_id: int) -> HttpResponse:
    """Open (create on first use) the student's session for a scenario; presets applied."""
    classroom = get_object_or_404(Classroom, pk=classroom_id)
    scenario = get_object_or_404(Scenario, pk=scenario_id)
    session = session_open_service(user=request.user, classroom=classroom, scenario=scenario)
    return redirect(session)


@require_GET
@login_required
def session_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """The live lab page (read-only for anyone but the owner)."""
    session = visible_session(request.user, pk)
    burst_services.bursts_reap_stale(session_id=session.pk)
    lab_services.session_ensure_state(session=session)
    return render(request, TEMPLATE, page_context(request, session))


@require_GET
@login_required
def session_journal(request: HttpRequest, pk: int) -> HttpResponse:
    """Older journal rows (htmx paging): the 100 rows before ``?before=<seq>``."""
    session = visible_session(request.user, pk)
    try:
        before = int(request.GET.get("before", ""))
    except ValueError:
        return HttpResponse("before must be a sequence number", status=400)
    rows, older = journal_page(session, before)
    context = {"session": session, "journal_rows": rows, "older_before": older}
    if request.htmx:
        return render_partial(request, "journal-older", context)
    return render(request, "labs/session_journal.html", context)


# --- writes (owner only) ---------------------------------------------------------------------


def _after_write(request: HttpRequest, session: LabSession, partial: str, context: dict):
    if request.htmx:
        return render_partial(request, partial, context)
    return redirect(session)


def _refused(request: HttpRequest, session: LabSession, partial: str, status: int, **forms):
    if request.htmx:
        return render_partial(
            request, partial, {"session": session, **form_context(session, **forms)}, status
        )
    return render(request, TEMPLATE, page_context(request, session, **forms), status=status)


def _settings_write(
    request: HttpRequest, pk: int, *, form_class, field: str, service, partial: str, saved: str
) -> HttpResponse:
    """Merge a settings form into the session through ``service``; 422 with the form's errors
    (field and range beside each) when the service refuses, and nothing changed."""
    session = writable_session(request, pk)
    form = form_class.from_post(request.POST, getattr(session, field) or {})
    form.is_valid()  # parsing only; the service is the validator
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
def session_dependency(request: HttpRequest, pk: int) -> HttpResponse:
    """Set the fake dependency (a mode button and its parameters)."""
    return _settings_write(
        request, pk, form_class=DependencyForm, field="dependency",
        service=lab_services.session_set_dependency, partial="dependency-form",
        saved="Dependency set.",
    )  # fmt: skip


@require_POST
@login_required
def session_policy(request: HttpRequest, pk: int) -> HttpResponse:
    """Change the client policy (every field of DESIGN section 4)."""
    return _settings_write(
        request, pk, form_class=PolicyForm, field="policy",
        service=lab_services.session_set_policy, partial="policy-form",
        saved="Policy saved; it applies from the next burst.",
    )  # fmt: skip


@require_POST
@login_required
def session_burst(request: HttpRequest, pk: int) -> HttpResponse:
    """Run a burst: 400 with the ranges for bad numbers, 409 while one is running."""
    session = writable_session(request, pk)
    form = BurstForm(request.POST)
    form.is_valid()
    size, concurrency = form.values()
    try:
        burst = burst_services.burst_start(
            session=session, user=request.user, size=size, concurrency=concurrency
        )
    except burst_services.BurstInvalid as exc:
        form.add_problems(exc.problems)
        return _refused(request, session, "burst-form", 400, burst_form=form)
    except burst_services.BurstAlreadyRunning as exc:
        return _refused(request, session, "burst-form", 409, burst_form=form, burst_error=str(exc))
    context = {"session": session, **form_context(session, burst_form=form)}
    context["saved"] = (
        f"Burst {burst.number} queued: {burst.size} call{'s' if burst.size != 1 else ''}."
    )
    return _after_write(request, session, "burst-form", context)


@require_POST
@login_required
def session_reset(request: HttpRequest, pk: int) -> HttpResponse:
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
def session_breaker(request: HttpRequest, pk: int) -> HttpResponse:
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
    request: HttpRequest,
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
def session_export(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
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


class _Echo:
    def write(self, value: str) -> str:
        return value


def _csv_lines(rows) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(EXPORT_COLUMNS)
    for row in rows.iterator(chunk_size=2000):
        p = event_payload(row)
        p["data"] = json.dumps(p["data"], sort_keys=True) if p["data"] else ""
        yield writer.writerow([_csv_safe(p.get(c)) for c in EXPORT_COLUMNS])


def _csv_safe(value: Any) -> Any:
    """Neutralise spreadsheet formulas in text cells (a message starting with ``=``)."""
    if value is None:
        return ""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@"):
        return "'" + value
    return value
