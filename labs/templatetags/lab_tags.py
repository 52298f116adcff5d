"""Template helpers of the lab's pages: scenario Markdown, labels, journal rows, lessons.

The journal row, labels and step sentences are :mod:`labs.presenters`' (the websocket consumer
renders the same rows); this module only registers them for templates."""

from __future__ import annotations

from typing import Any

import markdown as markdown_lib
import nh3
from django import template
from django.utils.safestring import SafeString, mark_safe

from labs.engine import state_label as engine_state_label
from labs.journal import rows
from labs.presenters import lessons as lesson_words
from labs.presenters.lessons import step_sentence
from labs.presenters.text import mode_label as dependency_mode_label
from labs.presenters.text import ms_text, seconds_text

register = template.Library()


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
def mode_label(mode: str | None) -> str:
    """``rate_limited`` -> ``Rate limited`` (the lab page's mode button)."""
    return dependency_mode_label(mode)


@register.filter
def state_label(state: str | None) -> str:
    """``half_open`` -> ``HALF-OPEN`` (the engine's label)."""
    return engine_state_label(state)


register.filter("kind_label", rows.kind_label)
register.filter("row_tone", rows.row_tone)
register.simple_tag(rows.journal_row, name="journal_row")


@register.simple_tag
def journal_item(item: dict[str, Any]) -> str:
    """A line of the lab page's journal: a row, or a second of steady traffic (its ``line``,
    :func:`labs.selectors.lab.journal_items`)."""
    line = item.get("line")
    return mark_safe(line) if line is not None else rows.journal_row(item)  # noqa: S308 - rendered escaped


@register.filter
def event_time(event: dict[str, Any]) -> str:
    """``14:03:07.215`` in the site's time zone."""
    return rows.clock_text(rows.event_datetime(event))


@register.filter
def event_iso(event: dict[str, Any]) -> str:
    moment = rows.event_datetime(event)
    return moment.isoformat() if moment else ""


@register.filter
def observed_text(prediction: Any) -> str:
    """A graded prediction's observed value as people read it (whole milliseconds; for a
    recovery question what the storm panel's recovery clock showed)."""
    if prediction.measure in lesson_words.CLASS_MEASURES:
        return lesson_words.recovery_text(prediction.observed)
    return lesson_words.observed_text(prediction.measure, prediction.observed_value)


@register.filter
def recovery_wait_text(check: dict[str, Any] | None) -> str:
    """Why a recovery question is not graded yet (:func:`lessons.recovery_wait_text`)."""
    return lesson_words.recovery_wait_text(check)


@register.filter
def answer_text(prediction: Any) -> str:
    """A prediction's answer as the page shows it ("Yes, it comes back" for ``yes``)."""
    return lesson_words.answer_text(prediction.measure, prediction.answer)


@register.filter
def step_text(step: dict[str, Any]) -> str:
    return step_sentence(step)


@register.filter
def seconds(ms: float | None) -> str:
    """Milliseconds as seconds with one decimal: ``1940`` -> ``1.9``
    (:func:`labs.presenters.text.seconds_text`)."""
    return seconds_text(ms)


@register.filter
def ms(value: float | None) -> str:
    """``175.0`` -> ``175 ms``; ``12.25`` -> ``12.3 ms`` (:func:`labs.presenters.text.ms_text`)."""
    return ms_text(value)


register.filter("expected_text", lesson_words.expected_text)
register.filter("measure", lesson_words.measure_value)
register.filter("lesson_description", lesson_words.lesson_description)
register.filter("lesson_progress", lesson_words.lesson_progress)
register.filter("lesson_groups", lesson_words.lesson_groups)
