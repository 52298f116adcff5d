"""Worker-side push latency, measured without a browser-side client in the way.

    .venv/bin/python benchmarks/layer_probe.py [SESSIONS]     (default 30)

Starts a private ``redis-server`` and one real worker on its own SQLite file, creates SESSIONS
lab sessions, listens on every session's channel-layer group with one channel and one
concurrent receive per group, starts a 20-call burst (healthy, 20 ms per attempt) in every
session at once, and prints the latency from each event's ``emitted`` stamp (the engine handing
it over) to its arrival on the channel layer: the journal writer's batch, INSERT, commit and
push, and nothing of daphne. benchmarks/push_bench.py measures the whole way to websocket
clients, but runs all of them and its own channel-layer listener on one event loop, whose
backlog adds to what it measures at 30 and 100 sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_common import Bench, int_range, run  # noqa: E402


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sessions", metavar="SESSIONS", nargs="?", type=int_range(1, 500),
                        default=30, help="lab sessions bursting at once (1 to 500, default 30)")  # fmt: skip
    return parser


def measure(args, bench: Bench) -> None:
    count = args.sessions
    os.environ["DJANGO_SETTINGS_MODULE"] = "lab_project.settings"
    os.environ.pop("DATABASE_URL", None)  # a SQLite file of its own
    os.environ["REDIS_URL"] = bench.private_redis()[0]
    os.environ["REDIS_DB_BASE"] = os.environ["BENCH_REDIS_DB_BASE"] = "0"
    bench.database("layer-probe")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import burst_bench as bb  # shares its session and worker helpers

    bb.setup_django()
    from labs.services.bursts import burst_start

    script = {"name": "probe", "seed": 1, "steps": [{"burst": 20}],
              "dependency": {"mode": "healthy", "latency_ms": 20}, "policy": {}}  # fmt: skip
    sessions = bb.make_sessions(count, script)
    worker = bb.start_worker(bench, 128)
    latencies: list[float] = []

    async def probe() -> None:
        from channels.layers import get_channel_layer

        layer = get_channel_layer()

        async def listen(session_id: int) -> None:
            channel = await layer.new_channel()
            await layer.group_add(f"lab-session-{session_id}", channel)
            while True:
                message = await layer.receive(channel)
                now = time.time()
                latencies.extend(
                    (now - e["emitted"]) * 1000
                    for e in message.get("events", [])
                    if e.get("emitted")
                )

        listeners = [asyncio.ensure_future(listen(s.pk)) for s in sessions]
        await asyncio.sleep(1)

        def click_all() -> None:
            from django.db import connections

            for session in sessions:
                burst_start(session=session, user=session.owner, size=20)
            connections.close_all()

        await asyncio.to_thread(click_all)
        expected = count * 42  # burst_start, 20 x (attempt, call_result), burst_end
        deadline = time.monotonic() + 60
        while len(latencies) < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        # Drop the subscriptions first: a receive cancelled while its channel is still
        # subscribed unsubscribes on its way out, and a hundred of those at once race.
        await layer.flush()
        for listener in listeners:
            listener.cancel()
        await asyncio.gather(*listeners, return_exceptions=True)

    try:
        time.sleep(8)  # the worker's journal writer boots when the worker is ready
        asyncio.run(probe())
    finally:
        bench.stop(worker)
    latencies.sort()

    def q(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))]

    print(f"{'sessions':>8} {'events':>7} {'expected':>8} {'p50 ms':>7} {'p95 ms':>7} "
          f"{'p99 ms':>7} {'max ms':>7}")  # fmt: skip
    print(f"{count:>8} {len(latencies):>7} {count * 42:>8} {q(.5):>7.1f} {q(.95):>7.1f} "
          f"{q(.99):>7.1f} {latencies[-1]:>7.1f}")  # fmt: skip


if __name__ == "__main__":
    run("layer_probe", parser(), measure)
