"""Failure Lab's resilience engine: retries, a circuit breaker, a fake dependency, in pure
Python with time and randomness injected.

No Django import anywhere in this package, so students can read and run it alone
(docs/engine.md, "Ten lines without Django"). The root exports what docs/engine.md documents
for a user of the engine; everything else is imported from its module (the Redis side from
:mod:`labs.engine.redis`)."""

from labs.engine.breaker import Breaker, CircuitOpenError, state_label
from labs.engine.client import GuardedClient
from labs.engine.clock import Clock, SystemClock, VirtualClock
from labs.engine.config import LIMITS, BreakerConfig, DependencyConfig, Policy, Scenario
from labs.engine.dependency import Dependency, FakeDependency
from labs.engine.events import Event, EventList
from labs.engine.outcomes import BurstResult, CallResult
from labs.engine.scenario import run_scenario
from labs.engine.shared import (
    MemorySharedModel,
    SharedConfig,
    SharedDependency,
    SharedModel,
    Trigger,
)
from labs.engine.stores import MemoryStore, Store
from labs.engine.validate import (
    Problem,
    ValidationError,
    merge_settings,
    parse_dependency,
    parse_policy,
    parse_scenario,
    validate_scenario,
    validate_settings,
)

__all__ = [
    "LIMITS",
    "Breaker",
    "BreakerConfig",
    "BurstResult",
    "CallResult",
    "CircuitOpenError",
    "Clock",
    "Dependency",
    "DependencyConfig",
    "Event",
    "EventList",
    "FakeDependency",
    "GuardedClient",
    "MemorySharedModel",
    "MemoryStore",
    "Policy",
    "Problem",
    "Scenario",
    "SharedConfig",
    "SharedDependency",
    "SharedModel",
    "Store",
    "SystemClock",
    "Trigger",
    "ValidationError",
    "VirtualClock",
    "merge_settings",
    "parse_dependency",
    "parse_policy",
    "parse_scenario",
    "run_scenario",
    "state_label",
    "validate_scenario",
    "validate_settings",
]
