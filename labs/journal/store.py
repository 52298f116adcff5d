"""The journal: every engine event becomes one ``JournalEvent`` row, then a push.

:func:`append_entries` is the only code that assigns sequence numbers and inserts rows; it
reserves a block per session under a row lock, so numbers are unique and gap-free per session
whichever process writes. Request code calls :func:`record` inside its transaction (the push
goes out on commit); a burst on a worker hands its events to a :class:`JournalSink`, whose
writers batch, write with :func:`append_entries` and push with :func:`pushes_for`. This module
starts no thread and no process (docs/live-page.md, "The path").
"""

from __future__ import annotations

import json
import operator
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from django.db import connection, transaction
from django.utils import timezone

from labs.journal import broadcast, kinds, rows, seconds
from labs.journal.kinds import BURST_END_KINDS
from labs.models import JournalEvent, LabSession

#: Kinds that end a burst, however it ended.


@dataclass(slots=True)
class Entry:
    """One journal row waiting for its sequence number."""

    session_id: int
    classroom_id: int
    kind: str
    message: str
    burst_id: int | None = None
    t_ms: float = 0.0
    call_no: int | None = None
    attempt_no: int | None = None
    outcome: str = ""
    error: str = ""
    latency_ms: float | None = None
    backoff_ms: float | None = None
    state_from: str = ""
    state_to: str = ""
    actor_id: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    # Wall time when the event was handed over (push latency is measured from here).
    emitted: float = 0.0

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Pickled as the class and a tuple of the fields: a worker pickles every entry for its
        # journal writer process, which unpickles it; the dataclass's own way (a state set
        # field by field) cost three to four times as much at both ends.
        return (Entry, _entry_fields(self))


_entry_fields = operator.attrgetter(*(f.name for f in fields(Entry)))


def entry(
    session, kind: str, message: str, *, user=None, actor_id: int | None = None, **fields: Any
) -> Entry:
    """An entry about ``session`` (a ``LabSession``) done by ``user`` (None: the lab itself;
    ``actor_id`` names the actor by id instead)."""
    return Entry(
        session_id=session.pk,
        classroom_id=session.classroom_id,
        kind=kind,
        message=message,
        actor_id=actor_id if actor_id is not None else getattr(user, "pk", None),
        **fields,
    )


def entry_from_event(event, *, session_id: int, classroom_id: int, burst_id: int | None) -> Entry:
    """Adapt an engine :class:`~labs.engine.events.Event` to a journal :class:`Entry`."""
    data = dict(event.data) if event.data else {}
    if event.reason:
        data.setdefault("reason", event.reason)
    return Entry(
        session_id=session_id,
        classroom_id=classroom_id,
        kind=event.kind,
        message=event.explain,
        burst_id=burst_id,
        t_ms=event.at_ms,
        call_no=event.call,
        attempt_no=event.attempt,
        outcome=event.outcome or "",
        error=event.error or "",
        latency_ms=event.latency_ms,
        backoff_ms=event.backoff_ms,
        state_from=event.state_from or "",
        state_to=event.state_to or "",
        data=data,
        emitted=time.time(),
    )


def _payload(fields, seq: int, created_at: datetime, emitted: float | None) -> dict[str, Any]:
    """The JSON form of one journal row, from a row or an entry (same attribute names)."""
    payload = {
        "seq": seq,
        "kind": fields.kind,
        "burst": fields.burst_id,
        "t_ms": fields.t_ms,
        "at": created_at.isoformat(),
        "call": fields.call_no,
        "attempt": fields.attempt_no,
        "outcome": fields.outcome,
        "error": fields.error,
        "latency_ms": fields.latency_ms,
        "backoff_ms": fields.backoff_ms,
        "state_from": fields.state_from,
        "state_to": fields.state_to,
        "actor": fields.actor_id,
        "message": fields.message,
        "data": fields.data,
    }
    if emitted:
        payload["emitted"] = emitted
    return payload


def event_payload(row: JournalEvent, emitted: float | None = None) -> dict[str, Any]:
    """The JSON form of a journal row, as pushed to pages and exported."""
    return _payload(row, row.seq, row.created_at, emitted)


