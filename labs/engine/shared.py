"""The shared dependency: one server model with finite capacity that many clients call at once.

Every attempt is one exact decision (shed, skipped, ok, error, timeout) on the servers'
free-at times, the class's and the session's per-second counters written in the same atomic
step, so every page counts an attempt once. Two implementations answer reply for reply alike:
:class:`MemorySharedModel` (a lock) and :class:`~labs.engine.redis.shared.RedisSharedModel`
(one Lua script per attempt); :class:`SharedDependency` puts either behind the guarded
client. docs/engine.md, "The shared dependency", gives the model, triggers and counters."""

from __future__ import annotations

import bisect
import heapq
import math
import operator
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from labs.engine.clock import Clock
from labs.engine.config import LIMITS
from labs.engine.dependency import AttemptResult

__all__ = [
    "OUTCOMES",
    "SECOND_FIELDS",
    "SESSION_FIELDS",
    "SESSION_KEEP_S",
    "TRIGGER_KINDS",
    "WAIT_BOUNDS_MS",
    "Decision",
    "MemorySharedModel",
    "Second",
    "SharedConfig",
    "SharedDependency",
    "SharedModel",
    "Trigger",
    "private_server",
    "seconds_from_fields",
    "session_seconds_from_fields",
    "wait_bucket",
    "wait_quantile_ms",
]

MAX_SERVERS = 64
TRIGGER_KINDS = tuple(LIMITS["shared.trigger.kind"].choices)
#: What the client sees: ``ok``; ``error`` (503 after service, down trigger); ``shed`` (503 at
#: once: the queue wait too long, or one of the server's defences, :data:`SHED_REASONS`);
#: ``skipped`` (503 at once, could not start before the deadline); ``limited`` (429 at once
#: with a Retry-After, the server's rate limit); ``timeout`` (the client stopped waiting
#: after its attempt timeout).
OUTCOMES = ("ok", "error", "shed", "skipped", "limited", "timeout")
#: Why an attempt was shed: its queue wait over ``max_queue_ms``, the queue at
#: ``queue_limit``, the server at ``concurrency_limit``, or CoDel.
SHED_REASONS = ("queue_wait", "queue_full", "concurrency", "codel")
#: The server's defences a :class:`SharedConfig` may add (each off by default).
DEFENCES = (
    "rate_per_s", "rate_burst", "queue_limit", "concurrency_limit", "concurrency",
    "concurrency_max", "limit_latency_ms", "codel_target_ms", "codel_interval_ms",
    "discipline", "lifo_after_ms",
)  # fmt: skip
#: Which waiting attempt a freed server takes: the oldest (``fifo``), the newest (``lifo``),
#: or the oldest until the oldest has waited longer than ``lifo_after_ms``, then the newest
#: (``adaptive_lifo``, as Facebook's servers do).
DISCIPLINES = tuple(LIMITS["shared.discipline"].choices)
#: How many servers' turns ahead a waiting attempt's next look is computed (a lower bound of
#: when a server could take it; more turns ahead only push the bound later).
LOOKAHEAD = 64
#: The longest a waiting attempt goes without looking again (bounds how late it hears of a
#: change the bound cannot foresee: a trigger cleared early, servers added).
POLL_MAX_US = 1_000_000
#: How a concurrency limit moves: ``fixed``; ``aimd`` (an answer slower than
#: ``limit_latency_ms``, or a failure, cuts it to 0.9x; + 1 while half of it is in use);
#: ``gradient`` (toward limit x fastest / this latency + sqrt(limit), as Netflix's
#: concurrency-limits moves it).
CONCURRENCY = tuple(LIMITS["shared.concurrency"].choices)
#: Upper bounds (inclusive, ms) of the queue-wait histogram's buckets; a wait is at most
#: ``max_queue_ms`` <= 10000, so the last bound holds every served attempt.
WAIT_BOUNDS_MS = (
    0, 1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700,
    1000, 1500, 2000, 3000, 5000, 7000, 10000,
)  # fmt: skip
_WAIT_BOUNDS_US = tuple(b * 1000 for b in WAIT_BOUNDS_MS)
#: The per-second counters, in the order :class:`Second` lists them.
SECOND_FIELDS = (
    "offered",
    "ok",
    "error",
    "shed",
    "skipped",
    "limited",
    "timeout",
    "wasted_us",
    "calls",
    "calls_ok",
    "retries",
)

#: The per-session counters of a second (beside ``state``, the breaker state seen in it).
SESSION_FIELDS = (
    "offered", "calls", "retries", "ok", "error", "shed", "skipped", "limited", "timeout",
    "fast",
)  # fmt: skip
#: Seconds of a session's counters kept behind its newest arrival (the lab page's strip
#: chart shows the last minute; the panel's table the last few seconds).
SESSION_KEEP_S = 120
#: The breaker states a session's second records.
BREAKER_STATES = ("closed", "half_open", "open")


def wait_bucket(wait_us: int) -> int:
    """Index of the histogram bucket holding a queue wait of ``wait_us`` microseconds."""
    for i, bound in enumerate(_WAIT_BOUNDS_US):
        if wait_us <= bound:
            return i
    return len(_WAIT_BOUNDS_US) - 1


