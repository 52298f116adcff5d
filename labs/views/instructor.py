"""The instructor's class dashboard: a live grid of every session, class-wide actions, exports.

Every view starts from ``Classroom.objects.for_instructor(user)``: a class the user does not
teach (a student included) is a 404, the same as a missing one, so class ids do not leak. The
page is rendered from one query (``labs.selectors.dashboard.class_dashboard_rows``) and kept live by the
``ws/classes/<id>/`` websocket (``labs.dashboard_consumer``); nothing polls.

The action views call ``labs.services.classroom``. htmx requests get the ``action-result``
partial; a refused action answers 422 with the problems (field and range), a permission
problem 404. Without JavaScript the forms post normally and redirect back (or re-render the
page with the problems).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.utils.text import slugify
from django.views.decorators.http import require_GET, require_POST

from labs.engine import LIMITS, SharedConfig
from labs.engine.config import MODES
from labs.forms import shared as shared_forms
from labs.forms.lab import coerce
from labs.journal.store import event_payload
from labs.live.traffic import ARRIVALS, DURATION_RANGE, RATE_RANGE
from labs.models import Classroom, JournalEvent, LabSession, Scenario
from labs.presenters.dashboard import dashboard_row_html, row_json
from labs.presenters.exports import csv_lines
from labs.presenters.server import describe_config
from labs.presenters.storm import offered_load_text
from labs.presenters.text import mode_label
from labs.selectors import storm as storm_reads
from labs.selectors.dashboard import class_dashboard_rows, simulated_count, state_counts
from labs.selectors.storm import storm_configured, storm_traffic_defaults
from labs.services import chain as chain_services
from labs.services import classroom as class_services
from labs.services import shared as shared_services
from labs.services.lab import SettingsInvalid
from labs.views import HtmxHttpRequest

TEMPLATE = "labs/dashboard.html"
EXPORT_CHUNK = 2000

#: Dependency parameters the class-wide form offers: (field, LIMITS path, label).
FAULT_PARAMS: tuple[tuple[str, str, str], ...] = (
    ("fail_count", "dependency.fail_count", "Flaky: failing attempts"),
    ("rate", "dependency.rate", "Error rate: failure probability"),
    ("down_for_ms", "dependency.down_for_ms", "Outage: down for (ms)"),
    ("retry_after_ms", "dependency.retry_after_ms", "Rate limited: 429s for (ms)"),
    ("latency_ms", "dependency.latency_ms", "Latency per attempt (ms)"),
    ("error", "dependency.error", "Failure kind"),
)


def taught_classroom(user, pk: int) -> Classroom:
    """The class ``pk`` if ``user`` teaches it, else 404 (students included)."""
    return get_object_or_404(Classroom.objects.for_instructor(user), pk=pk)


# --- the page --------------------------------------------------------------------------------


def fault_changes(post) -> tuple[dict[str, Any], Any]:
    """(dependency changes, duration) from the class-wide form: blank fields are not sent."""
    changes: dict[str, Any] = {"mode": post.get("mode", "").strip()}
    for name, path, _label in FAULT_PARAMS:
        raw = post.get(name, "")
        if raw.strip():
            changes[name] = coerce(raw, LIMITS[path])
    raw_duration = post.get("duration_s", "").strip()
    duration: Any = None
    if raw_duration:
        # plain digits only (not 1e1 or 10.0); anything else is refused by the service,
        # naming the field and its range
        plain = raw_duration.isascii() and raw_duration.isdigit()
        duration = int(raw_duration) if plain else raw_duration
    return changes, duration


def _fault_fields() -> list[dict[str, Any]]:
    """The class-wide fault form's inputs (blank by default: a blank field is not sent)."""
    return [
        {k: v for k, v in field.items() if k != "value"}
        for field in shared_forms.fields(FAULT_PARAMS)
    ]