class Written(NamedTuple):
    """An entry as committed: its sequence number and the row's ``created_at``."""

    entry: Entry
    seq: int
    created_at: datetime


def entry_payload(written: Written) -> dict[str, Any]:
    """:func:`event_payload` for a just-written entry (no model instance needed)."""
    return _payload(written.entry, written.seq, written.created_at, written.entry.emitted)


#: Above this many rows a batch goes to PostgreSQL with COPY (see append_entries).
COPY_FROM_ROWS = 20

_COLUMNS = (
    "session_id", "seq", "burst_id", "kind", "created_at", "t_ms", "call_no", "attempt_no",
    "outcome", "error", "latency_ms", "backoff_ms", "state_from", "state_to", "actor_id",
    "message", "data",
)  # fmt: skip


def append_entries(entries: Sequence[Entry]) -> list[Written]:
    """Assign sequence numbers and insert ``entries``, keeping their order per session.

    Must run inside a transaction. One ``UPDATE ... RETURNING`` reserves a block of sequence
    numbers for every session of the batch and holds their row locks until commit
    (:func:`_reserve`); then one ``executemany`` (PostgreSQL: ``COPY`` beyond
    :data:`COPY_FROM_ROWS` rows) inserts every row. Plain SQL rather than ``bulk_create``:
    building model instances cost about ten times more than the INSERT itself, on the path
    every burst event takes.
    Returns the written entries in input order. Raises LabSession.DoesNotExist if a session
    is gone.
    """
    kinds.check({entry.kind for entry in entries})  # before anything is written
    per_session: dict[int, list[Entry]] = defaultdict(list)
    for entry in entries:
        per_session[entry.session_id].append(entry)
    now = timezone.now()
    session_table = connection.ops.quote_name(LabSession._meta.db_table)
    seqs: dict[int, int] = {}
    params: list[tuple[Any, ...]] = []
    created = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cursor:
        for session_id, next_seq in _reserve(cursor, session_table, per_session).items():
            batch = per_session[session_id]
            first = next_seq - len(batch)
            for offset, entry in enumerate(batch):
                seqs[id(entry)] = first + offset
        for entry in entries:
            params.append((
                entry.session_id, seqs[id(entry)], entry.burst_id, entry.kind, created,
                entry.t_ms, entry.call_no, entry.attempt_no, entry.outcome, entry.error,
                entry.latency_ms, entry.backoff_ms, entry.state_from, entry.state_to,
                entry.actor_id, entry.message, json.dumps(entry.data, separators=(",", ":")),
            ))  # fmt: skip
        table = connection.ops.quote_name(JournalEvent._meta.db_table)
        columns = ", ".join(_COLUMNS)
        if connection.vendor == "postgresql" and len(params) > COPY_FROM_ROWS:
            # COPY for a big batch: one huge multi-row INSERT costs psycopg more to parse than
            # to send (docs/scaling.md, "Figures behind the code"). A small batch (a click's
            # one row, a quiet writer's few) is inserted in one pipelined round trip, where
            # COPY's exchange takes two.
            with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in params:
                    copy.write_row(row)
        else:
            placeholders = ", ".join(["%s"] * len(_COLUMNS))
            cursor.executemany(
                f"INSERT INTO {table} ({columns}) VALUES ({placeholders})",  # noqa: S608
                params,
            )
    return [Written(entry, seqs[id(entry)], now) for entry in entries]