def wait_quantile_ms(histogram: Iterable[int], q: float) -> float | None:
    """The ``q`` quantile (0 < q <= 1) of a wait histogram, as its bucket's upper bound in ms:
    the smallest bound with at least ``ceil(q x n)`` waits at or below it. None when empty."""
    counts = list(histogram)
    total = sum(counts)
    if not total:
        return None
    need = -(-q * total // 1)  # ceil without float surprises for q x n integral
    seen = 0
    for bound, count in zip(WAIT_BOUNDS_MS, counts, strict=False):
        seen += count
        if seen >= need:
            return float(bound)
    return float(WAIT_BOUNDS_MS[-1])


@dataclass(frozen=True)
class SharedConfig:
    """The server model: ``servers`` serving one attempt at a time, ``service_ms`` per attempt,
    and the longest queue wait accepted (``max_queue_ms``; longer is shed at once).

    The server may defend itself (:data:`DEFENCES`, each off by default), every defence
    decided at the attempt's arrival so that one atomic step still decides an attempt:

    - ``rate_per_s`` / ``rate_burst``: a token bucket; an attempt finding it empty is answered
      429 at once (``limited``) with a Retry-After of the time until the next token;
    - ``queue_limit``: an attempt that would wait while that many already wait is shed;
    - ``concurrency_limit``: an attempt arriving while that many are in the server (waiting
      or being served) is shed; with ``concurrency`` ``aimd`` or ``gradient`` it is where an
      adaptive limit starts (:data:`CONCURRENCY`, up to ``concurrency_max``), moved by every
      attempt that has finished by the next arrival, in the order they finished;
    - ``codel_target_ms`` / ``codel_interval_ms``: once every wait has been over the target
      for an interval, an attempt that would wait longer than the target is shed; a wait at
      or under it ends the congestion (CoDel, on the wait the attempt will have);
    - ``discipline`` (:data:`DISCIPLINES`) with ``lifo_after_ms``: which waiting attempt a
      freed server takes. Any but ``fifo`` keeps the waiting attempts in an explicit queue
      decided as servers free (see :meth:`MemorySharedModel.poll`); it works with the rate
      limit, the queue limit and the longest wait (dropped when a server reaches it), not
      with CoDel or a concurrency limit, which decide on the wait known at arrival.

    Capacity is ``servers x 1000 / service_ms`` attempts per second (8 x 1000 / 40 = 200/s
    with the defaults, which 30 clients at 5 calls/s load to 75 %). Use
    :func:`labs.engine.validate.parse_shared` for the lab's ranges; direct construction checks
    only structural sanity.
    """

    servers: int = LIMITS["shared.servers"].default
    service_ms: int = LIMITS["shared.service_ms"].default
    max_queue_ms: int = LIMITS["shared.max_queue_ms"].default
    rate_per_s: float | None = None
    rate_burst: int = LIMITS["shared.rate_burst"].default
    queue_limit: int | None = None
    concurrency_limit: int | None = None
    concurrency: str = LIMITS["shared.concurrency"].default
    concurrency_max: int = LIMITS["shared.concurrency_max"].default
    limit_latency_ms: int = LIMITS["shared.limit_latency_ms"].default
    codel_target_ms: int | None = None
    codel_interval_ms: int = LIMITS["shared.codel_interval_ms"].default
    discipline: str = LIMITS["shared.discipline"].default
    lifo_after_ms: int = LIMITS["shared.lifo_after_ms"].default

    def __post_init__(self) -> None:
        if not 1 <= self.servers <= MAX_SERVERS:
            raise ValueError(f"servers must be between 1 and {MAX_SERVERS}")
        if self.service_ms <= 0 or self.max_queue_ms < 0:
            raise ValueError("service_ms must be > 0 and max_queue_ms >= 0")
        positive = (self.rate_per_s, self.queue_limit, self.concurrency_limit,
                    self.codel_target_ms, self.rate_burst, self.codel_interval_ms,
                    self.concurrency_max, self.limit_latency_ms)  # fmt: skip
        if any(x is not None and x <= 0 for x in positive):
            raise ValueError("the server's defences must be > 0 (or None: off)")
        if self.concurrency not in CONCURRENCY:
            raise ValueError(f"concurrency must be one of {', '.join(CONCURRENCY)}")
        if self.discipline not in DISCIPLINES or self.lifo_after_ms <= 0:
            raise ValueError(f"discipline must be one of {', '.join(DISCIPLINES)}")

    @property
    def queues(self) -> bool:
        """Whether waiting attempts are held in an explicit queue (any discipline but FIFO)."""
        return self.discipline != "fifo"

    @property
    def adaptive(self) -> bool:
        """Whether the concurrency limit moves as attempts finish."""
        return self.concurrency != "fixed" and self.concurrency_limit is not None

    @property
    def defended(self) -> bool:
        """Whether any of the server's defences is on."""
        return (
            self.rate_per_s is not None
            or self.queue_limit is not None
            or self.concurrency_limit is not None
            or self.codel_target_ms is not None
            or self.queues
        )

    @property
    def counts_in_flight(self) -> bool:
        """Whether a decision needs how many attempts wait or are in the server."""
        return self.queue_limit is not None or self.concurrency_limit is not None

    @property
    def capacity_per_s(self) -> float:
        """Attempts per second the servers complete when always busy."""
        return self.servers * 1000 / self.service_ms

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON form."""
        return {
            "servers": self.servers,
            "service_ms": self.service_ms,
            "max_queue_ms": self.max_queue_ms,
            **{name: getattr(self, name) for name in DEFENCES},
        }


@dataclass(frozen=True)
class Trigger:
    """A trigger an instructor fires for ``duration_ms``: ``down``, ``slow`` (service x
    ``factor``) or ``capacity`` (``servers`` in service). Build it with
    :func:`labs.engine.validate.parse_trigger` to check the lab's ranges."""

    kind: Literal["down", "slow", "capacity"]
    duration_ms: int
    factor: float = 2.0
    servers: int = 0

    def __post_init__(self) -> None:
        if self.kind not in TRIGGER_KINDS:
            raise ValueError(f"unknown trigger kind {self.kind!r}")
        if self.duration_ms <= 0 or self.factor < 1 or self.servers < 0:
            raise ValueError("duration_ms must be > 0, factor >= 1, servers >= 0")

    @property
    def factor_pct(self) -> int:
        """The slow factor in hundredths (the form both implementations compute with)."""
        return round(self.factor * 100)

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON form."""
        return {
            "kind": self.kind,
            "duration_ms": self.duration_ms,
            "factor": self.factor,
            "servers": self.servers,
        }


@dataclass(frozen=True, slots=True)
class Decision:
    """The model's reply to one attempt (times are integer microseconds, model time base).

    ``outcome`` is one of :data:`OUTCOMES`; the client learns it at ``answer_us`` (its
    latency is ``answer_us - arrival_us``). ``server`` (0-based) is -1 and ``start_us`` /
    ``finish_us`` are 0 when the attempt took no server (shed, skipped, limited);
    ``wait_us`` is the queue wait it had (or would have had; 0 when limited). ``reason``
    says why a shed attempt was shed (:data:`SHED_REASONS`, else ""); ``retry_after_us`` is
    a 429's Retry-After.

    With a queueing discipline an attempt that has to wait gets ``outcome`` ``waiting``, its
    ``ticket`` and, as ``answer_us``, the earliest instant anything can change for it: the
    caller asks :meth:`MemorySharedModel.poll` again then.
    """

    outcome: str
    arrival_us: int
    answer_us: int
    start_us: int
    finish_us: int
    server: int
    wait_us: int
    service_us: int
    second_offered: int
    reason: str = ""
    retry_after_us: int = 0
    ticket: int = 0

    @property
    def latency_ms(self) -> float:
        """How long the client waits for the answer."""
        return (self.answer_us - self.arrival_us) / 1000

    def to_dict(self) -> dict[str, Any]:
        """JSON form (journal data); ``reason`` and ``retry_after_us`` only when set."""
        data = {
            "outcome": self.outcome,
            "arrival_us": self.arrival_us,
            "answer_us": self.answer_us,
            "start_us": self.start_us,
            "finish_us": self.finish_us,
            "server": self.server,
            "wait_us": self.wait_us,
            "service_us": self.service_us,
            "second_offered": self.second_offered,
        }
        if self.reason:
            data["reason"] = self.reason
        if self.retry_after_us:
            data["retry_after_us"] = self.retry_after_us
        return data


@dataclass(frozen=True)
class Second:
    """The counters of one second (see the module docstring for which second counts what)."""

    second: int
    offered: int = 0
    ok: int = 0
    error: int = 0
    shed: int = 0
    skipped: int = 0
    limited: int = 0
    timeout: int = 0
    wasted_us: int = 0
    calls: int = 0
    calls_ok: int = 0
    retries: int = 0
    waits: tuple[int, ...] = field(default=(0,) * len(WAIT_BOUNDS_MS))

    @property
    def wasted_ms(self) -> float:
        """Server time spent on attempts nobody received."""
        return self.wasted_us / 1000

    @property
    def wait_p50_ms(self) -> float | None:
        """Median queue wait of the attempts served that arrived in this second."""
        return wait_quantile_ms(self.waits, 0.5)

    @property
    def wait_p99_ms(self) -> float | None:
        """99th percentile queue wait (bucket upper bound)."""
        return wait_quantile_ms(self.waits, 0.99)

    def to_dict(self) -> dict[str, Any]:
        """JSON form, with the two wait quantiles."""
        data = {name: getattr(self, name) for name in ("second", *SECOND_FIELDS)}
        data["waits"] = list(self.waits)
        data["wait_p50_ms"] = self.wait_p50_ms
        data["wait_p99_ms"] = self.wait_p99_ms
        return data


def seconds_from_fields(fields: Mapping[Any, Any]) -> list[Second]:
    """Per-second counters from the flat ``"<second>:<name>" -> count`` mapping both
    implementations keep (Redis hash fields; bytes or str), sorted by second."""
    table: dict[int, dict[str, Any]] = {}
    for key, value in fields.items():
        text = key.decode() if isinstance(key, bytes) else str(key)
        sec, _, name = text.partition(":")
        row = table.setdefault(int(sec), {"waits": [0] * len(WAIT_BOUNDS_MS)})
        count = int(value)
        if name.startswith("q"):
            row["waits"][int(name[1:])] = count
        else:
            row[name] = count
    out = []
    for sec in sorted(table):
        row = table[sec]
        row["waits"] = tuple(row["waits"])
        out.append(Second(second=sec, **row))
    return out


def session_seconds_from_fields(
    fields: Mapping[Any, Any], first: int, last: int
) -> list[dict[str, Any]]:
    """One session's rows for every second from ``first`` to ``last`` (inclusive; zero rows
    for quiet seconds, ``state`` None) from its ``"<second>:<name>"`` fields (bytes or str)."""
    rows = {
        sec: {"second": sec, **dict.fromkeys(SESSION_FIELDS, 0), "state": None}
        for sec in range(first, last + 1)
    }
    for key, value in fields.items():
        if value is None:
            continue
        text = key.decode() if isinstance(key, bytes) else str(key)
        sec, _, name = text.partition(":")
        if not sec.isdigit() or int(sec) not in rows:
            continue
        row = rows[int(sec)]
        raw = value.decode() if isinstance(value, bytes) else value
        if name == "state":
            row["state"] = str(raw)
        elif name in row:
            row[name] = int(raw)
    return [rows[sec] for sec in range(first, last + 1)]


def session_field_names(first: int, last: int) -> list[str]:
    """The hash fields of a session's seconds ``first`` to ``last`` (what a reader asks for)."""
    return [
        f"{sec}:{name}" for sec in range(first, last + 1) for name in (*SESSION_FIELDS, "state")
    ]