def storm_context(classroom: Classroom) -> dict[str, Any]:
    """What the storm panel's parts need (``labs/storm.html``'s partials), on its own page and
    in the dashboard's storm section: whether the class has a shared dependency, the
    websocket's path, the traffic form's ranges and its defaults (the class's lesson's
    traffic, with the load it will offer against the capacity)."""
    defaults = storm_traffic_defaults(classroom.pk)
    return {
        "storm_configured": storm_configured(classroom.pk),
        "storm_ws_path": f"/ws/classes/{classroom.pk}/storm/",
        "traffic_rate_range": RATE_RANGE,
        "traffic_duration_range": DURATION_RANGE,
        "traffic_arrivals": ARRIVALS,
        "traffic_defaults": {
            **defaults,
            "load": offered_load_text(
                defaults["sessions"], defaults["rate"], defaults["capacity_per_s"]
            ),
        },
    }


def page_context(request: HtmxHttpRequest, classroom: Classroom, **extra) -> dict[str, Any]:
    rows = class_dashboard_rows(classroom_id=classroom.pk)
    scenarios = list(classroom.scenarios.all())
    low, high = class_services.FAULT_DURATION_RANGE_S
    shared_now = storm_reads.shared_settings(classroom=classroom)
    context = {
        "classroom": classroom,
        "rows": rows,
        "rows_html": mark_safe(  # noqa: S308 (each row is built by format_html)
            "".join(dashboard_row_html(r) for r in rows)
        ),
        "rows_json": [row_json(r) for r in rows],
        "counts": state_counts(rows),
        "simulated": simulated_count(classroom.pk),
        "bursting": sum(1 for r in rows if r.bursting),
        "modes": MODES,
        "fault_fields": _fault_fields(),
        "duration_range": (low, high),
        "fault": class_services.active_fault(classroom=classroom),
        "assignable": Scenario.objects.active().exclude(pk__in=classroom.scenarios.values("pk")),
        "scenarios": scenarios,
        "ws_path": f"/ws/classes/{classroom.pk}/",
        "problems": [],
        "shared_fields": shared_forms.fields(shared_forms.SHARED_PARAMS, shared_now),
        "shared_defended": SharedConfig(**shared_now).defended,
        "trigger_fields": shared_forms.fields(shared_forms.TRIGGER_PARAMS),
        "chain": storm_reads.chain_settings(classroom=classroom),
        "chain_orders": chain_services.ORDERS,
        **storm_context(classroom),
    }
    context.update(extra)
    return context


