"""What a journal batch announces: one message per session with its rows, one per class with
each touched session's summary (never one per attempt, never one per session for a class)."""

from __future__ import annotations

from datetime import UTC, datetime

from labs.journal import store as journal
from labs.journal.broadcast import class_group, session_group


def _written(session_id: int, classroom_id: int, seq: int, kind: str, outcome: str = ""):
    entry = journal.Entry(
        session_id=session_id, classroom_id=classroom_id, kind=kind, message=f"{kind} {seq}",
        outcome=outcome,
    )  # fmt: skip
    return journal.Written(entry, seq, datetime(2026, 12, 1, tzinfo=UTC))


def test_a_batch_announces_each_sessions_rows_and_one_summary_message_per_class():
    batch = [
        _written(1, 10, 5, "attempt", "ok"),
        _written(2, 10, 9, "attempt", "error"),
        _written(1, 10, 6, "call_result", "success"),
        _written(3, 20, 1, "call_result", "rejected_open"),
    ]
    pushes = journal.pushes_for(batch)
    groups = [group for group, _ in pushes]
    assert sorted(groups) == sorted(
        [session_group(1), session_group(2), session_group(3), class_group(10), class_group(20)]
    )
    by_group = dict(pushes)
    assert [e["seq"] for e in by_group[session_group(1)]["events"]] == [5, 6]
    summaries = by_group[class_group(10)]
    assert summaries["type"] == "class.sessions"
    assert [(s["session"], s["last_seq"], s["attempts_total"], s["calls"]) for s in summaries["sessions"]] == [
        (1, 6, 1, 1),
        (2, 9, 1, 0),
    ]
    (other,) = by_group[class_group(20)]["sessions"]
    assert (other["session"], other["fast_failed"]) == (3, 1)


def test_an_entry_crosses_the_writer_pipe_with_every_field_as_it_was():
    """Entries travel to the journal writer process pickled (as their fields' tuple)."""
    import pickle

    entry = journal.Entry(
        session_id=4, classroom_id=2, kind="attempt", message="call 3, attempt 2: 503",
        burst_id=9, t_ms=1764750000123.5, call_no=3, attempt_no=2, outcome="error",
        error="503", latency_ms=5.0, backoff_ms=None, state_from="", state_to="",
        actor_id=None, data={"host": 1, "nested": {"a": [1, 2]}}, emitted=1764750000.25,
    )  # fmt: skip
    copy = pickle.loads(pickle.dumps([entry], protocol=pickle.HIGHEST_PROTOCOL))[0]  # noqa: S301
    assert copy == entry and copy is not entry
    assert pickle.loads(pickle.dumps(entry)) == entry  # noqa: S301 (the default protocol too)