class SharedModel(Protocol):
    """What :class:`SharedDependency` needs from a model (both implementations provide it).

    ``now_us`` None means the model's own clock (the memory model's clock, Redis's ``TIME``);
    ``timeout_us`` / ``deadline_us`` are *relative to the arrival* (None: none), so callers
    whose clocks disagree still get consistent answers.
    """

    def decide(
        self,
        now_us: int | None = None,
        *,
        timeout_us: int | None = None,
        deadline_us: int | None = None,
        attempt: int = 1,
        session: str | None = None,
        state: str = "closed",
    ) -> Decision: ...

    def refuse(self, now_us: int | None = None, *, session: str, state: str = "open") -> None: ...

    def poll(self, ticket: int, now_us: int | None = None) -> Decision: ...


def _sec(t_us: int) -> int:
    return t_us // 1_000_000


@dataclass(slots=True, eq=False)
class _Waiter:
    """An attempt waiting in the explicit queue (times in us, ``timeout`` and ``deadline``
    relative to ``arrival`` as :meth:`MemorySharedModel.decide` takes them). Each is itself:
    two waiters are never equal, so finding one in the queue compares identities."""

    ticket: int
    arrival: int
    timeout: int | None
    deadline: int | None
    session: str | None
    offered: int
    given_up: bool = False

    @property
    def give_up_at(self) -> int | None:
        """When the caller stops waiting: its propagated deadline, else its timeout."""
        if self.deadline is not None:
            return self.arrival + self.deadline
        return None if self.timeout is None else self.arrival + self.timeout


