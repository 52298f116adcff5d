"""Steady traffic counted by the second (labs.journal.seconds) and the writer's pushes of it
(labs.journal.store.pushes_for, tally_pushes): which rows are counted, what a second counts,
and that a page gets every sequence number in order when a burst's rows fall between
traffic's."""

from __future__ import annotations

from datetime import UTC, datetime

from labs.journal import kinds, rows, seconds
from labs.journal.store import Entry, Written, pushes_for, tally_pushes

T0 = 1_796_000_000  # an epoch second


def entry(kind: str, *, t: float = T0 + 0.5, burst: int | None = None, **fields) -> Entry:
    return Entry(session_id=7, classroom_id=3, kind=kind, message=f"{kind} row", burst_id=burst,
                 t_ms=t * 1000, **fields)  # fmt: skip


def written(seq: int, e: Entry) -> Written:
    return Written(e, seq, datetime(2026, 12, 4, tzinfo=UTC))


def test_only_a_traffic_runs_engine_events_are_counted_by_the_second():
    assert kinds.per_second("attempt", None) and kinds.per_second("transition", None)
    assert not kinds.per_second("attempt", 4)  # a burst's: row by row
    for kind in ("traffic_start", "traffic_end", "policy_set", "journal_lost", "breaker_forced"):
        assert not kinds.per_second(kind, None), kind


def test_a_second_counts_attempts_by_answer_calls_by_result_and_the_breakers_moves():
    tally = seconds.Tally()
    rows_of_second = [
        entry("attempt", outcome="ok"),
        entry("attempt", outcome="error", error="timeout"),
        entry("attempt", outcome="error", data={"outcome": "shed"}),
        entry("call_result", outcome="success"),
        entry("call_result", outcome="degraded"),
        entry("rejected", outcome="rejected_open"),
        entry("call_result", outcome="rejected_open"),
        entry("transition", state_from="closed", state_to="open"),
        entry("transition", state_from="closed", state_to="open", data={"host": "h1"}),
        entry("attempt", t=T0 + 1.2, outcome="ok"),
    ]
    for seq, e in enumerate(rows_of_second, start=10):
        tally.add(7, 3, seq, e)
    classroom, ranges, counted, delta = tally.take(7)
    assert (classroom, ranges) == (3, [[10, 19]])
    first, second = counted
    assert first["t"] == T0 and first["n"] == 9 and first["seq"] == 18
    assert first["attempts"] == {"ok": 1, "timeout": 1, "shed": 1}
    assert first["counts"] == {"calls": 3, "succeeded": 1, "degraded": 1, "fast_failed": 1,
                               "failed": 0, "attempts_total": 3}  # fmt: skip
    assert first["transitions"] == [["closed", "open"]]  # the host's own breaker left out
    assert first["state_changes"] == 2
    assert second["t"] == T0 + 1 and second["attempts"] == {"ok": 1}
    assert delta["first_seq"] == 10 and delta["last_seq"] == 19 and delta["calls"] == 3
    assert tally.take(7) is None and not tally


def test_a_second_sent_again_counts_every_row_of_it_so_far():
    tally = seconds.Tally()
    tally.add(7, 3, 1, entry("call_result", outcome="success"))
    assert tally.take(7)[2][0]["counts"]["calls"] == 1
    tally.add(7, 3, 2, entry("call_result", outcome="failure"))
    _, ranges, (again,), delta = tally.take(7)
    assert ranges == [[2, 2]] and again["n"] == 2 and again["counts"]["calls"] == 2
    assert delta["calls"] == 1  # the dashboard's part is a delta


