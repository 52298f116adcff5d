"""A batch of Redis commands in one write on one connection, then every reply.

redis-py's ``pipeline()`` does the same in more Python: it packs each command through a
generator and two wrappers, takes a connection from the pool and gives it back through its
deprecation and observability layers, and runs a retry wrapper per batch. On the paths that
send a batch every few milliseconds (the engine hub's round trips, the journal writer's
pushes) that was the larger part of the sending's CPU (figures in docs/scaling.md).
:func:`send_batch` keeps redis-py's connection (its parser, its reconnecting)
and response callbacks, and only skips the layers around them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import hiredis
import redis


def words(args: Sequence[Any]) -> tuple[Any, ...]:
    """A command's arguments as Redis reads them: a command name of two words (redis-py's
    ``SCRIPT LOAD``, ``CLIENT SETNAME``) is two arguments."""
    first = args[0]
    if (isinstance(first, str) and " " in first) or (isinstance(first, bytes) and b" " in first):
        return (*first.split(), *args[1:])
    return tuple(args)


def send_batch(
    conn: redis.connection.AbstractConnection,
    commands: Sequence[Sequence[Any]],
    callbacks: Mapping[Any, Any] | None = None,
) -> list[Any]:
    """Send ``commands`` (argument tuples) in one write on ``conn`` and read their replies in
    order (:func:`write_batch`, then :func:`read_replies`)."""
    failed = write_batch(conn, commands)
    if failed is not None:
        return [failed] * len(commands)
    return read_replies(conn, commands, callbacks)


def write_batch(
    conn: redis.connection.AbstractConnection, commands: Sequence[Sequence[Any]]
) -> Exception | None:
    """Send ``commands`` in one write on ``conn``; their replies are for
    :func:`read_replies`, in order, after those of any batch written before. Returns the
    error when nothing could be sent: a connection that fails while sending is reconnected
    and the whole batch sent once more (nothing of it reached Redis)."""
    try:
        payload = b"".join([hiredis.pack_command(words(args)) for args in commands])
    except Exception as exc:  # an argument Redis cannot take: every command fails alike
        return exc
    try:
        conn.send_packed_command([payload])
    except (redis.ConnectionError, redis.TimeoutError):
        conn.disconnect()
        try:
            conn.send_packed_command([payload])
        except Exception as exc:
            conn.disconnect()
            return exc
    except Exception as exc:
        conn.disconnect()
        return exc
    return None


def read_replies(
    conn: redis.connection.AbstractConnection,
    commands: Sequence[Sequence[Any]],
    callbacks: Mapping[Any, Any] | None = None,
) -> list[Any]:
    """Read the replies of ``commands``, written on ``conn`` before. A reply is the value
    (through ``callbacks``, a client's ``response_callbacks``, where one applies) or the
    exception redis-py would have raised for that command alone. A connection that fails
    while the replies are read is dropped (it connects again on its next use), and every
    command not yet answered gets the error (it may have run)."""
    replies: list[Any] = []
    for args in commands:
        try:
            reply = conn.read_response()
        except redis.ResponseError as exc:
            replies.append(exc)
            continue
        except Exception as exc:
            conn.disconnect()
            replies.extend([exc] * (len(commands) - len(replies)))
            break
        callback = callbacks.get(args[0]) if callbacks else None
        replies.append(reply if callback is None else callback(reply))
    return replies
