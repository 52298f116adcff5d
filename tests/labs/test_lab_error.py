"""How a run's error reads in the student's journal and summary (labs.presenters.text.lab_error):
a lost connection is said in words, and no internal address is ever shown."""

from __future__ import annotations

import redis
from django.db import OperationalError

from labs.presenters.text import lab_error


def test_a_lost_redis_connection_is_said_in_words_without_its_address():
    for exc in (
        redis.ConnectionError("Error 111 connecting to 127.0.0.1:6407. Connection refused."),
        redis.ConnectionError("Connection closed by server."),
        redis.TimeoutError("Timeout reading from redis:6379"),
    ):
        words = lab_error(exc)
        assert words.startswith("the lab lost its connection to Redis")
        assert "6407" not in words and "6379" not in words


def test_a_lost_database_connection_is_said_in_words():
    words = lab_error(OperationalError('connection to server at "10.0.0.5", port 5432 failed'))
    assert words.startswith("the lab lost its connection to the database")
    assert "10.0.0.5" not in words


def test_any_other_error_keeps_its_text_but_not_an_address():
    assert lab_error(ValueError("bad value at db.internal:5432 and [::1]:6379")) == (
        "bad value at (an internal address) and (an internal address)"
    )
    assert lab_error(RuntimeError()) == "RuntimeError"
