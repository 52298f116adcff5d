"""Server policies for the shared dependency in virtual time: how a server defends itself.

A :class:`ServerPolicy` picks a queue discipline (FIFO, LIFO, adaptive LIFO), CoDel-style
dropping, a fixed or adaptive concurrency limit, a token-bucket rate limit and a queue cap;
:class:`QueueServer` runs the shared dependency with one as a discrete-event simulation. The
default policy is :meth:`MemorySharedModel.decide <labs.engine.shared.MemorySharedModel.decide>`
itself, so the defaults behave exactly as the class's model (a test compares them). The
defences a decision at arrival can make (a rate limit, a queue limit, a fixed concurrency
limit, CoDel on the wait an attempt will have) live in
:class:`~labs.engine.shared.SharedConfig` instead, and so in the live Redis model too; a
``QueueServer`` with the default policy and such a configuration runs them exactly as the
class does. LIFO and the adaptive limits need a real queue and run here only.
docs/experiments.md, "Server policies in virtual time"."""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from labs.engine.config import LIMITS, Limit
from labs.engine.shared import MemorySharedModel, SharedConfig, Trigger
from labs.engine.validate import Problem, ValidationError, _check, _not_object, _unknown

__all__ = [
    "DISCIPLINES",
    "LIMITERS",
    "SERVER_LIMITS",
    "QueueServer",
    "Reply",
    "ServerPolicy",
    "parse_server_policy",
    "validate_server_policy",
]

DISCIPLINES = ("fifo", "lifo", "adaptive_lifo")
LIMITERS = ("none", "fixed", "aimd", "gradient")

#: Every server-policy setting's default and allowed range (null = off), under ``server.``.
SERVER_LIMITS: dict[str, Limit] = {
    "server.discipline": Limit("fifo", type="choice", choices=DISCIPLINES),
    "server.lifo_after_ms": Limit(
        100, 1, 10000, "ms", note="adaptive LIFO: LIFO while the oldest wait is longer"
    ),
    # the ranges the class's own defences have (labs.engine.config.LIMITS, "shared.")
    "server.codel_target_ms": LIMITS["shared.codel_target_ms"],
    "server.codel_interval_ms": LIMITS["shared.codel_interval_ms"],
    "server.concurrency": Limit("none", type="choice", choices=LIMITERS),
    "server.concurrency_limit": Limit(
        20, 1, 1000, "attempts", note="fixed: the limit; adaptive: where it starts"
    ),
    "server.concurrency_max": Limit(200, 1, 1000, "attempts", note="adaptive: the highest"),
    "server.limit_latency_ms": Limit(500, 1, 10000, "ms", note="AIMD: slower than this is a drop"),
    "server.rate_per_s": LIMITS["shared.rate_per_s"],
    "server.rate_burst": LIMITS["shared.rate_burst"],
    "server.queue_limit": LIMITS["shared.queue_limit"],
}
_KEYS = tuple(name.removeprefix("server.") for name in SERVER_LIMITS)


@dataclass(frozen=True)
class ServerPolicy:
    """How the shared dependency defends itself (see the module docstring). The defaults are
    today's server: FIFO, no dropping by queue time, no limits."""

    discipline: str = "fifo"
    lifo_after_ms: int = 100
    codel_target_ms: int | None = None
    codel_interval_ms: int = 100
    concurrency: str = "none"
    concurrency_limit: int = 20
    concurrency_max: int = 200
    limit_latency_ms: int = 500
    rate_per_s: float | None = None
    rate_burst: int = 10
    queue_limit: int | None = None

    @property
    def is_default(self) -> bool:
        """Whether this is the plain shared model (FIFO, nothing else)."""
        return (
            self.discipline == "fifo"
            and self.codel_target_ms is None
            and self.concurrency == "none"
            and self.rate_per_s is None
            and self.queue_limit is None
        )

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON form."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def validate_server_policy(d: Any, prefix: str = "server") -> list[Problem]:
    """Problems with a server-policy dict: unknown fields, values out of
    :data:`SERVER_LIMITS` (each problem names the field and its range), and a starting
    concurrency limit above the highest."""
    if not isinstance(d, Mapping):
        return _not_object(prefix, d)
    problems = _unknown(prefix, d, _KEYS)
    for key in _KEYS:
        if key in d:
            _check(f"{prefix}.{key}", d[key], SERVER_LIMITS[f"server.{key}"], problems)
    if problems:
        return problems
    start = d.get("concurrency_limit", SERVER_LIMITS["server.concurrency_limit"].default)
    high = d.get("concurrency_max", SERVER_LIMITS["server.concurrency_max"].default)
    if d.get("concurrency") in ("aimd", "gradient") and start > high:
        problems.append(
            Problem(
                f"{prefix}.concurrency_limit",
                f"must be between 1 and {high} attempts (at most concurrency_max; got {start})",
            )
        )
    return problems


