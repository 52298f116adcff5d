"""``once``: threads racing on a singleton's first use create one."""

from __future__ import annotations

import threading
import time

from labs.worker.once import once


def test_racing_threads_create_the_value_once():
    made = []

    @once
    def value() -> object:
        time.sleep(0.05)  # long enough for every thread to arrive while the first creates it
        made.append(object())
        return made[-1]

    seen = []
    threads = [threading.Thread(target=lambda: seen.append(value())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 1
    assert all(v is made[0] for v in seen) and len(seen) == 8