_ticket_of = operator.attrgetter("ticket")


class MemorySharedModel:
    """The model in one process: a lock around the decision and the counters.

    ``clock`` (virtual or system) stamps arrivals when ``decide`` gets no ``now_us``. The
    :class:`~labs.engine.redis.shared.RedisSharedModel` mirrors this code line for line
    in Lua; a differential test compares every reply.
    """

    def __init__(
        self,
        config: SharedConfig | None = None,
        *,
        clock: Clock | None = None,
        keep_s: int = SESSION_KEEP_S,
    ) -> None:
        self.clock = clock
        self.keep_s = keep_s
        self._sessions: dict[str, Counter[str]] = {}
        self._session_state: dict[str, dict[int, str]] = {}
        self._session_last: dict[str, int] = {}
        self._lock = threading.Lock()
        self._config = config or SharedConfig()
        self._free = [0] * MAX_SERVERS
        self._held: dict[int, int] = {}
        self._trigger: tuple[str, int, int, int, int] | None = None  # kind, from, until, pct, c'
        self._last = 0
        self._fields: Counter[str] = Counter()
        self._waiting: list[_Waiter] = []  # the explicit queue, in arrival order
        self._tickets: dict[int, _Waiter] = {}  # waiting attempts a caller still waits for
        self._done: dict[int, Decision] = {}  # decided, not yet heard by their caller
        self._ticket = 0
        self._defences_reset()

    def _defences_reset(self) -> None:
        self._tokens: float | None = None  # the token bucket (None: full)
        self._tokens_at = 0
        self._starts: list[int] = []  # accepted attempts' start times (a heap)
        #: and their finish times, with their number, latency and failure (a heap)
        self._finishes: list[tuple[int, int, int, bool]] = []
        self._seq = 0
        self._codel_since = -1  # since when every wait was over the target (-1: not)
        self._adaptation_reset()

    def _adaptation_reset(self) -> None:
        self._limit: float | None = None  # an adaptive concurrency limit (None: its start)
        self._fastest: int | None = None  # the gradient's fastest latency seen

    # -- settings ----------------------------------------------------------------------------

    @property
    def config(self) -> SharedConfig:
        """The configuration in force."""
        return self._config

    def configure(self, config: SharedConfig) -> None:
        """Change servers, service time, queue limit and the defences; queued work keeps
        its schedule, an adaptive concurrency limit starts again."""
        with self._lock:
            self._config = config
            self._adaptation_reset()

    def _now(self, now_us: int | None) -> int:
        if now_us is not None:
            return int(now_us)
        if self.clock is None:
            raise ValueError("now_us is required for a model without a clock")
        return int(self.clock.now() * 1e6 + 0.5)

    def trigger(self, trigger: Trigger, now_us: int | None = None) -> dict[str, Any] | None:
        """Fire ``trigger`` from now for its duration, replacing any trigger still running.

        Returns the replaced trigger (``kind``, ``from_us``, ``until_us``) or None.
        """
        with self._lock:
            t = max(self._now(now_us), self._last)
            replaced = self._end_trigger(t)
            until = t + trigger.duration_ms * 1000
            servers = min(trigger.servers, self._config.servers)
            self._trigger = (trigger.kind, t, until, trigger.factor_pct, servers)
            if trigger.kind == "capacity":
                for i in range(servers, self._config.servers):
                    self._held[i] = self._free[i]
                    self._free[i] = max(self._free[i], until)
            return replaced

    def clear_trigger(self, now_us: int | None = None) -> dict[str, Any] | None:
        """End the running trigger now; returns it (as :meth:`trigger` does) or None."""
        with self._lock:
            return self._end_trigger(max(self._now(now_us), self._last))

    def _end_trigger(self, t: int) -> dict[str, Any] | None:
        running = self._trigger
        self._trigger = None
        if running is None:
            self._held.clear()
            return None
        kind, start, until, _, _ = running
        if kind == "capacity" and t < until:
            for i, before in self._held.items():
                if self._free[i] == until:  # took no work while held: free it again
                    self._free[i] = max(before, t)
        self._held.clear()
        if t >= until:
            return None
        return {"kind": kind, "from_us": start, "until_us": until}

    # -- the decision ------------------------------------------------------------------------

    def _service(self, t: int) -> tuple[int, bool]:
        """The service time (us) of an attempt arriving at ``t`` and whether the servers are
        down then: a ``slow`` trigger stretches it, a ``down`` trigger fails it."""
        service = self._config.service_ms * 1000
        trig = self._trigger
        if trig is not None and trig[1] <= t < trig[2]:
            if trig[0] == "down":
                return service, True
            if trig[0] == "slow":
                service = service * trig[3] // 100
        return service, False

    def decide(
        self,
        now_us: int | None = None,
        *,
        timeout_us: int | None = None,
        deadline_us: int | None = None,
        attempt: int = 1,
        session: str | None = None,
        state: str = "closed",
    ) -> Decision:
        """Decide one attempt and count it, for the class and for ``session`` when given
        (atomic). See the module docstring for the rules."""
        with self._lock:
            cfg = self._config
            t = max(self._now(now_us), self._last)
            self._last = t
            mine = self._session_second(session, _sec(t), state)
            service, down = self._service(t)
            free = self._free
            counts = self._fields
            sec = _sec(t)
            offered = self._offer(sec, attempt, mine)
            after = self._take_token(cfg, t) if cfg.rate_per_s is not None else 0
            if after:  # answered 429 at once
                for table in (counts, mine):
                    table[f"{sec}:limited"] += 1
                return Decision("limited", t, t, 0, 0, -1, 0, service, offered, "", after)
            if cfg.queues or self._waiting:
                self._settle(cfg, t)
                if self._waiting or min(free[: cfg.servers]) > t:
                    waiter = _Waiter(0, t, timeout_us, deadline_us, session, offered)
                    return self._enqueue(cfg, waiter, service, mine)
            best = min(range(cfg.servers), key=free.__getitem__)  # the first free server
            start = max(t, free[best])
            wait = start - t
            shed = self._shed_reason(cfg, t, wait)
            late = deadline_us is not None and start >= t + deadline_us
            if shed or late:  # answered at once, no server taken
                outcome = "shed" if shed else "skipped"
                for table in (counts, mine):
                    table[f"{sec}:{outcome}"] += 1
                return Decision(outcome, t, t, 0, 0, -1, wait, service, offered, shed)
            return self._begin(cfg, t, best, start, service, down, timeout_us, offered, mine)

    def _begin(self, cfg, t, best, start, service, down, timeout_us, offered, mine) -> Decision:
        """Server ``best`` takes the attempt arriving at ``t`` at ``start``: its outcome."""
        counts, free, wait = self._fields, self._free, start - t
        finish = start + service
        free[best] = finish
        if cfg.counts_in_flight:
            given_up = timeout_us is not None and finish - t > timeout_us
            self._admit(start, finish, t, down or given_up)
        counts[f"{_sec(t)}:q{wait_bucket(wait)}"] += 1
        if timeout_us is not None and finish - t > timeout_us:
            answer = t + timeout_us
            counts[f"{_sec(answer)}:timeout"] += 1
            mine[f"{_sec(answer)}:timeout"] += 1
            counts[f"{_sec(finish)}:wasted_us"] += service
            return Decision("timeout", t, answer, start, finish, best, wait, service, offered)
        if down:
            counts[f"{_sec(finish)}:error"] += 1
            mine[f"{_sec(finish)}:error"] += 1
            return Decision("error", t, finish, start, finish, best, wait, service, offered)
        counts[f"{_sec(finish)}:ok"] += 1
        counts[f"{_sec(finish)}:calls_ok"] += 1
        mine[f"{_sec(finish)}:ok"] += 1
        return Decision("ok", t, finish, start, finish, best, wait, service, offered)

    def _offer(self, sec: int, attempt: int, mine: Counter[str]) -> int:
        """Count an arrival in ``sec`` (a call or a retry); the second's offered count."""
        kind = f"{sec}:calls" if attempt <= 1 else f"{sec}:retries"
        for table in (self._fields, mine):
            table[f"{sec}:offered"] += 1
            table[kind] += 1
        return self._fields[f"{sec}:offered"]

    # -- the explicit queue (any discipline but FIFO) ----------------------------------------

    def poll(self, ticket: int, now_us: int | None = None) -> Decision:
        """What became of waiting attempt ``ticket`` by now: its decision (counted as
        :meth:`decide` counts, in its answer's second) once a server took it, dropped it or
        its caller gave up; else ``waiting`` with the next instant to ask again. Every call
        first lets each server freed by now take the attempt the discipline picks."""
        with self._lock:
            cfg = self._config
            t = max(self._now(now_us), self._last)
            self._last = t
            self._settle(cfg, t)
            done = self._done.pop(ticket, None)
            if done is not None:
                return done
            waiter = self._tickets.get(ticket)
            if waiter is None:  # the model was reset under it
                return Decision("error", t, t, 0, 0, -1, 0, 0, 0, "reset")
            give_up = waiter.give_up_at
            if give_up is not None and t >= give_up:
                self._give_up(waiter)
                return self._done.pop(ticket)
            at = self._poll_at(cfg, waiter, t)
            return Decision(
                "waiting", waiter.arrival, at, 0, 0, -1, 0, 0, waiter.offered, "", 0, ticket
            )

    def _enqueue(self, cfg: SharedConfig, w: _Waiter, service: int, mine: Counter[str]) -> Decision:
        """Queue an attempt that cannot start at its arrival (or shed it: the queue full)."""
        t, sec = w.arrival, _sec(w.arrival)
        if cfg.queue_limit is not None and len(self._waiting) >= cfg.queue_limit:
            self._fields[f"{sec}:shed"] += 1
            mine[f"{sec}:shed"] += 1
            return Decision("shed", t, t, 0, 0, -1, 0, service, w.offered, "queue_full")
        self._ticket += 1
        w.ticket = self._ticket
        self._waiting.append(w)
        self._tickets[w.ticket] = w
        at = self._poll_at(cfg, w, t)
        return Decision("waiting", t, at, 0, 0, -1, 0, service, w.offered, "", 0, w.ticket)

    def _settle(self, cfg: SharedConfig, now: int) -> None:
        """Every server free by ``now`` takes the waiting attempt the discipline picks, in
        the order the servers free (dropping on the way what waited longer than
        ``max_queue_ms`` and what its caller's deadline skipped)."""
        free, waiting = self._free, self._waiting
        while waiting:
            best = min(range(cfg.servers), key=free.__getitem__)
            at = free[best]
            if at > now:
                return
            newest = cfg.discipline == "lifo" or (
                cfg.discipline == "adaptive_lifo"
                and at - waiting[0].arrival > cfg.lifo_after_ms * 1000
            )
            w = waiting.pop() if newest else waiting.pop(0)
            self._tickets.pop(w.ticket, None)
            self._serve(cfg, w, best, at)

    def _serve(self, cfg: SharedConfig, w: _Waiter, best: int, at: int) -> None:
        """Server ``best``, free at ``at``, takes ``w``: the same rules as an attempt
        starting at its arrival (:meth:`decide`), counted for ``w``'s session."""
        give_up = w.give_up_at
        if not w.given_up and give_up is not None and at >= give_up:
            self._give_up(w)
            if w.deadline is not None:
                return  # skipped: no server taken
        wait = at - w.arrival
        counts, mine = self._fields, self._counts_of(w.session)
        if wait > cfg.max_queue_ms * 1000:
            if not w.given_up:
                counts[f"{_sec(at)}:shed"] += 1
                mine[f"{_sec(at)}:shed"] += 1
                self._done[w.ticket] = Decision(
                    "shed", w.arrival, at, 0, 0, -1, wait, 0, w.offered, "queue_wait"
                )
            return
        service, down = self._service(at)
        finish = at + service
        self._free[best] = finish
        counts[f"{_sec(w.arrival)}:q{wait_bucket(wait)}"] += 1
        late = w.timeout is not None and finish - w.arrival > w.timeout
        if w.given_up or late:
            counts[f"{_sec(finish)}:wasted_us"] += service
        if w.given_up:
            return
        if late:
            answer = w.arrival + (w.timeout or 0)
            outcome = "timeout"
        else:
            answer = finish
            outcome = "error" if down else "ok"
            if not down:
                counts[f"{_sec(finish)}:calls_ok"] += 1
        counts[f"{_sec(answer)}:{outcome}"] += 1
        mine[f"{_sec(answer)}:{outcome}"] += 1
        self._done[w.ticket] = Decision(
            outcome, w.arrival, answer, at, finish, best, wait, service, w.offered
        )

    def _give_up(self, w: _Waiter) -> None:
        """``w``'s caller stopped waiting before a server took it: ``skipped`` (a propagated
        deadline: it leaves the queue) or ``timeout`` (it stays, and a server that takes it
        later wastes its work), counted in the second it gave up."""
        at = w.give_up_at or w.arrival
        if w.deadline is not None:
            outcome = "skipped"
            if w in self._waiting:
                self._waiting.remove(w)
        else:
            outcome = "timeout"
            w.given_up = True
        self._tickets.pop(w.ticket, None)
        self._fields[f"{_sec(at)}:{outcome}"] += 1
        self._counts_of(w.session)[f"{_sec(at)}:{outcome}"] += 1
        self._done[w.ticket] = Decision(
            outcome, w.arrival, at, 0, 0, -1, at - w.arrival, 0, w.offered
        )

    def _poll_at(self, cfg: SharedConfig, w: _Waiter, now: int) -> int:
        """A lower bound of when a server could take ``w`` (or it could be dropped, or skip),
        no later than its give-up nor :data:`POLL_MAX_US` away.

        The servers must first take the attempts the discipline picks before it (the newer
        ones under LIFO, the older under FIFO, the fewer of the two under adaptive LIFO), each
        for at least a service time, up to :data:`LOOKAHEAD` of them; an attempt ahead may
        leave without a server only once the oldest has waited past ``max_queue_ms`` or a
        propagated deadline passes, so from then on the next freed server is the bound."""
        waiting = self._waiting
        older = bisect.bisect_left(waiting, w.ticket, key=_ticket_of)  # in ticket order
        newer = len(waiting) - older - 1
        if cfg.discipline == "lifo":
            ahead = newer
        elif cfg.discipline == "fifo":
            ahead = older
        else:
            ahead = min(older, newer) if cfg.lifo_after_ms <= cfg.max_queue_ms else 0
        turns = sorted(self._free[: cfg.servers])
        first = turns[0]
        for _ in range(min(ahead, LOOKAHEAD)):
            heapq.heapreplace(turns, turns[0] + cfg.service_ms * 1000)
        leave = waiting[0].arrival + cfg.max_queue_ms * 1000 + 1
        deadlines = [x.arrival + x.deadline for x in waiting if x.deadline is not None]
        if deadlines:
            leave = min(leave, min(deadlines))
        at = min(turns[0], max(first, leave), now + POLL_MAX_US)
        give_up = w.give_up_at
        return at if give_up is None else min(at, give_up)

    def _counts_of(self, session: str | None) -> Counter[str]:
        """``session``'s counters, for an outcome decided after its arrival (a throwaway
        for None); its seconds and breaker state move only with its own arrivals."""
        if session is None:
            return Counter()
        return self._sessions.setdefault(str(session), Counter())

    def _take_token(self, cfg: SharedConfig, t: int) -> int:
        """The token bucket at ``t``: 0 when a token was taken, else the Retry-After (us)."""
        rate = float(cfg.rate_per_s or 0)
        tokens = float(cfg.rate_burst) if self._tokens is None else self._tokens
        tokens = min(float(cfg.rate_burst), tokens + (t - self._tokens_at) * rate / 1e6)
        self._tokens_at = t
        if tokens < 1:
            self._tokens = tokens
            return max(1, math.ceil((1 - tokens) * 1e6 / rate))
        self._tokens = tokens - 1
        return 0

    def _shed_reason(self, cfg: SharedConfig, t: int, wait: int) -> str:
        """Why an attempt arriving at ``t`` that would wait ``wait`` us is shed ("" if not):
        the queue wait, then the concurrency limit, the queue limit and CoDel, in that
        order."""
        if wait > cfg.max_queue_ms * 1000:
            return "queue_wait"
        if cfg.counts_in_flight:
            self._finished_by(cfg, t)
            if cfg.concurrency_limit is not None and len(self._finishes) >= self._limit_now(cfg):
                return "concurrency"
            if cfg.queue_limit is not None and wait > 0 and len(self._starts) >= cfg.queue_limit:
                return "queue_full"
        if cfg.codel_target_ms is not None:
            if wait <= cfg.codel_target_ms * 1000:
                self._codel_since = -1
            elif self._codel_since < 0:
                self._codel_since = t
            elif t - self._codel_since >= cfg.codel_interval_ms * 1000:
                return "codel"
        return ""

    def _admit(self, start: int, finish: int, t: int, failed: bool) -> None:
        """Keep an accepted attempt's start and finish (for the limits) and how it went."""
        self._seq += 1
        heapq.heappush(self._starts, start)
        heapq.heappush(self._finishes, (finish, self._seq, finish - t, failed))

    def _finished_by(self, cfg: SharedConfig, t: int) -> None:
        """Drop what started and finished by ``t``; each finished attempt, in the order they
        finished, moves an adaptive limit (with the attempts still in the server then)."""
        while self._starts and self._starts[0] <= t:
            heapq.heappop(self._starts)
        while self._finishes and self._finishes[0][0] <= t:
            _, _, latency, failed = heapq.heappop(self._finishes)
            if cfg.adaptive:
                self._adapt(cfg, latency, failed, len(self._finishes))

    def _limit_now(self, cfg: SharedConfig) -> int:
        if not cfg.adaptive or self._limit is None:
            return int(cfg.concurrency_limit or 0)
        return math.floor(self._limit)

    def _adapt(self, cfg: SharedConfig, latency: int, failed: bool, in_server: int) -> None:
        """One finished attempt moves the limit (:data:`CONCURRENCY`)."""
        limit = float(cfg.concurrency_limit or 1) if self._limit is None else self._limit
        high = float(cfg.concurrency_max)
        if cfg.concurrency == "aimd":
            if failed or latency > cfg.limit_latency_ms * 1000:
                limit = max(1.0, math.floor(limit * 0.9))
            elif (in_server + 1) * 2 >= limit:  # + the one finishing
                limit = min(high, limit + 1)
        else:
            fastest = latency if self._fastest is None else min(self._fastest, latency)
            self._fastest = max(1, fastest)
            gradient = max(0.5, min(1.0, self._fastest / max(1, latency)))
            new = limit * gradient + math.sqrt(limit)
            limit = max(1.0, min(high, limit * 0.8 + new * 0.2))
        self._limit = limit

    def refuse(self, now_us: int | None = None, *, session: str, state: str = "open") -> None:
        """Count a call ``session``'s breaker refused before any attempt (``fast``, and the
        breaker's ``state``): the session's counters only, nothing reaches the model."""
        with self._lock:
            t = max(self._now(now_us), self._last)
            self._session_second(session, _sec(t), state)[f"{_sec(t)}:fast"] += 1

    def _session_second(self, session: str | None, sec: int, state: str) -> Counter[str]:
        """The counters of ``session`` (a throwaway for None) after a call in ``sec``: older
        seconds than ``keep_s`` dropped as the Lua script drops them, the state recorded."""
        if session is None:
            return Counter()
        session = str(session)
        counts = self._sessions.setdefault(session, Counter())
        states = self._session_state.setdefault(session, {})
        prev = self._session_last.get(session, 0)
        if sec > prev:
            if prev > 0 and sec - prev < self.keep_s:
                gone = range(prev - self.keep_s + 1, sec - self.keep_s + 1)
                for x in gone:
                    states.pop(x, None)
                    for name in SESSION_FIELDS:
                        counts.pop(f"{x}:{name}", None)
            elif prev > 0:
                counts.clear()
                states.clear()
            self._session_last[session] = sec
        states[sec] = state
        return counts

    def session_seconds(
        self, sessions: Iterable[str], first: int, last: int
    ) -> dict[str, list[dict[str, Any]]]:
        """Each session's rows for the seconds ``first`` to ``last``
        (:func:`session_seconds_from_fields`)."""
        out = {}
        with self._lock:
            for session in sessions:
                session = str(session)
                fields: dict[str, Any] = {
                    k: v for k, v in self._sessions.get(session, {}).items() if v
                }
                for sec, st in self._session_state.get(session, {}).items():
                    fields[f"{sec}:state"] = st
                out[session] = session_seconds_from_fields(fields, first, last)
        return out

    # -- reading -----------------------------------------------------------------------------

    def counters(self) -> list[Second]:
        """Every second's counters so far, sorted by second."""
        with self._lock:
            snapshot = dict(self._fields)
        return seconds_from_fields(snapshot)

    def state(self) -> dict[str, Any]:
        """Configuration, running trigger and the servers' free-at times (for tests, views)."""
        with self._lock:
            trig = self._trigger
            return {
                "config": self._config.to_dict(),
                "trigger": None
                if trig is None
                else {
                    "kind": trig[0],
                    "from_us": trig[1],
                    "until_us": trig[2],
                    "factor_pct": trig[3],
                    "servers": trig[4],
                },
                "free_us": self._free[: self._config.servers],
                "waiting": len(self._waiting),
                "last_us": self._last,
                "limit_now": self._limit_now(self._config) if self._config.adaptive else None,
            }

    def reset(self) -> None:
        """Idle servers, no trigger, no counters (the configuration stays)."""
        with self._lock:
            self._free = [0] * MAX_SERVERS
            self._held.clear()
            self._trigger = None
            self._last = 0
            self._fields.clear()
            self._waiting.clear()
            self._tickets.clear()
            self._done.clear()
            self._defences_reset()
            self._sessions.clear()
            self._session_state.clear()
            self._session_last.clear()


