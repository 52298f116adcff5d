"""The engine hub: every call a worker process has in flight, on one thread, with its Redis
round trips batched.

Every call runs as a cooperative caller (a greenlet) of one :class:`HubClock`, the engine's
virtual clock paced to the wall clock: a sleep hands the thread to the next due caller, and
the Redis commands of every caller due now go out in one write. Other threads use the hub
through :meth:`Hub.run`; a caller must block on nothing but the hub. Why, and its timing
guarantees: docs/scaling.md, "The engine hub".
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import heapq
import logging
import select
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import redis
from redis.exceptions import NoScriptError

from lab_project.env import plain
from labs.engine import VirtualClock
from labs.engine.clock import Task
from labs.live import runtime
from labs.live.redis_batch import read_replies, write_batch
from labs.worker.once import once

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The most of one wake-up's lateness a caller's next sleep absorbs, in seconds: a timer's
#: overshoot and a busy round, not an overloaded process.
CATCH_UP_S = 0.001
#: While busy, the hub hands its callers' journal entries to the writer this often (seconds).
JOURNAL_HANDOFF_S = 0.002


class HubClock(VirtualClock):
    """A :class:`~labs.engine.clock.VirtualClock` paced to the wall clock (``now()`` is wall
    time, ``time.time``: breaker timestamps live in Redis and are shared with other
    processes), driven by its :class:`Hub`'s thread.

    ``sleep`` from one of its callers parks the caller until the instant (see the module
    docstring for the catch-up); from any other thread it really sleeps, like
    :class:`~labs.engine.clock.SystemClock`.
    """

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        super().__init__(start=wall(), backend="greenlet")
        self._sleepers: set[Task[Any]] = set()
        self._late: dict[Task[Any], float] = {}

    def now(self) -> float:
        wall = self._wall()
        if wall > self._now:
            self._now = wall
        return self._now

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"cannot sleep a negative duration ({seconds})")
        task = self._backend.current()
        if task is None:
            if seconds:
                time.sleep(seconds)
            return
        due = self.now() - self._late.pop(task, 0.0) + seconds
        self._sleepers.add(task)
        heapq.heappush(self._queue, (due, next(self._seq), task))
        self._backend.suspend(task)

    def run_concurrently(self, fns):  # type: ignore[no-untyped-def]
        """As the VirtualClock's, from one of the hub's callers only (RuntimeError else)."""
        if self._backend.current() is None:
            raise RuntimeError("run_concurrently() on a HubClock only from one of its callers")
        return super().run_concurrently(fns)

    def resume_now(self, task: Task[Any]) -> None:
        """Put a parked caller back on the queue, due now (the hub, after its pipeline)."""
        heapq.heappush(self._queue, (self._now, next(self._seq), task))

    def current(self) -> Task[Any] | None:
        """The caller running now, or None outside the hub's callers."""
        return self._backend.current()

    def suspend(self, task: Task[Any]) -> None:
        """Give the thread back to the hub until someone resumes ``task``."""
        self._backend.suspend(task)

    def due(self) -> float | None:
        """When the earliest scheduled entry is due (None: nothing scheduled)."""
        return self._queue[0][0] if self._queue else None

    def _step(self) -> bool:
        when, _, entry = self._queue[0]
        if entry in self._sleepers:
            self._sleepers.discard(entry)  # type: ignore[arg-type]
            late = self._wall() - when
            if late > 0:
                self._late[entry] = late if late < CATCH_UP_S else CATCH_UP_S  # type: ignore[index]
        return super()._step()

    def _body(self, task: Task[Any]) -> Callable[[], None]:
        body = super()._body(task)

        def run() -> None:
            try:
                body()
            finally:
                self._late.pop(task, None)

        return run