def test_a_seconds_words_name_its_counts_for_people():
    tally = seconds.Tally()
    for seq, e in enumerate([entry("attempt", outcome="ok"), entry("attempt", outcome="error"),
                             entry("call_result", outcome="success"),
                             entry("call_result", outcome="rejected_open"),
                             entry("transition", state_from="closed", state_to="open")], 1):  # fmt: skip
        tally.add(7, 3, seq, e)
    counted = tally.take(7)[2][0]
    assert rows.second_text(counted) == (
        "2 calls: 1 succeeded, 1 fast-failed. 2 attempts: 1 ok, 1 error. Breaker: closed to open."
    )
    html = rows.second_row(7, counted)
    assert f'id="sec-{T0}"' in html and 'class="journal-row tone-state"' in html
    assert f'href="/sessions/7/seconds/{T0}/"' in html


def test_rows_between_traffics_rows_reach_the_page_in_sequence_order():
    """Traffic 1-2, a burst's row 3, traffic 4: the page gets seconds through 2, row 3,
    seconds through 4, so whatever it has is gap-free up to a number."""
    tally = seconds.Tally()
    batch = [written(1, entry("attempt", outcome="ok")),
             written(2, entry("call_result", outcome="success")),
             written(3, entry("attempt", burst=9, outcome="ok")),
             written(4, entry("attempt", outcome="ok"))]  # fmt: skip
    others = []
    for item in batch:
        if kinds.per_second(item.entry.kind, item.entry.burst_id):
            tally.add(7, 3, item.seq, item.entry)
        else:
            others.append(item)
    pushes = pushes_for(others, tally)
    to_page = [(m["type"], m.get("first"), m.get("through"), [e["seq"] for e in m.get("events", [])])
               for group, m in pushes if group == "lab-session-7"]  # fmt: skip
    assert to_page == [
        ("traffic.seconds", 1, 2, []), ("journal.events", None, None, [3]),
        ("traffic.seconds", 4, 4, []),
    ]  # fmt: skip
    seconds_messages = [m for _, m in pushes if m["type"] == "traffic.seconds"]
    assert seconds_messages[0]["seconds"][0]["n"] == 3 and seconds_messages[1]["seconds"] == []
    dashboard = [m for group, m in pushes if group == "lab-class-3"]
    assert [s["calls"] for m in dashboard for s in m["sessions"]] == [0, 1]  # rows, then traffic
    assert not tally


def test_the_tick_pushes_each_session_once_and_the_class_once():
    tally = seconds.Tally()
    for seq in range(1, 6):
        tally.add(7, 3, seq, entry("call_result", outcome="success"))
    tally.add(8, 3, 1, entry("call_result", outcome="failure"))
    pushes = tally_pushes(tally)
    assert [(group, m["type"]) for group, m in pushes] == [
        ("lab-session-7", "traffic.seconds"), ("lab-session-8", "traffic.seconds"),
        ("lab-class-3", "class.sessions"),
    ]  # fmt: skip
    assert [(s["session"], s["calls"], s["failed"]) for s in pushes[-1][1]["sessions"]] == [
        (7, 5, 0), (8, 1, 1),
    ]  # fmt: skip
    assert tally_pushes(tally) == []


def test_runs_cut_a_replay_into_seconds_and_rows_in_order():
    payloads = [{"kind": "attempt", "burst": None}, {"kind": "sleep", "burst": None},
                {"kind": "attempt", "burst": 2}, {"kind": "traffic_end", "burst": None},
                {"kind": "attempt", "burst": None}]  # fmt: skip
    cut = [(flag, len(run)) for flag, run in
           seconds.runs(payloads, lambda p: kinds.per_second(p["kind"], p["burst"]))]  # fmt: skip
    assert cut == [(True, 2), (False, 2), (True, 1)]


def test_a_second_where_no_call_ended_takes_its_tone_from_its_attempts():
    failing = seconds.empty(T0)
    seconds.add(failing, entry("attempt", outcome="error"))
    assert rows.second_tone(failing) == "bad"
    assert rows.second_text(failing) == "No call ended in this second. 1 attempt: 1 error."
    waiting = seconds.empty(T0)
    seconds.add(waiting, entry("attempt", outcome="ok"))
    assert rows.second_tone(waiting) == "ok"
    assert rows.second_tone(seconds.empty(T0)) == "note"
