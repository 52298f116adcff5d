"""Helpers for the engine tests (no database: nothing here touches Django)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from lab_project.env import redis_db_url
from labs.engine import (
    Breaker,
    EventList,
    FakeDependency,
    GuardedClient,
    MemoryStore,
    VirtualClock,
    parse_dependency,
    parse_policy,
)

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
# Database 15 of the run's Redis (REDIS_URL: make test may have started a private one).
REDIS_URL = os.environ.get("ENGINE_TEST_REDIS_URL") or redis_db_url(
    os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379", 15
)


def load_scenario(name: str) -> dict:
    return json.loads((SCENARIOS / f"{name}.json").read_text())


class Rig:
    """A guarded client on a virtual clock with every part exposed."""

    def __init__(self, dependency=None, policy=None, *, store=None, seed=7, clock=None):
        self.clock = clock or VirtualClock()
        self.store = store if store is not None else MemoryStore()
        self.rng = random.Random(seed)
        self.events = EventList()
        self.policy = parse_policy(policy or {})
        self.breaker = Breaker(
            self.policy.breaker, store=self.store, clock=self.clock, rng=self.rng, sink=self.events
        )
        self.set_dependency(dependency or {})
        self.next_call = 1
        self.bursts = 0

    def set_dependency(self, d):
        self.dependency = FakeDependency(
            parse_dependency(d), store=self.store, clock=self.clock, rng=self.rng
        )
        self.dependency.arm()

    @property
    def client(self):
        return GuardedClient(
            self.policy,
            breaker=self.breaker,
            dependency=self.dependency,
            clock=self.clock,
            rng=self.rng,
            sink=self.events,
            store=self.store,
        )

    def burst(self, size, concurrency=1):
        self.bursts += 1
        result = self.client.run_burst(
            size, concurrency=concurrency, first_call=self.next_call, burst=self.bursts
        )
        self.next_call += size
        return result

    def call(self):
        result = self.client.call(self.next_call)
        self.next_call += 1
        return result
