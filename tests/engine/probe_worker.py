"""Helper process for the Redis tests (not a test module).

``crowd URL NS N``: prints ``ready``, reads a wall-clock start time from stdin, then N threads
each make one guarded call at that time; prints one JSON line of [call, outcome, attempts].

``holder URL NS LEASE_MS``: takes a half-open probe permit, prints ``probe <slot>``, then
starts a dependency attempt that takes a minute (the test kills this process mid-call).

``late URL NS LEASE_MS``: takes a half-open probe permit, prints ``probe <slot>``, waits for
a line on stdin (the test resumes it after the lease expired), records a failure and prints
one JSON line of [applied, transition].
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time

import redis

from labs.engine import (
    Breaker,
    FakeDependency,
    GuardedClient,
    SystemClock,
    parse_dependency,
    parse_policy,
)
from labs.engine.redis import RedisStore

POLICY = {"breaker": {"failure_threshold": 1, "cooldown_ms": 1000}}


def crowd(url: str, ns: str, n: int, first_call: int) -> None:
    client = redis.Redis.from_url(url)
    clock = SystemClock("wall")
    store = RedisStore(client, ns)
    rng = random.Random(first_call)
    policy = parse_policy(POLICY)
    breaker = Breaker(policy.breaker, store=store, clock=clock, rng=rng)
    dependency = FakeDependency(
        parse_dependency({"mode": "healthy", "latency_ms": 600}), store=store, clock=clock, rng=rng
    )
    guarded = GuardedClient(policy, breaker=breaker, dependency=dependency, clock=clock, rng=rng)
    client.ping()
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    results: list[list] = []

    def one(call_no: int) -> None:
        time.sleep(max(0.0, start - time.time()))
        r = guarded.call(call_no)
        results.append([r.call, r.outcome, r.attempts])

    threads = [threading.Thread(target=one, args=(first_call + i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(results), flush=True)


def holder(url: str, ns: str, lease_ms: int) -> None:
    client = redis.Redis.from_url(url)
    clock = SystemClock("wall")
    store = RedisStore(client, ns, probe_lease_ms=lease_ms)
    policy = parse_policy(POLICY)
    breaker = Breaker(policy.breaker, store=store, clock=clock)
    permit = breaker.allow(call=99)
    if not permit or not permit.probe:
        print(f"no probe: {permit!r}", flush=True)
        return
    print(f"probe {permit.slot}", flush=True)
    dependency = FakeDependency(
        parse_dependency({"mode": "healthy", "latency_ms": 2000}),
        store=store,
        clock=clock,
        rng=random.Random(0),
    )
    for _ in range(30):  # a minute of "work"; the test kills us long before the record
        dependency.attempt()


def late(url: str, ns: str, lease_ms: int) -> None:
    client = redis.Redis.from_url(url)
    store = RedisStore(client, ns, probe_lease_ms=lease_ms)
    breaker = Breaker(parse_policy(POLICY).breaker, store=store, clock=SystemClock("wall"))
    permit = breaker.allow(call=98)
    if not permit or not permit.probe:
        print(f"no probe: {permit!r}", flush=True)
        return
    print(f"probe {permit.slot}", flush=True)
    sys.stdin.readline()  # paused past the lease
    print(json.dumps(list(breaker.record(permit, "failure", error="503"))), flush=True)


if __name__ == "__main__":
    kind, url, ns, number = sys.argv[1:5]
    if kind == "crowd":
        crowd(url, ns, int(number), int(sys.argv[5]))
    elif kind == "late":
        late(url, ns, int(number))
    else:
        holder(url, ns, int(number))