class SharedDependency:
    """The shared model behind the guarded client's dependency interface.

    ``attempt(timeout_ms, attempt=n, deadline=at)`` asks the model once (one round trip on
    Redis), sleeps on ``clock`` until the answer (or until the attempt timeout, whichever is
    first: the model's reply already says which) and returns an
    :class:`~labs.engine.dependency.AttemptResult`: ok; ``503`` (down, shed or skipped);
    ``429`` with its Retry-After (the server's rate limit); ``timeout``. ``AttemptResult.data`` carries the model's :class:`Decision` as a dict.

    With ``propagate_deadline`` the client sends along the instant it stops waiting for this
    attempt: the call's deadline, or the end of the attempt timeout if that is earlier. The
    server then skips an attempt that could not start before it (no wasted work).
    ``GuardedClient`` passes the attempt number and the call's deadline because this class
    sets ``wants_call_context``; it also passes ``probe`` (the half-open probe) and tells
    :meth:`refused` of a call its breaker refused, so that with ``session`` the model counts
    the session's attempts, outcomes and breaker state (module docstring) in the same step.
    """

    wants_call_context = True

    def __init__(
        self,
        model: SharedModel,
        *,
        clock: Clock,
        propagate_deadline: bool = False,
        session: str | int | None = None,
    ) -> None:
        self.model = model
        self.clock = clock
        self.propagate_deadline = propagate_deadline
        self.session = None if session is None else str(session)
        self.last: Decision | None = None

    def refused(self, reason: str) -> None:
        """The session's breaker refused a call before any attempt (``reason``: ``open`` or
        ``half_open``): counted for the session, when it has one (nothing reaches the model)."""
        if self.session is None:
            return
        now = None if _owns_time(self.model) else int(self.clock.now() * 1e6 + 0.5)
        state = reason if reason in BREAKER_STATES else "open"
        self.model.refuse(now, session=self.session, state=state)

    def attempt(
        self,
        timeout_ms: float | None = None,
        *,
        attempt: int = 1,
        deadline: float | None = None,
        probe: bool = False,
        call: int | None = None,
    ) -> AttemptResult:
        """One attempt (``deadline``: absolute, on ``clock``, or None; ``probe``: the
        breaker's half-open probe, counted as the session's breaker state; ``call``, the
        call's number, is not the model's concern)."""
        now = self.clock.now()
        timeout_us = None if timeout_ms is None else round(timeout_ms * 1000)
        deadline_us = None
        if self.propagate_deadline:
            if deadline is not None:
                deadline_us = max(0, round((deadline - now) * 1e6))
            if timeout_us is not None and (deadline_us is None or timeout_us < deadline_us):
                deadline_us = timeout_us
        decision = self.model.decide(
            None if _owns_time(self.model) else int(now * 1e6 + 0.5),
            timeout_us=timeout_us,
            deadline_us=deadline_us,
            attempt=attempt,
            session=self.session,
            state="half_open" if probe else "closed",
        )
        queued = decision.outcome == "waiting"
        decision = self._wait_in_queue(decision, now)
        self.last = decision
        took_us = decision.answer_us - decision.arrival_us
        if queued:  # asked again since the arrival: sleep until the answer's instant
            self.clock.sleep(max(0.0, now + took_us / 1e6 - self.clock.now()))
        elif took_us > 0:
            self.clock.sleep(took_us / 1e6)
        took = took_us / 1000
        data = decision.to_dict()
        if decision.outcome == "ok":
            return AttemptResult(True, None, took, data=data)
        if decision.outcome == "timeout":
            return AttemptResult(False, "timeout", took, data=data)
        if decision.outcome == "limited":
            retry_after = decision.retry_after_us / 1000
            return AttemptResult(False, "429", took, retry_after_ms=retry_after, data=data)
        return AttemptResult(False, "503", took, data=data)

    def _wait_in_queue(self, decision: Decision, now: float) -> Decision:
        """An attempt waiting in the explicit queue sleeps until each instant its reply
        names and asks again, until it is decided (times measured from its arrival, so the
        model's clock and ours need not agree)."""
        while decision.outcome == "waiting":
            at = now + (decision.answer_us - decision.arrival_us) / 1e6
            self.clock.sleep(max(0.0, at - self.clock.now()))
            asked = None
            if not _owns_time(self.model):  # the named instant, never a rounding before it
                asked = max(int(self.clock.now() * 1e6 + 0.5), decision.answer_us)
            decision = self.model.poll(decision.ticket, asked)
        return decision


def private_server(
    settings: Mapping[str, Any] | None, *, clock: Clock, model: SharedModel | None = None
) -> SharedDependency:
    """A student's own server with a queue (dependency mode ``server``): the shared model with
    ``settings`` (a :class:`SharedConfig` dict), called by this one client. ``model`` is where
    it lives (the lab's Redis model keyed by the session); without one it is a
    :class:`MemorySharedModel` on ``clock``'s time, as a lesson in virtual time runs it.
    Its queue, defences and counters are the class model's; only the callers differ."""
    config = SharedConfig(**(settings or {}))
    if model is None:
        model = MemorySharedModel(config)
    else:
        model.configure(config)
    return SharedDependency(model, clock=clock)


def _owns_time(model: Any) -> bool:
    """Whether the model stamps arrivals itself (Redis ``TIME``) rather than taking ours."""
    return bool(getattr(model, "server_time", False))
