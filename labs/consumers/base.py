"""What the websocket consumers share: the close codes, the way they read the database and
Redis and do what a browser asks off the event loop (:func:`read`, :func:`read_redis`,
:func:`act`), a dispatch without a per-message thread hop, the limits on the socket daphne
serves them (:class:`SocketLimits`) and the periodic re-check of the right that let a socket
in (:class:`RightCheck`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.layers import get_channel_layer
from daphne.ws_protocol import WebSocketProtocol
from django.conf import settings

from lab_project.env import plain
from labs.selectors.access import signed_in_many
from labs.services.launch_token import launch_tokens_still_valid

logger = logging.getLogger(__name__)

#: Close code for a socket whose user may not see what it asked for. The consumers accept,
#: then close with it: a socket refused before ``accept`` reaches the page as a bare 1006.
CLOSE_FORBIDDEN = 4403
#: Close code for a socket whose client has not read what was sent to it: more than
#: ``LAB_WS_SEND_BUFFER_MAX_BYTES`` wait in the server for it. The page reconnects and catches
#: up from its last sequence number (or reloads when that is too far back).
CLOSE_TOO_FAR_BEHIND = 4008


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


#: Threads for what a browser asks a consumer to do (a Run burst click), apart from the reads'
#: pool: a class-wide click must not queue behind pages catching up, nor they behind it.
#: Several, not one: a click spends most of its time waiting (Redis, the broker, the
#: database's write lock and commit), and one thread makes a class's answers wait on each
#: other (docs/scaling.md, "Figures behind the code").
_ACTIONS = ThreadPoolExecutor(max_workers=6, thread_name_prefix="lab-actions")


def act(function):
    """``function`` (a short write through the ORM) as a coroutine run in the actions' pool."""
    return database_sync_to_async(function, thread_sensitive=False, executor=_ACTIONS)


class DirectDispatch:
    """Consumer mixin: take each message from one inbox (see ``__call__``) and dispatch it
    straight to its handler.

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

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """``AsyncConsumer.__call__`` (Channels 4.3, pinned in requirements.txt) with a
        cheaper wait for the next message: one task per source (the browser's frames, the
        channel layer) feeding one inbox, handled in arrival order, one at a time.

        Channels waits with ``asyncio.wait`` over a fresh task per source and makes a new
        task for each message it takes: about 14 us of event-loop bookkeeping a message
        warm, one inbox about 1 us, on the loop that forwards every push of the process."""
        self.scope = scope
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        sources = [receive]
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            self.channel_receive = functools.partial(
                self.channel_layer.receive, self.channel_name
            )
            sources.append(self.channel_receive)
        self.base_send = send
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def pump(source: Any) -> None:
            while True:
                inbox.put_nowait(await source())

        pumps = [asyncio.ensure_future(pump(source)) for source in sources]
        try:
            while True:
                await self.dispatch(await inbox.get())
        except StopConsumer:
            pass
        finally:
            for task in pumps:
                task.cancel()
            for task in pumps:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


if plain("dispatch"):  # Channels' own dispatch and __call__ (LAB_PLAIN, for the benchmarks)
    DirectDispatch = type("DirectDispatch", (), {"__doc__": DirectDispatch.__doc__})  # type: ignore[misc]


def clip(value: Any, limit: int = 120) -> str:
    """``repr(value)`` cut to ``limit`` characters, for a log line about a bad message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def daphne_protocol(send: Any) -> WebSocketProtocol | None:
    """daphne's protocol object for the socket behind the ASGI ``send`` callable, or None
    when another server (or a test communicator) serves it.

    daphne 4.2 (pinned in requirements.txt) hands each application
    ``functools.partial(Server.handle_reply, protocol)`` as ``send``; channels' session
    middleware (4.3, pinned) passes on a method of its own instead, keeping daphne's in
    ``real_send``. tests/integration/test_daphne_sockets.py runs a real daphne against this."""
    for _ in range(4):  # daphne's send, or a wrapper or two around it
        if isinstance(send, functools.partial) and send.args:
            protocol = send.args[0]
            return protocol if isinstance(protocol, WebSocketProtocol) else None
        send = getattr(getattr(send, "__self__", None), "real_send", None)
        if send is None:
            return None
    return None


