"""``once``: a process-wide singleton created on first use, by one thread only; and
``daemon_once``, the worker's background threads started that way."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def once(factory: Callable[[], T]) -> Callable[[], T]:
    """Wrap ``factory`` so that its first call creates the value (under a lock, so two
    threads racing on the first use create one) and every later call returns that value
    without taking the lock."""
    box: list[T] = []
    lock = threading.Lock()

    def get() -> T:
        if not box:
            with lock:
                if not box:
                    box.append(factory())
        return box[0]

    get.__doc__ = factory.__doc__
    get.__name__ = factory.__name__
    return get


def daemon_once(target: Callable[[], object], name: str) -> Callable[[], threading.Thread]:
    """A function that starts ``target`` on a daemon thread called ``name`` at its first call
    (once per process, however many threads ask) and returns that thread every time."""

    def start() -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread

    start.__name__ = f"start_{name.replace('-', '_')}"
    return once(start)
