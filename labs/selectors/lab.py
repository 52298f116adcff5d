"""The lab page's reads: journal rows and pages, the timeline's events, bursts and their
summaries, traffic.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models import BooleanField, ExpressionWrapper, Q

from labs.engine.validate import traffic_defaults
from labs.journal import rows as journal_rows
from labs.journal import seconds
from labs.journal.store import event_payload
from labs.live import runtime
from labs.models import (
    Burst,
    JournalEvent,
    LabSession,
    Traffic,
)
from labs.presenters.text import chain_place

#: Journal rows per page of the lab page's journal.
JOURNAL_PAGE = 100
#: Bursts the timeline chart shows (older ones scroll out).
CHART_BURSTS = 4
CHART_MAX_EVENTS = 3000


def breaker_now(session_id: int, policy: dict[str, Any]) -> dict[str, Any]:
    """The session's breaker read from Redis (the live truth) at now, with the server's clock
    (``server_now_ms``: the page counts a cooldown down against its own clock, corrected for
    the skew). Redis only, no database: a consumer calls it after every state change."""
    view = runtime.breaker_view_of(session_id, policy)
    view["server_now_ms"] = round(time.time() * 1000)
    return view


def rows_after(session_id: int, after: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` journal payloads after ``after``, oldest first (marked as
    :func:`mark_unreplayable` says)."""
    rows = JournalEvent.objects.filter(session_id=session_id).after(after)[:limit]
    return mark_unreplayable([event_payload(row) for row in rows])