class HubRedis(redis.Redis):
    """A ``redis.Redis`` whose commands, when a caller of ``hub`` sends them, go out in the
    hub's next pipeline (the caller waits for its reply meanwhile); from any other thread
    they go out at once, as usual. Replies, errors and response callbacks are redis-py's own:
    the hub replays each command on a pipeline of this client."""

    def __init__(self, hub: Hub, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._hub = hub
        self._hub_connection: Any = None  # the hub thread's own (see _send)
        self._hub_unread: list[Any] = []  # parked commands written, replies not yet read

    def execute_command(self, *args: Any, **options: Any) -> Any:
        hub = self._hub
        task = hub.clock.current()
        if task is None:
            return super().execute_command(*args, **options)
        # redis-py's read commands name their keys (``keys=``) for its client-side cache
        # only, and drops them before sending; so does the hub, or every GET and HGET would
        # take the rare options path (a pipeline on a pooled connection of its own).
        options.pop("keys", None)
        return hub._command(task, self, args, options)

    def send_nowait(self, args: tuple[Any, ...], script: str | None = None) -> Any:
        """Send a command whose reply the caller will not read: from one of the hub's
        callers it goes out with the hub's next pipeline, after every command the caller
        sent before it and before every one it sends after, and the caller goes on at once
        (returns None); elsewhere it runs now and returns its reply. ``script`` is the text
        of an ``EVALSHA``'s script, run with ``EVAL`` if Redis does not know the script."""
        hub = self._hub
        if hub.clock.current() is None:
            try:
                return super().execute_command(*args)
            except NoScriptError:
                if script is None:
                    raise
                return super().execute_command("EVAL", script, *args[2:])
        hub._parked.append((None, self, args, {}, script))
        return None


class _Waiter:
    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class Hub:
    """One thread running cooperative callers on a :class:`HubClock`, with batched Redis
    round trips (:class:`HubRedis`) and batched journal hand-offs (:meth:`journal`).

    Thread-safe entry points: :meth:`run`, :meth:`redis`. Everything else is for code that
    runs as one of the hub's callers.
    """

    def __init__(self, *, name: str = "engine-hub", wall: Callable[[], float] = time.time) -> None:
        self.clock = HubClock(wall)
        self.name = name
        self._inbox: collections.deque[tuple[Callable[[], Any], _Waiter]] = collections.deque()
        self._wake = threading.Event()
        # (caller or None for a command nobody waits for, client, args, options, its script)
        self._parked: list[tuple[Any, HubRedis, tuple[Any, ...], dict[str, Any], str | None]] = []
        self._replies: dict[Task[Any], Any] = {}
        self._entries: dict[Any, list[Any]] = {}  # writer -> entries of this round
        self._finished: list[_Waiter] = []
        self._handed = 0.0  # when the journal entries were last handed over
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._clients: dict[int, HubRedis] = {}
        #: Rounds and pipelined commands so far (benchmarks read them).
        self.rounds = 0
        self.commands = 0

    # -- for other threads -------------------------------------------------------------------

    def start(self) -> None:
        """Start the hub's thread now (the first :meth:`run` starts it otherwise)."""
        with self._start_lock:
            if self._thread is None:
                thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread = thread  # before it runs: run() tells its own thread by it
                thread.start()

    def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` as a caller on the hub and wait for it; returns its result or raises
        its exception. Raises RuntimeError from the hub's own thread (it would wait for
        itself)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("Hub.run() from the hub's own thread")
        waiter = _Waiter()
        self._inbox.append((fn, waiter))
        if self._thread is None:
            self.start()
        self._wake.set()
        waiter.done.wait()
        if waiter.error is not None:
            raise waiter.error
        return waiter.result  # type: ignore[no-any-return]

    def redis(self, pool: redis.ConnectionPool) -> HubRedis:
        """The hub's client on ``pool``'s server (one per pool: its commands share pipelines)."""
        client = self._clients.get(id(pool))
        if client is None:
            with self._start_lock:
                client = self._clients.get(id(pool))
                if client is None:
                    own = redis.ConnectionPool(
                        connection_class=pool.connection_class,
                        max_connections=pool.max_connections,
                        **pool.connection_kwargs,
                    )
                    client = self._clients[id(pool)] = HubRedis(self, connection_pool=own)
        return client

    # -- for callers -------------------------------------------------------------------------

    def journal(self, writer: Any, entry: Any) -> None:
        """Hand ``entry`` to ``writer`` (a :class:`~labs.journal.store.JournalSink`) with the
        other entries the callers emit meanwhile, in order: one ``submit_many`` when the hub
        is about to wait, when a run ends, or 2 ms after the last hand-off while it is busy.
        Outside the hub's callers, at once."""
        if self.clock.current() is None:
            writer.submit(entry)
            return
        batch = self._entries.get(writer)
        if batch is None:
            self._entries[writer] = [entry]
        else:
            batch.append(entry)

    def _command(
        self, task: Task[Any], client: HubRedis, args: tuple[Any, ...], options: dict[str, Any]
    ) -> Any:
        self._parked.append((task, client, args, options, None))
        self.clock.suspend(task)
        reply = self._replies.pop(task)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    # -- the thread --------------------------------------------------------------------------

    def _loop(self) -> None:
        _name_native_thread(self.name)
        logger.info("engine hub %s running (thread %s)", self.name, threading.get_native_id())
        clock = self.clock
        inbox = self._inbox
        while True:
            while inbox:
                fn, waiter = inbox.popleft()
                clock.spawn(self._job(fn, waiter))
            wall = clock._wall()
            due = clock.due()
            while due is not None and due <= wall:
                try:
                    clock._step()
                except Exception:  # a callback's error must not stop every other call
                    logger.exception("a scheduled callback failed on the engine hub")
                due = clock.due()
            busy = bool(self._parked)
            if busy:
                self._pipeline()  # its callers are due again at once
            due = clock.due()
            idle = not (inbox or self._parked) and (due is None or due > clock._wall())
            self._end_round(idle)
            if not idle:
                continue
            timeout = None if due is None else due - clock._wall()
            if self._read_unread():  # replies still on their way: look again soon
                timeout = UNREAD_LOOK_S if timeout is None else min(timeout, UNREAD_LOOK_S)
            if self._parked:  # a script Redis lost, to run by its text now
                continue
            if timeout is None or timeout > 0:
                self._wake.wait(timeout)
                self._wake.clear()

    def _job(self, fn: Callable[[], Any], waiter: _Waiter) -> Callable[[], None]:
        def job() -> None:
            try:
                waiter.result = fn()
            except BaseException as exc:  # handed to the waiting thread
                waiter.error = exc
            finally:
                self._finished.append(waiter)

        return job

    def _pipeline(self) -> None:
        """Send every parked command, one batch per client, and requeue their callers.

        A batch of commands nobody waits for (``send_nowait`` alone: a call's last result)
        is written and its replies left to be read with the next batch that has a waiting
        caller: the hub does not stop for them."""
        parked, self._parked = self._parked, []
        self.rounds += 1
        self.commands += len(parked)
        clock = self.clock
        clock.now()
        client = parked[0][1]
        if all(item[1] is client for item in parked):
            groups = [parked]
        else:
            by: dict[int, list[Any]] = {}
            for item in parked:
                by.setdefault(id(item[1]), []).append(item)
            groups = list(by.values())
        for items in groups:
            client = items[0][1]
            commands = [(item[2], item[3]) for item in items]
            waiting = any(item[0] is not None for item in items)
            try:
                replies = _send(client, commands, waiting)
            except Exception as exc:  # never leave a caller parked
                logger.exception("the engine hub could not send %d commands", len(commands))
                replies = [exc] * len(commands)
            if replies is None:  # written; the replies come with a later batch
                client._hub_unread.extend(items)
                continue
            for (task, client, args, _, script), reply in zip(items, replies, strict=True):
                if task is not None:
                    self._replies[task] = reply
                    clock.resume_now(task)
                else:
                    self._unanswered(client, args, script, reply)

    def _read_unread(self, wait: bool = False) -> bool:
        """Read the replies of commands nobody waited for that have arrived (``wait``: all of
        them, waiting for those still on their way); True when some are still to come."""
        pending = False
        for client in list(self._clients.values()):
            unread = client._hub_unread
            conn = client._hub_connection
            if wait and unread and conn is not None:
                _read_all_unread(client, conn)
            while unread and conn is not None:
                try:
                    if not conn.can_read(timeout=0):
                        break
                except Exception:  # the connection broke: the next batch reconnects
                    logger.warning("%d commands sent without waiting may not have run",
                                   len(unread))  # fmt: skip
                    unread.clear()
                    break
                item = unread.pop(0)
                (reply,) = read_replies(conn, [item[2]], client.response_callbacks)
                self._unanswered(client, item[2], item[4], reply)
            pending = pending or bool(unread)
        return pending

    def _unanswered(self, client: HubRedis, args: tuple[Any, ...], script: str | None,
                    reply: Any) -> None:  # fmt: skip
        """The reply of a command nobody waits for: an error is logged; a script Redis lost
        (a restart) is run by its text in the next round."""
        if isinstance(reply, NoScriptError) and script is not None:
            self._parked.append((None, client, ("EVAL", script, *args[2:]), {}, None))
        elif isinstance(reply, BaseException):
            logger.warning("a command sent without waiting failed: %r", reply)

    def _end_round(self, idle: bool) -> None:
        """Hand the journal entries over when the hub is about to wait, when a run ended or
        every :data:`JOURNAL_HANDOFF_S` while it is busy; then wake the threads whose
        functions returned (their entries are with the writer by then).

        Not every round: with a hundred bursts the hub makes a round every few hundred
        microseconds, and each hand-off wakes the writer process's threads (the writer
        batches for 8 ms anyway)."""
        now = time.monotonic()
        if self._entries and (idle or self._finished or now - self._handed >= JOURNAL_HANDOFF_S):
            self._handed = now
            entries, self._entries = self._entries, {}
            for writer, batch in entries.items():
                try:
                    writer.submit_many(batch)
                except Exception:  # a writer's failure is its own to report
                    logger.exception("handing %d journal entries to the writer failed", len(batch))
        if self._finished:
            # What a finished run sent without waiting must have run before its thread goes
            # on (it may read the state at once, on another connection).
            self._read_unread(wait=True)
            finished, self._finished = self._finished, []
            for waiter in finished:
                waiter.done.set()


#: One thread of a worker process at a time does a run's bookkeeping (claim, start state,
#: the final row): see :func:`bookkeeping`.
_bookkeeping = threading.Lock()


@contextlib.contextmanager
def bookkeeping() -> Iterator[None]:
    """Hold this process's bookkeeping turn for a run's database work around the hub.

    A hundred bursts queued at once are a hundred pool threads claiming, loading and storing
    rows through the ORM, each needing the interpreter lock while the hub's thread needs it
    too every time it wakes to run the calls already going: every thread that wants the
    lock is one more the hub waits behind (CPython hands it over every switch interval to
    whichever waiter the OS picks). Waiting for this turn instead is waiting on a plain lock
    outside the interpreter, so at most one bookkeeping thread competes with the hub.

    A thread gives its database connection back before it waits for the turn (on PostgreSQL
    it returns to the process's pool): the holder of the turn needs one from that pool, and
    as many waiting threads as the pool has connections, each holding one, would leave it
    none (tests/integration/test_worker_pool.py).
    """
    with _bookkeeping:
        yield


#: Replies of commands nobody waits for may pile up to this many before the hub reads them.
UNREAD_MAX = 1000
#: An idle hub with such replies still on their way looks for them again this soon (seconds).
UNREAD_LOOK_S = 0.002


#: redis-py's own pipeline for every batch instead of redis_batch on a kept connection
#: (LAB_PLAIN, for the benchmarks).
_PLAIN = plain("hub-redis")


def _send(
    client: HubRedis, commands: list[tuple[tuple[Any, ...], dict[str, Any]]], waiting: bool
) -> list[Any] | None:
    """Send ``commands`` in one write on the hub's own connection to ``client``'s server and
    read their replies (:mod:`labs.live.redis_batch`): each is the value, or the exception,
    redis-py would have given for that command alone. With nobody ``waiting`` the replies
    are not read now (None is returned; the hub keeps the commands in ``_hub_unread``), and
    a later batch reads those first."""
    if _PLAIN or any(options for _, options in commands):
        pipe = client.pipeline(transaction=False)  # options (rare): redis-py's own way
        for args, options in commands:
            pipe.pipeline_execute_command(*args, **options)
        try:
            return pipe.execute(raise_on_error=False)
        except Exception as exc:
            return [exc] * len(commands)
    conn = client._hub_connection
    if conn is None:
        # The hub's thread keeps one connection per client for good: taking one from the
        # pool and giving it back every round cost more than the round's own commands
        # (redis-py's pool runs its deprecation and observability wrappers each time).
        try:
            conn = client._hub_connection = client.connection_pool.get_connection()
        except Exception as exc:  # no connection to be had (Redis down): every command fails
            return [exc] * len(commands)
    unread = client._hub_unread
    if not unread and _closed(conn):
        # Redis closed the connection since the last batch (a restart): a batch written on
        # it would be answered "Connection closed by server" without having run. Nothing
        # was sent, so the batch goes out on a new connection (sending connects again).
        logger.info("the engine hub's Redis connection was closed; reconnecting")
        conn.disconnect()
    failed = write_batch(conn, [args for args, _ in commands])
    if failed is not None:
        if unread:  # the connection was dropped with their replies: nobody will know
            logger.warning("%d commands sent without waiting may not have run", len(unread))
            unread.clear()
        return [failed] * len(commands)
    if not waiting and len(unread) + len(commands) <= UNREAD_MAX:
        return None
    if unread:
        _read_all_unread(client, conn)
    return read_replies(conn, [args for args, _ in commands], client.response_callbacks)


def _closed(conn: Any) -> bool:
    """Whether the server closed ``conn`` (or sent something nobody asked for) while no reply
    was due on it: the check redis-py's own pool makes when it hands out a connection, made
    with one ``select`` (about a microsecond a batch) and redis-py's ``can_read`` only when
    the socket is readable."""
    sock = conn._sock
    if sock is None:
        return False  # not connected: sending connects
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and bool(conn.can_read(timeout=0))
    except Exception:  # EOF or a reset: closed by the server
        return True


def _read_all_unread(client: HubRedis, conn: Any) -> None:
    """Read the replies of every command ``client`` sent without waiting (they come before
    any later batch's on ``conn``), waiting for those still on their way."""
    unread = client._hub_unread
    earlier, unread[:] = list(unread), []
    replies = read_replies(conn, [item[2] for item in earlier], client.response_callbacks)
    for (_, _, args, _, script), reply in zip(earlier, replies, strict=True):
        client._hub._unanswered(client, args, script, reply)


def _name_native_thread(name: str) -> None:
    """Give this thread ``name`` where the OS shows it (Linux: ``top -H``, ``ps -L``,
    ``/proc/<pid>/task/<tid>/comm``; benchmarks read the hub's CPU there); elsewhere nothing."""
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


@once
def get_hub() -> Hub:
    """This process's hub, created (and its thread started) on first use."""
    hub = Hub()
    hub.start()
    return hub


def hub_redis() -> redis.Redis:
    """The engine hub's client on the engine's Redis: the commands the calls running on the
    hub send go out together, one batch a round."""
    return get_hub().redis(runtime.engine_redis().connection_pool)