@login_required
@require_GET
def class_dashboard(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The live grid of every lab session in a class the user teaches."""
    classroom = taught_classroom(request.user, pk)
    # Backstop for a lost restore task: a fault whose time has passed ends now.
    class_services.classroom_faults_restore_due()
    return render(request, TEMPLATE, page_context(request, classroom))


# --- class-wide actions ----------------------------------------------------------------------


def _answer(
    request: HtmxHttpRequest,
    classroom: Classroom,
    *,
    message: str = "",
    problems: Iterable[str] = (),
    status: int = 200,
    chain: bool = False,
) -> HttpResponse:
    problems = list(problems)
    if request.htmx:
        context = {
            "classroom": classroom,
            "message": message,
            "problems": problems,
            "fault": class_services.active_fault(classroom=classroom),
            # the chain form's "Now:" line, swapped in beside the answer
            "chain_answered": storm_reads.chain_settings(classroom=classroom) if chain else None,
        }
        return render(request, f"{TEMPLATE}#action-result", context, status=status)
    if problems:
        context = page_context(request, classroom, problems=problems)
        return render(request, TEMPLATE, context, status=status)
    messages.success(request, message)
    return redirect("labs:class_dashboard", pk=classroom.pk)


@login_required
@require_POST
def class_set_dependency(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Put every session of the class into one dependency mode, optionally for a while."""
    classroom = taught_classroom(request.user, pk)
    changes, duration = fault_changes(request.POST)
    try:
        result = class_services.classroom_set_dependency(
            classroom=classroom, user=request.user, changes=changes, duration_s=duration
        )
    except SettingsInvalid as exc:
        return _answer(request, classroom, problems=[str(p) for p in exc.problems], status=422)
    what = mode_label(changes["mode"])
    if duration:
        what += f" for {duration} s (then each session's previous mode comes back)"
    return _answer(request, classroom, message=result.describe(f"{what}: applied to"))


@login_required
@require_POST
def class_set_shared(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Change the class's shared dependency (servers, service time, queue limit, the server's
    defences); a refusal names each field by its label and its range."""
    classroom = taught_classroom(request.user, pk)
    try:
        row = shared_services.classroom_set_shared(
            classroom=classroom, user=request.user, values=shared_forms.shared_values(request.POST)
        )
    except SettingsInvalid as exc:
        problems = shared_forms.problem_texts(exc.problems, shared_forms.SHARED_PARAMS)
        return _answer(request, classroom, problems=problems, status=422)
    described = describe_config(SharedConfig(**row.to_dict()))
    return _answer(request, classroom, message=f"shared dependency set: {described}")


@login_required
@require_POST
def class_fire_trigger(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Fire a trigger (down, slow, capacity drop) on the class's shared dependency."""
    classroom = taught_classroom(request.user, pk)
    try:
        fired = shared_services.classroom_fire_trigger(
            classroom=classroom, user=request.user, values=shared_forms.trigger_values(request.POST)
        )
    except SettingsInvalid as exc:
        return _answer(request, classroom, problems=[str(p) for p in exc.problems], status=422)
    trigger = fired["trigger"]
    message = f"{trigger['kind']} trigger fired for {trigger['duration_ms'] / 1000:g} s"
    if fired["replaced"]:
        message += f"; it replaced the running {fired['replaced']['kind']} trigger"
    return _answer(request, classroom, message=message)


@login_required
@require_POST
def class_set_chain(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Arrange the class's sessions on the shared dependency in tiers (blank: no chain);
    refused with the field and its range, or while any run of the class is going."""
    classroom = taught_classroom(request.user, pk)
    try:
        layout = chain_services.classroom_set_chain(
            classroom=classroom, user=request.user, values=shared_forms.chain_values(request.POST)
        )
    except SettingsInvalid as exc:
        return _answer(request, classroom, problems=[str(p) for p in exc.problems], status=422)
    except chain_services.ChainBusy as exc:
        return _answer(request, classroom, problems=[str(exc)], status=409)
    if not layout:
        return _answer(request, classroom, chain=True, message="chain removed: every service "
                       "calls its own dependency again")  # fmt: skip
    sizes = ", ".join(str(len(t)) for t in layout)
    return _answer(request, classroom, chain=True, message=(
        f"chain set: {len(layout)} tiers ({sizes} services); tier 1 runs the traffic and each "
        f"tier calls the next through its own policy; tier {len(layout)} calls the shared "
        "dependency"
    ))  # fmt: skip


@login_required
@require_POST
def class_reset(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Reset every session of the class; sessions with a burst running are skipped."""
    classroom = taught_classroom(request.user, pk)
    result = class_services.classroom_reset(classroom=classroom, user=request.user)
    return _answer(request, classroom, message=result.describe("reset"))


@login_required
@require_POST
def class_assign_scenario(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Assign an active scenario to the class (journaled in every session of the class)."""
    classroom = taught_classroom(request.user, pk)
    raw = request.POST.get("scenario", "").strip()
    scenario = Scenario.objects.filter(pk=int(raw)).first() if raw.isdigit() else None
    if scenario is None:
        return _answer(
            request,
            classroom,
            problems=["scenario: choose one of the listed scenarios"],
            status=422,
        )
    try:
        result = class_services.classroom_assign_scenario(
            classroom=classroom, user=request.user, scenario=scenario
        )
    except SettingsInvalid as exc:
        return _answer(request, classroom, problems=[str(p) for p in exc.problems], status=422)
    if not result.changed and classroom.scenarios.filter(pk=scenario.pk).exists():
        message = f"\u201c{scenario.title}\u201d is assigned to the class"
    else:
        message = result.describe(f"\u201c{scenario.title}\u201d assigned; announced in")
    return _answer(request, classroom, message=message)


# --- exports ---------------------------------------------------------------------------------


JOURNAL_COLUMNS = [
    "session", "student", "scenario", "seq", "at", "kind", "burst", "call", "attempt",
    "outcome", "error", "latency_ms", "backoff_ms", "state_from", "state_to", "actor",
    "message", "data",
]  # fmt: skip

SUMMARY_COLUMNS = [
    "session", "student", "username", "scenario", "breaker_state", "mode", "activity",
    "calls", "attempts_total", "fast_failed", "succeeded", "last_burst_calls",
    "last_burst_succeeded", "last_burst_fast_failed", "last_burst_attempts",
    "last_burst_wall_ms", "last_seq",
]  # fmt: skip


def _class_journal(classroom: Classroom) -> Iterator[dict[str, Any]]:
    """Every journal row of the class as export dicts, streamed from the database."""
    sessions = {
        s.pk: s
        for s in LabSession.objects.filter(classroom=classroom).select_related("owner", "scenario")
    }
    actor_ids = (
        JournalEvent.objects.filter(session__in=list(sessions), actor__isnull=False)
        .order_by()
        .values("actor_id")
        .distinct()
    )
    actors = dict(get_user_model().objects.filter(pk__in=actor_ids).values_list("pk", "username"))
    rows = (
        JournalEvent.objects.filter(session__in=list(sessions))
        .order_by("session_id", "seq")
        .iterator(chunk_size=EXPORT_CHUNK)
    )
    for row in rows:
        session = sessions[row.session_id]
        payload = event_payload(row)
        payload["actor"] = actors.get(row.actor_id, "") if row.actor_id else ""
        yield {
            "session": session.pk,
            "student": session.owner.get_username(),
            "scenario": session.scenario.slug,
            **payload,
        }


def _filename(classroom: Classroom, what: str, ext: str) -> str:
    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    return f"{slugify(classroom.name) or 'class'}-{what}-{stamp}.{ext}"


def _streaming(chunks: Iterable[str], content_type: str, filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(chunks, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_GET
def class_export_journal(request: HtmxHttpRequest, pk: int, fmt: str) -> HttpResponse:
    """The whole class's journal, streamed as CSV or JSON (``fmt``), oldest first per session."""
    classroom = taught_classroom(request.user, pk)
    if fmt == "csv":

        def cells() -> Iterator[list[Any]]:
            for item in _class_journal(classroom):
                values = {**item, "data": json.dumps(item["data"], separators=(",", ":"))}
                yield [values[c] for c in JOURNAL_COLUMNS]

        return _streaming(
            csv_lines(JOURNAL_COLUMNS, cells()),
            "text/csv; charset=utf-8",
            _filename(classroom, "journal", "csv"),
        )
    if fmt == "json":

        def json_chunks() -> Iterator[str]:
            yield "["
            first = True
            for item in _class_journal(classroom):
                yield ("\n" if first else ",\n") + json.dumps(item, separators=(",", ":"))
                first = False
            yield "\n]\n"

        return _streaming(
            json_chunks(), "application/json", _filename(classroom, "journal", "json")
        )
    return HttpResponse("format must be csv or json", status=404, content_type="text/plain")


@login_required
@require_GET
def class_export_summary(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One summary row per student session, as CSV."""
    classroom = taught_classroom(request.user, pk)
    rows = class_dashboard_rows(classroom_id=classroom.pk)

    def cells() -> Iterator[list[Any]]:
        for r in rows:
            last = r.last_summary or {}
            yield [
                r.session_id, r.student, r.username, r.scenario, r.state, r.mode,
                r.activity, r.calls, r.attempts_total, r.fast_failed, r.succeeded,
                last.get("calls", ""), last.get("succeeded", ""),
                last.get("fast_failed", ""), last.get("attempts_total", ""),
                last.get("wall_ms", ""), r.last_seq,
            ]  # fmt: skip

    return _streaming(
        csv_lines(SUMMARY_COLUMNS, cells()),
        "text/csv; charset=utf-8",
        _filename(classroom, "summary", "csv"),
    )