def mark_unreplayable(payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set ``"whatif": False`` on the payloads of bursts that can never be replayed: finished
    without a recorded start state (run before replay existed), interrupted or failed. One
    query for the whole list, none when no row belongs to a burst; the journal row and the
    timeline then offer no what-if for them (:func:`labs.journal.rows.journal_row`)."""
    ids = {p["burst"] for p in payloads if p.get("burst")}
    if not ids:
        return payloads
    never = set(
        Burst.objects.filter(pk__in=ids)
        .filter(
            Q(status__in=(Burst.Status.INTERRUPTED, Burst.Status.FAILED))
            | Q(status=Burst.Status.DONE, start_state={})
        )
        .values_list("pk", flat=True)
    )
    if never:
        for payload in payloads:
            if payload.get("burst") in never:
                payload["whatif"] = False
    return payloads


def newest_seq(session_id: int) -> int:
    """The session's newest journal sequence number (0: none yet).

    Plain SQL: every page watching a session asks it a second after its pushes stop, and
    the ORM's query building (``.first()`` and its ordering) cost several times the query."""
    table = connection.ops.quote_name(LabSession._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT next_seq FROM {table} WHERE id = %s", [session_id])  # noqa: S608
        row = cursor.fetchone()
    return (row[0] if row else 1) - 1


def count_after(session_id: int, after: int) -> int:
    return JournalEvent.objects.filter(session_id=session_id, seq__gt=after).count()


def journal_page(session: LabSession, before: int | None = None) -> tuple[list[dict], int | None]:
    """One page of the journal, newest first, and the seq to page on from (None: no older).

    A second of steady traffic is one line on the page (:func:`journal_items`), so a page
    never cuts one: the rows of the oldest row's second are left to the next page, unless
    they are the whole page."""
    rows = JournalEvent.objects.filter(session=session)
    if before is not None:
        rows = rows.filter(seq__lt=before)
    page = list(rows.order_by("-seq")[: JOURNAL_PAGE + 1])
    older = page[JOURNAL_PAGE - 1].seq if len(page) > JOURNAL_PAGE else None
    page = page[:JOURNAL_PAGE]
    if older is not None and _second_of_row(page[-1]) is not None:
        cut = _second_of_row(page[-1])
        kept = [r for r in page if _second_of_row(r) != cut]
        if kept:
            page, older = kept, kept[-1].seq
    return mark_unreplayable([event_payload(r) for r in page]), older


def _second_of_row(row: JournalEvent) -> int | None:
    """The second a row is counted in, for a row of steady traffic (else None)."""
    if not seconds.per_second(row.kind, row.burst_id):
        return None
    return seconds.second_of(row.t_ms)


def journal_items(session_id: int, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A page of journal payloads (newest first) as the journal shows them: each row of its
    own, but steady traffic's rows as one line per second (``{"seq", "second", "line"}``, at
    its newest row), with every row of that second counted, also those on other pages."""
    wanted = {
        seconds.second_of(p["t_ms"])
        for p in payloads
        if seconds.per_second(p["kind"], p["burst"]) and seconds.second_of(p["t_ms"]) is not None
    }
    counted = traffic_seconds(session_id, wanted)
    items: list[dict[str, Any]] = []
    shown: set[int] = set()
    for payload in payloads:
        second = seconds.second_of(payload["t_ms"])
        if not seconds.per_second(payload["kind"], payload["burst"]) or second is None:
            items.append(payload)
        elif second not in shown and second in counted:
            shown.add(second)
            items.append({"seq": payload["seq"], "second": second, "line": counted[second]["html"]})
    return items


def chart_events(session: LabSession) -> list[dict[str, Any]]:
    """The journal rows the timeline draws: everything since the start of the last few bursts
    (oldest first, at most ``CHART_MAX_EVENTS``; the page keeps of each what
    ``labs.presenters.lab_page.chart_payload`` keeps)."""
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
    payloads = mark_unreplayable([event_payload(r) for r in rows])
    payloads.reverse()
    return payloads


def burst_rows(burst: Burst | None) -> list[dict[str, Any]]:
    """The journal payloads of a burst the summary panel counts (oldest first): a running
    or stopped burst's rows so far; none for a finished burst, whose summary has its counts
    (``labs.presenters.lab_page.burst_panel``)."""
    if burst is None or (burst.status == Burst.Status.DONE and burst.summary):
        return []
    return [event_payload(r) for r in burst.events.order_by("seq")]


def latest_burst(session: LabSession) -> Burst | None:
    return Burst.objects.filter(session=session).order_by("-number").first()


def burst_facts_by_id(burst_ids: list[int]) -> dict[int, dict[str, Any]]:
    """What the summary panel's heading needs of each burst (``BURST_FACTS`` of
    :mod:`labs.presenters.lab_page`), by burst id, and whether its start state is recorded."""
    rows = (
        Burst.objects.filter(pk__in=burst_ids)
        .annotate(recorded=ExpressionWrapper(~Q(start_state={}), output_field=BooleanField()))
        .values("pk", "recorded", "number", "size", "concurrency", "status", "error")
    )
    return {row["pk"]: {"id": row.pop("pk"), **row} for row in rows}


def latest_traffic(session: LabSession) -> Traffic | None:
    """The session's active traffic run, else its latest one (None if it never ran any)."""
    return session.traffic.order_by("-pk").first()


def session_traffic_defaults(session: LabSession) -> dict[str, Any]:
    """The steady traffic a session's form starts with: its scenario's ``traffic`` (the
    lesson's rate, duration and arrivals), else the lab's defaults."""
    script = session.scenario.script if session.scenario_id else {}
    return traffic_defaults(script)


#: The most rows an opened second shows (20 calls/s, the highest rate, with every retry and
#: backoff of each, stays well under it).
SECOND_ROWS_MAX = 1000
#: Seconds of steady traffic the lab page's strip chart opens with.
STRIP_SECONDS = 60

_SECOND_FIELDS = ("seq", "kind", "t_ms", "outcome", "error", "data", "state_from", "state_to")


def _per_second_rows(session_id: int):
    return JournalEvent.objects.filter(
        session_id=session_id, burst__isnull=True, kind__in=seconds.PER_SECOND_KINDS
    )


def traffic_seconds(session_id: int, wanted: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The session's seconds ``wanted`` (epoch seconds) of steady traffic, each with every
    row of it counted (:func:`labs.journal.seconds.count`) and its journal line (``html``):
    what a page catching up from the journal is sent. One query, a time range per run of
    consecutive seconds."""
    spans: list[list[int]] = []
    for second in sorted(set(wanted)):
        if spans and spans[-1][1] + 1 == second:
            spans[-1][1] = second
        else:
            spans.append([second, second])
    if not spans:
        return {}
    within = Q()
    for first, last in spans:
        within |= Q(t_ms__gte=first * 1000, t_ms__lt=(last + 1) * 1000)
    rows = _per_second_rows(session_id).filter(within).only(*_SECOND_FIELDS).order_by("seq")
    counted = seconds.count((row.seq, row) for row in rows)
    return {t: journal_rows.with_html(session_id, c) for t, c in counted.items()}


def strip_seconds(session_id: int) -> list[dict[str, Any]]:
    """The last :data:`STRIP_SECONDS` seconds of the session's steady traffic (up to its
    newest row), oldest first: what the strip chart opens with."""
    newest = _per_second_rows(session_id).order_by("-seq").values_list("t_ms", flat=True).first()
    last = seconds.second_of(newest)
    if last is None:
        return []
    counted = traffic_seconds(session_id, range(last - STRIP_SECONDS + 1, last + 1))
    return [counted[t] for t in sorted(counted)]


def second_rows(session_id: int, second: int) -> tuple[list[dict[str, Any]], int]:
    """The journal rows of one second of the session's steady traffic, oldest first (at most
    :data:`SECOND_ROWS_MAX`), and how many there are."""
    rows = _per_second_rows(session_id).filter(
        t_ms__gte=second * 1000, t_ms__lt=(second + 1) * 1000
    )
    page = [event_payload(row) for row in rows.order_by("seq")[:SECOND_ROWS_MAX]]
    total = len(page) if len(page) < SECOND_ROWS_MAX else rows.count()
    return page, total


def chain_place_of(session: LabSession) -> str:
    """Where the session's service sits in its class's chain of students, in words; empty
    when the class has none (one query, only for a session in a chain)."""
    if not session.tier:
        return ""
    return chain_place(session.tier, runtime.chain_depth(session.classroom_id) or session.tier)
