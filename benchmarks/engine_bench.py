"""Engine benchmark: prints one table, the engine beside pybreaker.

    .venv/bin/python benchmarks/engine_bench.py [--redis-url URL] [--quick] [--no-real]

Rows:

* in-memory admitted call: ``allow()`` + ``record(permit, "success")`` on a closed breaker
  (MemoryStore, SystemClock), timed in batches of 10 calls; beside it pybreaker's in-memory
  ``CircuitBreaker.call(f)``. Target: median <= 2 us. A second measurement counts the
  thread's CPU time (batches of 100), which a busy machine inflates much less than wall time.
* Redis decision and Redis record: one ``allow()`` / one ``record()`` against a RedisStore
  (each one EVALSHA); beside them pybreaker's ``call(f)`` with ``CircuitRedisStorage`` (its
  decision and record together). The "round trips" column counts Redis commands per
  operation. Target: median <= 150 us each.
* the peer libraries' options switched on (``PEER_BREAKER``: a rolling count window checked
  on failures, strict edge, growing cooldown, half-open decided on a ratio; gRPC throttling
  and Finagle's budget on Redis), slow calls (``SLOW_BREAKER``, every other call slow) and
  gobreaker's counting (``GOBREAKER_BREAKER``) and strict admission (``STRICT_BREAKER``,
  one decision and its record together): what they cost beside the rows above. No target.
* the tour (scenarios/tour.json) in virtual time. Target: < 5 ms.
* 200 cooperative callers on a VirtualClock (flaky dependency, up to 4 attempts each).
* the tour with --real: wall time against the sum of configured sleeps (2810 ms).

Numbers are per operation, in microseconds unless the row says ms. A benchmark informs; no
test asserts on these figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_common import Bench, pct, run  # noqa: E402
from labs.engine import (  # noqa: E402
    Breaker,
    BreakerConfig,
    DependencyConfig,
    FakeDependency,
    GuardedClient,
    MemoryStore,
    SystemClock,
    VirtualClock,
    parse_policy,
    run_scenario,
)
from labs.engine.config import RetryBudgetConfig  # noqa: E402
from labs.engine.redis import RedisStore  # noqa: E402
from labs.engine.retry import RetryBudget  # noqa: E402

TOUR = json.loads((ROOT / "scenarios" / "tour.json").read_text())
TOUR_SLEEPS_MS = 2810  # 21 attempts x 5 ms + 700 ms backoff + 2000 ms wait + 5 ms probe


def interleaved(
    ops: dict[str, Callable[[], object]],
    rounds: int,
    per_batch: int = 1,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> dict[str, list[float]]:
    """Per-operation time (us) of each op, batch by batch, the ops taking turns.

    Taking turns matters on a shared machine: every contender sees the same load.
    """
    for op in ops.values():  # warm-up
        for _ in range(min(200, rounds)):
            op()
    out: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(rounds):
        for name, op in ops.items():
            start = clock()
            for _ in range(per_batch):
                op()
            out[name].append((clock() - start) / per_batch / 1000)
    return out


def counted(client, op: Callable[[], object], n: int = 50) -> float:
    """Redis commands per operation."""
    original = client.execute_command
    count = 0

    def counting(*args, **kwargs):
        nonlocal count
        count += 1
        return original(*args, **kwargs)

    client.execute_command = counting
    try:
        for _ in range(n):
            op()
    finally:
        client.execute_command = original
    return count / n


def bench_memory(n: int) -> dict:
    import pybreaker

    breaker = Breaker(BreakerConfig(), store=MemoryStore(), clock=SystemClock())

    def ours() -> None:
        breaker.record(breaker.allow(), "success")

    calls = iter(range(10**9))

    def ours_labelled() -> None:
        breaker.record(breaker.allow(call=next(calls)), "success")

    theirs_breaker = pybreaker.CircuitBreaker(fail_max=3, reset_timeout=2)

    def nothing() -> None:
        return None

    def theirs() -> None:
        theirs_breaker.call(nothing)

    wall = interleaved({"ours": ours, "ours_labelled": ours_labelled, "pybreaker": theirs}, n, 10)
    # CPU time of this thread: what a busy machine inflates much less than wall time.
    cpu = interleaved({"ours": ours, "pybreaker": theirs}, n // 10, 100, time.thread_time_ns)
    return {**wall, "ours_cpu": cpu["ours"], "pybreaker_cpu": cpu["pybreaker"]}


def bench_redis(url: str, n: int) -> dict:
    import pybreaker
    import redis

    client = redis.Redis.from_url(url)
    client.ping()
    ns = f"flbench:{uuid.uuid4().hex[:8]}"
    store = RedisStore(client, ns)
    breaker = Breaker(BreakerConfig(), store=store, clock=SystemClock("wall"))
    permits: list = []

    theirs_ns = f"flbench-pyb:{uuid.uuid4().hex[:8]}"
    storage = pybreaker.CircuitRedisStorage(pybreaker.STATE_CLOSED, client, namespace=theirs_ns)
    theirs_breaker = pybreaker.CircuitBreaker(fail_max=3, reset_timeout=2, state_storage=storage)

    def theirs() -> None:
        theirs_breaker.call(lambda: None)

    timings = interleaved(
        {
            "ping": client.ping,
            "decide": lambda: permits.append(breaker.allow()),
            "record": lambda: breaker.record(permits.pop(), "success"),
            "pybreaker": theirs,
        },
        n,
    )
    trips = (
        counted(client, lambda: permits.append(breaker.allow())),
        counted(client, lambda: breaker.record(permits.pop(), "success")),
    )
    pybreaker_trips = counted(client, theirs)

    store.clear()
    keys = list(client.scan_iter(match=f"{theirs_ns}*"))
    if keys:
        client.delete(*keys)
    client.close()
    return {**timings, "trips": trips, "pybreaker_trips": pybreaker_trips}


#: Every breaker option of the peer libraries switched on (docs/engine.md), for the cost rows.
PEER_BREAKER = BreakerConfig(
    kind="rolling_ratio",
    window_calls=20,
    min_calls=10,
    cooldown_edge="strict",
    ratio_checked_on="failure",
    cooldown_multiplier=2,
    cooldown_max_ms=60000,
    half_open_calls=3,
    half_open_decision="ratio",
)


#: resilience4j's slow calls on a rolling count window; every other call is slow (50 %, below
#: the 90 % that would open), so the slow path is measured without the breaker opening.
SLOW_BREAKER = BreakerConfig(
    kind="rolling_ratio", window_calls=20, min_calls=10, slow_call_ms=100, slow_call_ratio=0.9
)
_SLOW_DURATIONS = (50.0, 150.0)
#: gobreaker's counting: its Counts kept, the closed state's counts cleared every minute.
GOBREAKER_BREAKER = BreakerConfig(counts="gobreaker", count_interval_ms=60000)
#: Strict admission: each admission holds a place that its result gives back.
STRICT_BREAKER = BreakerConfig(admission="strict", failure_threshold=20)


def bench_peers(url: str | None, n: int) -> dict:
    """The peer options' cost: the same operations as the rows above with them on."""
    breaker = Breaker(PEER_BREAKER, store=MemoryStore(), clock=SystemClock())
    slow = Breaker(SLOW_BREAKER, store=MemoryStore(), clock=SystemClock())
    gob = Breaker(GOBREAKER_BREAKER, store=MemoryStore(), clock=SystemClock())
    strict = Breaker(STRICT_BREAKER, store=MemoryStore(), clock=SystemClock())
    turn = [0]

    def memory_call() -> None:
        breaker.record(breaker.allow(), "success")

    def slow_call() -> None:
        turn[0] ^= 1
        slow.record(slow.allow(), "success", duration_ms=_SLOW_DURATIONS[turn[0]])

    def gob_call() -> None:
        gob.record(gob.allow(), "success")

    def strict_call() -> None:
        strict.record(strict.allow(), "success")

    out = interleaved(
        {
            "memory": memory_call,
            "slow_memory": slow_call,
            "gob_memory": gob_call,
            "strict_memory": strict_call,
        },
        n,
        10,
    )
    if url is None:
        return out
    import redis

    client = redis.Redis.from_url(url)
    client.ping()
    store = RedisStore(client, f"flbench:{uuid.uuid4().hex[:8]}")
    clock = SystemClock("wall")
    remote = Breaker(PEER_BREAKER, store=store, clock=clock)
    slow_store = RedisStore(client, f"flbench:{uuid.uuid4().hex[:8]}")
    slow_remote = Breaker(SLOW_BREAKER, store=slow_store, clock=clock)
    slow_permits: list = []
    gob_store = RedisStore(client, f"flbench:{uuid.uuid4().hex[:8]}")
    gob_remote = Breaker(GOBREAKER_BREAKER, store=gob_store, clock=clock)
    gob_permits: list = []
    strict_store = RedisStore(client, f"flbench:{uuid.uuid4().hex[:8]}")
    strict_remote = Breaker(STRICT_BREAKER, store=strict_store, clock=clock)

    def slow_record() -> None:
        turn[0] ^= 1
        slow_remote.record(slow_permits.pop(), "success", duration_ms=_SLOW_DURATIONS[turn[0]])

    grpc = RetryBudget(RetryBudgetConfig(kind="grpc"), store=store)
    finagle = RetryBudget(RetryBudgetConfig(kind="finagle"), store=store, clock=clock)
    permits: list = []
    out |= interleaved(
        {
            "decide": lambda: permits.append(remote.allow()),
            "record": lambda: remote.record(permits.pop(), "success"),
            "grpc": lambda: grpc.observe(True),
            "finagle": finagle.deposit,
            "slow_decide": lambda: slow_permits.append(slow_remote.allow()),
            "slow_record": slow_record,
            "gob_decide": lambda: gob_permits.append(gob_remote.allow()),
            "gob_record": lambda: gob_remote.record(gob_permits.pop(), "success"),
            "strict_call": lambda: strict_remote.record(strict_remote.allow(), "success"),
        },
        n // 4,
    )
    slow_permits.extend(slow_remote.allow() for _ in range(50))
    out["trips"] = {
        "decide": counted(client, lambda: permits.append(remote.allow())),
        "record": counted(client, lambda: remote.record(permits.pop(), "success")),
        "grpc": counted(client, lambda: grpc.observe(True)),
        "finagle": counted(client, finagle.deposit),
        "slow_record": counted(client, slow_record),
        "gob_decide": counted(client, lambda: gob_permits.append(gob_remote.allow())),
        "gob_record": counted(client, lambda: gob_remote.record(gob_permits.pop(), "success")),
    }
    out["trips"]["strict_call"] = counted(
        client, lambda: strict_remote.record(strict_remote.allow(), "success")
    )
    gob_store.clear()
    strict_store.clear()
    store.clear()
    slow_store.clear()
    client.close()
    return out