def parse_server_policy(d: Mapping[str, Any]) -> ServerPolicy:
    """A :class:`ServerPolicy` from a dict (missing keys: defaults). Raises ValidationError."""
    problems = validate_server_policy(d)
    if problems:
        raise ValidationError(problems)
    return ServerPolicy(**{k: d[k] for k in _KEYS if k in d})


@dataclass(frozen=True, slots=True)
class Reply:
    """What a caller hears: ``outcome`` (``ok``, ``error``, ``shed``, ``limited``,
    ``timeout``) at ``answer_us``; ``reason`` says why a refusal happened (``queue_wait``,
    ``queue_full``, ``codel``, ``concurrency``, ``rate``); ``retry_after_us`` is set on 429s."""

    outcome: str
    arrival_us: int
    answer_us: int
    attempt: int
    reason: str = ""
    retry_after_us: int = 0

    @property
    def status(self) -> str:
        """The HTTP-ish status the client sees: ``200``, ``503``, ``429`` or ``timeout``."""
        return {"ok": "200", "limited": "429", "timeout": "timeout"}.get(self.outcome, "503")


class _Job:
    __slots__ = (
        "answered", "arrival", "attempt", "deadline", "finish", "give_up", "reply", "service",
    )  # fmt: skip

    def __init__(self, arrival, attempt, service, deadline, give_up, reply):
        self.arrival, self.attempt, self.service = arrival, attempt, service
        self.deadline, self.give_up, self.reply = deadline, give_up, reply
        self.answered = False
        self.finish: int | None = None


