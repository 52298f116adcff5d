"""Clocks: the only place in the engine that reads real time or really sleeps.

Everything else takes a :class:`Clock`, so the same code runs for real (:class:`SystemClock`)
or in simulated time (:class:`VirtualClock`), where a two-second cooldown costs nothing and
many concurrent callers, cooperative callers and discrete events on one queue, interleave
deterministically. A cooperative caller must never sleep while holding a lock another caller
wants. docs/engine.md, "Time", says how the callers are scheduled."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

try:  # optional: fast cooperative callers
    import greenlet as _greenlet_mod
except ImportError:  # pragma: no cover - exercised where greenlet is absent
    _greenlet_mod = None  # type: ignore[assignment]

T = TypeVar("T")

__all__ = ["Clock", "SystemClock", "Task", "VirtualClock"]


@runtime_checkable
class Clock(Protocol):
    """Time as the engine sees it: seconds as floats."""

    def now(self) -> float:
        """Current time in seconds (monotonic for a given clock)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling caller for ``seconds`` of this clock's time."""
        ...

    def run_concurrently(self, fns: Sequence[Callable[[], T]]) -> list[T]:
        """Run ``fns`` as concurrent callers on this clock; results in input order.

        An exception raised by one callable is re-raised (the first, in input order) after
        all of them have finished.
        """
        ...


def _collect(results: list[Any], errors: list[BaseException | None]) -> list[Any]:
    for error in errors:
        if error is not None:
            raise error
    return results


