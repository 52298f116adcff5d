"""CPU profiles of the processes a benchmark starts, per thread, by cProfile on CPU time.

A benchmark puts this directory first on ``PYTHONPATH`` and sets ``CPU_PROFILE_DIR``: every
Python process started with that environment (a worker, the journal-writer process it
starts) gives each thread it starts from then on its own ``cProfile`` profiler timed by the
thread's CPU clock (``time.thread_time``: a thread sleeping or waiting costs nothing), and
every 2 s writes each profiler's snapshot to ``CPU_PROFILE_DIR/<pid>-<thread>.prof`` (the
benchmark may kill the process at any time). The main thread is profiled from here on
(its imports included).

cProfile adds its own cost to every Python call, so the figures are larger than the
unprofiled run's; their proportions say where the time goes. Greenlet switches (a traffic
run's cooperative calls) mix the call stacks of the calls on one thread, so trust the
functions' own time (``tottime``) more than the cumulative one.

``python benchmarks/cpu_profile/report.py DIR`` prints the top functions of each process.
"""

from __future__ import annotations

import os

if os.environ.get("CPU_PROFILE_DIR"):
    import cProfile
    import marshal
    import sys
    import threading
    import time

    _OUT = os.environ["CPU_PROFILE_DIR"]
    _profilers: list[tuple[str, cProfile.Profile]] = []
    _lock = threading.Lock()

    def _start_profiling(frame, event, arg) -> None:
        sys.setprofile(None)
        if threading.current_thread().name == "cpu-profile-dump":
            return
        profiler = cProfile.Profile(time.thread_time)
        with _lock:
            _profilers.append((f"{os.getpid()}-{threading.get_native_id()}", profiler))
        profiler.enable()

    def _dump() -> None:
        while True:
            time.sleep(2)
            with _lock:
                profilers = list(_profilers)
            for name, profiler in profilers:
                profiler.snapshot_stats()
                if not profiler.stats:
                    continue
                path = os.path.join(_OUT, f"{name}.prof")
                with open(path + ".tmp", "wb") as fh:
                    marshal.dump(profiler.stats, fh)
                os.replace(path + ".tmp", path)

    threading.setprofile(_start_profiling)
    threading.Thread(target=_dump, name="cpu-profile-dump", daemon=True).start()
    _start_profiling(None, "call", None)  # the main thread