class QueueServer:
    """The shared dependency with a :class:`ServerPolicy`, in virtual time.

    ``at(t_us, fn, *args)`` schedules a callback; ``run(until_us)`` runs them in time order
    (ties: scheduling order). ``submit(t_us, reply, ...)``, called from a callback at ``t_us``,
    offers one attempt; ``reply(Reply)`` is called at the answer's time. Counters per second
    (``offered``, ``calls``, ``retries``, ``ok``, ``error``, ``shed``, ``limited``,
    ``timeout``, ``wasted_us``, ``dropped`` by CoDel) are in :meth:`counters`.
    """

    def __init__(
        self,
        config: SharedConfig | None = None,
        policy: ServerPolicy | None = None,
        *,
        exact_model: bool | None = None,
        pickup_us: int = 0,
    ) -> None:
        self.config = config or SharedConfig()
        self.policy = policy or ServerPolicy()
        #: the plain shared model decides (default policy); False forces the explicit queue
        self.exact = self.policy.is_default if exact_model is None else exact_model
        if self.exact and not self.policy.is_default:
            raise ValueError("only the default policy can run on the plain shared model")
        if self.exact and self.config.queues:
            raise ValueError("a queue order is the policy's here: ServerPolicy(discipline=...)")
        self.model = MemorySharedModel(self.config)
        #: a worker that finishes takes queued work only ``pickup_us`` later; an attempt
        #: arriving meanwhile takes it at once (the queueing simulator's one-tick hand-off)
        self.pickup_us = int(pickup_us)
        self._fresh = 0
        self._pickups: deque[list[bool]] = deque()
        self._events: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self.now = 0
        self._counts: Counter[tuple[int, str]] = Counter()
        self._queue: deque[_Job] = deque()
        self._busy = 0
        self._trigger: tuple[str, int, int, int, int] | None = None
        self._tokens = float(self.policy.rate_burst)
        self._tokens_at = 0
        self.limit = float(self.policy.concurrency_limit)
        self._fastest_us: int | None = None
        self._last_empty = 0
        self.limits_seen: list[tuple[int, float]] = []

    # -- the event loop ----------------------------------------------------------------------

    def at(self, t_us: int, fn: Callable[..., None], *args: Any) -> None:
        """Call ``fn(*args)`` at ``t_us`` (never before the current time)."""
        self._seq += 1
        t = int(t_us)
        heapq.heappush(self._events, (t if t > self.now else self.now, self._seq, fn, args))

    def run(self, until_us: int | None = None) -> None:
        """Run every event up to ``until_us`` (all of them when None)."""
        events, pop = self._events, heapq.heappop
        last = float("inf") if until_us is None else until_us
        while events and events[0][0] <= last:
            t, _, fn, args = pop(events)
            self.now = t
            fn(*args)

    def trigger(self, trigger: Trigger) -> None:
        """Fire ``trigger`` now for its duration (down, slow or a capacity drop)."""
        if self.exact:
            self.model.trigger(trigger, self.now)
            return
        until = self.now + trigger.duration_ms * 1000
        kept = min(trigger.servers, self.config.servers)
        self._trigger = (trigger.kind, self.now, until, trigger.factor_pct, kept)
        if trigger.kind == "capacity":
            self.at(until, self._dispatch)

    @property
    def queued(self) -> int:
        """Attempts waiting in the queue now."""
        return len(self._queue)

    # -- counters ----------------------------------------------------------------------------

    def _count(self, t_us: int, name: str, n: int = 1) -> None:
        self._counts[t_us // 1_000_000, name] += n

    def counters(self) -> dict[int, dict[str, int]]:
        """``{second: {name: count}}`` over every counter so far."""
        table: dict[int, dict[str, int]] = {}
        if self.exact:
            for s in self.model.counters():
                row = table.setdefault(s.second, {})
                for name in ("offered", "ok", "error", "shed", "limited", "timeout", "wasted_us"):
                    row[name] = row.get(name, 0) + getattr(s, name)
                row["calls"], row["retries"] = s.calls, s.retries
        for (sec, name), value in self._counts.items():
            row = table.setdefault(sec, {})
            row[name] = row.get(name, 0) + value
        return dict(sorted(table.items()))

    def totals(self) -> Counter[str]:
        """Every counter summed over the seconds."""
        out: Counter[str] = Counter()
        for row in self.counters().values():
            out.update(row)
        return out

    # -- one attempt -------------------------------------------------------------------------

    def submit(
        self,
        reply: Callable[[Reply], None],
        *,
        attempt: int = 1,
        timeout_us: int | None = None,
        service_us: int | None = None,
        give_up: bool = True,
    ) -> None:
        """Offer one attempt now. ``service_us``: this attempt's service time (default: the
        configuration's). ``give_up``: the client stops waiting at its timeout (else it hears
        ``timeout`` when the late answer comes, as the queueing simulator counts it)."""
        t = self.now
        policy = self.policy
        if policy.rate_per_s is not None:
            rate = policy.rate_per_s / 1e6
            self._tokens = min(policy.rate_burst, self._tokens + (t - self._tokens_at) * rate)
            self._tokens_at = t
            if self._tokens < 1:
                self._count(t, "offered")
                self._count(t, "calls" if attempt <= 1 else "retries")
                self._count(t, "limited")
                wait = math.ceil((1 - self._tokens) / rate)
                reply(Reply("limited", t, t, attempt, "rate", wait))
                return
            self._tokens -= 1
        if self.exact:
            self._exact(reply, attempt, timeout_us, service_us)
            return
        self._count(t, "offered")
        self._count(t, "calls" if attempt <= 1 else "retries")
        inflight = self._busy + len(self._queue)
        if policy.concurrency != "none" and inflight >= int(self.limit):
            self._refuse(reply, t, attempt, "concurrency")
            return
        while self._pickups and not self._pickups[0][0]:
            self._pickups.popleft()
        direct = bool(self._pickups)  # a worker just freed, not yet back at the queue
        full = policy.queue_limit is not None and len(self._queue) >= policy.queue_limit
        if full and not direct and self._free_servers() <= 0:
            self._refuse(reply, t, attempt, "queue_full")
            return
        service = self.config.service_ms * 1000 if service_us is None else int(service_us)
        deadline = None if timeout_us is None else t + timeout_us
        job = _Job(t, attempt, service, deadline, give_up, reply)
        if deadline is not None and give_up:
            self.at(deadline, self._timeout, job)
        if direct:  # takes the worker before the queue does
            self._pickups.popleft()[0] = False
            self._fresh -= 1
            self._start(job)
            return
        self._queue.append(job)
        self._dispatch()

    def _exact(self, reply, attempt, timeout_us, service_us) -> None:
        if service_us is not None and service_us != self.config.service_ms * 1000:
            raise ValueError("the plain shared model has one service time")
        d = self.model.decide(self.now, timeout_us=timeout_us, attempt=attempt)
        reason = "rate" if d.outcome == "limited" else d.reason
        answer = Reply(d.outcome, d.arrival_us, d.answer_us, attempt, reason, d.retry_after_us)
        self.at(d.answer_us, reply, answer)

    def _refuse(self, reply, t, attempt, reason) -> None:
        """Refuse at once: the client hears it now (a retry may arrive at this same instant)."""
        self._count(t, "shed")
        reply(Reply("shed", t, t, attempt, reason))

    def _timeout(self, job: _Job) -> None:
        if job.answered or (job.finish is not None and job.finish <= self.now):
            return  # answered, or answering at this very instant (in time, as the model has it)
        job.answered = True
        self._count(self.now, "timeout")
        job.reply(Reply("timeout", job.arrival, self.now, job.attempt))

    def _free_servers(self) -> int:
        """Servers free for queued work (in service, minus busy and just-freed ones)."""
        servers = self.config.servers - self._fresh
        trig = self._trigger
        if trig is not None and trig[0] == "capacity" and trig[1] <= self.now < trig[2]:
            servers = trig[4]
        return servers - self._busy

    def _pick(self) -> _Job:
        queue, policy = self._queue, self.policy
        if policy.discipline == "lifo":
            return queue.pop()
        backed_up = self.now - queue[0].arrival > policy.lifo_after_ms * 1000
        if policy.discipline == "adaptive_lifo" and backed_up:
            return queue.pop()
        return queue.popleft()

    def _dispatch(self) -> None:
        """Start queued attempts on free servers, dropping by queue time on the way."""
        policy, now = self.policy, self.now
        while self._queue and self._free_servers() > 0:
            job = self._pick()
            waited = now - job.arrival
            if not self._queue:
                self._last_empty = now
            if waited > self.config.max_queue_ms * 1000:
                self._drop(job, "queue_wait")
                continue
            if policy.codel_target_ms is not None:
                congested = now - self._last_empty > policy.codel_interval_ms * 1000
                allowed = policy.codel_target_ms if congested else policy.codel_interval_ms
                if waited > allowed * 1000:
                    self._count(now, "dropped")
                    self._drop(job, "codel")
                    continue
            self._start(job)
        if not self._queue:
            self._last_empty = now

    def _start(self, job: _Job) -> None:
        now = self.now
        self._busy += 1
        service = job.service
        down = False
        trig = self._trigger
        if trig is not None and trig[1] <= now < trig[2]:
            down = trig[0] == "down"
            if trig[0] == "slow":
                service = service * trig[3] // 100
        job.finish = now + service
        self.at(job.finish, self._finish, job, service, down)

    def _back(self, pickup: list[bool]) -> None:
        if pickup[0]:
            pickup[0] = False
            self._fresh -= 1
        self._dispatch()

    def _drop(self, job: _Job, reason: str) -> None:
        if job.answered:
            return
        job.answered = True
        self._count(self.now, "shed")
        job.reply(Reply("shed", job.arrival, self.now, job.attempt, reason))

    def _finish(self, job: _Job, service: int, down: bool) -> None:
        """Free the server (to the queue now, or after the hand-off) and answer the client."""
        now = self.now
        self._busy -= 1
        late = job.deadline is not None and now > job.deadline
        if job.answered or late:
            self._count(now, "wasted_us", service)
        self._adapt(now - job.arrival, late or down)
        if self.pickup_us:
            self._fresh += 1
            pickup = [True]
            self._pickups.append(pickup)
            self.at(now + self.pickup_us, self._back, pickup)
        else:
            self._dispatch()
        if job.answered:
            return
        job.answered = True
        outcome = "timeout" if late else "error" if down else "ok"
        self._count(now, outcome)
        if outcome == "ok" and job.attempt <= 1:
            self._count(now, "calls_ok")
        job.reply(Reply(outcome, job.arrival, now, job.attempt))

    def _adapt(self, latency_us: int, failed: bool) -> None:
        """Move an adaptive concurrency limit after one attempt finished."""
        policy = self.policy
        if policy.concurrency in ("none", "fixed"):
            return
        high = float(policy.concurrency_max)
        if policy.concurrency == "aimd":
            if failed or latency_us > policy.limit_latency_ms * 1000:
                self.limit = max(1.0, math.floor(self.limit * 0.9))
            elif (self._busy + len(self._queue) + 1) * 2 >= self.limit:  # + the one finishing
                self.limit = min(high, self.limit + 1)
        else:
            fastest = latency_us if self._fastest_us is None else min(self._fastest_us, latency_us)
            self._fastest_us = max(1, fastest)
            gradient = max(0.5, min(1.0, self._fastest_us / max(1, latency_us)))
            new = self.limit * gradient + math.sqrt(self.limit)
            self.limit = max(1.0, min(high, self.limit * 0.8 + new * 0.2))
        self.limits_seen.append((self.now, self.limit))
