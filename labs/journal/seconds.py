"""Steady traffic, a second at a time: what a page is pushed of a session's steady traffic.

A page on steady traffic draws one strip-chart column a second; a row a millisecond is more
than anyone can read, and forwarding every attempt's row through a web process costs more CPU
than the attempt itself. So the journal keeps every row of steady traffic (nothing changes in
what is written), and the pages get, once a second, each second's counts instead: attempts by
the answer they got, calls by result (the one count vocabulary of :mod:`labs.journal.kinds`),
the breaker's changes in that second. A student who opens a second on the page gets its rows
from the database (``labs.views.lab.session_second``). A burst's rows are pushed one by one as
before (docs/live-page.md, "Steady traffic, a second at a time").

A second's counts are absolute (every row of that second committed so far), never deltas, so
a page keeps whichever copy of a second counts more rows, and a second sent twice, or read
from the database after a gap, cannot be counted twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from labs.journal import kinds
from labs.journal.kinds import PER_SECOND_KINDS, per_second

__all__ = ["PER_SECOND_KINDS", "Tally", "add", "count", "per_second", "runs", "second_of"]

#: What an attempt's answer is counted as on the strip: the shared dependency's answer (ok,
#: error, shed, skipped, limited (429), timeout), else ok, timeout or error.
ATTEMPT_ANSWERS = ("ok", "error", "timeout", "shed", "skipped", "limited")


def second_of(t_ms: float | None) -> int | None:
    """The second (epoch seconds) of an engine time in wall-clock ms; None for a row with no
    wall time (a virtual clock's offset)."""
    if not t_ms or t_ms <= 1e11:
        return None
    return int(t_ms // 1000)


def attempt_answer(outcome: str | None, error: str | None, data: Mapping[str, Any] | None) -> str:
    """What an attempt row counts as: one of :data:`ATTEMPT_ANSWERS`."""
    answer = (data or {}).get("outcome")
    if answer:
        return answer if answer in ATTEMPT_ANSWERS else "error"
    if outcome == "ok":
        return "ok"
    return "timeout" if error == "timeout" else "error"


def empty(second: int) -> dict[str, Any]:
    """A second with nothing counted yet."""
    return {
        "t": second,
        "n": 0,
        "seq": 0,
        "attempts": {},
        "counts": kinds.zero(),
        "transitions": [],
        "state_changes": 0,
    }


def add(counted: dict[str, Any], row: Any) -> None:
    """Count one row (an :class:`~labs.journal.store.Entry`, a ``JournalEvent`` or anything
    with ``kind``, ``outcome``, ``error``, ``data``, ``state_from`` and ``state_to``) of
    sequence number ``seq`` into its second."""
    counted["n"] += 1
    kind = row.kind
    for name, n in kinds.delta(kind, row.outcome).items():
        counted["counts"][name] += n
    if kind == "attempt":
        answer = attempt_answer(row.outcome, row.error, row.data)
        counted["attempts"][answer] = counted["attempts"].get(answer, 0) + 1
    if row.state_to:
        counted["state_changes"] += 1
        data = row.data or {}
        # A host's or dependency B's own breaker is not the dependency-wide one the strip's
        # band shows (docs/live-page.md, "Per-host breakers on the page").
        if "host" not in data and data.get("dependency") != "b":
            counted["transitions"].append([row.state_from or "", row.state_to])


def count(rows: Iterable[tuple[int, Any]]) -> dict[int, dict[str, Any]]:
    """The seconds of ``(seq, row)`` pairs, by second (rows with no wall time left out)."""
    out: dict[int, dict[str, Any]] = {}
    for seq, row in rows:
        second = second_of(row.t_ms)
        if second is None:
            continue
        counted = out.get(second)
        if counted is None:
            counted = out[second] = empty(second)
        add(counted, row)
        counted["seq"] = max(counted["seq"], seq)
    return out


def runs(items: Iterable[Any], is_per_second) -> Iterator[tuple[bool, list[Any]]]:
    """``items`` (in sequence order) cut into runs of consecutive items that are, or are not,
    counted by the second: ``(per_second, items)`` pairs, in order. A page gets each run in
    turn, so what it has is always gap-free up to a sequence number."""
    current: list[Any] = []
    flag = False
    for item in items:
        this = bool(is_per_second(item))
        if current and this != flag:
            yield flag, current
            current = []
        flag = this
        current.append(item)
    if current:
        yield flag, current


class Tally:
    """The writer's seconds of steady traffic not yet pushed, per session.

    :meth:`add` counts committed rows; :meth:`take` hands back, for each session, the seconds
    touched since the last take (absolute counts: every row of each second counted so far)
    and the ranges of sequence numbers counted, so the pushes can say which rows a page has
    now had. Seconds older than :attr:`keep_s` before a session's newest are forgotten (a row
    that late is counted afresh from the database by a page that asks)."""

    def __init__(self, keep_s: int = 120) -> None:
        self.keep_s = keep_s
        #: session -> second -> counts
        self._seconds: dict[int, dict[int, dict[str, Any]]] = {}
        #: session -> classroom, the seconds touched and the seq ranges since the last take
        self._classroom: dict[int, int] = {}
        self._touched: dict[int, set[int]] = {}
        self._ranges: dict[int, list[list[int]]] = {}
        #: session -> what the class's dashboards get: count deltas, newest seq and state
        self._deltas: dict[int, dict[str, Any]] = {}

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def add(self, session_id: int, classroom_id: int, seq: int, row: Any) -> None:
        """Count the committed row ``seq`` of ``session_id``."""
        self._classroom[session_id] = classroom_id
        ranges = self._ranges.setdefault(session_id, [])
        if ranges and ranges[-1][1] + 1 == seq:
            ranges[-1][1] = seq
        else:
            ranges.append([seq, seq])
        delta = self._deltas.get(session_id)
        if delta is None:
            delta = self._deltas[session_id] = {**kinds.zero(), "first_seq": seq}
        for name, n in kinds.delta(row.kind, row.outcome).items():
            delta[name] += n
        delta["last_seq"] = seq
        if row.state_to:
            delta["state"] = row.state_to
        second = second_of(row.t_ms)
        if second is None:
            return
        seconds = self._seconds.setdefault(session_id, {})
        counted = seconds.get(second)
        if counted is None:
            counted = seconds[second] = empty(second)
            oldest = second - self.keep_s
            for old in [s for s in seconds if s < oldest]:
                del seconds[old]
        add(counted, row)
        counted["seq"] = max(counted["seq"], seq)
        self._touched.setdefault(session_id, set()).add(second)

    def sessions(self) -> list[int]:
        """The sessions with something not yet taken (and forget the seconds of sessions
        quiet for longer than :attr:`keep_s`)."""
        oldest = int(time.time()) - self.keep_s
        for session_id in [s for s, kept in self._seconds.items() if max(kept, default=0) < oldest]:
            if session_id not in self._ranges:
                del self._seconds[session_id]
                self._classroom.pop(session_id, None)
        return list(self._ranges)

    def take(self, session_id: int) -> tuple[int, list[list[int]], list[dict[str, Any]],
                                             dict[str, Any]] | None:  # fmt: skip
        """``(classroom, seq ranges, seconds, dashboard delta)`` of ``session_id`` since the
        last take (None: nothing new). The seconds are copies: later rows do not change them."""
        ranges = self._ranges.pop(session_id, None)
        if ranges is None:
            return None
        seconds = self._seconds.get(session_id, {})
        touched = sorted(self._touched.pop(session_id, ()))
        counted = [_copy(seconds[s]) for s in touched if s in seconds]
        delta = self._deltas.pop(session_id)
        return self._classroom[session_id], ranges, counted, delta


def _copy(counted: dict[str, Any]) -> dict[str, Any]:
    return {
        **counted,
        "attempts": dict(counted["attempts"]),
        "counts": dict(counted["counts"]),
        "transitions": [list(t) for t in counted["transitions"]],
    }
