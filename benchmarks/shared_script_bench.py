"""What one decision of the class's shared model costs in Redis, with and without the server's
defences: a table of Redis's own time per ``EVALSHA`` (``INFO commandstats``) and the caller's
round trip, over a steady stream of attempts from 30 sessions on one model.

Run on purpose, never by the tests: ``python benchmarks/shared_script_bench.py``. It starts
its own ``redis-server`` on a free port (nothing else shares it). ``LAB_ROOT`` runs another
checkout's engine with this script (to compare two commits: alternate the two, and compare
medians). docs/scaling.md, "The shared dependency's decision".
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(os.environ.get("LAB_ROOT") or Path(__file__).resolve().parents[1])
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from labs.engine import SharedConfig  # noqa: E402
from labs.engine.redis import RedisSharedModel  # noqa: E402

#: name -> the server's settings; the first is the plain model every class has by default.
CASES = {
    "plain": {},
    "CoDel": {"codel_target_ms": 100, "codel_interval_ms": 100},
    "rate limit": {"rate_per_s": 5000, "rate_burst": 20},
    "queue and concurrency limits": {"queue_limit": 200, "concurrency_limit": 300},
    "an AIMD concurrency limit": {"concurrency_limit": 300, "concurrency": "aimd"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(port: int, workdir: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", workdir],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            return proc
        except redis.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not answer")


def one_run(client: redis.Redis, defences: dict, attempts: int) -> tuple[float, float]:
    """(Redis us per EVALSHA, caller us per decision) for ``attempts`` decisions spaced 2 ms
    apart in the model's time (64 servers x 40 ms: about 20 % busy), sessions in turn."""
    if defences and "codel_target_ms" not in SharedConfig.__dataclass_fields__:
        return float("nan"), float("nan")  # a checkout from before the defences
    config = SharedConfig(servers=64, service_ms=40, max_queue_ms=1000, **defences)
    model = RedisSharedModel(client, uuid.uuid4().hex[:10], server_time=False)
    model.configure(config)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=20000, help="decisions a run")
    parser.add_argument("--runs", type=int, default=5, help="runs of each case, in turns")
    args = parser.parse_args(argv)
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        proc = start_redis(port, workdir)
        try:
            client = redis.Redis(port=port)
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in CASES}
            for _ in range(args.runs):
                for name, defences in CASES.items():
                    results[name].append(one_run(client, defences, args.attempts))
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"engine from {ROOT}; {args.attempts} decisions a run, {args.runs} runs each")
    print(f"{'server':32} {'Redis us/decision':>18} {'caller us/decision':>19}")
    for name, rows in results.items():
        redis_us = statistics.median(r[0] for r in rows)
        caller_us = statistics.median(r[1] for r in rows)
        print(f"{name:32} {redis_us:18.2f} {caller_us:19.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