def _reserve(cursor, table: str, per_session: dict[int, list[Entry]]) -> dict[int, int]:
    """Reserve each session's block of sequence numbers; returns each session's new
    ``next_seq``. One ``UPDATE ... RETURNING`` for all the batch's sessions (a statement per
    session costs a writer batch far more CPU: docs/scaling.md, "Figures behind the code");
    on PostgreSQL the rows are locked in id order first, so two
    writers never wait on each other in a cycle. Raises LabSession.DoesNotExist if a
    session is gone."""
    ids = sorted(per_session)
    params: list[int] = []
    for session_id in ids:
        params += [session_id, len(per_session[session_id])]
    if connection.vendor == "postgresql":
        if len(ids) > 1:  # one row's lock (the UPDATE's own) can close no cycle
            cursor.execute(
                f"SELECT id FROM {table} WHERE id = ANY(%s) ORDER BY id FOR UPDATE",  # noqa: S608
                [ids],
            )
        values = ", ".join(["(%s::bigint, %s::bigint)"] * len(ids))
        columns = "v(id, n)"
        key, amount = "v.id", "v.n"
    else:  # SQLite: a VALUES list's columns are column1, column2
        values = ", ".join(["(%s, %s)"] * len(ids))
        columns = "v"
        key, amount = "v.column1", "v.column2"
    cursor.execute(
        f"UPDATE {table} SET next_seq = next_seq + {amount} FROM (VALUES {values}) AS {columns} "  # noqa: S608
        f"WHERE {table}.id = {key} RETURNING {table}.id, {table}.next_seq",
        params,
    )
    reserved = dict(cursor.fetchall())
    for session_id in ids:
        if session_id not in reserved:
            raise LabSession.DoesNotExist(f"lab session {session_id} is gone")
    return reserved


def pushes_for(
    written: Iterable[Written], tally: seconds.Tally | None = None
) -> list[broadcast.Push]:
    """The channel-layer messages announcing freshly committed rows: one per session, and
    one per class for its dashboards (:func:`labs.journal.broadcast.journal_pushes`).

    A session's message carries each row rendered (:func:`labs.journal.rows.pushed_row`): once
    here, where the batch is written, instead of in every web process with a page watching.

    With a ``tally`` (the journal writer's steady traffic counted by the second), a session's
    seconds not yet pushed go out first, cut around these rows so that a page gets every
    sequence number in order (:func:`_interleave`)."""
    per_session: dict[int, list[Written]] = defaultdict(list)
    for item in written:
        per_session[item.entry.session_id].append(item)
    per_class: dict[int, list[tuple[int, list[dict[str, Any]], dict[str, Any]]]] = defaultdict(list)
    before: list[broadcast.Push] = []
    deltas: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for session_id, items in per_session.items():
        payloads = [entry_payload(item) for item in items]
        pushed = [rows.pushed_row(p) for p in payloads]
        classroom_id = items[0].entry.classroom_id
        taken = tally.take(session_id) if tally is not None else None
        if taken is not None:
            _, ranges, counted, delta = taken
            deltas[classroom_id].append({"session": session_id, **delta})
            pieces = _interleave(session_id, ranges, counted, pushed)
            before.extend(pieces[:-1])
            pushed = pieces[-1][1]["events"] if pieces[-1][1]["type"] == "journal.events" else []
            if not pushed:
                before.append(pieces[-1])
        per_class[classroom_id].append((session_id, pushed, class_summary(payloads)))
    pushes: list[broadcast.Push] = list(before)
    for classroom_id, sessions in per_class.items():
        pushes.extend(broadcast.journal_pushes(classroom_id, sessions))
    for classroom_id, session_deltas in deltas.items():
        pushes.append(broadcast.class_seconds_push(classroom_id, session_deltas))
    return pushes


def _interleave(
    session_id: int,
    ranges: list[list[int]],
    counted: list[dict[str, Any]],
    pushed: list[dict[str, Any]],
) -> list[broadcast.Push]:
    """A session's seconds (sequence ranges ``ranges``, the seconds ``counted``) and its rows
    ``pushed`` as messages in sequence order: the seconds ride with the first range, the last
    message is the last rows' when a row is newest. The seconds go as counts: the web process
    gives each its words and journal line (:func:`labs.journal.rows.with_html`), so the writer
    needs no URL configuration."""
    out: list[broadcast.Push] = []
    seconds_left = counted
    pending_rows: list[dict[str, Any]] = []
    items = sorted(
        [(a, "range", b) for a, b in ranges] + [(p["seq"], "row", p) for p in pushed],
        key=lambda x: x[0],
    )
    for seq, what, value in items:
        if what == "row":
            pending_rows.append(value)
            continue
        if pending_rows:
            out.append(_rows_push(session_id, pending_rows))
            pending_rows = []
        out.append(broadcast.seconds_push(session_id, seq, value, seconds_left))
        seconds_left = []
    if pending_rows:
        out.append(_rows_push(session_id, pending_rows))
    return out


