"""The store interface: where breaker, dependency and budget state live.

A store implements the breaker's state machine itself, one atomic operation per decision, so
the same rules hold whether the state is in this process (:class:`MemoryStore`) or shared
by many processes in Redis (:class:`RedisStore`, one Lua script per operation). The
:class:`~labs.engine.breaker.Breaker` is a thin typed layer over these operations.

Times are integer microseconds of the caller's clock (so a :class:`VirtualClock` drives a
Redis store as well as a memory one); only the probe leases of the Redis store expire on
Redis's own clock (``PX``), because their purpose is to outlive a dead process.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from labs.engine.config import BreakerConfig

__all__ = [
    "ADMIT",
    "APPLIED",
    "CLOSED",
    "DEFAULT_PROBE_LEASE_MS",
    "HOLD",
    "MAX_PROBE_SLOTS",
    "OPENED",
    "PROBE",
    "REJECT_HALF_OPEN",
    "REJECT_OPEN",
    "REOPENED",
    "STALE",
    "WINDOW_SLICES",
    "AllowReply",
    "BreakerSpec",
    "RecordReply",
    "Store",
    "effective_state",
    "from_doc",
    "peer_budget_doc",
    "peer_budget_from_doc",
    "scaled_cooldown_us",
    "to_doc",
]

# breaker_allow codes
ADMIT, PROBE, REJECT_OPEN, REJECT_HALF_OPEN, HOLD = 0, 1, 2, 3, 4
# breaker_record codes
STALE, APPLIED, OPENED, CLOSED, REOPENED = 0, 1, 2, 3, 4

#: Probe slots a store supports (``half_open_max_probes`` is at most this).
MAX_PROBE_SLOTS = 16
DEFAULT_PROBE_LEASE_MS = 5000


class BreakerSpec(NamedTuple):
    """The numbers a store needs from a :class:`BreakerConfig`, as integers."""

    rolling: bool
    failure_threshold: int
    ratio_ppm: int
    min_calls: int
    bucket_us: int
    buckets: int
    window_calls: int  # 0: time window of ``buckets`` x ``bucket_us``
    max_probes: int
    success_threshold: int
    # The peer-library options; the defaults are the engine's own behaviour.
    strict_edge: bool = False  # half-open only once now > open_until (else now >= open_until)
    failure_only: bool = False  # rolling ratio checked after a failure only (else every result)
    cooldown_mult_milli: int = 1000  # each consecutive opening multiplies the cooldown by this/1000
    cooldown_max_us: int = 0  # the cooldown's ceiling (0: none)
    half_open_calls: int = 0  # probes admitted per half-open period (0: no limit but in-flight)
    half_open_ratio: bool = False  # half-open decided on the failure ratio of half_open_calls
    slow_us: int = 0  # a call longer than this is slow (0: slow calls are not counted)
    slow_ppm: int = 1_000_000  # the slow-call rate that opens, in parts per million
    counts: bool = False  # keep gobreaker's Counts (requests, totals, consecutive runs)
    interval_us: int = 0  # gobreaker Interval: the closed state's counts clear this often
    strict: bool = False  # strict admission: streak + calls in flight stay below the threshold

    @classmethod
    def of(cls, config: BreakerConfig) -> BreakerSpec:
        """Derive the spec from a config."""
        buckets = int(config.buckets)
        return cls(
            rolling=config.kind == "rolling_ratio",
            failure_threshold=int(config.failure_threshold),
            ratio_ppm=round(config.failure_ratio * 1_000_000),
            min_calls=int(config.min_calls),
            bucket_us=max(1, round(config.window_ms * 1000 / buckets)),
            buckets=buckets,
            window_calls=int(config.window_calls or 0),
            max_probes=int(config.half_open_max_probes),
            success_threshold=int(config.success_threshold),
            strict_edge=config.cooldown_edge == "strict",
            failure_only=config.ratio_checked_on == "failure",
            cooldown_mult_milli=round(config.cooldown_multiplier * 1000),
            cooldown_max_us=round((config.cooldown_max_ms or 0) * 1000),
            half_open_calls=int(config.half_open_calls or 0),
            half_open_ratio=config.half_open_decision == "ratio",
            slow_us=round((config.slow_call_ms or 0) * 1000),
            slow_ppm=round(config.slow_call_ratio * 1_000_000),
            counts=config.counts == "gobreaker",
            interval_us=round((config.count_interval_ms or 0) * 1000),
            strict=config.admission == "strict",
        )

    def packed(self) -> str:
        """The spec as the Lua scripts read it: integers separated by spaces."""
        return " ".join(str(int(v)) for v in self)


class AllowReply(NamedTuple):
    """Answer of ``breaker_allow``.

    ``code`` is ADMIT (closed), PROBE (a half-open slot was leased: ``slot``, ``token``),
    REJECT_OPEN (``open_until_us``, -1 when forced open) or REJECT_HALF_OPEN (all slots
    taken) or HOLD (strict admission: the failure streak and the calls in flight already
    reach the threshold; ask again later). A strict admission carries a ``token`` that its
    result gives back. ``moved`` is True when this very call turned an expired OPEN into
    HALF_OPEN.
    """

    code: int
    generation: int
    slot: int
    token: str
    open_until_us: int
    moved: bool


class RecordReply(NamedTuple):
    """Answer of ``breaker_record``.

    ``code``: STALE (nothing counted: the generation is no longer current, or a probe's
    lease no longer holds its token because it expired), APPLIED (counted, no
    transition), OPENED (closed -> open), CLOSED (half-open -> closed), REOPENED (half-open ->
    open). For a transition, ``a``/``b`` explain it: the failure streak, or failures/total of
    the window, or the half-open successes (0 for APPLIED and STALE); a negative ``a`` says
    the slow-call rate opened it: ``-a`` slow calls of ``b``. ``open_until_us`` is
    set when the breaker (re)opened.
    """

    code: int
    generation: int
    a: int
    b: int
    open_until_us: int


class Store(Protocol):
    """What :class:`Breaker`, :class:`FakeDependency` and :class:`RetryBudget` need.

    A store may also offer ``breaker_door() -> AllowReply | None``: the admit reply when the
    breaker is closed, answered without the clock or a round trip (MemoryStore does; the
    Breaker uses it as a fast path when present).
    """

    probe_lease_ms: int

    def breaker_allow(self, spec: BreakerSpec, now_us: int) -> AllowReply:
        """Admission decision, atomically (one round trip)."""
        ...

    def breaker_allow_step(
        self, spec: BreakerSpec, now_us: int, fail_left: int
    ) -> tuple[AllowReply, tuple[int, int, int] | None]:
        """``breaker_allow``, then, when it admits the call (ADMIT or PROBE), the admitted
        call's first attempt reaching the dependency (``dependency_step(fail_left, now_us)``);
        None for the step when the call is not admitted. On Redis both are one atomic round
        trip."""
        ...

    def breaker_check_step(
        self, spec: BreakerSpec, now_us: int, fail_left: int
    ) -> tuple[str, tuple[int, int, int] | None]:
        """The breaker's state as read at ``now_us`` (:func:`effective_state`) and, only when
        it reads ``closed``, ``dependency_step(fail_left, now_us)`` (else None): a retry that
        the breaker still lets through reaches the dependency. On Redis one round trip."""
        ...

    def breaker_record(
        self,
        spec: BreakerSpec,
        generation: int,
        slot: int,
        token: str,
        outcome: str,
        now_us: int,
        cooldown_us: int,
        *,
        wait: bool = True,
    ) -> RecordReply | None:
        """Count a result (outcome ``s``, ``f`` or ``i``) and release its probe lease.

        ``wait=False``: the caller will not read the reply; a store whose client can send
        the operation without waiting for it (the engine hub's) does, and returns None. The
        operation itself is the same, in the same order among the caller's operations."""
        ...

    def breaker_force(self, action: str, now_us: int) -> tuple[str, int, bool]:
        """``open`` / ``closed`` (forced until reset) or ``reset``; returns (state before,
        generation, changed). Forcing the state already forced changes nothing (changed is
        False, the generation stays)."""
        ...

    def breaker_read(self, spec: BreakerSpec, now_us: int) -> dict[str, Any]:
        """The stored breaker fields plus ``probes_in_flight`` (no transition is made)."""
        ...

    def dependency_arm(self, fail_left: int, now_us: int) -> None:
        """Fresh dependency state: flaky counter, start time (outage, rate limit), attempts 0.
        A start time below 0 means "at the first attempt": :meth:`dependency_step` then
        records that attempt's time as the start."""
        ...

    def dependency_step(self, fail_left: int, now_us: int) -> tuple[int, int, int]:
        """One attempt reaches the dependency: returns (flaky counter before this attempt,
        armed-at time, attempts before this one) and consumes one flaky failure. Arms lazily
        with ``fail_left`` and ``now_us`` when there is no state; an armed-at below 0 becomes
        ``now_us`` (the window of a rate limit starts at its first attempt)."""
        ...

    def budget_deposit(self, ratio_micro: int, max_micro: int, *, wait: bool = True) -> int | None:
        """Add ``ratio_micro`` micro-tokens (the bucket starts full); returns the balance
        (None with ``wait=False`` where the store sends it without waiting, as
        ``breaker_record``)."""
        ...

    def budget_withdraw(self, max_micro: int) -> tuple[bool, int]:
        """Take one whole token if there is one; returns (taken, balance)."""
        ...

    def budget_throttle(self, op: str, ratio_milli: int, max_milli: int) -> tuple[bool, int]:
        """gRPC retry throttling in milli-tokens (the bucket starts full at ``max_milli``):
        ``success`` adds ``ratio_milli`` up to the ceiling, ``failure`` takes 1000 down to 0.
        Returns (retries allowed: ``2 x tokens > max``, tokens)."""
        ...

    def budget_window(
        self, op: str, now_us: int, slice_us: int, reserve: int, amount: int
    ) -> tuple[bool, int]:
        """Finagle's retry budget: a sum over the last 10 slices of ``slice_us`` plus
        ``reserve``; ``deposit`` adds ``amount`` to the current slice, ``withdraw`` takes it
        if the sum holds it. Returns (taken, sum after)."""
        ...

    def scoped(self, name: str) -> Store:
        """The store of a part of this one (a host ``h0`` .. ``h7``, dependency ``b``): its
        own breaker, dependency, cache and effect state."""
        ...

    def fallback_note(self, now_us: int) -> None:
        """A success happened at ``now_us``: the cached fallback answer is this fresh."""
        ...

    def fallback_last(self) -> int | None:
        """The time of the last success, or None when there is none."""
        ...

    def effect_once(self, key: str) -> bool:
        """Record an idempotency key's effect: True the first time, False ever after."""
        ...

    def export_state(self) -> dict[str, Any]:
        """Everything needed to rebuild the state elsewhere, JSON-serialisable (the
        dependency-wide state: scopes, the cache and the effect keys are not part of it)."""
        ...

    def import_state(self, state: dict[str, Any]) -> None:
        """Replace the state with an exported one (probe leases are not restored)."""
        ...

    def has_state(self) -> bool:
        """Whether any breaker, dependency or budget state exists."""
        ...

    def clear(self) -> None:
        """Delete all state."""
        ...


def effective_state(fields: dict[str, Any], now_us: int, strict_edge: bool = False) -> str:
    """The state as read at ``now_us``: an OPEN whose cooldown has elapsed reads HALF_OPEN.

    The cooldown edge is inclusive by default: at exactly ``open_until`` the breaker is
    half-open; with ``strict_edge`` only once ``now_us > open_until``.
    """
    forced = fields.get("forced") or ""
    if forced:
        return str(forced)
    state = fields.get("state") or "closed"
    until = int(fields.get("open_until") or 0)
    if state == "open" and (now_us > until if strict_edge else now_us >= until):
        return "half_open"
    return str(state)


def scaled_cooldown_us(spec: BreakerSpec, cooldown_us: int, openings: int) -> int:
    """The cooldown of an opening that follows ``openings`` consecutive ones (0 for the first
    since the breaker last closed): ``min(max, cooldown x multiplier^openings)``, in integer
    microseconds, each multiplication floored, so both stores agree exactly."""
    mult, ceiling = spec.cooldown_mult_milli, spec.cooldown_max_us
    if mult != 1000:
        for _ in range(openings):
            cooldown_us = cooldown_us * mult // 1000
            if ceiling and cooldown_us >= ceiling:
                break
    return min(cooldown_us, ceiling) if ceiling else cooldown_us


# -- the exported state document (same for every store) ---------------------------------------

_DOC_BREAKER = {
    "state": "state",
    "generation": "gen",
    "failure_streak": "streak",
    "opened_at_us": "opened_at",
    "open_until_us": "open_until",
    "half_open_successes": "ho_succ",
    "window_successes": "win_s",
    "window_failures": "win_f",
    "forced": "forced",
    "openings": "opens",
    "half_open_admitted": "ho_adm",
    "half_open_failures": "ho_fail",
}
_DOC_DEPENDENCY = {"fail_left": "fail_left", "armed_at_us": "started", "attempts": "attempts"}
_TEXT_FIELDS = ("state", "forced")


def to_doc(
    breaker: dict[str, Any] | None,
    buckets: dict[str, list[int]],
    calls: list[str],
    dependency: dict[str, int] | None,
    budget_micro: int | None,
    peer_budget: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build the export document from a store's raw fields."""
    return {
        "version": 1,
        "breaker": None
        if not breaker
        else {
            doc: (
                str(breaker.get(raw) or "") if raw in _TEXT_FIELDS else int(breaker.get(raw) or 0)
            )
            for doc, raw in _DOC_BREAKER.items()
        },
        "window": {
            "buckets": {
                k: list(v[:3]) if len(v) > 2 and v[2] else list(v[:2]) for k, v in buckets.items()
            },
            "calls": calls,
        },
        **_slow_doc(breaker),
        "dependency": None
        if dependency is None
        else {doc: int(dependency.get(raw) or 0) for doc, raw in _DOC_DEPENDENCY.items()},
        "budget": None if budget_micro is None else {"tokens_micro": int(budget_micro)},
        "peer_budget": peer_budget or None,
    }


#: Slow-call counters (``slow_call_ms``): in the document only when not zero, so a breaker
#: that does not count slow calls exports what it always did.
_DOC_SLOW = {"window_slow": "win_w", "half_open_slow": "ho_slow"}
#: gobreaker's Counts and the closed state's interval end, likewise only when not zero.
_DOC_COUNTS = {
    "requests": "c_req",
    "total_successes": "c_ts",
    "total_failures": "c_tf",
    "consecutive_successes": "c_cs",
    "consecutive_failures": "c_cf",
    "interval_ends_us": "c_exp",
}


def _slow_doc(breaker: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for section, names in (("slow", _DOC_SLOW), ("counts", _DOC_COUNTS)):
        values = {d: int(breaker.get(raw) or 0) for d, raw in names.items()} if breaker else {}
        values = {k: v for k, v in values.items() if v}
        if values:
            out[section] = values
    return out


#: Finagle's budget sums the last this many slices of its time-to-live.
WINDOW_SLICES = 10


def peer_budget_doc(throttle_milli: int | None, slices: dict[int, int]) -> dict[str, Any] | None:
    """The ``peer_budget`` part of the export document (gRPC and Finagle budgets)."""
    if throttle_milli is None and not slices:
        return None
    return {
        "throttle_milli": throttle_milli,
        "slices": {str(k): int(v) for k, v in sorted(slices.items())},
    }


def peer_budget_from_doc(doc: dict[str, Any]) -> tuple[int | None, dict[int, int]]:
    """(gRPC milli-tokens or None, Finagle slices) from an export document."""
    peer = doc.get("peer_budget") or {}
    throttle = peer.get("throttle_milli")
    slices = {int(k): int(v) for k, v in (peer.get("slices") or {}).items()}
    return (None if throttle is None else int(throttle)), slices


def from_doc(
    doc: dict[str, Any],
) -> tuple[
    dict[str, Any] | None, dict[str, list[int]], list[str], dict[str, int] | None, int | None
]:
    """Split an export document into a store's raw fields. Raises ValueError if malformed."""
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise ValueError("not an engine state document (version 1)")
    breaker = doc.get("breaker")
    raw_breaker = None
    if breaker:
        raw_breaker = {
            raw: (
                str(breaker.get(d) or ("closed" if raw == "state" else ""))
                if raw in _TEXT_FIELDS
                else int(breaker.get(d) or 0)
            )
            for d, raw in _DOC_BREAKER.items()
        }
        slow = doc.get("slow") or {}
        raw_breaker.update({raw: int(slow.get(d) or 0) for d, raw in _DOC_SLOW.items()})
        counts = doc.get("counts") or {}
        raw_breaker.update({raw: int(counts.get(d) or 0) for d, raw in _DOC_COUNTS.items()})
    window = doc.get("window") or {}
    # a bucket is [successes, failures], or [successes, failures, slow] when it has slow calls
    buckets = {
        str(k): [int(v[0]), int(v[1]), int(v[2]) if len(v) > 2 else 0]
        for k, v in (window.get("buckets") or {}).items()
    }
    calls = [str(c) for c in window.get("calls") or []]
    dependency = doc.get("dependency")
    raw_dep = None
    if dependency:
        raw_dep = {raw: int(dependency.get(d) or 0) for d, raw in _DOC_DEPENDENCY.items()}
    budget = doc.get("budget")
    return raw_breaker, buckets, calls, raw_dep, None if not budget else int(budget["tokens_micro"])
