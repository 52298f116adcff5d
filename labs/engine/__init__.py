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

See docs/engine.md for the semantics, defaults and the scenario format.
"""

from labs.engine.breaker import (
    STATE_LABELS,
    STATES,
    Breaker,
    CircuitOpenError,
    Outcome,
    Permit,
    Recorded,
    Rejection,
    state_label,
)
from labs.engine.client import CALL_OUTCOMES, BurstResult, CallResult, GuardedClient
from labs.engine.clock import Clock, SystemClock, Task, VirtualClock
from labs.engine.config import (
    BREAKER_KINDS,
    ERROR_KINDS,
    JITTERS,
    LIMITS,
    MODES,
    NESTINGS,
    BreakerConfig,
    DependencyConfig,
    Limit,
    Policy,
    RetryBudgetConfig,
    Scenario,
    Step,
    default_dependency,
    default_policy,
)
from labs.engine.dependency import AttemptResult, FakeDependency
from labs.engine.events import (
    EVENT_KINDS,
    FAST_FAIL_OUTCOMES,
    Event,
    EventList,
    Sink,
    is_fast_fail,
    null_sink,
)
from labs.engine.retry import (
    RETRYABLE_ERRORS,
    Delay,
    RetryBudget,
    backoff_ms,
    counts_against_dependency,
    is_retryable,
    jitter_bounds_ms,
    jittered_backoff_ms,
    retry_delay,
)
from labs.engine.scenario import EngineExecutor, Executor, build_output, run_scenario
from labs.engine.stores import MemoryStore, RedisStore, Store
from labs.engine.validate import (
    Problem,
    ValidationError,
    merge_settings,
    parse_breaker,
    parse_dependency,
    parse_policy,
    parse_scenario,
    validate_dependency,
    validate_policy,
    validate_scenario,
)

__all__ = [
    "BREAKER_KINDS",
    "CALL_OUTCOMES",
    "ERROR_KINDS",
    "EVENT_KINDS",
    "FAST_FAIL_OUTCOMES",
    "JITTERS",
    "LIMITS",
    "MODES",
    "NESTINGS",
    "RETRYABLE_ERRORS",
    "STATES",
    "STATE_LABELS",
    "AttemptResult",
    "Breaker",
    "BreakerConfig",
    "BurstResult",
    "CallResult",
    "CircuitOpenError",
    "Clock",
    "Delay",
    "DependencyConfig",
    "EngineExecutor",
    "Event",
    "EventList",
    "Executor",
    "FakeDependency",
    "GuardedClient",
    "Limit",
    "MemoryStore",
    "Outcome",
    "Permit",
    "Policy",
    "Problem",
    "Recorded",
    "RedisStore",
    "Rejection",
    "RetryBudget",
    "RetryBudgetConfig",
    "Scenario",
    "Sink",
    "Step",
    "Store",
    "SystemClock",
    "Task",
    "ValidationError",
    "VirtualClock",
    "backoff_ms",
    "build_output",
    "counts_against_dependency",
    "default_dependency",
    "default_policy",
    "is_fast_fail",
    "is_retryable",
    "jitter_bounds_ms",
    "jittered_backoff_ms",
    "merge_settings",
    "null_sink",
    "parse_breaker",
    "parse_dependency",
    "parse_policy",
    "parse_scenario",
    "retry_delay",
    "run_scenario",
    "state_label",
    "validate_dependency",
    "validate_policy",
    "validate_scenario",
]
