"""A journal row as every page shows it: its HTML, its JSON, what it adds to a burst's counts.

The journal writer renders each row once (:func:`row_text`) and pushes the text, so web
processes forward it to every page without rendering it again; a row read back from the
database, the templates' filters and the presenters use the same functions. Plain string
formatting, no templates: this runs once for every event of every burst.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from html import escape as _escape
from typing import Any

from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from labs.journal import kinds


def kind_label(kind: str | None) -> str:
    return kinds.label(kind)


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


def clock_text(moment: datetime | None) -> str:
    """``14:03:07.215`` in the site's time zone ("" for no time).

    The site's zone is ``TIME_ZONE`` (nothing activates another), taken directly: Django's
    ``localtime`` looks the current zone up in a context-local on every call, a visible part
    of a pushed row's rendering (docs/scaling.md, "Figures behind the code")."""
    if moment is None:
        return ""
    local = moment.astimezone(timezone.get_default_timezone())
    # (one format string: strftime cost as much again as the zone conversion)
    return f"{local.hour:02d}:{local.minute:02d}:{local.second:02d}.{local.microsecond // 1000:03d}"


def row_tone(event: dict[str, Any]) -> str:
    """A CSS modifier for a journal row (one of :data:`labs.journal.kinds.TONES`), from the
    registry: :func:`labs.journal.kinds.tone`."""
    return kinds.tone(event.get("kind"), event.get("outcome"))


ROW_HTML = (
    '<li id="ev-{}" class="journal-row tone-{}" data-seq="{}" data-kind="{}">'
    '<span class="j-seq">#{}</span> <time class="j-time" datetime="{}">{}</time> '
    '<span class="j-kind">{}</span> <span class="j-msg">{}</span></li>'
)


def journal_row(event: dict[str, Any]) -> SafeString:
    """One journal row, as the page renders it and the websocket pushes it.

    A format string rather than a template: the consumer renders one per event pushed, for
    every page watching, and a template render costs several times more (docs/scaling.md,
    "Figures behind the code"). Every value is escaped with ``html.escape`` (what Django's
    ``escape`` does, minus its lazy-string wrapper).

    A row carries no "what if" link: each burst has one, in the page's burst history.
    """
    seq = _escape(str(event.get("seq")))
    kind = event.get("kind") or ""
    moment = event_datetime(event)
    return mark_safe(  # noqa: S308 - every part escaped just here
        ROW_HTML.format(
            seq, row_tone(event), seq, _escape(kind), seq,
            moment.isoformat() if moment else "", clock_text(moment),
            _escape(kind_label(kind)), _escape(str(event.get("message") or "")),
        )
    )  # fmt: skip


def summary_delta(event: dict[str, Any]) -> dict[str, float]:
    """What one journal event adds to its burst's summary counts ({} for nothing). The page
    adds these as pushes arrive; :func:`counts_from_events` adds them on the server."""
    kind = event["kind"]
    if kind == "sleep":
        backoff = event.get("backoff_ms") or 0
        return {"backoff_ms_total": backoff, "waiting_ms_total": backoff}
    delta: dict[str, float] = dict(kinds.delta(kind, event.get("outcome")))
    # A pooled call's wait for a slot is time waiting too (the summary's "Time waiting" is
    # backoff and slot waits together; labs.presenters.lab_page.summary_panel).
    waited = (event.get("data") or {}).get("waited_ms") if kind == "call_result" else None
    if waited:
        delta["waiting_ms_total"] = waited
    return delta


#: Kinds whose ``data`` a web process reads from a pushed row (the burst's facts from
#: ``burst_queued``, its summary from ``burst_end``); other rows carry theirs in their text.
PUSHED_DATA_KINDS = frozenset(("burst_queued", "burst_end"))
_ENCODE = json.JSONEncoder(default=str).encode


def row_text(payload: dict[str, Any]) -> str:
    """The JSON text of a journal row as a page gets it: the row's payload
    (:func:`labs.journal.store.event_payload`), its ``html`` (:func:`journal_row`) and, when
    it adds to its burst's counts, ``summary_delta``."""
    item = dict(payload)
    item["html"] = str(journal_row(payload))
    delta = summary_delta(payload)
    if delta:
        item["summary_delta"] = delta
    return _ENCODE(item)


def pushed_row(payload: dict[str, Any]) -> dict[str, Any]:
    """What a push carries of one row: its :func:`row_text` under ``text`` and the few
    fields the web process decides by (number, kind, burst, state change, timestamps; the
    ``data`` of :data:`PUSHED_DATA_KINDS`)."""
    kind = payload["kind"]
    return {
        "seq": payload["seq"],
        "kind": kind,
        "burst": payload["burst"],
        "state_to": payload["state_to"],
        "at": payload["at"],
        "emitted": payload.get("emitted"),
        "data": payload["data"] if kind in PUSHED_DATA_KINDS else None,
        "text": row_text(payload),
    }


