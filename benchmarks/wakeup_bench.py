"""What waking up costs on this machine: the floor under every attempt's added time.

    .venv/bin/python benchmarks/wakeup_bench.py [--runs 300]

Starts its own ``redis-server`` on a free port and prints, for one client on one connection:

- a ``PING`` round trip when pings follow each other, and after 5 and 25 ms of quiet (the
  client thread and Redis both asleep, as between a burst's attempts): its wall time and the
  client thread's CPU time;
- how far a ``time.sleep`` of 5 ms overshoots.

A burst's attempt costs at least one round trip after a quiet sleep and the wake-up from that
sleep (docs/bursts.md, "Measured"); no engine code runs here.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_common import start_private_redis


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    import redis

    server, port = start_private_redis("wakeup_bench")
    try:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise SystemExit("the private redis-server did not answer") from None
                time.sleep(0.05)
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
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
