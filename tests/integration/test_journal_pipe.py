"""The writer process (JournalPipe) on the real database and Redis, its child SIGKILLed.

The journal is the source of truth: a writer process that dies is restarted and everything it
had not committed is sent again, and an entry it had committed is never written twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connections, transaction
from django.db.models import F

from labs.journal import store as journal
from labs.models import JournalEvent, LabSession
from labs.services import lab
from labs.worker.writer_process import JournalPipe
from tests.conftest import make_classroom, make_scenario, make_student, tour_script
from tests.integration.conftest import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

KIND = "policy_set"  # any kind the journal knows; the rows carry their number in data


def new_sessions(count: int):
    scenario = make_scenario("pipe", script=tour_script())
    room = make_classroom("Pipe", join_code="PIPE0001")
    room.scenarios.add(scenario)
    return [
        lab.session_open(user=make_student(f"pipe{i}", room), classroom=room, scenario=scenario)
        for i in range(count)
    ]


def entry(session, n: int) -> journal.Entry:
    return journal.Entry(
        session_id=session.pk,
        classroom_id=session.classroom_id,
        kind=KIND,
        message=f"entry {n}",
        data={"n": n},
        emitted=time.time(),
    )


#: Writer processes this test process already had (the process-wide writer another test
#: started): not the pipe under test.
_ELSEWHERE: set[int] = set()


@pytest.fixture(autouse=True)
def _ignore_writers_started_elsewhere():
    _ELSEWHERE.clear()
    _ELSEWHERE.update(writer_children())
    yield
    _ELSEWHERE.clear()


def one_writer() -> set[int] | None:
    """The live writer processes, when there is exactly one."""
    children = writer_children()
    return children if len(children) == 1 else None


def writer_children() -> set[int]:
    """Live journal writer processes started by this (the test's) process for the pipe under
    test."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if (
            int(stat[1]) == os.getpid()
            and stat[0] != "Z"
            and b"labs.worker.writer_process" in cmdline
        ):
            pids.add(int(proc.name))
    return pids - _ELSEWHERE


def journaled(sessions) -> int:
    return JournalEvent.objects.filter(session__in=sessions, kind=KIND).count()


def assert_exactly_once_in_order(sessions, submitted: dict[int, int]) -> None:
    problems = []
    for session in sessions:
        rows = list(JournalEvent.objects.filter(session=session).order_by("seq"))
        seqs = [row.seq for row in rows]
        if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
            problems.append(f"session {session.pk}: sequence numbers have gaps")
        numbers = [row.data["n"] for row in rows if row.kind == KIND]
        expected = list(range(submitted[session.pk]))
        if numbers != expected:
            missing = len(set(expected) - set(numbers))
            duplicated = len(numbers) - len(set(numbers))
            problems.append(
                f"session {session.pk}: {submitted[session.pk]} submitted, {len(numbers)} "
                f"journaled, {missing} missing, {duplicated} duplicated, "
                f"in order: {numbers == sorted(numbers)}"
            )
    assert not problems, "\n".join(problems)


@pytest.fixture
def pipe():
    writer = JournalPipe()
    yield writer
    writer.stop()


def test_writer_child_killed_five_times_mid_stream_loses_and_duplicates_nothing(pipe):
    """Three threads submit entries for three sessions without pause while the writer child is
    SIGKILLed five times, each time after its successor has written something. No submit may
    raise, and afterwards every entry is in the journal exactly once, in submit order, with
    gap-free sequence numbers."""
    sessions = new_sessions(3)
    submitted = {s.pk: 0 for s in sessions}
    errors: list[BaseException] = []
    stop = threading.Event()

    def submit_until_stopped(session):
        try:
            while not stop.is_set():
                pipe.submit(entry(session, submitted[session.pk]))
                submitted[session.pk] += 1
                time.sleep(0.0005)
        except BaseException as exc:  # reported below: a submit must never fail a burst
            errors.append(exc)

    pipe.start()
    assert pipe.flush(120), "the writer process did not start"
    threads = [threading.Thread(target=submit_until_stopped, args=(s,)) for s in sessions]
    for thread in threads:
        thread.start()
    try:
        for _ in range(5):
            before = journaled(sessions)
            wait_for(lambda before=before: journaled(sessions) > before + 20, timeout=120,
                     message="the writer process to write more rows")  # fmt: skip
            # The one live writer (a killed one may take a moment to be gone)
            children = wait_for(one_writer, timeout=60, message="exactly one live writer")
            os.kill(children.pop(), signal.SIGKILL)
        before = journaled(sessions)
        wait_for(lambda: journaled(sessions) > before + 20, timeout=120,
                 message="a restarted writer process to write")  # fmt: skip
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert errors == []
    assert pipe.flush(120)
    connections.close_all()
    assert_exactly_once_in_order(sessions, submitted)