# --- a second of steady traffic (labs.journal.seconds) -----------------------------------------

#: An attempt's answer in words: (one, several).
_ATTEMPT_WORDS = {"ok": ("ok", "ok"), "error": ("error", "errors"),
                  "timeout": ("timed out", "timed out"), "shed": ("shed", "shed"),
                  "skipped": ("skipped", "skipped"),
                  "limited": ("rate-limited (429)", "rate-limited (429)")}  # fmt: skip
_CALL_WORDS = (("succeeded", "succeeded"), ("degraded", "degraded"), ("failed", "failed"),
               ("fast_failed", "fast-failed"))  # fmt: skip
_STATE_WORDS = {"closed": "closed", "open": "open", "half_open": "half-open"}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def second_text(counted: dict[str, Any]) -> str:
    """A second of steady traffic in words: its calls by result, its attempts by answer and
    the breaker's changes ("8 calls: 6 succeeded, 2 fast-failed. 9 attempts: 7 ok, 2 errors.
    Breaker: closed to open.")."""
    counts = counted["counts"]
    calls = counts["calls"]
    parts = [f"{counts[key]} {word}" for key, word in _CALL_WORDS if counts[key]]
    text = (f"{_plural(calls, 'call')}: {', '.join(parts)}." if calls
            else "No call ended in this second.")  # fmt: skip
    attempts = counted["attempts"]
    total = sum(attempts.values())
    if total:
        answers = [f"{attempts[k]} {words[attempts[k] != 1]}"
                   for k, words in _ATTEMPT_WORDS.items() if attempts.get(k)]  # fmt: skip
        text += f" {_plural(total, 'attempt')}: {', '.join(answers)}."
    moves = counted["transitions"]
    if moves:
        path = [_STATE_WORDS.get(moves[0][0], moves[0][0]) or "closed"]
        path += [_STATE_WORDS.get(to, to) for _, to in moves]
        text += f" Breaker: {' to '.join(path)}."
    elif counted["state_changes"]:
        text += f" {_plural(counted['state_changes'], 'breaker change')} (per host)."
    return text


def second_tone(counted: dict[str, Any]) -> str:
    """The line's tone (:data:`labs.journal.kinds.TONES`): state when the breaker changed,
    else the worst result of its calls, else (no call ended in it) bad when an attempt
    failed."""
    counts = counted["counts"]
    if counted["state_changes"]:
        return "state"
    for key, tone_name in (("failed", "bad"), ("fast_failed", "fast"), ("degraded", "degraded")):
        if counts[key]:
            return tone_name
    if counts["calls"]:
        return "ok"
    # No call ended in this second: its attempts say how it went so far.
    attempts = counted["attempts"]
    if not attempts:
        return "note"
    return "ok" if set(attempts) == {"ok"} else "bad"


SECOND_HTML = (
    '<li id="sec-{t}" class="journal-second" data-second="{t}" data-seq="{seq}" '
    'data-n="{n}"><details><summary class="journal-row tone-{tone}">'
    '<span class="j-seq" aria-hidden="true"></span> <time class="j-time" datetime="{iso}">{clock}'
    '</time> <span class="j-kind">traffic, 1 s</span> <span class="j-msg">{text}</span>'
    '</summary><div class="second-rows" data-url="{url}"><a href="{url}">'
    "Every row of this second ({rows})</a></div></details></li>"
)


def second_url(session_id: int, second: int) -> str:
    """Where a second's rows are read (``labs.views.lab.session_second``)."""
    return reverse("labs:session_second", args=[session_id, second])


def second_row(session_id: int, counted: dict[str, Any]) -> str:
    """A second of steady traffic as one line of the journal: its time, its counts in words
    (:func:`second_text`) and, opened, its rows (fetched then from ``second_url``)."""
    moment = datetime.fromtimestamp(counted["t"], tz=UTC)
    clock = clock_text(moment)[:8]
    return SECOND_HTML.format(
        t=int(counted["t"]), tone=second_tone(counted), seq=int(counted["seq"]),
        n=int(counted["n"]), iso=moment.isoformat(), clock=clock,
        text=_escape(second_text(counted)), url=_escape(second_url(session_id, counted["t"])),
        rows=_plural(int(counted["n"]), "row"),
    )  # fmt: skip


def with_html(session_id: int, counted: dict[str, Any]) -> dict[str, Any]:
    """A second as a page gets it: its counts, its time and words (``clock``, ``text``) and
    its journal line (``html``)."""
    moment = datetime.fromtimestamp(counted["t"], tz=UTC)
    return {**counted, "clock": clock_text(moment)[:8], "text": second_text(counted),
            "html": second_row(session_id, counted)}  # fmt: skip
