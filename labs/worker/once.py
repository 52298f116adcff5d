"""``once``: a process-wide singleton created on first use, by one thread only."""

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