def unsent_bytes(transport: Any) -> int:
    """Bytes written to a Twisted TCP transport that the kernel has not taken yet (what
    ``twisted.internet.abstract.FileDescriptor`` holds in ``dataBuffer`` past ``offset``, plus
    its pending ``_tempDataBuffer``)."""
    return (
        len(transport.dataBuffer) - transport.offset + getattr(transport, "_tempDataLen", 0)
    )


class SocketLimits:
    """Consumer mixin: limits on the socket that daphne serves for this consumer.

    - A client frame over daphne's size limit (1 MiB) closes the socket with 1009 and a close
      frame (``failByDrop`` off), not autobahn's dropped connection, which the browser reports
      as a bare 1006.
    - When a message is to be sent while more than ``LAB_WS_SEND_BUFFER_MAX_BYTES`` wait in
      daphne's transport for a client that does not read, the socket is closed with
      :data:`CLOSE_TOO_FAR_BEHIND` and nothing more is sent; the page catches up when it
      reconnects.

    Under another server (and under ``WebsocketCommunicator``) neither applies.
    """

    _server_send: Any = None
    _transport: Any = None
    _behind = False

    async def websocket_connect(self, message: dict[str, Any]) -> None:
        protocol = daphne_protocol(self.base_send)
        if protocol is not None:
            protocol.failByDrop = False
            self._transport = protocol.transport
            self._server_send = self.base_send
            self.base_send = self._send_bounded
        await super().websocket_connect(message)

    async def _send_bounded(self, message: dict[str, Any]) -> None:
        if message.get("type") == "websocket.send":
            if self._behind:
                return
            waiting = unsent_bytes(self._transport)
            if waiting > settings.LAB_WS_SEND_BUFFER_MAX_BYTES:
                self._behind = True
                logger.warning(
                    "websocket %s: closed with %d, its client has not read %d bytes (limit %d)",
                    self.scope.get("path"),
                    CLOSE_TOO_FAR_BEHIND,
                    waiting,
                    settings.LAB_WS_SEND_BUFFER_MAX_BYTES,
                )
                message = {"type": "websocket.close", "code": CLOSE_TOO_FAR_BEHIND}
        await self._server_send(message)


#: A socket's right: ``test([(user, key), ...])`` answers for many sockets at once, with
#: the key each socket gave (:meth:`RightCheck.keep_checking`).
RightTest = Callable[[list[tuple[Any, Any]]], list[bool]]


class RightCheck:
    """Consumer mixin: an open socket keeps the right that let it in, or closes.

    A logout, an expired session or a class no longer taught would otherwise never reach a
    socket let in at its handshake. After letting a socket in, a consumer calls
    :meth:`keep_checking` with a test of its right that answers for many sockets at once;
    every ``LAB_WS_RECHECK_MS`` every socket of the process is checked together
    (:class:`_Rechecks`): its test, and that its login (a Django session, or a course launch's
    grant) still signs in its user. When either fails, nothing more is sent and the socket
    closes with :data:`CLOSE_FORBIDDEN`; a check that cannot be made (the database
    restarting) keeps the socket and tries again at the next interval.
    """

    _rechecked = False
    _revoked = False

    def keep_checking(self, test: RightTest, key: Any) -> None:
        """From now on, re-check ``test([(user, key)])`` and the login periodically."""
        if self._rechecked:
            return
        self._rechecked = True
        # Every message goes out through base_send (send_json included): once revoked,
        # nothing but the close passes.
        self._unguarded_send = self.base_send
        self.base_send = self._send_unless_revoked
        user = self.scope.get("user")
        right = _Right(
            test, key, user, getattr(user, "pk", None),
            getattr(self.scope.get("session"), "session_key", None), self.scope.get("launch_grant"),
        )  # fmt: skip
        _rechecks().add(self, right)

    async def revoke(self) -> None:
        """Send nothing more and close with :data:`CLOSE_FORBIDDEN`."""
        if self._revoked:
            return
        self._revoked = True
        logger.info("websocket %s: closed, its right ended", self.scope.get("path"))
        await self.close(code=CLOSE_FORBIDDEN)

    async def _send_unless_revoked(self, message: dict[str, Any]) -> None:
        if self._revoked and message.get("type") == "websocket.send":
            return
        await self._unguarded_send(message)

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        if self._rechecked:
            _rechecks().discard(self)
        await super().websocket_disconnect(message)  # type: ignore[misc]


