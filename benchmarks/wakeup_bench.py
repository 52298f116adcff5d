"""What waking up costs on this machine: the floor under every attempt's added time and CPU.

    .venv/bin/python benchmarks/wakeup_bench.py [--runs 300] [--hub-seconds 10]

Starts its own ``redis-server`` on a free port and prints, for one client on one connection:

- a ``PING`` round trip when pings follow each other, and after 5 and 25 ms of quiet (the
  client thread and Redis both asleep, as between a burst's attempts): its wall time and the
  client thread's CPU time;
- how far a ``time.sleep`` of 5 ms overshoots;
- the engine hub's floor (:mod:`labs.worker.hub`, no engine code, no journal): attempts arriving
  at 100, 300, 1,000 and 3,000 a second (seeded Poisson), each a caller that sends one
  script and waits for its reply, sleeps 40 ms (an answer's wait) and sends one more command
  without waiting (a result's record). CPU per attempt of this process (the hub's thread) and
  of ``redis-server``: what steady traffic costs before a line of the engine, the journal or
  the web runs. Waking a thread and a server that were idle costs more CPU than one that was
  busy, so the cost per attempt falls as the rate rises (docs/bursts.md, "Steady traffic,
  measured").

A burst's attempt costs at least one round trip after a quiet sleep and the wake-up from that
sleep (docs/bursts.md, "Measured").
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_common import Bench, float_range, int_range, run


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int_range(1, 100_000), default=300, help="1 to 100,000")
    parser.add_argument("--hub-seconds", type=float_range(0, 600), default=10.0,
                        help="seconds of arrivals per rate in the hub's floor (0: skip it; "
                             "at most 600)")  # fmt: skip
    return parser


def measure(args, bench: Bench) -> None:
    import redis

    _url, port = bench.private_redis()
    server = bench.redis_proc
    client = redis.Redis(port=port)
    print(f"wakeup_bench: {args.runs} runs each, one client, redis-server on 127.0.0.1:{port}")
    print(f"{'':32} {'p50 us':>8} {'mean us':>8} {'p50 CPU us':>11}")
    for quiet in (0.0, 0.005, 0.025):
        walls, cpus = [], []
        for _ in range(args.runs):
            if quiet:
                time.sleep(quiet)
            wall, cpu = time.perf_counter(), time.thread_time()
            client.ping()
            cpus.append((time.thread_time() - cpu) * 1e6)
            walls.append((time.perf_counter() - wall) * 1e6)
        label = (
            "PING, back to back" if not quiet else f"PING after {quiet * 1000:.0f} ms of quiet"
        )
        print(f"{label:32} {statistics.median(walls):8.0f} {statistics.mean(walls):8.0f} "
              f"{statistics.median(cpus):11.0f}")  # fmt: skip
    over = []
    for _ in range(args.runs):
        wall = time.perf_counter()
        time.sleep(0.005)
        over.append((time.perf_counter() - wall - 0.005) * 1e6)
    print(f"{'time.sleep(5 ms) overshoot':32} {statistics.median(over):8.0f} "
          f"{statistics.mean(over):8.0f}")  # fmt: skip
    if args.hub_seconds > 0:
        hub_floor(server.pid, port, args.hub_seconds)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hub_floor(redis_pid: int, port: int, seconds: float) -> None:
    """The engine hub's own CPU per attempt at several arrival rates (see the docstring)."""
    import random

    import django
    import redis

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab_project.settings")
    django.setup()  # the hub's module reaches the engine's Redis client through the settings
    from labs.worker.hub import Hub

    pool = redis.ConnectionPool(port=port)
    plain = redis.Redis(connection_pool=pool)
    sha = plain.script_load("return redis.call('INCR', KEYS[1])")
    print()
    print(f"the engine hub's floor: one script, a 40 ms sleep and one command sent without "
          f"waiting per attempt, {seconds:g} s of seeded Poisson arrivals per rate")  # fmt: skip
    print(f"{'attempts/s':>10} {'attempts':>9} {'hub process CPU ms':>19} {'redis CPU ms':>13} "
          f"{'summed ms/attempt':>18}")  # fmt: skip
    for rate in (100, 300, 1000, 3000):
        hub = Hub(name="floor-hub")
        hub.start()
        client = hub.redis(pool)
        rng = random.Random(rate)
        done = [0]

        def attempt(client=client, hub=hub, done=done) -> None:
            client.evalsha(sha, 1, "floor:a")
            hub.clock.sleep(0.04)
            client.send_nowait(("EVALSHA", sha, 1, "floor:b"))
            done[0] += 1

        def arrivals(hub=hub, rng=rng, rate=rate) -> None:
            clock = hub.clock
            t = clock.now()
            end = t + seconds
            while t < end:
                t += rng.expovariate(rate)
                clock.call_at(t, clock.spawn, attempt)
            clock.sleep(seconds + 0.3)

        mine, theirs = _cpu_seconds(os.getpid()), _cpu_seconds(redis_pid)
        hub.run(arrivals)
        mine, theirs = _cpu_seconds(os.getpid()) - mine, _cpu_seconds(redis_pid) - theirs
        n = max(done[0], 1)
        print(f"{rate:>10} {done[0]:>9} {1000 * mine / n:>19.3f} {1000 * theirs / n:>13.3f} "
              f"{1000 * (mine + theirs) / n:>18.3f}")  # fmt: skip


if __name__ == "__main__":
    run("wakeup_bench", parser(), measure)