def bench_tour(n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        run_scenario(TOUR)
        out.append((time.perf_counter() - start) * 1000)
    return out


def bench_crowd(runs: int) -> list[float]:
    """200 callers on one VirtualClock, each one call with up to 4 attempts (flaky, full jitter)."""
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        clock, store, rng = VirtualClock(), MemoryStore(), random.Random(1)
        policy = parse_policy({"jitter": "full", "breaker": {"failure_threshold": 20}})
        breaker = Breaker(policy.breaker, store=store, clock=clock, rng=rng)
        dependency = FakeDependency(
            DependencyConfig(mode="flaky", fail_count=300), store=store, clock=clock, rng=rng
        )
        client = GuardedClient(policy, breaker=breaker, dependency=dependency, clock=clock, rng=rng)
        burst = client.run_burst(200, concurrency=200)
        assert len(burst.calls) == 200
        out.append((time.perf_counter() - start) * 1000)
    return out


def bench_real(runs: int) -> tuple[list[float], list]:
    walls, attempts = [], []
    for _ in range(runs):
        start = time.perf_counter()
        out = run_scenario(TOUR, real=True)
        walls.append((time.perf_counter() - start) * 1000)
        attempts = [b["attempts"] for b in out["bursts"]]
    return walls, attempts


def redis_url(text: str) -> str:
    """``--redis-url``: a redis://, rediss:// or unix:// URL."""
    if not text.startswith(("redis://", "rediss://", "unix://")):
        raise argparse.ArgumentTypeError(f"must be a redis:// URL, got {text!r}")
    return text


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--redis-url",
        type=redis_url,
        default=os.environ.get("ENGINE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"),
        help="a redis:// URL (default: ENGINE_BENCH_REDIS_URL or redis://127.0.0.1:6379/15)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--no-real", action="store_true", help="skip the 2.8 s real-time tour")
    return parser


