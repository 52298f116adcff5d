"""Template helpers of the live lab page: scenario Markdown, step sentences, journal rows."""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape as _escape
from typing import Any

import markdown as markdown_lib
import nh3
from django import template
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from labs.engine import is_fast_fail
from labs.engine import state_label as engine_state_label

register = template.Library()


KIND_LABELS = {
    "burst_queued": "burst queued",
    "burst_start": "burst start",
    "attempt": "attempt",
    "sleep": "backoff",
    "call_result": "call",
    "rejected": "fast-fail",
    "budget_exhausted": "budget",
    "deadline_exceeded": "deadline",
    "transition": "breaker",
    "burst_end": "burst end",
    "burst_interrupted": "interrupted",
    "burst_failed": "burst failed",
    "state_restored": "restored",
    "dependency_set": "dependency",
    "fault_injected": "fault",
    "fault_restored": "fault ended",
    "policy_set": "policy",
    "breaker_forced": "breaker",
    "session_reset": "reset",
    "scenario_assigned": "scenario",
}

# Tags the scenario instructions may use (Markdown output); everything else is stripped.
_ALLOWED_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "dl", "dt", "em", "h2", "h3", "h4",
    "h5", "h6", "hr", "i", "kbd", "li", "ol", "p", "pre", "strong", "sub", "sup", "table",
    "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip


@register.filter
def render_markdown(text: str | None) -> SafeString:
    """The admin's Markdown as HTML, sanitised with nh3 (no scripts, no inline handlers)."""
    html = markdown_lib.markdown(text or "", extensions=["extra", "sane_lists"])
    clean = nh3.clean(
        html,
        tags=_ALLOWED_TAGS,
        attributes={"a": {"href", "title"}, "abbr": {"title"}, "td": {"align"}, "th": {"align"}},
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
    return mark_safe(clean)  # noqa: S308 - sanitised by nh3 just above


@register.filter
def state_label(state: str | None) -> str:
    """``half_open`` -> ``HALF-OPEN`` (the engine's label)."""
    return engine_state_label(state)


@register.filter
def kind_label(kind: str | None) -> str:
    return KIND_LABELS.get(kind or "", (kind or "").replace("_", " "))


def event_datetime(event: dict[str, Any]) -> datetime | None:
    """When a journal event happened: its engine time (wall ms for live bursts) if it has
    one, else the time its row was written."""
    t_ms = event.get("t_ms") or 0
    if t_ms > 1e11:  # a wall-clock epoch in ms, not a virtual clock's offset
        return datetime.fromtimestamp(t_ms / 1000, tz=UTC)
    at = event.get("at")
    if isinstance(at, datetime):
        return at
    if isinstance(at, str) and at:
        try:
            return datetime.fromisoformat(at)
        except ValueError:
            return None
    return None


ROW_HTML = (
    '<li id="ev-{}" class="journal-row tone-{}" data-seq="{}" data-kind="{}">'
    '<span class="j-seq">#{}</span> <time class="j-time" datetime="{}">{}</time> '
    '<span class="j-kind">{}</span> <span class="j-msg">{}</span></li>'
)


@register.simple_tag
def journal_row(event: dict[str, Any]) -> SafeString:
    """One journal row (the ``journal-row`` partial of labs/session.html).

    Python rather than template markup because the websocket consumer renders one per event
    pushed, for every page watching: this is about ten times cheaper than a template render.
    The page and the consumer both call it, so their rows are the same bytes. Every value is
    escaped with ``html.escape`` (what Django's ``escape`` does, minus its lazy-string
    wrapper).
    """
    seq = _escape(str(event.get("seq")))
    kind = event.get("kind") or ""
    moment = event_datetime(event)
    return mark_safe(  # noqa: S308 - every part escaped just here
        ROW_HTML.format(
            seq, row_tone(event), seq, _escape(kind), seq,
            moment.isoformat() if moment else "", _clock(moment),
            _escape(kind_label(kind)), _escape(str(event.get("message") or "")),
        )
    )  # fmt: skip


def _clock(moment: datetime | None) -> str:
    if moment is None:
        return ""
    local = timezone.localtime(moment)
    return local.strftime("%H:%M:%S.") + f"{local.microsecond // 1000:03d}"


@register.filter
def event_time(event: dict[str, Any]) -> str:
    """``14:03:07.215`` in the site's time zone."""
    return _clock(event_datetime(event))


@register.filter
def event_iso(event: dict[str, Any]) -> str:
    moment = event_datetime(event)
    return moment.isoformat() if moment else ""


@register.filter
def row_tone(event: dict[str, Any]) -> str:
    """A CSS modifier for a journal row: ok, bad, fast, wait, state or note."""
    kind = event.get("kind")
    outcome = event.get("outcome") or ""
    if kind == "attempt":
        return "ok" if outcome == "ok" else "bad"
    if kind == "call_result":
        if outcome == "success":
            return "ok"
        return "fast" if is_fast_fail(outcome) else "bad"
    if kind in ("rejected", "budget_exhausted", "deadline_exceeded"):
        return "fast"
    if kind == "sleep":
        return "wait"
    if kind in ("transition", "breaker_forced", "session_reset", "state_restored"):
        return "state"
    if kind in ("burst_interrupted", "burst_failed"):
        return "bad"
    return "note"


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


@register.filter
def step_text(step: dict[str, Any]) -> str:
    return step_sentence(step)


@register.filter
def seconds(ms: float | None) -> str:
    """Milliseconds as seconds with one decimal: ``1940`` -> ``1.9``."""
    if ms is None:
        return ""
    return f"{max(0.0, float(ms)) / 1000:.1f}"


@register.filter
def ms(value: float | None) -> str:
    """``175.0`` -> ``175 ms``; ``12.25`` -> ``12.3 ms``."""
    if value is None:
        return "-"
    value = float(value)
    return f"{value:.0f} ms" if value.is_integer() or value >= 100 else f"{value:.1f} ms"