@dataclass(frozen=True)
class _Right:
    """What one socket must keep: its right's test and key, and its login."""

    test: RightTest
    key: Any
    user: Any
    user_id: int | None
    session_key: str | None
    grant: Any


def check_rights(rights: list[_Right]) -> list[bool | None]:
    """For each of ``rights``: True while its login signs its user in and its test passes,
    False when either ended, None when it could not be checked (kept, asked again next time).
    A handful of queries however many sockets: the logins in two (sessions, then users), the
    course grants in two, each test once for all its sockets."""
    verdicts: list[bool | None] = [True] * len(rights)

    def apply(indexes: list[int], check: Callable[[list], list[bool]], what: str,
              argument: Callable[[_Right], Any]) -> None:  # fmt: skip
        if not indexes:
            return
        try:
            answers = check([argument(rights[i]) for i in indexes])
        except Exception:  # no answer is not a no: look again next time
            logger.warning("websockets: could not re-check %s", what, exc_info=True)
            for i in indexes:
                verdicts[i] = None
            return
        for i, ok in zip(indexes, answers, strict=True):
            if not ok and verdicts[i] is not None:
                verdicts[i] = False

    by_session = [i for i, right in enumerate(rights) if right.grant is None]
    by_grant = [i for i, right in enumerate(rights) if right.grant is not None]
    apply(by_session, signed_in_many, "their logins", lambda r: (r.session_key, r.user_id))
    apply(by_grant, launch_tokens_still_valid, "their course grants", lambda r: r.grant)
    tests: dict[RightTest, list[int]] = {}
    for i, right in enumerate(rights):
        tests.setdefault(right.test, []).append(i)
    for test, indexes in tests.items():
        apply(indexes, test, test.__name__, lambda r: (r.user, r.key))
    return verdicts


class _Rechecks:
    """Every open socket's right on one event loop, checked together every
    ``LAB_WS_RECHECK_MS`` in one trip to the reads' pool (:func:`check_rights`): thirty pages
    cost a few queries an interval, not three each. The loop's task runs while a socket is
    open."""

    def __init__(self) -> None:
        self.sockets: dict[RightCheck, _Right] = {}
        self.task: asyncio.Task | None = None

    def add(self, consumer: RightCheck, right: _Right) -> None:
        self.sockets[consumer] = right
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._run())

    def discard(self, consumer: RightCheck) -> None:
        self.sockets.pop(consumer, None)

    async def _run(self) -> None:
        while self.sockets:
            await asyncio.sleep(settings.LAB_WS_RECHECK_MS / 1000)
            checked = list(self.sockets.items())
            if not checked:
                return
            try:
                verdicts = await read(check_rights)([right for _, right in checked])
            except Exception:
                logger.warning("websockets: could not re-check their rights", exc_info=True)
                continue
            for (consumer, _), ok in zip(checked, verdicts, strict=True):
                if ok is False and self.sockets.pop(consumer, None) is not None:
                    try:
                        await consumer.revoke()
                    except Exception:  # a socket already gone must not stop the others
                        logger.warning("websocket: could not close after its right ended",
                                       exc_info=True)  # fmt: skip


_RECHECKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Rechecks] = (
    weakref.WeakKeyDictionary()
)


def _rechecks() -> _Rechecks:
    """The running loop's :class:`_Rechecks` (one per process under daphne; a test's own
    loop gets its own)."""
    loop = asyncio.get_running_loop()
    rechecks = _RECHECKS.get(loop)
    if rechecks is None:
        rechecks = _RECHECKS[loop] = _Rechecks()
    return rechecks