def measure(args, bench: Bench) -> None:
    scale = 1 if args.quick else 5

    memory = bench_memory(4000 * scale)
    try:
        red = bench_redis(args.redis_url, 1000 * scale)
    except Exception as exc:  # report and go on: the other rows still mean something
        print(f"(redis rows skipped: {exc})", file=sys.stderr)
        red = None
    peers = bench_peers(args.redis_url if red else None, 4000 * scale)
    tour = bench_tour(40 * scale)
    crowd = bench_crowd(3 * scale)
    real = None if args.no_real else bench_real(1 if args.quick else 3)

    rows = []

    def row(name, ours, theirs, trips, target, unit="us"):
        fmt = (lambda x: f"{x:.2f}") if unit == "us" else (lambda x: f"{x:.2f} ms")
        rows.append(
            (
                name,
                fmt(statistics.median(ours)),
                fmt(pct(ours, 0.99)),
                fmt(statistics.median(theirs)) if theirs else "-",
                fmt(pct(theirs, 0.99)) if theirs else "-",
                trips,
                target,
            )
        )

    row(
        "in-memory admitted call (allow+record)",
        memory["ours"],
        memory["pybreaker"],
        "0 / -",
        "<= 2 us",
    )
    row("  same, labelled with call numbers", memory["ours_labelled"], None, "0", "")
    row("  same, CPU time (thread_time)", memory["ours_cpu"], memory["pybreaker_cpu"], "0 / -", "")
    if red:
        trips = red["trips"]
        row("Redis PING (the bare round trip, for scale)", red["ping"], None, "1", "")
        row(
            "Redis decision (allow)",
            red["decide"],
            red["pybreaker"],
            f"{trips[0]:g} / {red['pybreaker_trips']:g}",
            "<= 150 us",
        )
        row("Redis record", red["record"], None, f"{trips[1]:g}", "<= 150 us")
    row("peer options on: in-memory admitted call", peers["memory"], None, "0", "")
    row("slow calls on: in-memory admitted call", peers["slow_memory"], None, "0", "")
    row("gobreaker counting on: in-memory admitted call", peers["gob_memory"], None, "0", "")
    row("strict admission on: in-memory admitted call", peers["strict_memory"], None, "0", "")
    if "decide" in peers:
        row(
            "peer options on: Redis decision",
            peers["decide"],
            None,
            f"{peers['trips']['decide']:g}",
            "",
        )
        row(
            "peer options on: Redis record",
            peers["record"],
            None,
            f"{peers['trips']['record']:g}",
            "",
        )
        row(
            "slow calls on: Redis record",
            peers["slow_record"],
            None,
            f"{peers['trips']['slow_record']:g}",
            "",
        )
        for key, what in (("gob_decide", "decision"), ("gob_record", "record")):
            row(
                f"gobreaker counting on: Redis {what}",
                peers[key],
                None,
                f"{peers['trips'][key]:g}",
                "",
            )
        row(
            "strict admission on: Redis decision + record",
            peers["strict_call"],
            None,
            f"{peers['trips']['strict_call']:g}",
            "",
        )
        row(
            "gRPC retry throttling, one attempt (Redis)",
            peers["grpc"],
            None,
            f"{peers['trips']['grpc']:g}",
            "",
        )
        row(
            "Finagle retry budget, one deposit (Redis)",
            peers["finagle"],
            None,
            f"{peers['trips']['finagle']:g}",
            "",
        )
    row("tour, virtual time", tour, None, "-", "< 5 ms", unit="ms")
    row("200 callers x <= 4 attempts, virtual time", crowd, None, "-", "< 500 ms", unit="ms")

    headers = (
        "measurement",
        "engine p50",
        "engine p99",
        "pybreaker p50",
        "pybreaker p99",
        "round trips (engine / pybreaker)",
        "target",
    )
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
    print()
    print("times in us per operation unless marked ms; in-memory rows timed in batches of 10 calls")
    print("(CPU row: 100); engine and pybreaker take turns batch by batch, so both see the same")
    print("load; pybreaker's Redis row is one whole call (its decision and its record together).")
    if red:
        ping = statistics.median(red["ping"])
        print(
            f"Redis, beyond a bare PING: decision +{statistics.median(red['decide']) - ping:.0f} us, "
            f"record +{statistics.median(red['record']) - ping:.0f} us (script and argument packing); "
            f"pybreaker call +{statistics.median(red['pybreaker']) - ping:.0f} us"
        )
    if real:
        walls, attempts = real
        drifts = ", ".join(f"{(w - TOUR_SLEEPS_MS) / TOUR_SLEEPS_MS * 100:+.1f} %" for w in walls)
        print(
            f"tour --real ({len(walls)} runs): {', '.join(f'{w:.0f}' for w in walls)} ms wall vs "
            f"{TOUR_SLEEPS_MS} ms of configured sleeps ({drifts}); attempts {attempts}"
        )
    print(
        f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus"
    )


if __name__ == "__main__":
    run("engine_bench", parser(), measure)
