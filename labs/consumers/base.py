"""What both websocket consumers share: the close code for "not yours", the way they read
the database and Redis off the event loop, and a dispatch without a per-message thread hop."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async

#: Close code for a socket whose user may not see what it asked for. The consumers accept,
#: then close with it: a socket refused before ``accept`` reaches the page as a bare 1006.
CLOSE_FORBIDDEN = 4403


def read(function):
    """``function`` as a coroutine run in the thread pool (read-only ORM work).

    ``thread_sensitive=False``: plain reads run in a pool instead of queueing behind every
    other consumer's on the process's one shared sync thread."""
    return database_sync_to_async(function, thread_sensitive=False)


#: Threads for Redis-only reads (the badge), apart from the ORM's: a badge must not queue
#: behind queries waiting for a database connection.
_REDIS_READS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lab-redis-read")


def read_redis(function):
    """``function`` (Redis only, no ORM) as a coroutine run in its own small thread pool."""
    return sync_to_async(function, thread_sensitive=False, executor=_REDIS_READS)


class DirectDispatch:
    """Consumer mixin: dispatch each message straight to its handler.

    Since Channels 4.2, ``AsyncConsumer.dispatch`` runs ``close_old_connections`` through
    ``sync_to_async`` before every handler, that is, a hop to the process's one
    thread-sensitive sync thread and back for every push and every frame a browser sends.
    With a hundred pages that was a queue of thousands of hops a second, shared with the sync
    views (the Run burst POSTs) that need that thread too. These consumers never use the ORM
    on the event loop: every query goes through ``database_sync_to_async``, which closes old
    connections around the call itself, so the per-message hop bought nothing.
    """

    async def dispatch(self, message: dict[str, Any]) -> None:
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)



def clip(value: Any, limit: int = 120) -> str:
    """``repr(value)`` cut to ``limit`` characters, for a log line about a bad message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
