"""The shared dependency's model in Redis: every worker process of a class calls one model.

Every attempt is one ``EVALSHA`` of ``lua/shared_attempt.lua`` (the decision, the server's new
free-at time and every counter in one atomic step), a trigger one of
``lua/shared_control.lua``; with a discipline but FIFO an attempt that waits asks again with
``lua/shared_poll.lua`` (both include ``lua/shared_queue.lua``, the explicit queue); every key lives under the hash tag ``{shared:ID}`` so the scripts
run on Redis Cluster. Arrivals are stamped with Redis's ``TIME`` by default, so arrival order
is the order Redis runs the scripts whatever the callers' clocks say. docs/engine.md, "The two
implementations", gives the key layout."""

from __future__ import annotations

import contextlib
import math
import struct
from typing import Any

from labs.engine.redis.store import _Script, _text
from labs.engine.shared import (
    DEFENCES,
    MAX_SERVERS,
    SESSION_KEEP_S,
    Decision,
    Second,
    SharedConfig,
    Trigger,
    seconds_from_fields,
    session_field_names,
    session_seconds_from_fields,
)

__all__ = ["CONFIG_FIELDS", "RedisSharedModel", "config_from_fields"]

#: The counters of a model nobody calls any more disappear after an hour.
DEFAULT_COUNTERS_TTL_MS = 3_600_000
#: How the model hash's ``free`` field packs the servers' free-at times (the Lua scripts'
#: ``struct`` format): one field read and written per attempt, where a field per server made
#: an attempt on 64 servers an ``HMGET`` and an ``HSET`` of strings to convert, three
#: quarters of the decision's time in Redis. Doubles hold integer microseconds exactly up to
#: 2^53 (the year 2255).
FREE_PACK = "<" + "d" * MAX_SERVERS
#: redis-py's option for a reply read as bytes whatever the client decodes (``redis.client``)
NEVER_DECODE = "NEVER_DECODE"
_TEXT_FIELDS = (
    "servers", "last", "trig", "trig_from", "trig_until", "trig_pct", "trig_servers", "c_limit",
)  # fmt: skip
#: The decision's fields in a reply of ``shared_attempt.lua`` or ``shared_poll.lua`` (a 12th
#: element, the ticket, only while the attempt waits).
_REPLY_LEN = 11
#: The model hash's fields of the server's defences (``''``: off), in :data:`DEFENCES` order.
_DEFENCE_FIELDS = (
    "d_rate", "d_burst", "d_queue", "d_conc", "d_adapt", "d_cmax", "d_lat_us", "d_codel_us",
    "d_codel_int_us", "d_disc", "d_lifo_us",
)  # fmt: skip
CONFIG_FIELDS = ("servers", "service_us", "max_queue_us", *_DEFENCE_FIELDS)


