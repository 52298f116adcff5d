"""The class dashboard's rows and labels."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from django.utils.html import format_html

from labs.engine import state_label as engine_state_label
from labs.presenters.text import mode_label

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
    '<td class="num" data-field="attempts_total">{attempts_total}</td>'
    '<td class="num" data-field="fast_failed">{fast_failed}</td>'
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
    renders a hundred of them and Django's template engine costs several times more
    (docs/scaling.md, "Figures behind the code")."""
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
        attempts_total=row.attempts_total,
        fast_failed=row.fast_failed,
        progress=progress_text(row.progress),
    )


def row_json(row) -> dict[str, Any]:
    """A dashboard row (``DashboardRow``) as the page's script holds it: its data with the
    words the page shows for it."""
    return {
        **row.as_dict(),
        "progress_text": progress_text(row.progress),
        **dashboard_labels(
            {"state": row.state, "mode": row.mode, "burst_summary": row.last_summary}
        ),
    }


def row_message(row) -> dict[str, Any]:
    """A dashboard row as the websocket's snapshot sends it: :func:`row_json` with its HTML
    (the page inserts a row it lacks as the server renders it)."""
    return row_json(row) | {"html": dashboard_row_html(row)}
