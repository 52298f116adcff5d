"""The one place that talks to the channel layer.

``lab-session-<id>`` (everyone watching a session) gets ``journal.events``: the session's rows
in sequence order, each already rendered (:func:`labs.journal.rows.pushed_row`).
``lab-class-<id>`` (the class's instructors) gets ``class.sessions``, one summary per class
per batch, and ``class.progress``, which names a session and carries no counts. Sends happen
only after the rows are committed: a page that reconnects reads the database, so a push must
never announce a row a rollback could take back (what consumers send on: docs/live-page.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)


def session_group(session_id: int) -> str:
    """Group name for everyone watching lab session ``session_id``."""
    return f"lab-session-{session_id}"


def class_group(classroom_id: int) -> str:
    """Group name for the dashboards of classroom ``classroom_id``."""
    return f"lab-class-{classroom_id}"


Push = tuple[str, dict[str, Any]]


def journal_pushes(
    classroom_id: int, per_session: Sequence[tuple[int, Sequence[dict[str, Any]], dict[str, Any]]]
) -> list[Push]:
    """The messages for newly committed journal rows of one class's sessions: one
    ``journal.events`` per session (its rows as :func:`labs.journal.rows.pushed_row` makes
    them, in sequence order) and one ``class.sessions`` for the class's dashboards with each
    session's compact summary (``(session id, payloads, summary)`` items, in order)."""
    pushes: list[Push] = [
        (session_group(session_id), {"type": "journal.events", "session": session_id,
                                     "events": list(payloads)})
        for session_id, payloads, _ in per_session
        if payloads
    ]  # fmt: skip
    if per_session:
        pushes.append(
            (
                class_group(classroom_id),
                {
                    "type": "class.sessions",
                    "sessions": [
                        {"session": session_id, **summary} for session_id, _, summary in per_session
                    ],
                },
            )
        )
    return pushes


def progress_push(classroom_id: int, session_id: int) -> Push:
    """The message saying session ``session_id``'s step progress or predictions changed."""
    return (class_group(classroom_id), {"type": "class.progress", "session": session_id})


async def asend_all(pushes: Iterable[Push]) -> None:
    """Send every push on the running loop, in order: one pipelined round trip for the batch
    (labs.live.channel_layer). A failed send is logged, never raised: the journal is already
    committed, and a page that missed a push reads the gap from the database (labs.consumers).
    """
    pushes = list(pushes)
    try:
        await get_channel_layer().group_send_many(pushes)
    except Exception as exc:
        logger.warning("channel layer send of %d message(s) failed: %r", len(pushes), exc)


def send_all(pushes: Iterable[Push]) -> None:
    """:func:`asend_all` for synchronous code (request code from ``on_commit``, the journal
    writer's thread): one pipelined round trip on a plain Redis client, no event loop."""
    pushes = list(pushes)
    if not pushes:
        return
    try:
        get_channel_layer().group_send_many_sync(pushes)
    except Exception as exc:
        logger.warning("channel layer send of %d message(s) failed: %r", len(pushes), exc)


def seconds_push(
    session_id: int, first: int, through: int, seconds: Sequence[dict[str, Any]]
) -> Push:
    """The message counting rows ``first`` to ``through`` of session ``session_id`` (all of
    them steady traffic's, :mod:`labs.journal.seconds`) and carrying ``seconds``: the seconds
    they fall in, each with every row of it counted so far."""
    return (
        session_group(session_id),
        {"type": "traffic.seconds", "session": session_id, "first": first, "through": through,
         "seconds": list(seconds)},
    )  # fmt: skip


def class_seconds_push(classroom_id: int, deltas: Sequence[dict[str, Any]]) -> Push:
    """One ``class.sessions`` for a class's dashboards: each session's steady traffic since
    the last (count deltas, ``first_seq`` and ``last_seq``, newest breaker state)."""
    return (class_group(classroom_id), {"type": "class.sessions", "sessions": list(deltas)})
