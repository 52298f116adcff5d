"""What one decision of the class's shared model costs in Redis, with and without the server's
defences.

    .venv/bin/python benchmarks/shared_script_bench.py [--runs 5] [--attempts 20000]

Starts its own ``redis-server`` on a free port and prints a table: Redis's own time per
``EVALSHA`` (``INFO commandstats``) and the caller's round trip, over a steady stream of
attempts from 30 sessions taking turns on one model of 64 servers x 40 ms (about 20 % busy),
each case run ``--runs`` times in turns and the medians shown. ``LAB_ROOT`` runs another
checkout's engine with this script (to compare two commits: alternate the two and compare
medians; a checkout from before the defences measures the plain case only).
docs/scaling.md, "The shared dependency's decision".
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_common import Bench, int_range, run

#: name -> the server's settings; the first is the plain model every class has by default.
CASES = {
    "plain": {},
    "CoDel": {"codel_target_ms": 100, "codel_interval_ms": 100},
    "rate limit": {"rate_per_s": 5000, "rate_burst": 20},
    "queue and concurrency limits": {"queue_limit": 200, "concurrency_limit": 300},
    "an AIMD concurrency limit": {"concurrency_limit": 300, "concurrency": "aimd"},
    "newest first (LIFO)": {"discipline": "lifo"},
}


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int_range(1, 100), default=5, help="1 to 100")
    parser.add_argument("--attempts", type=int_range(100, 1_000_000), default=20_000,
                        help="decisions a run, 100 to 1,000,000")  # fmt: skip
    return parser


def one_run(client, engine, defences: dict, attempts: int) -> tuple[float, float] | None:
    """(Redis us per EVALSHA, caller us per decision) for ``attempts`` decisions spaced 2 ms
    apart in the model's time, the sessions in turn; None when ``engine`` predates
    ``defences``. (With LIFO an attempt that finds the servers busy waits; the next arrival
    settles the queue, as a caller's poll would.)"""
    shared_config, model_class = engine
    if any(name not in shared_config.__dataclass_fields__ for name in defences):
        return None
    model = model_class(client, uuid.uuid4().hex[:10], server_time=False)
    model.configure(shared_config(servers=64, service_ms=40, max_queue_ms=1000, **defences))
    for i in range(200):  # load the script, warm the connection
        model.decide(i * 2000, timeout_us=500_000, attempt=1, session=str(i % 30))
    client.config_resetstat()
    start = time.perf_counter()
    for i in range(200, 200 + attempts):
        model.decide(i * 2000, timeout_us=500_000, attempt=1 + (i % 4 == 0), session=str(i % 30))
    caller = (time.perf_counter() - start) / attempts * 1e6
    stats = client.info("commandstats")["cmdstat_evalsha"]
    model.clear()
    return stats["usec"] / stats["calls"], caller


def measure(args, bench: Bench) -> None:
    import redis

    root = os.environ.get("LAB_ROOT")
    if root:
        sys.path.insert(0, root)
    from labs.engine import SharedConfig
    from labs.engine.redis import RedisSharedModel

    _url, port = bench.private_redis()
    client = redis.Redis(port=port)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in CASES}
    for _ in range(args.runs):
        for name, defences in CASES.items():
            row = one_run(client, (SharedConfig, RedisSharedModel), defences, args.attempts)
            if row is not None:
                results[name].append(row)
    print(f"engine from {root or 'this checkout'}; {args.attempts} decisions a run, "
          f"{args.runs} runs each")  # fmt: skip
    print(f"{'server':32} {'Redis us/decision':>18} {'caller us/decision':>19}")
    for name, rows in results.items():
        if not rows:
            print(f"{name:32} {'(not in that engine)':>18}")
            continue
        redis_us = statistics.median(r[0] for r in rows)
        caller_us = statistics.median(r[1] for r in rows)
        print(f"{name:32} {redis_us:18.2f} {caller_us:19.1f}")


if __name__ == "__main__":
    run("shared_script_bench", parser(), measure)