class RedisSharedModel:
    """The shared model of ``model_id`` in Redis; same semantics as
    :class:`~labs.engine.shared.MemorySharedModel`, reply for reply.

    Safe to share between threads and to use from many processes at once. ``configure``
    must have run once (by any process) before the first attempt; an attempt on an
    unconfigured model raises ``redis.ResponseError``.
    """

    def __init__(
        self,
        client: Any,
        model_id: str,
        *,
        server_time: bool = True,
        counters_ttl_ms: int = DEFAULT_COUNTERS_TTL_MS,
        keep_s: int = SESSION_KEEP_S,
    ) -> None:
        model_id = str(model_id)
        if not model_id or any(c in model_id for c in "{} "):
            raise ValueError(f"model_id must be non-empty, without braces or spaces ({model_id!r})")
        self.client = client
        self.model_id = model_id
        self.server_time = server_time
        self.counters_ttl_ms = int(counters_ttl_ms)
        self.keep_s = int(keep_s)
        tag = f"{{shared:{model_id}}}"
        self._tag = tag
        self.k_model = f"{tag}:model"
        self.k_counters = f"{tag}:counters"
        self.k_starts = f"{tag}:starts"
        self.k_finishes = f"{tag}:finishes"
        #: the explicit queue: tickets in arrival order, the waiters, their deadlines, and
        #: the decisions their callers have not heard yet
        self.k_waiting = f"{tag}:waiting"
        self.k_waiters = f"{tag}:waiters"
        self.k_deadlines = f"{tag}:deadlines"
        self.k_done = f"{tag}:done"
        self._keys = tuple(k.encode() for k in self.all_keys())
        self._attempt = _Script(client, "shared_attempt")
        self._poll = _Script(client, "shared_poll")
        self._control = _Script(client, "shared_control")

    def all_keys(self) -> list[str]:
        """Every key this model writes but the sessions' (:meth:`session_key`)."""
        return [
            self.k_model, self.k_counters, self.k_starts, self.k_finishes,
            self.k_waiting, self.k_waiters, self.k_deadlines, self.k_done,
        ]  # fmt: skip

    def session_key(self, session: str) -> str:
        """The key of one calling session's counters (under the model's hash tag)."""
        session = str(session)
        if not session or any(c in session for c in "{} :"):
            raise ValueError(
                f"session must be non-empty, without braces, colons or spaces ({session!r})"
            )
        return f"{self._tag}:session:{session}"

    # -- settings ----------------------------------------------------------------------------

    def configure(self, config: SharedConfig) -> None:
        """Write servers, service time, queue limit and the server's defences (one
        ``MULTI``: an ``HSET``, and an adaptive concurrency limit starting again); queued work
        keeps its schedule, the trigger keeps running."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self.k_model, mapping=_config_fields(config))
        pipe.hdel(self.k_model, "c_limit", "c_fastest")
        pipe.execute()

    @property
    def config(self) -> SharedConfig:
        """The configuration stored in Redis (one ``HMGET``). Raises LookupError if none."""
        return config_from_fields(self.client.hmget(self.k_model, CONFIG_FIELDS), self.model_id)

    def _now_arg(self, now_us: int | None) -> str:
        if self.server_time or now_us is None:
            return ""
        return str(int(now_us))

    def trigger(self, trigger: Trigger, now_us: int | None = None) -> dict[str, Any] | None:
        """Fire ``trigger`` now, replacing any trigger still running (one round trip).

        Returns the replaced trigger (``kind``, ``from_us``, ``until_us``) or None.
        """
        reply = self._control(
            self._keys[:1],
            (
                "trigger",
                self._now_arg(now_us),
                trigger.kind,
                trigger.duration_ms * 1000,
                trigger.factor_pct,
                trigger.servers,
            ),
        )
        return _replaced(reply)

    def clear_trigger(self, now_us: int | None = None) -> dict[str, Any] | None:
        """End the running trigger now (one round trip); returns it, or None."""
        reply = self._control(self._keys[:1], ("clear", self._now_arg(now_us), "", 0, 0, 0))
        return _replaced(reply)

    # -- the decision ------------------------------------------------------------------------

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
        """Decide one attempt and count it, for the class and for ``session`` when given:
        exactly one ``EVALSHA``."""
        keys = self._keys if session is None else (*self._keys, self.session_key(session))
        reply = self._attempt(
            keys,
            (
                self._now_arg(now_us),
                -1 if timeout_us is None else int(timeout_us),
                -1 if deadline_us is None else int(deadline_us),
                max(1, int(attempt)),
                self.counters_ttl_ms,
                state,
                self.keep_s,
            ),
        )
        return _decision(reply)

    def poll(self, ticket: int, now_us: int | None = None) -> Decision:
        """What became of waiting attempt ``ticket`` (:meth:`MemorySharedModel.poll
        <labs.engine.shared.MemorySharedModel.poll>`): exactly one ``EVALSHA``."""
        reply = self._poll(self._keys, (self._now_arg(now_us), int(ticket), self.counters_ttl_ms))
        return _decision(reply)

    def refuse(self, now_us: int | None = None, *, session: str, state: str = "open") -> None:
        """Count a call ``session``'s breaker refused (its counters only; one ``EVALSHA``,
        sent with the hub's next round trip without waiting where the client can)."""
        self._attempt.send(
            (*self._keys, self.session_key(session)),
            (self._now_arg(now_us), -1, -1, 0, self.counters_ttl_ms, state, self.keep_s),
        )

    # -- reading -----------------------------------------------------------------------------

    def counters(self) -> list[Second]:
        """Every second's counters still stored, sorted by second (one ``HGETALL``)."""
        return seconds_from_fields(self.client.hgetall(self.k_counters))

    def session_seconds(
        self, sessions: Any, first: int, last: int
    ) -> dict[str, list[dict[str, Any]]]:
        """Each session's rows for the seconds ``first`` to ``last``
        (:func:`~labs.engine.shared.session_seconds_from_fields`): one pipelined ``HMGET``
        of exactly those fields per session, one round trip."""
        sessions = [str(s) for s in sessions]
        if not sessions or last < first:
            return {s: [] for s in sessions}
        names = session_field_names(first, last)
        pipe = self.client.pipeline(transaction=False)
        for session in sessions:
            pipe.hmget(self.session_key(session), names)
        replies = pipe.execute()
        return {
            session: session_seconds_from_fields(dict(zip(names, values, strict=True)), first, last)
            for session, values in zip(sessions, replies, strict=True)
        }

    def state(self) -> dict[str, Any]:
        """Configuration, running trigger and the servers' free-at times (two reads); the
        same shape as :meth:`MemorySharedModel.state`."""
        values = self.client.hmget(self.k_model, _TEXT_FIELDS)
        raw = {k: _text(v) for k, v in zip(_TEXT_FIELDS, values, strict=True) if v is not None}
        # binary: read undecoded whatever the client's decode_responses
        packed = self.client.execute_command("HGET", self.k_model, "free", **{NEVER_DECODE: []})
        free = struct.unpack(FREE_PACK, packed) if packed else (0.0,) * MAX_SERVERS
        servers = int(raw.get("servers", 0))
        trigger = None
        if raw.get("trig"):
            trigger = {
                "kind": raw["trig"],
                "from_us": int(raw["trig_from"]),
                "until_us": int(raw["trig_until"]),
                "factor_pct": int(raw["trig_pct"]),
                "servers": int(raw["trig_servers"]),
            }
        config = self.config if servers else None
        limit_now = None
        if config is not None and config.adaptive:
            moved = raw.get("c_limit")
            limit_now = math.floor(float(moved)) if moved else config.concurrency_limit
        return {
            "config": None if config is None else config.to_dict(),
            "trigger": trigger,
            "free_us": [int(f) for f in free[: min(servers, MAX_SERVERS)]],
            "waiting": int(self.client.zcard(self.k_waiting)),
            "last_us": int(raw.get("last", 0)),
            "limit_now": limit_now,
        }

    def reset(self) -> None:
        """Idle servers, no trigger, no counters (the sessions' too); the configuration stays
        (one MULTI/EXEC after a ``SCAN`` for the sessions' keys)."""
        config = None
        with contextlib.suppress(LookupError):
            config = self.config
        sessions = self._session_keys()
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(*self.all_keys(), *sessions)
        if config is not None:
            pipe.hset(self.k_model, mapping=_config_fields(config))
        pipe.execute()

    def clear(self) -> None:
        """Delete the model's keys (configuration and the sessions' counters included)."""
        self.client.delete(*self.all_keys(), *self._session_keys())

    def _session_keys(self) -> list[Any]:
        return list(self.client.scan_iter(match=f"{self._tag}:session:*", count=1000))

    def __repr__(self) -> str:
        return f"RedisSharedModel(model_id={self.model_id!r})"


