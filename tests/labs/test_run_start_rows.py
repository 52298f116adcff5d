"""The first journal row of a run, as ``burst_start`` and ``traffic_start`` write it
(``labs.journal.store.record_one``): its kind, words, actor, burst and data, and the push
that follows the commit."""

from __future__ import annotations

import pytest

from labs.journal import store as journal
from labs.models import JournalEvent
from labs.services import bursts, lab, traffic

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_worker(monkeypatch):
    """A start sends a task on commit; these tests only look at the row."""
    monkeypatch.setattr("labs.live.enqueue.enqueue_burst_on_commit", lambda *a, **k: None)
    monkeypatch.setattr("labs.live.enqueue.send_traffic", lambda traffic_id: None)


@pytest.fixture
def session(classroom, scenario, student):
    return lab.session_open(user=student, classroom=classroom, scenario=scenario)


def _row(session, kind: str) -> JournalEvent:
    return JournalEvent.objects.get(session=session, kind=kind)


def test_a_bursts_first_row_says_what_was_queued_by_whom(session, student):
    burst = bursts.burst_start(session=session, user=student, size=6, concurrency=2)
    row = _row(session, "burst_queued")
    assert row.message == "burst 1 queued: 6 call(s) from call 1, 2 caller(s) at once"
    assert (row.actor_id, row.burst_id) == (student.pk, burst.pk)
    assert row.data == {"size": 6, "concurrency": 2, "burst": 1}


def test_a_traffic_runs_first_row_says_what_was_started_by_whom(session, student):
    run = traffic.traffic_start(session=session, user=student, rate=4, duration_s=10,
                                arrivals="even")  # fmt: skip
    row = _row(session, "traffic_start")
    assert row.message == (
        f"traffic started by {student.username}: 4 calls/s (even) "
        "for 10 s, 40 call(s) from call 1"
    )
    assert (row.actor_id, row.burst_id) == (student.pk, None)
    assert row.data == {"traffic": run.pk, "rate": 4, "duration_s": 10, "arrivals": "even",
                        "calls": 40, "first_call": 1}  # fmt: skip


def test_record_one_writes_one_row_and_pushes_it_after_the_commit(
    session, student, monkeypatch, django_capture_on_commit_callbacks
):
    sent = []
    monkeypatch.setattr("labs.journal.broadcast.send_all", sent.extend)
    with django_capture_on_commit_callbacks(execute=True):
        written = journal.record_one(session, "burst_queued", "a row", user=student,
                                     data={"burst": 9})  # fmt: skip
    row = _row(session, "burst_queued")
    assert (written.seq, written.entry.kind) == (row.seq, "burst_queued")
    assert (row.message, row.actor_id, row.data) == ("a row", student.pk, {"burst": 9})
    pushed = [payload for _group, message in sent for payload in message.get("events", [])]
    assert [p["seq"] for p in pushed] == [row.seq]
