"""Failure Lab's resilience engine: retries, a circuit breaker, a fake dependency, in pure
Python with time and randomness injected.

No Django import anywhere in this package. Typical use::

    import random
    from labs.engine import (Breaker, FakeDependency, GuardedClient, MemoryStore,
                             VirtualClock, parse_dependency, parse_policy)

    clock, store, rng = VirtualClock(), MemoryStore(), random.Random(7)
    policy = parse_policy({"max_attempts": 4, "breaker": {"failure_threshold": 3}})
    breaker = Breaker(policy.breaker, store=store, clock=clock, rng=rng)
    dependency = FakeDependency(parse_dependency({"mode": "flaky", "fail_count": 3}),
                                store=store, clock=clock, rng=rng)
    client = GuardedClient(policy, breaker=breaker, dependency=dependency, clock=clock,
                           rng=rng, sink=lambda event: print(event.explain))
    print(client.run_burst(6).attempts)   # [4, 1, 1, 1, 1, 1]

This package exports what a user of the library needs: clocks, the fake dependency, the
settings (LIMITS, config dataclasses, validation and parsing), retry arithmetic, the breaker
and its states, the guarded client and its outcomes, events, stores and scenario runs.
Everything else (decision codes, choice tuples, helpers) stays importable from its module.
docs/engine.md has the semantics, defaults, the public surface and the scenario format.
"""

from labs.engine.breaker import (
    STATE_LABELS,
    STATES,
    Breaker,
    CircuitOpenError,
    Permit,
    Rejection,
    state_label,
)
from labs.engine.client import CALL_OUTCOMES, BurstResult, CallResult, GuardedClient
from labs.engine.clock import Clock, SystemClock, VirtualClock
from labs.engine.config import (
    LIMITS,
    BreakerConfig,
    DependencyConfig,
    Limit,
    Policy,
    RetryBudgetConfig,
    Scenario,
    default_dependency,
    default_policy,
)
from labs.engine.dependency import AttemptResult, Dependency, FakeDependency
from labs.engine.events import (
    EVENT_KINDS,
    FAST_FAIL_OUTCOMES,
    Event,
    EventList,
    Sink,
    is_fast_fail,
)
from labs.engine.expect import (
    ASK_MEASURES,
    EXPECT_MEASURES,
    check_expectations,
    check_situation,
    grade_answer,
    observe,
)
from labs.engine.retry import RetryBudget, backoff_ms, is_retryable, jittered_backoff_ms
from labs.engine.scenario import Executor, run_scenario
from labs.engine.shared import (
    Decision,
    MemorySharedModel,
    Second,
    SharedConfig,
    SharedDependency,
    SharedModel,
    Trigger,
)
from labs.engine.stores import MemoryStore, RedisStore, Store
from labs.engine.stores.shared_redis import RedisSharedModel
from labs.engine.validate import (
    Problem,
    ValidationError,
    merge_settings,
    parse_dependency,
    parse_policy,
    parse_scenario,
    parse_shared,
    parse_trigger,
    validate_dependency,
    validate_policy,
    validate_scenario,
    validate_settings,
    validate_shared,
    validate_trigger,
)

__all__ = [
    "ASK_MEASURES",
    "CALL_OUTCOMES",
    "EVENT_KINDS",
    "EXPECT_MEASURES",
    "FAST_FAIL_OUTCOMES",
    "LIMITS",
    "STATES",
    "STATE_LABELS",
    "AttemptResult",
    "Breaker",
    "BreakerConfig",
    "BurstResult",
    "CallResult",
    "CircuitOpenError",
    "Clock",
    "Decision",
    "Dependency",
    "DependencyConfig",
    "Event",
    "EventList",
    "Executor",
    "FakeDependency",
    "GuardedClient",
    "Limit",
    "MemorySharedModel",
    "MemoryStore",
    "Permit",
    "Policy",
    "Problem",
    "RedisSharedModel",
    "RedisStore",
    "Rejection",
    "RetryBudget",
    "RetryBudgetConfig",
    "Scenario",
    "Second",
    "SharedConfig",
    "SharedDependency",
    "SharedModel",
    "Sink",
    "Store",
    "SystemClock",
    "Trigger",
    "ValidationError",
    "VirtualClock",
    "backoff_ms",
    "check_expectations",
    "check_situation",
    "default_dependency",
    "default_policy",
    "grade_answer",
    "is_fast_fail",
    "is_retryable",
    "jittered_backoff_ms",
    "merge_settings",
    "observe",
    "parse_dependency",
    "parse_policy",
    "parse_scenario",
    "parse_shared",
    "parse_trigger",
    "run_scenario",
    "state_label",
    "validate_dependency",
    "validate_policy",
    "validate_scenario",
    "validate_settings",
    "validate_shared",
    "validate_trigger",
]