class SystemClock:
    """Real time: ``time.monotonic()`` (default) or ``time.time()``, and ``time.sleep``.

    Use ``source="wall"`` when several processes or machines share state keyed on time (the
    breaker in Redis stores ``open_until`` as a timestamp): monotonic clocks of different
    processes have unrelated origins, wall clocks agree (up to NTP skew). The web worker
    uses ``"wall"`` for that reason, and because the browser shows cooldown countdowns.
    """

    now: Callable[[], float]
    """Seconds from the chosen source (``time.monotonic`` or ``time.time`` itself: it is on
    every breaker decision's hot path, so no Python-level wrapper sits in between)."""

    def __init__(self, source: Literal["monotonic", "wall"] = "monotonic") -> None:
        if source not in ("monotonic", "wall"):
            raise ValueError(f"source must be 'monotonic' or 'wall' (got {source!r})")
        self.source = source
        self.now = time.monotonic if source == "monotonic" else time.time

    def sleep(self, seconds: float) -> None:
        """Really sleep. Raises ValueError for a negative duration."""
        if seconds < 0:
            raise ValueError(f"cannot sleep a negative duration ({seconds})")
        if seconds:
            time.sleep(seconds)

    def run_concurrently(self, fns: Sequence[Callable[[], T]]) -> list[T]:
        """Run each callable in its own real thread and wait for all of them."""
        results: list[Any] = [None] * len(fns)
        errors: list[BaseException | None] = [None] * len(fns)

        def body(i: int, fn: Callable[[], T]) -> None:
            try:
                results[i] = fn()
            except BaseException as exc:  # re-raised in the calling thread below
                errors[i] = exc

        threads = [
            threading.Thread(target=body, args=(i, fn), name=f"caller-{i}", daemon=True)
            for i, fn in enumerate(fns)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return _collect(results, errors)

    def __repr__(self) -> str:
        return f"SystemClock(source={self.source!r})"


class Task(Generic[T]):
    """A cooperative caller started by :meth:`VirtualClock.spawn`; read its outcome here."""

    __slots__ = ("_handle", "done", "error", "fn", "group", "result")

    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn = fn
        self.done = False
        self.result: T | None = None
        self.error: BaseException | None = None
        self.group: _Group | None = None
        self._handle: Any = None  # backend-specific: a greenlet or a (thread, lock) pair


class _Group:
    """Callers started together by run_concurrently; wakes the waiter when the last ends."""

    __slots__ = ("pending", "waiter")

    def __init__(self, pending: int, waiter: Task[Any] | None) -> None:
        self.pending = pending
        self.waiter = waiter


class _Callback:
    """Handle of a scheduled callback."""

    __slots__ = ("args", "cancelled", "fn")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        """Do not run this callback (no effect once it has run)."""
        self.cancelled = True


class _GreenletBackend:
    """Callers as greenlets: a switch is a function call, no OS scheduling involved."""

    def __init__(self) -> None:
        self._callers: dict[Any, Task[Any]] = {}
        self._resumer: Any = None

    def current(self) -> Task[Any] | None:
        return self._callers.get(_greenlet_mod.getcurrent()) if self._callers else None

    def start(self, task: Task[Any], body: Callable[[], None]) -> None:
        glet = _greenlet_mod.greenlet(body)
        task._handle = glet
        self._callers[glet] = task

    def finished(self, task: Task[Any]) -> None:
        self._callers.pop(task._handle, None)

    def resume(self, task: Task[Any]) -> None:
        glet = task._handle
        here = _greenlet_mod.getcurrent()
        self._resumer = here
        glet.parent = here  # when the caller ends, control comes back here
        glet.switch()

    def suspend(self, task: Task[Any]) -> None:
        self._resumer.switch()


class _ThreadBackend:
    """Callers as OS threads; exactly one holds the baton at any time."""

    def __init__(self) -> None:
        self._callers: dict[int, Task[Any]] = {}
        self._baton = threading.Lock()  # released by a caller when it gives control back
        self._baton.acquire()

    def current(self) -> Task[Any] | None:
        return self._callers.get(threading.get_ident()) if self._callers else None

    def start(self, task: Task[Any], body: Callable[[], None]) -> None:
        turn = threading.Lock()
        turn.acquire()

        def run() -> None:
            turn.acquire()
            body()

        thread = threading.Thread(target=run, name="virtual-caller", daemon=True)
        task._handle = (thread, turn)
        thread.start()
        # Registered before the caller gets its first turn, so its sleeps are recognised.
        self._callers[thread.ident] = task  # type: ignore[index]

    def finished(self, task: Task[Any]) -> None:
        self._callers.pop(task._handle[0].ident, None)
        self._baton.release()

    def resume(self, task: Task[Any]) -> None:
        task._handle[1].release()
        self._baton.acquire()  # until the caller sleeps, waits for children, or ends

    def suspend(self, task: Task[Any]) -> None:
        self._baton.release()
        task._handle[1].acquire()


class VirtualClock:
    """Deterministic simulated time (seconds as floats, starting at ``start``).

    Guarantees: for the same program and inputs, every caller sees the same times and runs in
    the same order on every run; no real time passes in ``sleep``. Sleeping from the owning
    context (anything that is not a spawned caller) advances time and, on the way, runs every
    callback and caller that falls due, in time order.

    ``backend`` picks how cooperative callers are run: ``"greenlet"`` (fast; needs the
    greenlet package), ``"thread"``, or ``"auto"`` (greenlet when installed).

    Raises RuntimeError when used in a way that cannot be simulated: a callback that sleeps,
    or a foreign thread sleeping while the scheduler runs.
    """

    def __init__(
        self, start: float = 0.0, *, backend: Literal["auto", "greenlet", "thread"] = "auto"
    ) -> None:
        if backend == "auto":
            backend = "greenlet" if _greenlet_mod is not None else "thread"
        if backend == "greenlet":
            if _greenlet_mod is None:
                raise ValueError("backend 'greenlet' needs the greenlet package")
            self._backend: _GreenletBackend | _ThreadBackend = _GreenletBackend()
        elif backend == "thread":
            self._backend = _ThreadBackend()
        else:
            raise ValueError(f"backend must be auto, greenlet or thread (got {backend!r})")
        self.backend = backend
        self._now = float(start)
        self._queue: list[tuple[float, int, _Callback | Task[Any]]] = []
        self._seq = itertools.count()
        self._scheduling = False
        self._in_callback = False

    # -- the Clock protocol ------------------------------------------------------------------

    def now(self) -> float:
        """Current virtual time in seconds."""
        return self._now

    def sleep(self, seconds: float) -> None:
        """Advance virtual time by ``seconds`` for the calling caller.

        From a cooperative caller: suspend it and let the others run until it is due. From the
        owning context: run everything due up to ``now + seconds``, then set the time to it.
        Raises ValueError for a negative duration, RuntimeError from a callback.
        """
        if seconds < 0:
            raise ValueError(f"cannot sleep a negative duration ({seconds})")
        caller = self._backend.current()
        if caller is not None:
            heapq.heappush(self._queue, (self._now + seconds, next(self._seq), caller))
            self._backend.suspend(caller)
            return
        if self._in_callback:
            raise RuntimeError(
                "a call_at/call_later callback cannot sleep; schedule another callback"
            )
        if self._scheduling:
            raise RuntimeError("sleep() from a thread that is not a caller of this VirtualClock")
        self.run(until=self._now + seconds)

    def advance(self, seconds: float) -> None:
        """Same as :meth:`sleep` from the owning context; reads better in tests."""
        self.sleep(seconds)

    def run_concurrently(self, fns: Sequence[Callable[[], T]]) -> list[T]:
        """Run ``fns`` as cooperative callers starting now; results in input order.

        Returns when all have finished (other scheduled work keeps its place in time). May be
        called from a cooperative caller too: it then waits, in virtual time, for its children.
        The first exception (in input order) is re-raised once all have finished.
        """
        if not fns:
            return []
        parent = self._backend.current()
        group = _Group(len(fns), parent)
        tasks = [self.spawn(fn) for fn in fns]
        for task in tasks:
            task.group = group
        if parent is not None:
            self._backend.suspend(parent)  # woken by the last child to finish
        else:
            if self._scheduling or self._in_callback:
                raise RuntimeError("run_concurrently() from a callback or a foreign thread")
            while group.pending:
                if not self._step():
                    raise RuntimeError("virtual callers are blocked outside the clock")
        results: list[Any] = [t.result for t in tasks]
        return _collect(results, [t.error for t in tasks])

    def run_within(self, fn: Callable[[], T], timeout_s: float | None) -> Task[T]:
        """Run ``fn`` as a caller of its own and wait for it at most ``timeout_s`` (None: as
        long as it takes); returns its task. ``task.done`` False means the wait ended first:
        ``fn`` goes on regardless (a caller that stops waiting does not stop the callee).

        From the owning context (not a caller) ``fn`` simply runs to its end here. Raises
        ValueError for a negative timeout.
        """
        if timeout_s is not None and timeout_s < 0:
            raise ValueError(f"timeout must be >= 0 (got {timeout_s})")
        parent = self._backend.current()
        if parent is None:
            task: Task[T] = Task(fn)
            self._body(task)()
            return task
        task = self.spawn(fn)
        task.group = _Group(1, parent)  # its end wakes the parent, unless the wait ended

        def give_up() -> None:
            if not task.done:
                task.group.waiter = None  # type: ignore[union-attr]
                heapq.heappush(self._queue, (self._now, next(self._seq), parent))

        timer = None if timeout_s is None else self.call_at(self._now + timeout_s, give_up)
        self._backend.suspend(parent)
        if timer is not None and task.done:
            timer.cancel()
        return task

    # -- the discrete-event API --------------------------------------------------------------

    def call_at(self, when: float, fn: Callable[..., Any], *args: Any) -> _Callback:
        """Schedule ``fn(*args)`` at virtual time ``when`` (seconds); returns a cancellable handle.

        Callbacks run on the scheduler, in (time, scheduling order); they may schedule more
        work, spawn callers and read ``now()`` but must not sleep. Raises ValueError for a time
        in the past.
        """
        if when < self._now:
            raise ValueError(f"cannot schedule in the past ({when} < now {self._now})")
        callback = _Callback(fn, args)
        heapq.heappush(self._queue, (when, next(self._seq), callback))
        return callback

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> _Callback:
        """Schedule ``fn(*args)`` ``delay`` seconds from now (see :meth:`call_at`)."""
        if delay < 0:
            raise ValueError(f"delay must be >= 0 (got {delay})")
        return self.call_at(self._now + delay, fn, *args)

    def spawn(self, fn: Callable[[], T], at: float | None = None) -> Task[T]:
        """Start ``fn`` as a cooperative caller at virtual time ``at`` (default now).

        The caller runs when the scheduler reaches that time (inside :meth:`run`, a sleep of
        the owning context, or :meth:`run_concurrently`). Its outcome is on the returned task.
        """
        when = self._now if at is None else at
        if when < self._now:
            raise ValueError(f"cannot spawn in the past ({when} < now {self._now})")
        task: Task[T] = Task(fn)
        heapq.heappush(self._queue, (when, next(self._seq), task))
        return task

    def run(self, until: float | None = None) -> int:
        """Process scheduled work in time order; returns how many entries were processed.

        With ``until``, stops before anything later than it and sets the time to ``until``;
        without, runs until nothing is scheduled. Raises RuntimeError if re-entered.
        """
        if self._scheduling or self._in_callback:
            raise RuntimeError("VirtualClock.run() is not reentrant")
        processed = 0
        queue = self._queue
        while queue and (until is None or queue[0][0] <= until):
            self._step()
            processed += 1
        if until is not None and until > self._now:
            self._now = until
        return processed

    def pending(self) -> int:
        """Number of scheduled callbacks and callers not yet run."""
        return len(self._queue)

    # -- internals ---------------------------------------------------------------------------

    def _step(self) -> bool:
        """Run the earliest entry; False if nothing is scheduled."""
        if not self._queue:
            return False
        when, _, entry = heapq.heappop(self._queue)
        if when > self._now:
            self._now = when
        if isinstance(entry, _Callback):
            if not entry.cancelled:
                self._in_callback = True
                try:
                    entry.fn(*entry.args)
                finally:
                    self._in_callback = False
            return True
        self._scheduling = True
        try:
            if entry._handle is None:
                self._backend.start(entry, self._body(entry))
            self._backend.resume(entry)
        finally:
            self._scheduling = False
        return True

    def _body(self, task: Task[Any]) -> Callable[[], None]:
        def body() -> None:
            try:
                task.result = task.fn()
            except BaseException as exc:  # kept on the task; run_concurrently re-raises it
                task.error = exc
            finally:
                task.done = True
                group = task.group
                if group is not None:
                    group.pending -= 1
                    if group.pending == 0 and group.waiter is not None:
                        heapq.heappush(self._queue, (self._now, next(self._seq), group.waiter))
                self._backend.finished(task)

        return body

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._now!r}, pending={len(self._queue)})"