def kill_after_commit_before_ack(pipe, session, before_kill=lambda: None) -> int:
    """Ten entries committed by the writer child, which is killed before it acknowledges them:
    Redis pauses writes (CLIENT PAUSE ... WRITE), so the child commits the batch and then waits
    on its push. ``before_kill`` runs just before the SIGKILL. Returns the killed pid."""
    pipe.start()
    assert pipe.flush(120)
    pause = redis.Redis.from_url(settings.CHANNEL_LAYER_REDIS_URL)
    pause.execute_command("CLIENT", "PAUSE", 30000, "WRITE")
    try:
        for n in range(10):
            pipe.submit(entry(session, n))
        wait_for(lambda: journaled([session]) == 10, timeout=20,
                 message="the batch to commit")  # fmt: skip
        (child,) = writer_children()
        before_kill()
        os.kill(child, signal.SIGKILL)
    finally:
        pause.execute_command("CLIENT", "UNPAUSE")
    return child


def test_a_batch_committed_but_not_acknowledged_is_not_written_again(pipe):
    """The child commits a batch and is killed before it acknowledges it: the batch is
    committed but the parent does not know; it must not be written a second time."""
    (session,) = new_sessions(1)
    kill_after_commit_before_ack(pipe, session)
    for n in range(10, 20):
        pipe.submit(entry(session, n))
    assert pipe.flush(120)
    assert_exactly_once_in_order([session], {session.pk: 20})


def test_a_successor_that_dies_before_it_looks_the_batch_up_hands_the_question_on(
    pipe, monkeypatch
):
    """As above, and the first successor dies before it has read a byte (it is started as a
    process that exits at once, as a writer killed while Django boots would). The one after it
    must still be asked about the batch in doubt, and must not write it a second time."""
    (session,) = new_sessions(1)
    real_popen = subprocess.Popen
    stillborn: list[int] = []

    def popen(args, **kwargs):
        if not stillborn and args[-1] == "labs.worker.writer_process":
            process = real_popen([sys.executable, "-c", "pass"], **kwargs)
            stillborn.append(process.pid)
            return process
        return real_popen(args, **kwargs)

    child = kill_after_commit_before_ack(
        pipe, session, before_kill=lambda: monkeypatch.setattr(subprocess, "Popen", popen)
    )
    wait_for(lambda: stillborn and one_writer() and child not in writer_children(), timeout=60,
             message="a writer after the stillborn one")  # fmt: skip
    for n in range(10, 20):
        pipe.submit(entry(session, n))
    assert pipe.flush(120)
    assert_exactly_once_in_order([session], {session.pk: 20})


def test_entries_pushed_out_of_a_full_buffer_and_lost_with_the_writer_are_journaled_as_lost():
    """Another transaction holds the session's row (the write lock on SQLite), so the writer
    process commits nothing while 50 entries arrive; the parent keeps only the newest 20. The
    writer is killed: the restarted one writes those 20 and one ``journal_lost`` row counting
    the 30 that nobody holds any more."""
    (session,) = new_sessions(1)
    pipe = JournalPipe(max_unacked=20)
    holding, release = threading.Event(), threading.Event()

    def hold_the_session_row():
        try:
            with transaction.atomic():
                LabSession.objects.filter(pk=session.pk).update(next_seq=F("next_seq"))
                holding.set()
                release.wait(60)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_session_row)
    try:
        pipe.start()
        assert pipe.flush(120)
        holder.start()
        assert holding.wait(30)
        for n in range(50):
            pipe.submit(entry(session, n))
        (child,) = writer_children()
        os.kill(child, signal.SIGKILL)
        wait_for(lambda: writer_children() and child not in writer_children(), timeout=30,
                 message="a new writer process")  # fmt: skip
    finally:
        release.set()
        holder.join()
    assert pipe.flush(120)
    pipe.stop()
    rows = list(JournalEvent.objects.filter(session=session).order_by("seq"))
    seqs = [row.seq for row in rows]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert [row.data["n"] for row in rows if row.kind == KIND] == list(range(30, 50))
    lost = [row for row in rows if row.kind == "journal_lost"]
    assert [row.data["lost"] for row in lost] == [30]
    assert "30 journal events lost" in lost[0].message
