"""Settings as data: the allowed ranges (``LIMITS``) and the typed configs built from them.

The field names are the scenario format's JSON names. ``to_dict()`` gives the canonical JSON
form (every field, defaults filled in) and round-trips through the ``parse_*`` functions of
:mod:`labs.engine.validate`, which also enforce the lab's ranges. Constructing a config
directly only checks structural sanity (known choices, non-negative numbers), so simulations
may go beyond the ranges a student can pick in the web form.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

__all__ = [
    "ADMISSIONS",
    "BREAKER_KINDS",
    "BREAKER_SCOPES",
    "BUDGET_KINDS",
    "COOLDOWN_EDGES",
    "COUNTS",
    "ERROR_KINDS",
    "FALLBACKS",
    "HALF_OPEN_DECISIONS",
    "HOST_KEYS",
    "JITTERS",
    "LIMITS",
    "MODES",
    "NESTINGS",
    "OUTCOME_TOKENS",
    "RATIO_CHECKS",
    "RETRY_AFTERS",
    "SIDE_EFFECTS",
    "SPREADS",
    "BreakerConfig",
    "DependencyConfig",
    "Limit",
    "Policy",
    "RetryBudgetConfig",
    "Scenario",
    "Step",
    "default_dependency",
    "default_policy",
]

MODES = (
    "healthy", "flaky", "down", "slow", "error_rate", "outage", "rate_limited", "script", "shared",
    "server",
)  # fmt: skip
ERROR_KINDS = ("503", "500", "timeout", "429", "400")
#: One entry of a ``script`` dependency: ``ok``, ``fail`` (the configured error) or a kind.
OUTCOME_TOKENS = ("ok", "fail", *ERROR_KINDS)
JITTERS = ("none", "full", "equal", "decorrelated", "proportional")
NESTINGS = ("breaker_outside", "retry_outside")
BREAKER_KINDS = ("consecutive", "rolling_ratio")
# The peer libraries' choices (the first of each is the engine's own behaviour).
COOLDOWN_EDGES = ("inclusive", "strict")
RATIO_CHECKS = ("every_result", "failure")
COUNTS = ("engine", "gobreaker")
ADMISSIONS = ("two_step", "strict")
HALF_OPEN_DECISIONS = ("first_failure", "ratio")
BUDGET_KINDS = ("per_call", "grpc", "finagle")
RETRY_AFTERS = ("capped", "pushback")
# Beyond one dependency (docs/engine.md, "Hosts, bulkheads, fallbacks and idempotency").
SPREADS = ("round_robin", "random")
BREAKER_SCOPES = ("dependency", "host")
FALLBACKS = ("cached", "default")
SIDE_EFFECTS = ("charge",)
#: The fields a host may set for itself; the others are the dependency's.
HOST_KEYS = (
    "mode", "latency_ms", "fail_count", "error", "rate", "down_for_ms", "retry_after_ms",
    "outcomes",
)  # fmt: skip
MAX_HOSTS = 8

Mode = Literal[
    "healthy", "flaky", "down", "slow", "error_rate", "outage", "rate_limited", "script", "shared",
    "server",
]  # fmt: skip
Jitter = Literal["none", "full", "equal", "decorrelated", "proportional"]
Nesting = Literal["breaker_outside", "retry_outside"]


@dataclass(frozen=True)
class Limit:
    """One setting: its default, allowed range or choices, unit, and whether null means off."""

    default: Any
    min: float | None = None
    max: float | None = None
    unit: str = ""
    type: Literal["int", "number", "choice", "list", "string", "bool"] = "int"
    choices: tuple[str, ...] = ()
    nullable: bool = False
    note: str = ""

    def describe(self) -> str:
        """The allowed values in words, e.g. ``between 0 and 2000 ms``."""
        if self.type == "choice":
            text = "one of " + ", ".join(self.choices)
        elif self.type == "bool":
            text = "true or false"
        else:
            unit = f" {self.unit}" if self.unit else ""
            text = f"between {_num(self.min)} and {_num(self.max)}{unit}"
        return f"null (off) or {text}" if self.nullable else text


def _num(value: float | None) -> str:
    if value is None:
        return "?"
    return str(int(value)) if float(value).is_integer() else str(value)


#: Every setting's default and allowed range, as data: field path -> Limit. The web forms, the admin and the CLI all
#: validate against this table (through :mod:`labs.engine.validate`).
LIMITS: dict[str, Limit] = {
    "dependency.mode": Limit("healthy", type="choice", choices=MODES),
    "dependency.latency_ms": Limit(5, 0, 2000, "ms", note="every attempt sleeps this long"),
    "dependency.fail_count": Limit(3, 1, 100, note="flaky: fail the next N attempts"),
    "dependency.error": Limit("503", type="choice", choices=ERROR_KINDS),
    "dependency.rate": Limit(0.5, 0, 1, type="number", note="error_rate: failure probability"),
    "dependency.down_for_ms": Limit(2000, 0, 60000, "ms", note="outage: down this long"),
    "dependency.retry_after_ms": Limit(
        1000, 0, 10000, "ms", note="rate_limited: 429s for this long, Retry-After = time left"
    ),
    "dependency.outcomes": Limit(
        [], 1, 100, "outcomes", type="list", choices=OUTCOME_TOKENS, note="script mode"
    ),
    # -- beyond one dependency: hosts, a second dependency, side effects, fallbacks --
    "dependency.hosts": Limit(
        (), 1, MAX_HOSTS, "hosts", type="list", note="[]: one host, the dependency itself"
    ),
    "dependency.spread": Limit("round_robin", type="choice", choices=SPREADS),
    "dependency.side_effect": Limit(
        None,
        type="choice",
        choices=SIDE_EFFECTS,
        nullable=True,
        note="applied per processed attempt",
    ),
    "dependency.honours_keys": Limit(
        False, type="bool", note="applies each idempotency key's effect at most once"
    ),
    "dependency.fallbacks": Limit(
        (), 0, len(FALLBACKS), type="list", choices=FALLBACKS, note="what a policy may fall back on"
    ),
    "dependency.b": Limit(None, nullable=True, type="string", note="a second dependency, B"),
    "dependency.b_every": Limit(2, 1, 20, note="call n goes to B when n is a multiple of this"),
    # -- a student's own server with a queue (mode ``server``): the shared.* ranges below --
    "dependency.server": Limit(
        None, nullable=True, type="string", note="server mode: servers, queue and defences"
    ),
    "policy.max_attempts": Limit(4, 1, 5),
    "policy.backoff_base_ms": Limit(25, 0, 500, "ms"),
    "policy.backoff_cap_ms": Limit(500, 0, 2000, "ms", note="at least backoff_base_ms"),
    "policy.jitter": Limit("none", type="choice", choices=JITTERS),
    "policy.nesting": Limit("breaker_outside", type="choice", choices=NESTINGS),
    "policy.deadline_ms": Limit(None, 0, 10000, "ms", nullable=True),
    "policy.attempt_timeout_ms": Limit(None, 1, 10000, "ms", nullable=True),
    "policy.breaker.kind": Limit("consecutive", type="choice", choices=BREAKER_KINDS),
    "policy.breaker.failure_threshold": Limit(3, 1, 20),
    "policy.breaker.cooldown_ms": Limit(2000, 100, 60000, "ms"),
    "policy.breaker.cooldown_jitter_pct": Limit(0, 0, 100, "%"),
    "policy.breaker.half_open_max_probes": Limit(1, 1, 5),
    "policy.breaker.success_threshold": Limit(1, 1, 5),
    "policy.breaker.failure_ratio": Limit(0.5, 0, 1, type="number"),
    "policy.breaker.min_calls": Limit(5, 1, 100),
    "policy.breaker.window_ms": Limit(10000, 100, 600000, "ms"),
    "policy.breaker.buckets": Limit(10, 1, 60),
    "policy.breaker.window_calls": Limit(None, 1, 1000, "calls", nullable=True),
    # -- the peer libraries' options (docs/engine.md, "Settings that follow a peer library") --
    "policy.breaker.cooldown_edge": Limit(
        "inclusive", type="choice", choices=COOLDOWN_EDGES, note="half-open at open_until or after"
    ),
    "policy.breaker.ratio_checked_on": Limit(
        "every_result",
        type="choice",
        choices=RATIO_CHECKS,
        note="rolling ratio: when it is checked",
    ),
    "policy.breaker.cooldown_multiplier": Limit(
        1, 1, 10, type="number", note="each consecutive opening multiplies the cooldown"
    ),
    "policy.breaker.cooldown_max_ms": Limit(
        None, 100, 3_600_000, "ms", nullable=True, note="the longest cooldown"
    ),
    "policy.breaker.half_open_calls": Limit(
        None, 1, 100, "calls", nullable=True, note="probes admitted per half-open period"
    ),
    "policy.breaker.half_open_decision": Limit(
        "first_failure", type="choice", choices=HALF_OPEN_DECISIONS
    ),
    "policy.breaker.slow_call_ms": Limit(
        None, 1, 600_000, "ms", nullable=True, note="rolling ratio: a longer call is slow"
    ),
    "policy.breaker.slow_call_ratio": Limit(
        1, 0, 1, type="number", note="rolling ratio: the slow-call rate that opens"
    ),
    "policy.breaker.counts": Limit(
        "engine", type="choice", choices=COUNTS, note="gobreaker: report its Counts"
    ),
    "policy.breaker.admission": Limit(
        "two_step", type="choice", choices=ADMISSIONS, note="consecutive: strict holds calls back"
    ),
    "policy.breaker.count_interval_ms": Limit(
        None, 100, 3_600_000, "ms", nullable=True, note="consecutive: counts clear this often"
    ),
    "policy.retry_budget.kind": Limit("per_call", type="choice", choices=BUDGET_KINDS),
    "policy.retry_budget.ttl_ms": Limit(10000, 1000, 60000, "ms", note="finagle"),
    "policy.retry_budget.min_retries_per_sec": Limit(10, 0, 1000, note="finagle"),
    "policy.retry_budget.percent_can_retry": Limit(
        0.2, 0, 10, type="number", note="finagle: retries per request"
    ),
    "policy.retry_after": Limit("capped", type="choice", choices=RETRY_AFTERS),
    # -- end of the peer libraries' options --
    "policy.breaker_scope": Limit(
        "dependency", type="choice", choices=BREAKER_SCOPES, note="host: one breaker per host"
    ),
    "policy.bulkhead": Limit(
        None, 1, 10, "calls", nullable=True, note="concurrent calls per dependency"
    ),
    "policy.pool_wait_ms": Limit(
        None, 0, 10000, "ms", nullable=True, note="the longest a call waits for a pool slot"
    ),
    "policy.fallback": Limit(None, type="choice", choices=FALLBACKS, nullable=True),
    "policy.fallback_max_age_ms": Limit(
        60000, 1, 3_600_000, "ms", note="cached: an older answer is not used"
    ),
    "policy.idempotency_keys": Limit(False, type="bool", note="the client sends a key per call"),
    "policy.retry_budget.token_ratio": Limit(0.1, 0, 1, type="number"),
    "policy.retry_budget.max_tokens": Limit(10, 1, 100, type="number"),
    "seed": Limit(0, 0, 2**32 - 1),
    "steps[].burst": Limit(6, 1, 20, "calls"),
    "steps[].concurrency": Limit(1, 1, 10, "callers"),
    "steps[].wait_ms": Limit(0, 0, 3_600_000, "ms", note="virtual time: up to an hour"),
    # -- a scenario's steady traffic (what the lab offers to start, per session) --------------
    "traffic.rate": Limit(5, 1, 20, "calls/s", note="per session"),
    "traffic.duration_s": Limit(60, 1, 300, "s"),
    "traffic.arrivals": Limit("poisson", type="choice", choices=("poisson", "even")),
    # -- the shared dependency (labs/engine/shared.py): a class's server model, its triggers --
    "shared.servers": Limit(8, 1, 64, "servers", note="each serves one attempt at a time"),
    "shared.service_ms": Limit(40, 1, 2000, "ms", note="service time of one attempt"),
    "shared.max_queue_ms": Limit(2000, 0, 10000, "ms", note="a longer queue wait is shed"),
    # the server's own defences, decided at each attempt's arrival (null: off)
    "shared.rate_per_s": Limit(
        None,
        0.1,
        100000,
        "attempts/s",
        type="number",
        nullable=True,
        note="token bucket: faster is answered 429 with a Retry-After",
    ),
    "shared.rate_burst": Limit(10, 1, 10000, "attempts", note="token bucket size"),
    "shared.queue_limit": Limit(
        None, 1, 100000, "attempts", nullable=True, note="attempts waiting: more is shed"
    ),
    "shared.concurrency_limit": Limit(
        None,
        1,
        1000,
        "attempts",
        nullable=True,
        note="attempts in the server, waiting or served: more is shed (adaptive: the start)",
    ),
    "shared.concurrency": Limit(
        "fixed",
        type="choice",
        choices=("fixed", "aimd", "gradient"),
        note="how the concurrency limit moves as attempts finish",
    ),
    "shared.concurrency_max": Limit(200, 1, 1000, "attempts", note="adaptive: the highest"),
    "shared.limit_latency_ms": Limit(
        500, 1, 10000, "ms", note="AIMD: an answer slower than this (or a failure) cuts the limit"
    ),
    "shared.codel_target_ms": Limit(
        None,
        1,
        5000,
        "ms",
        nullable=True,
        note="CoDel: once waits stay above this for an interval, a longer wait is shed",
    ),
    "shared.codel_interval_ms": Limit(100, 10, 10000, "ms", note="CoDel: the interval"),
    # which waiting attempt a freed server takes (LIFO needs the explicit queue: decided as
    # servers free, not at arrival; see labs/engine/shared.py)
    "shared.discipline": Limit(
        "fifo",
        type="choice",
        choices=("fifo", "lifo", "adaptive_lifo"),
        note="which waiting attempt a freed server takes",
    ),
    "shared.lifo_after_ms": Limit(
        100, 1, 10000, "ms", note="adaptive LIFO: LIFO while the oldest wait is longer"
    ),
    "shared.trigger.kind": Limit("down", type="choice", choices=("down", "slow", "capacity")),
    "shared.trigger.duration_ms": Limit(8000, 100, 600000, "ms"),
    "shared.trigger.factor": Limit(3, 1, 20, type="number", note="slow: service time x k"),
    "shared.trigger.servers": Limit(
        0, 0, 63, "servers", note="capacity: servers left, below shared.servers"
    ),
}


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


@dataclass(frozen=True)
class DependencyConfig:
    """The fake dependency's behaviour (a scenario's ``dependency``)."""

    mode: Mode = "healthy"
    latency_ms: float = 5
    fail_count: int = 3
    error: str = "503"
    rate: float = 0.5
    down_for_ms: float = 2000
    retry_after_ms: float = 1000
    outcomes: tuple[str, ...] = ()
    # Beyond one host and one dependency (docs/engine.md): each host's own settings (merged
    # over these; empty: one host, this one), how calls spread over them, the side effect a
    # processed attempt applies, the fallbacks a policy may name, and a second dependency B.
    hosts: tuple[dict[str, Any], ...] = ()
    spread: Literal["round_robin", "random"] = "round_robin"
    side_effect: str | None = None
    honours_keys: bool = False
    fallbacks: tuple[str, ...] = ()
    b: DependencyConfig | None = None
    b_every: int = 2
    # Mode ``server``: the student's own server with a queue, the shared model's settings
    # (labs.engine.shared.SharedConfig as a dict; defaults filled by parse_dependency).
    server: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _need(self.mode in MODES, f"unknown mode {self.mode!r}")
        _need(len(self.hosts) <= MAX_HOSTS, f"at most {MAX_HOSTS} hosts")
        _need(all(set(h) <= set(HOST_KEYS) for h in self.hosts), "unknown host field")
        _need(self.spread in SPREADS, f"unknown spread {self.spread!r}")
        _need(self.side_effect in (None, *SIDE_EFFECTS), "unknown side effect")
        _need(all(f in FALLBACKS for f in self.fallbacks), "unknown fallback")
        _need(self.b_every >= 1, "b_every must be >= 1")
        _need(self.b is None or (self.b.b is None and not self.b.hosts), "B has one host, no B")
        object.__setattr__(self, "hosts", tuple(dict(h) for h in self.hosts))
        object.__setattr__(self, "fallbacks", tuple(self.fallbacks))
        _need(self.error in ERROR_KINDS, f"unknown error kind {self.error!r}")
        _need(all(o in OUTCOME_TOKENS for o in self.outcomes), "unknown script outcome")
        _need(self.latency_ms >= 0 and self.down_for_ms >= 0, "durations must be >= 0")
        _need(self.retry_after_ms >= 0 and self.fail_count >= 0, "counts must be >= 0")
        _need(0 <= self.rate <= 1, "rate must be between 0 and 1")
        object.__setattr__(self, "outcomes", tuple(self.outcomes))

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON form."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["outcomes"] = list(self.outcomes)
        data["hosts"] = [dict(h) for h in self.hosts]
        data["fallbacks"] = list(self.fallbacks)
        data["b"] = None if self.b is None else self.b.to_dict()
        data["server"] = None if self.server is None else dict(self.server)
        return data

    def host_configs(self) -> list[DependencyConfig]:
        """One config per host: each host's fields over this dependency's (one host, this
        dependency's own behaviour, when ``hosts`` is empty)."""
        if not self.hosts:
            return [self]
        base = {k: getattr(self, k) for k in HOST_KEYS}
        return [
            DependencyConfig(
                **{**base, **h, "outcomes": tuple(h.get("outcomes", base["outcomes"]))}
            )
            for h in self.hosts
        ]


@dataclass(frozen=True)
class BreakerConfig:
    """Circuit breaker settings (``policy.breaker``).

    ``consecutive`` opens after ``failure_threshold`` consecutive failed calls;
    ``rolling_ratio`` opens when, over the window, at least ``min_calls`` calls were counted
    and the failure ratio is at or above ``failure_ratio``. The window is the last
    ``window_calls`` calls when that is set, else ``window_ms`` split into ``buckets``.
    """

    kind: Literal["consecutive", "rolling_ratio"] = "consecutive"
    failure_threshold: int = 3
    cooldown_ms: float = 2000
    cooldown_jitter_pct: float = 0
    half_open_max_probes: int = 1
    success_threshold: int = 1
    failure_ratio: float = 0.5
    min_calls: int = 5
    window_ms: float = 10000
    buckets: int = 10
    window_calls: int | None = None
    # The peer libraries' options (docs/engine.md); the defaults are the engine's own.
    cooldown_edge: Literal["inclusive", "strict"] = "inclusive"
    ratio_checked_on: Literal["every_result", "failure"] = "every_result"
    cooldown_multiplier: float = 1
    cooldown_max_ms: float | None = None
    half_open_calls: int | None = None
    half_open_decision: Literal["first_failure", "ratio"] = "first_failure"
    # resilience4j's slow calls: a call longer than ``slow_call_ms`` is slow, and a slow-call
    # rate at or above ``slow_call_ratio`` opens the breaker as the failure rate does.
    slow_call_ms: float | None = None
    slow_call_ratio: float = 1
    # gobreaker's counting: ``counts`` "gobreaker" keeps its Counts (cleared on every state
    # change); ``count_interval_ms`` (gobreaker Interval) clears the closed state's counts.
    counts: Literal["engine", "gobreaker"] = "engine"
    count_interval_ms: float | None = None
    # ``strict``: a closed consecutive breaker admits a call only while the failure streak plus
    # the calls in flight is below the threshold; the others wait (are held back).
    admission: Literal["two_step", "strict"] = "two_step"

    def __post_init__(self) -> None:
        _need(self.kind in BREAKER_KINDS, f"unknown breaker kind {self.kind!r}")
        _need(self.failure_threshold >= 1 and self.min_calls >= 1, "thresholds must be >= 1")
        _need(1 <= self.half_open_max_probes <= 16, "half_open_max_probes must be 1..16")
        _need(self.success_threshold >= 1, "success_threshold must be >= 1")
        _need(self.cooldown_ms >= 0 and self.cooldown_jitter_pct >= 0, "cooldown must be >= 0")
        _need(0 <= self.failure_ratio <= 1, "failure_ratio must be between 0 and 1")
        _need(self.window_ms > 0 and self.buckets >= 1, "window_ms and buckets must be > 0")
        _need(self.window_calls is None or self.window_calls >= 1, "window_calls must be >= 1")
        _need(self.cooldown_edge in COOLDOWN_EDGES, f"unknown cooldown_edge {self.cooldown_edge!r}")
        _need(self.ratio_checked_on in RATIO_CHECKS, "unknown ratio_checked_on")
        _need(self.half_open_decision in HALF_OPEN_DECISIONS, "unknown half_open_decision")
        _need(self.cooldown_multiplier >= 1, "cooldown_multiplier must be >= 1")
        _need(
            self.cooldown_max_ms is None or self.cooldown_max_ms > 0, "cooldown_max_ms must be > 0"
        )
        _need(
            self.half_open_calls is None or self.half_open_calls >= 1,
            "half_open_calls must be >= 1",
        )
        _need(
            self.half_open_decision == "first_failure" or self.half_open_calls is not None,
            "half_open_decision ratio needs half_open_calls",
        )
        _need(0 <= self.slow_call_ratio <= 1, "slow_call_ratio must be between 0 and 1")
        _need(
            self.slow_call_ms is None
            or (
                self.slow_call_ms > 0
                and self.kind == "rolling_ratio"
                and self.ratio_checked_on == "every_result"
            ),
            "slow_call_ms needs a rolling_ratio breaker checked on every result",
        )
        _need(self.counts in COUNTS, f"unknown counts {self.counts!r}")
        _need(
            self.count_interval_ms is None
            or (self.count_interval_ms > 0 and self.kind == "consecutive"),
            "count_interval_ms needs a consecutive breaker",
        )
        _need(self.admission in ADMISSIONS, f"unknown admission {self.admission!r}")
        _need(
            self.admission == "two_step" or self.kind == "consecutive",
            "strict admission needs a consecutive breaker",
        )

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON form."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class RetryBudgetConfig:
    """A token bucket shared by all calls: each call deposits ``token_ratio`` tokens (up to
    ``max_tokens``), each retry withdraws one whole token; the bucket starts full."""

    token_ratio: float = 0.1
    max_tokens: float = 10
    # The peer libraries' budgets (docs/engine.md): ``grpc`` is gRPC's retry throttling
    # (token_ratio, max_tokens), ``finagle`` Finagle's RetryBudget (the three below).
    kind: Literal["per_call", "grpc", "finagle"] = "per_call"
    ttl_ms: float = 10000
    min_retries_per_sec: int = 10
    percent_can_retry: float = 0.2

    def __post_init__(self) -> None:
        _need(self.token_ratio >= 0 and self.max_tokens >= 0, "budget values must be >= 0")
        _need(self.kind in BUDGET_KINDS, f"unknown retry budget kind {self.kind!r}")
        _need(self.ttl_ms >= 1000, "ttl_ms must be >= 1000")
        _need(self.min_retries_per_sec >= 0 and self.percent_can_retry >= 0, "must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON form: the engine's own budget (``per_call``) is its two numbers, a
        peer library's budget every field."""
        if self.kind == "per_call":
            return {"token_ratio": self.token_ratio, "max_tokens": self.max_tokens}
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Policy:
    """The guarded client's policy (``policy``): retries, nesting, breaker, budget, deadline."""

    max_attempts: int = 4
    backoff_base_ms: float = 25
    backoff_cap_ms: float = 500
    jitter: Jitter = "none"
    nesting: Nesting = "breaker_outside"
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    retry_budget: RetryBudgetConfig | None = None
    deadline_ms: float | None = None
    attempt_timeout_ms: float | None = None
    retry_after: Literal["capped", "pushback"] = "capped"
    # Beyond one dependency (docs/engine.md): one breaker per host, a bulkhead (concurrent
    # calls per dependency), the longest wait for a pool slot, a fallback and its maximum
    # age, and an idempotency key sent with every call.
    breaker_scope: Literal["dependency", "host"] = "dependency"
    bulkhead: int | None = None
    pool_wait_ms: float | None = None
    fallback: Literal["cached", "default"] | None = None
    fallback_max_age_ms: float = 60000
    idempotency_keys: bool = False

    def __post_init__(self) -> None:
        _need(self.max_attempts >= 1, "max_attempts must be >= 1")
        _need(self.breaker_scope in BREAKER_SCOPES, f"unknown breaker_scope {self.breaker_scope!r}")
        _need(self.bulkhead is None or self.bulkhead >= 1, "bulkhead must be >= 1")
        _need(self.pool_wait_ms is None or self.pool_wait_ms >= 0, "pool_wait_ms must be >= 0")
        _need(self.fallback in (None, *FALLBACKS), f"unknown fallback {self.fallback!r}")
        _need(self.fallback_max_age_ms > 0, "fallback_max_age_ms must be > 0")
        _need(self.retry_after in RETRY_AFTERS, f"unknown retry_after {self.retry_after!r}")
        _need(self.jitter in JITTERS, f"unknown jitter {self.jitter!r}")
        _need(self.nesting in NESTINGS, f"unknown nesting {self.nesting!r}")
        _need(self.backoff_base_ms >= 0, "backoff_base_ms must be >= 0")
        _need(self.backoff_cap_ms >= self.backoff_base_ms, "backoff_cap_ms must be >= base")
        _need(self.deadline_ms is None or self.deadline_ms >= 0, "deadline_ms must be >= 0")
        _need(
            self.attempt_timeout_ms is None or self.attempt_timeout_ms > 0,
            "attempt_timeout_ms must be > 0",
        )

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON form (``retry_budget`` null when off)."""
        return {
            "max_attempts": self.max_attempts,
            "backoff_base_ms": self.backoff_base_ms,
            "backoff_cap_ms": self.backoff_cap_ms,
            "jitter": self.jitter,
            "nesting": self.nesting,
            "breaker": self.breaker.to_dict(),
            "retry_budget": None if self.retry_budget is None else self.retry_budget.to_dict(),
            "deadline_ms": self.deadline_ms,
            "attempt_timeout_ms": self.attempt_timeout_ms,
            "retry_after": self.retry_after,
            "breaker_scope": self.breaker_scope,
            "bulkhead": self.bulkhead,
            "pool_wait_ms": self.pool_wait_ms,
            "fallback": self.fallback,
            "fallback_max_age_ms": self.fallback_max_age_ms,
            "idempotency_keys": self.idempotency_keys,
        }

    @property
    def pooled(self) -> bool:
        """Whether calls go through the pool model (a bulkhead or a pool wait is set)."""
        return self.bulkhead is not None or self.pool_wait_ms is not None


@dataclass(frozen=True)
class Step:
    """One scenario step: ``burst`` (with ``concurrency``), ``wait``, ``set_dependency`` or
    ``set_policy``. A ``set_*`` step carries the keys it changes; they are merged into the
    current settings (nested ``breaker`` / ``retry_budget`` objects merge one level deeper).
    A burst step may carry ``expect`` (measures checked after the run) and ``situation`` (what
    must have happened for the step's lesson to be there); see :mod:`labs.engine.expect`. It
    may also carry ``ask``, a lesson's question whose answer the run observes: the engine
    keeps it unread, the classroom checks and grades it (``labs.grading``)."""

    action: Literal["burst", "wait", "set_dependency", "set_policy"]
    burst: int | None = None
    concurrency: int = 1
    wait_ms: float | None = None
    changes: dict[str, Any] | None = None
    expect: dict[str, Any] | None = None
    ask: dict[str, Any] | None = None
    situation: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The step as it appears in a scenario file."""
        if self.action == "burst":
            out: dict[str, Any] = {"burst": self.burst, "concurrency": self.concurrency}
            if self.expect is not None:
                out["expect"] = dict(self.expect)
            if self.ask is not None:
                out["ask"] = dict(self.ask)
            if self.situation is not None:
                out["situation"] = dict(self.situation)
            return out
        if self.action == "wait":
            return {"wait_ms": self.wait_ms}
        return {self.action: dict(self.changes or {})}


@dataclass(frozen=True)
class Scenario:
    """A scenario script: start settings, then steps."""

    name: str
    dependency: DependencyConfig
    policy: Policy
    steps: tuple[Step, ...]
    seed: int = 0
    title: str = ""
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON form."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "seed": self.seed,
            "dependency": self.dependency.to_dict(),
            "policy": self.policy.to_dict(),
            "steps": [s.to_dict() for s in self.steps],
        }


def default_dependency() -> dict[str, Any]:
    """The default dependency in canonical JSON form."""
    return DependencyConfig().to_dict()


def default_policy() -> dict[str, Any]:
    """The default policy in canonical JSON form."""
    return Policy().to_dict()
