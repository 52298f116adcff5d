"""One storm panel tick reads the class's shared dependency once: Redis alone (no database
query) in two round trips, ``TIME`` and one pipeline, however many sessions the class has;
and what it reads is the model's counters, settings, trigger and each session's own
seconds."""

from __future__ import annotations

import time

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labs.consumers.storm import RESEND_S
from labs.engine.shared import SharedConfig, Trigger
from labs.live import runtime
from labs.presenters.storm import student_rows
from labs.selectors.storm import STORM_STUDENT_WINDOW_S, storm_now, storm_sessions


@pytest.fixture
def model(classroom):
    model = runtime.configure_shared(classroom.pk, SharedConfig(3, 20, 500))
    yield model
    model.clear()


@pytest.fixture
def round_trips(monkeypatch):
    """Every write of commands to a Redis connection (a pipeline's commands go in one)."""
    sent: list[bytes] = []
    original = redis.connection.AbstractConnection.send_packed_command

    def counted(self, command, *args, **kwargs):
        sent.append(command)
        return original(self, command, *args, **kwargs)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
    return sent


@pytest.mark.django_db
def test_a_tick_is_two_round_trips_to_redis_and_no_query(classroom, model, round_trips):
    sessions = list(range(9001, 9031))  # thirty sessions' own counters in the same read
    config = SharedConfig(3, 20, 500)
    with CaptureQueriesContext(connection) as queries:
        round_trips.clear()
        read = storm_now(classroom.pk, RESEND_S, sessions, config)
    assert len(queries) == 0, [q["sql"] for q in queries]
    assert len(round_trips) == 2
    assert len(read["seconds"]) == RESEND_S + 1 and set(read["window"]["sessions"]) == set(
        sessions
    )


@pytest.mark.django_db
def test_a_tick_reads_the_counters_the_settings_the_trigger_and_each_sessions_seconds(
    classroom, factory, student, scenario, model
):
    session = factory.session(student, classroom, scenario)
    for attempt in (1, 2, 1):  # three attempts of the session, one a retry
        model.decide(attempt=attempt, session=str(session.pk))
    second = int(model.client.time()[0])
    model.trigger(Trigger("slow", 60_000, factor=3.0))
    while int(model.client.time()[0]) == second:  # the window holds complete seconds only
        time.sleep(0.02)
    sessions = storm_sessions(classroom.pk)
    read = storm_now(classroom.pk, RESEND_S, [s["session"] for s in sessions])
    assert sum(s["offered"] for s in read["seconds"]) == 3
    assert [s["retries"] for s in read["seconds"] if s["second"] == second] == [1]
    assert read["model"]["config"] == SharedConfig(3, 20, 500).to_dict()
    assert read["model"]["capacity_per_s"] == SharedConfig(3, 20, 500).capacity_per_s
    trigger = read["model"]["trigger"]
    assert (trigger["kind"], trigger["factor_pct"]) == ("slow", 300)
    assert trigger["until_s"] - trigger["from_s"] == 60
    assert read["window"]["class_offered"] == 3
    assert len(read["window"]["sessions"][session.pk]) == STORM_STUDENT_WINDOW_S
    (row,) = student_rows(sessions, read["window"], read["now"])
    assert (row["session"], row["now"], row["attempts"], row["retries"]) == (
        session.pk, read["now"], 3, 1,
    )  # fmt: skip
    assert row["share"] == 1.0


@pytest.mark.django_db
def test_without_settings_in_redis_a_tick_shows_the_ones_it_was_given(classroom, model):
    model.clear()
    read = storm_now(classroom.pk, 0, (), SharedConfig(5, 10, 100))
    assert read["model"]["config"] == SharedConfig(5, 10, 100).to_dict()
    assert storm_now(classroom.pk, 0)["model"]["config"] == SharedConfig().to_dict()


@pytest.mark.django_db
def test_a_tick_in_the_same_second_leaves_the_students_window_out(classroom, model, round_trips):
    """The table goes out once a second: a second tick within it reads no session's counters."""
    first = storm_now(classroom.pk, RESEND_S, [9001, 9002])
    round_trips.clear()
    again = storm_now(classroom.pk, RESEND_S, [9001, 9002], unless_now=first["now"])
    if again["now"] == first["now"]:
        assert "window" not in again
        assert b"session" not in round_trips[-1]
    else:  # the second moved on between the reads
        assert set(again["window"]["sessions"]) == {9001, 9002}