def _config_fields(config: SharedConfig) -> dict[str, Any]:
    """The model hash's fields for ``config`` (times in us; a defence that is off: ``''``)."""
    values = {
        "d_rate": config.rate_per_s,
        "d_burst": config.rate_burst,
        "d_queue": config.queue_limit,
        "d_conc": config.concurrency_limit,
        "d_adapt": config.concurrency,
        "d_cmax": config.concurrency_max,
        "d_lat_us": config.limit_latency_ms * 1000,
        "d_codel_us": None if config.codel_target_ms is None else config.codel_target_ms * 1000,
        "d_codel_int_us": config.codel_interval_ms * 1000,
        "d_disc": config.discipline,
        "d_lifo_us": config.lifo_after_ms * 1000,
    }
    return {
        "servers": config.servers,
        "service_us": config.service_ms * 1000,
        "max_queue_us": config.max_queue_ms * 1000,
        **{k: "" if v is None else repr(v) if isinstance(v, float) else v
           for k, v in values.items()},
    }  # fmt: skip


def config_from_fields(values: Any, model_id: str = "?") -> SharedConfig:
    """A :class:`SharedConfig` from the model hash's :data:`CONFIG_FIELDS` values (bytes or
    str; a model written before the defences existed reads as undefended). Raises
    LookupError when the model was never configured."""
    servers, service, queue, *defences = (_text(v) if v is not None else None for v in values)
    if servers is None:
        raise LookupError(f"shared dependency {model_id!r} is not configured")
    kept: dict[str, Any] = {}
    for name, field, raw in zip(DEFENCES, _DEFENCE_FIELDS, defences, strict=True):
        if raw is None:
            continue  # not stored: the default
        if raw == "":
            kept[name] = None
        elif name == "rate_per_s":
            kept[name] = float(raw)
        elif name in ("concurrency", "discipline"):
            kept[name] = raw
        elif field.endswith("_us"):
            kept[name] = int(raw) // 1000
        else:
            kept[name] = int(raw)
    return SharedConfig(int(servers), int(service) // 1000, int(queue) // 1000, **kept)


def _decision(reply: Any) -> Decision:
    """A :class:`Decision` from a script's reply (its ticket when the attempt waits)."""
    outcome, *numbers, reason, retry_after = reply[:_REPLY_LEN]
    ticket = int(reply[_REPLY_LEN]) if len(reply) > _REPLY_LEN else 0
    return Decision(
        _text(outcome), *(int(n) for n in numbers), _text(reason), int(retry_after), ticket
    )


def _replaced(reply: Any) -> dict[str, Any] | None:
    kind, start, until = reply
    kind = _text(kind)
    if not kind:
        return None
    return {"kind": kind, "from_us": int(start), "until_us": int(until)}
