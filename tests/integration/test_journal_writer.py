"""The journal writer's own behaviour on the real database: waiting for SQLite's write lock."""

from __future__ import annotations

import logging
import sqlite3
import threading

import pytest
from django.db import connection

from labs.journal import store as journal
from labs.models import JournalEvent
from labs.services import lab
from labs.worker import writer as writer_module
from tests.conftest import make_classroom, make_scenario, make_student, tour_script

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def session():
    scenario = make_scenario("writer", script=tour_script())
    room = make_classroom("Writer", join_code="WRITER01")
    room.scenarios.add(scenario)
    return lab.session_open(user=make_student("wendy", room), classroom=room, scenario=scenario)


def test_a_writer_behind_another_sqlite_writer_polls_for_the_lock_without_an_error(session, caplog):
    """Another connection holds SQLite's write lock for half a second. The writer's own busy
    timeout is 2 ms (SQLite's handler would sleep through free windows in 100 ms steps), so it
    meets "database is locked" many times; it must ask again quietly and write the batch."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's write lock only")
    seen_timeouts: list[int] = []

    def after_write(written):  # runs in the writer thread, inside the batch's transaction
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout")
            seen_timeouts.append(cursor.fetchone()[0])

    holder = sqlite3.connect(
        connection.settings_dict["NAME"], timeout=20, isolation_level=None, check_same_thread=False
    )
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
    writer = writer_module.JournalWriter(after_write=after_write)
    caplog.set_level(logging.WARNING, logger="labs.worker.writer")
    try:
        release.start()
        writer.submit(
            journal.Entry(
                session_id=session.pk,
                classroom_id=session.classroom_id,
                kind="policy_set",
                message="written once the lock is free",
            )
        )
        assert writer.flush(30)
    finally:
        release.join()
        holder.close()
        writer.flush(close_connection=True)
    assert JournalEvent.objects.filter(session=session, kind="policy_set").count() == 1
    assert seen_timeouts == [writer_module.SQLITE_BUSY_TIMEOUT_MS]
    assert not [r for r in caplog.records if "not written yet" in r.getMessage()]


@pytest.mark.postgres
def test_concurrent_batches_over_the_same_sessions_get_gap_free_numbers_and_no_deadlock(session):
    """Four writers append batches naming the same sessions in different orders (one
    statement reserves every session's numbers: on PostgreSQL the rows are locked in id order
    first, so none waits on another in a cycle): every session's numbers are 1..n."""
    from django.db import connections

    room = session.classroom
    others = [
        lab.session_open(
            user=make_student(f"writer{i}", room), classroom=room, scenario=session.scenario
        )
        for i in range(3)
    ]
    sessions = [session, *others]
    errors: list[BaseException] = []

    def write(k: int) -> None:
        try:
            for round_no in range(15):
                order = sessions[k % 4 :] + sessions[: k % 4]
                if round_no % 2:
                    order.reverse()
                entries = [
                    journal.entry(s, "policy_set", f"writer {k} round {round_no}") for s in order for _ in (1, 2)
                ]
                from django.db import transaction

                with transaction.atomic():
                    journal.append_entries(entries)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for s in sessions:
        seqs = list(JournalEvent.objects.filter(session=s).order_by("seq").values_list("seq", flat=True))
        assert seqs == list(range(1, 4 * 15 * 2 + 1))


def test_a_batch_naming_a_deleted_session_raises_and_writes_nothing(session):
    from django.db import transaction

    gone = lab.session_open(
        user=make_student("ghost", session.classroom), classroom=session.classroom,
        scenario=session.scenario,
    )  # fmt: skip
    entries = [journal.entry(session, "policy_set", "kept?"), journal.entry(gone, "policy_set", "gone")]
    gone.delete()
    with pytest.raises(journal.LabSession.DoesNotExist), transaction.atomic():
        journal.append_entries(entries)
    assert not JournalEvent.objects.filter(session=session, kind="policy_set").exists()


def test_steady_traffic_rows_wait_longer_for_company_and_a_bursts_row_does_not(session):
    """A batch of rows with no burst (steady traffic) lingers ``traffic_linger``; a burst's row
    ends the linger after ``linger`` (its student watches attempt by attempt)."""
    import time

    from labs.models import Burst

    batches: list[list[str]] = []
    writer = writer_module.JournalWriter(
        linger=0.005,
        traffic_linger=5.0,
        after_write=lambda written: batches.append([w.entry.message for w in written]),
    )
    writer.submit(journal.entry(session, "attempt", "traffic 1"))
    time.sleep(0.3)  # far past the short linger: the traffic row still waits
    writer.submit(journal.entry(session, "attempt", "traffic 2"))
    burst = Burst.objects.create(session=session, number=1, size=1)
    writer.submit(journal.entry(session, "attempt", "burst 1", burst_id=burst.pk))
    started = time.monotonic()
    while not batches and time.monotonic() - started < 4.0:
        time.sleep(0.01)
    assert batches == [["traffic 1", "traffic 2", "burst 1"]]  # written well before 5 s
    writer.stop()