def _rows_push(session_id: int, pushed: list[dict[str, Any]]) -> broadcast.Push:
    return (
        broadcast.session_group(session_id),
        {"type": "journal.events", "session": session_id, "events": list(pushed)},
    )


def tally_pushes(tally: seconds.Tally) -> list[broadcast.Push]:
    """Everything ``tally`` holds, as messages: per session its seconds (one message per range
    of sequence numbers, the seconds on the first), per class one ``class.sessions``."""
    pushes: list[broadcast.Push] = []
    deltas: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for session_id in tally.sessions():
        taken = tally.take(session_id)
        if taken is None:
            continue
        classroom_id, ranges, counted, delta = taken
        pushes.extend(_interleave(session_id, ranges, counted, []))
        deltas[classroom_id].append({"session": session_id, **delta})
    for classroom_id, session_deltas in deltas.items():
        pushes.append(broadcast.class_seconds_push(classroom_id, session_deltas))
    return pushes


def class_summary(payloads: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What a class dashboard needs from a batch of one session's events: deltas, not rows."""
    summary: dict[str, Any] = {
        "last_seq": payloads[-1]["seq"] if payloads else None,
        **kinds.count_calls(payloads),
    }
    for p in payloads:
        kind = p["kind"]
        if p["state_to"]:
            summary["state"] = p["state_to"]
        if kind == "burst_start":
            summary["activity"] = "bursting"
        elif kind in BURST_END_KINDS:
            summary["activity"] = "idle"
            if kind == "burst_end":
                summary["burst_summary"] = p["data"]  # a burst_end's data is its summary
        elif kind in ("dependency_set", "fault_injected", "fault_restored", "session_reset"):
            mode = p["data"].get("mode")
            if mode:
                summary["mode"] = mode
    return summary


def record(entries: Sequence[Entry]) -> list[Written]:
    """Journal ``entries`` from request code: rows now, pushes after the commit.

    Call it inside the service's ``transaction.atomic()`` so the rows commit or roll back with
    the change they describe. Inside one it takes no savepoint of its own (a failure here
    fails the change, which is what the caller wants: a change is never committed without
    its rows), saving two statements a click; outside one it is its own transaction.
    """
    if not entries:
        return []
    with transaction.atomic(savepoint=False):
        written = append_entries(entries)
        # The pushes (each row rendered) are built after the commit: the transaction holds
        # the sessions' row locks, which the journal writers' batches wait for.
        transaction.on_commit(lambda: broadcast.send_all(pushes_for(written)))
    return written


def record_one(session, kind: str, message: str, *, user=None, **fields: Any) -> Written:
    """Journal one entry about ``session`` done by ``user`` (:func:`entry`, then
    :func:`record`): a run's first row, ``burst_queued`` or ``traffic_start``, written in the
    transaction that creates the run. ``fields`` are the entry's other fields (``burst_id``,
    ``data``)."""
    return record([entry(session, kind, message, user=user, **fields)])[0]


class JournalSink(Protocol):
    """What a burst hands its journal entries to: both writers implement it."""

    def start(self) -> None:
        """Get ready now (a worker calls it at boot, so the first burst does not wait)."""

    def submit(self, entry: Entry) -> None:
        """Queue one entry; cheap, thread-safe, never touches the database."""

    def submit_many(self, entries: Sequence[Entry]) -> None:
        """Queue several entries in order, at the cost of one (they stay in one batch)."""

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything submitted before this call is committed and pushed;
        False if that took longer than ``timeout`` seconds."""
        ...

    def stop(self, timeout: float = 30.0) -> None:
        """Write everything queued, then release the writer's resources (its database
        connection, its process)."""
