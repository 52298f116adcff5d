"""Redis store: the breaker shared by every worker, one Lua script per operation.

Every admission, recorded result, dependency attempt and budget move is one ``EVALSHA``, and
an admission can carry the admitted call's first attempt (``breaker_allow_step``), so a
healthy call can be one round trip. All keys of a namespace (``fl:{s42}``) share one hash tag,
so the scripts run on Redis Cluster. Decisions use the caller's clock (a VirtualClock drives
them deterministically); only probe leases expire on Redis's clock, so a dead prober frees its
slot. docs/engine.md, "Stores", gives the key layout."""

from __future__ import annotations

import functools
import itertools
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:
    from redis.exceptions import NoScriptError
except ImportError:  # pragma: no cover - without redis there is no RedisStore to use

    class NoScriptError(Exception):  # type: ignore[no-redef]
        """Placeholder so this module imports without redis installed."""


from labs.engine.stores.base import (
    ADMIT,
    APPLIED,
    DEFAULT_PROBE_LEASE_MS,
    MAX_PROBE_SLOTS,
    AllowReply,
    BreakerSpec,
    RecordReply,
    from_doc,
    peer_budget_doc,
    peer_budget_from_doc,
    to_doc,
)

__all__ = ["SCOPES", "RedisStore", "load_scripts"]

#: The scoped namespaces a store may hold: hosts (``h0`` .. ``h7``) and dependency B.
SCOPES = (*(f"h{i}" for i in range(8)), "b")

_LUA = Path(__file__).with_name("lua")
#: No spaces; braces only as one non-empty hash tag (``fl:{s42}``), which then decides the
#: cluster slot of every key of the namespace.
_NAMESPACE = re.compile(r"(?=.)[^{} ]*(?:\{[^{} ]+\}[^{} ]*)?")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _int(value: Any, default: int = 0) -> int:
    if value in (None, b"", ""):
        return default
    return int(_text(value))


class RedisStore:
    """State of one lab session in Redis under ``namespace`` (e.g. ``fl:{s42}``).

    ``client`` is a ``redis.Redis`` or a ``redis.cluster.RedisCluster`` (``decode_responses``
    either way; on a cluster the namespace needs a hash tag). Safe to share between
    threads (redis-py's connection pool) and to use from many processes at once: each
    operation is atomic on the server. Raises ``redis.RedisError`` when Redis is unreachable.
    """

    def __init__(
        self, client: Any, namespace: str, probe_lease_ms: int = DEFAULT_PROBE_LEASE_MS
    ) -> None:
        if not _NAMESPACE.fullmatch(namespace or ""):
            raise ValueError(
                "namespace must be non-empty, without spaces, with at most one non-empty "
                f"hash tag such as 'fl:{{s42}}' ({namespace!r})"
            )
        self.client = client
        self.namespace = namespace
        self.probe_lease_ms = int(probe_lease_ms)
        self._scope = False  # a host's or B's part of a session (see scoped)
        self.k_breaker = f"{namespace}:breaker"
        self.k_window = f"{namespace}:window"
        self.k_calls = f"{namespace}:window_calls"
        self.k_probes = [f"{namespace}:probe:{i}" for i in range(MAX_PROBE_SLOTS)]
        self.k_dependency = f"{namespace}:dependency"
        self.k_budget = f"{namespace}:budget"
        self.k_budget_peer = f"{namespace}:budget_peer"
        self.k_cache = f"{namespace}:cache"
        self.k_effects = f"{namespace}:effects"
        self._breaker_keys = [self.k_breaker, self.k_window, self.k_calls]
        self._token_prefix = uuid.uuid4().hex[:12]
        self._tokens = itertools.count(1)
        self._allow = _Script(client, "allow")
        self._record = _Script(client, "record")
        self._force = _Script(client, "force")
        self._read = _Script(client, "read")
        self._dependency = _Script(client, "dependency")
        self._allow_step = _Script(client, "allow_step")
        self._check_step = _Script(client, "check_step")
        self._budget = _Script(client, "budget")
        self._budget_peer = _Script(client, "budget_peer")
        # Keys and per-config arguments encoded once, and the closed-state replies cached per
        # generation: packing the command and building replies are a measurable share of a
        # decision's client-side cost, so the scripts take few arguments.
        self._b_breaker = self.k_breaker.encode()
        self._b_dependency = self.k_dependency.encode()
        self._b_probes = [k.encode() for k in self.k_probes]
        self._b_record_keys = [k.encode() for k in self._breaker_keys]
        self._b_specs: dict[BreakerSpec, bytes] = {}
        self._admit = AllowReply(ADMIT, 0, -1, "", 0, False)
        self._applied = RecordReply(APPLIED, 0, 0, 0, 0)

    def all_keys(self) -> list[str]:
        """Every key this store may write (not its scopes': see :meth:`scoped`)."""
        return [
            *self._breaker_keys,
            *self.k_probes,
            self.k_dependency,
            self.k_budget,
            self.k_budget_peer,
            self.k_cache,
            self.k_effects,
        ]

    # -- scopes, cache, effects --------------------------------------------------------------

    def scoped(self, name: str) -> RedisStore:
        """The store of one part of this one (a host ``h0``.., dependency ``b``), under
        ``<namespace>:<name>``: the same hash tag, so one slot on a cluster."""
        if name not in SCOPES:
            raise ValueError(f"unknown scope {name!r} (allowed: {', '.join(SCOPES)})")
        child = RedisStore(self.client, f"{self.namespace}:{name}", self.probe_lease_ms)
        child._scope = True
        return child

    def fallback_note(self, now_us: int) -> None:
        """A success happened at ``now_us`` (one round trip)."""
        self.client.hset(self.k_cache, "last", int(now_us))

    def fallback_last(self) -> int | None:
        """The time of the last success, or None (one round trip)."""
        value = self.client.hget(self.k_cache, "last")
        return None if value is None else _int(value)

    def effect_once(self, key: str) -> bool:
        """Whether ``key``'s effect is applied now (``SADD``: one round trip, atomic)."""
        return bool(self.client.sadd(self.k_effects, key))

    # -- breaker -----------------------------------------------------------------------------

    def breaker_allow(self, spec: BreakerSpec, now_us: int) -> AllowReply:
        """Admission decision (one round trip)."""
        token = f"{self._token_prefix}:{next(self._tokens)}"
        reply = self._allow(
            (self._b_breaker, *self._b_probes[: spec.max_probes]),
            self._allow_args(spec, now_us, token),
        )
        return self._allow_reply(spec, reply, token)

    def breaker_allow_step(
        self, spec: BreakerSpec, now_us: int, fail_left: int
    ) -> tuple[AllowReply, tuple[int, int, int] | None]:
        """:meth:`breaker_allow` and, when it admits the call (ADMIT or PROBE), the call's
        first attempt reaching the dependency (:meth:`dependency_step` at ``now_us``), in one
        atomic round trip (``allow_step.lua``); the step is None when the call is refused."""
        token = f"{self._token_prefix}:{next(self._tokens)}"
        reply = self._allow_step(
            (self._b_dependency, self._b_breaker, *self._b_probes[: spec.max_probes]),
            (*self._allow_args(spec, now_us, token), int(fail_left)),
        )
        allowed = self._allow_reply(spec, reply[0], token)
        if len(reply) < 2:
            return allowed, None
        left, started, attempts = reply[1]
        return allowed, (int(left), int(started), int(attempts))

    def breaker_check_step(
        self, spec: BreakerSpec, now_us: int, fail_left: int
    ) -> tuple[str, tuple[int, int, int] | None]:
        """The breaker's state as read at ``now_us`` and, only when it reads ``closed``, an
        attempt reaching the dependency (:meth:`dependency_step`), in one atomic round trip
        (``check_step.lua``)."""
        reply = self._check_step(
            (self._b_dependency, self._b_breaker), (now_us, int(spec.strict_edge), int(fail_left))
        )
        state = _text(reply[0])
        if len(reply) < 2:
            return state, None
        left, started, attempts = reply[1]
        return state, (int(left), int(started), int(attempts))

    def _allow_args(self, spec: BreakerSpec, now_us: int, token: str) -> tuple[Any, ...]:
        return (
            now_us,
            token,
            self.probe_lease_ms,
            int(spec.strict_edge),
            spec.half_open_calls,
            spec.interval_us,
            int(spec.counts),
            spec.failure_threshold if spec.strict else 0,
        )

    def _allow_reply(self, spec: BreakerSpec, reply: Any, token: str) -> AllowReply:
        if type(reply) is int:  # closed: admitted (the script answers with the generation)
            if spec.strict:  # the admission holds a place, given back by its result
                return AllowReply(ADMIT, reply, -1, token, 0, False)
            admit = self._admit
            if admit[1] != reply:
                admit = self._admit = AllowReply(ADMIT, reply, -1, "", 0, False)
            return admit
        code, gen, slot, until, moved = reply
        return AllowReply(code, gen, slot, token if code == 1 else "", until, bool(moved))

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
        """Count one result and release its probe lease (one round trip). With ``wait``
        False the reply is not read where the client can send without waiting (None)."""
        packed = self._b_specs.get(spec)
        if packed is None:
            packed = self._b_specs[spec] = spec.packed().encode()
        keys = self._b_record_keys
        if slot >= 0:
            keys = [*keys, self._b_probes[slot]]
        args = (generation, token or "-", outcome, now_us, cooldown_us, packed)
        reply = self._record(keys, args) if wait else self._record.send(keys, args)
        if reply is None:
            return None
        if type(reply) is int:  # counted, no transition (the script answers with the generation)
            applied = self._applied
            if applied[1] != reply:
                applied = self._applied = RecordReply(APPLIED, reply, 0, 0, 0)
            return applied
        return RecordReply(*reply)

    def breaker_force(self, action: str, now_us: int) -> tuple[str, int, bool]:
        """Force open / closed (until reset), or reset (one round trip); returns (state
        before, generation, changed)."""
        if action not in ("open", "closed", "reset"):
            raise ValueError(f"unknown action {action!r}")
        before, gen, changed = self._force(
            [*self._b_record_keys, *self._b_probes], (action, now_us)
        )
        return _text(before), int(gen), bool(changed)

    def breaker_read(self, spec: BreakerSpec, now_us: int) -> dict[str, Any]:
        """Stored breaker fields plus ``probes_in_flight`` (one round trip)."""
        window = spec.bucket_us if spec.rolling and not spec.window_calls else 0
        f = self._read(
            [self.k_breaker, self.k_window, *self.k_probes],
            (now_us, window, spec.buckets, spec.interval_us),
        )
        return {
            "state": _text(f[0]) or "closed",
            "gen": _int(f[1]),
            "streak": _int(f[2]),
            "opened_at": _int(f[3]),
            "open_until": _int(f[4]),
            "ho_succ": _int(f[5]),
            "win_s": _int(f[6]),
            "win_f": _int(f[7]),
            "forced": _text(f[8]),
            "opens": _int(f[9]),
            "ho_adm": _int(f[10]),
            "ho_fail": _int(f[11]),
            "win_w": _int(f[12]),
            "ho_slow": _int(f[13]),
            "c_req": _int(f[14]),
            "c_ts": _int(f[15]),
            "c_tf": _int(f[16]),
            "c_cs": _int(f[17]),
            "c_cf": _int(f[18]),
            "c_exp": _int(f[19]),
            "probes_in_flight": _int(f[20]),
        }

    # -- dependency --------------------------------------------------------------------------

    def dependency_arm(self, fail_left: int, now_us: int) -> None:
        """Fresh dependency state (one round trip)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(self.k_dependency)
        pipe.hset(
            self.k_dependency,
            mapping={"fail_left": int(fail_left), "started": now_us, "attempts": 0},
        )
        pipe.execute()

    def dependency_step(self, fail_left: int, now_us: int) -> tuple[int, int, int]:
        """One attempt reaches the dependency (one round trip); arms lazily."""
        left, started, attempts = self._dependency((self.k_dependency,), (now_us, int(fail_left)))
        return int(left), int(started), int(attempts)

    # -- retry budget ------------------------------------------------------------------------

    def budget_deposit(self, ratio_micro: int, max_micro: int, *, wait: bool = True) -> int | None:
        """Deposit micro-tokens up to the ceiling (one round trip). With ``wait`` False the
        balance is not read where the client can send without waiting (None)."""
        keys, args = (self.k_budget,), ("deposit", ratio_micro, max_micro)
        reply = self._budget(keys, args) if wait else self._budget.send(keys, args)
        return None if reply is None else int(reply[1])

    def budget_withdraw(self, max_micro: int) -> tuple[bool, int]:
        """Take one whole token if available (one round trip)."""
        taken, tokens = self._budget((self.k_budget,), ("withdraw", 0, max_micro))
        return bool(taken), int(tokens)

    def budget_throttle(self, op: str, ratio_milli: int, max_milli: int) -> tuple[bool, int]:
        """gRPC retry throttling (one round trip)."""
        allowed, tokens = self._budget_peer(
            (self.k_budget_peer,), ("throttle", op, ratio_milli, max_milli)
        )
        return bool(allowed), int(tokens)

    def budget_window(
        self, op: str, now_us: int, slice_us: int, reserve: int, amount: int
    ) -> tuple[bool, int]:
        """Finagle's retry budget (one round trip)."""
        taken, count = self._budget_peer(
            (self.k_budget_peer,), ("window", op, now_us, slice_us, reserve, amount)
        )
        return bool(taken), int(count)

    # -- whole state -------------------------------------------------------------------------

    def export_state(self) -> dict[str, Any]:
        """JSON-serialisable copy of the namespace's state (one MULTI/EXEC)."""
        pipe = self.client.pipeline(transaction=True)
        self._queue_export(pipe)
        return self._parse_export(pipe.execute())

    _EXPORT_READS = 6

    def _queue_export(self, pipe) -> None:
        pipe.hgetall(self.k_breaker)
        pipe.hgetall(self.k_window)
        pipe.lrange(self.k_calls, 0, -1)
        pipe.hgetall(self.k_dependency)
        pipe.hget(self.k_budget, "tokens")
        pipe.hgetall(self.k_budget_peer)

    @staticmethod
    def _has_state_in(results: Sequence[Any]) -> bool:
        breaker, _window, _calls, dep, budget, peer = results
        return bool(breaker or dep or budget is not None or peer)

    @staticmethod
    def _parse_export(results: Sequence[Any]) -> dict[str, Any]:
        breaker, window, calls, dep, budget, peer = results
        peer = {_text(k): _int(v) for k, v in peer.items()}
        throttle = peer.pop("throttle", None)
        slices = {int(k[2:]): v for k, v in peer.items() if k.startswith("w:")}
        breaker = {_text(k): _text(v) for k, v in breaker.items()}
        for key in breaker:
            if key not in ("state", "forced"):
                breaker[key] = _int(breaker[key])
        buckets: dict[str, list[int]] = {}
        for field, count in window.items():
            kind, _, idx = _text(field).partition(":")
            buckets.setdefault(idx, [0, 0, 0])["sfw".index(kind)] = _int(count)
        return to_doc(
            breaker or None,
            buckets,
            [_text(c) for c in calls],
            {_text(k): _int(v) for k, v in dep.items()} if dep else None,
            None if budget is None else _int(budget),
            peer_budget_doc(throttle, slices),
        )

    def import_state(self, state: dict[str, Any]) -> None:
        """Replace the namespace's state with an exported one (one MULTI/EXEC)."""
        breaker, buckets, calls, dep, budget = from_doc(state)
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(*self.all_keys())
        if breaker:
            pipe.hset(self.k_breaker, mapping=breaker)
        window = {}
        for idx, (s, f, w) in buckets.items():
            if s:
                window[f"s:{idx}"] = s
            if f:
                window[f"f:{idx}"] = f
            if w:
                window[f"w:{idx}"] = w
        if window:
            pipe.hset(self.k_window, mapping=window)
        if calls:
            pipe.rpush(self.k_calls, *calls)
        if dep:
            pipe.hset(self.k_dependency, mapping=dep)
        if budget is not None:
            pipe.hset(self.k_budget, "tokens", budget)
        throttle, slices = peer_budget_from_doc(state)
        peer = {f"w:{k}": v for k, v in slices.items()}
        if throttle is not None:
            peer["throttle"] = throttle
        if peer:
            pipe.hset(self.k_budget_peer, mapping=peer)
        pipe.execute()

    def has_state(self) -> bool:
        """Whether the namespace holds breaker, dependency or budget state."""
        return bool(
            self.client.exists(self.k_breaker, self.k_dependency, self.k_budget, self.k_budget_peer)
        )

    @staticmethod
    def export_states(stores: Sequence[RedisStore]) -> list[dict[str, Any] | None]:
        """``export_state`` of several stores on one client, in one MULTI/EXEC round trip;
        None for a store whose namespace holds no state (see ``has_state``).

        On a cluster client the namespaces' slots differ, and no transaction spans slots: the
        reads go in one plain pipeline, which redis-py splits by node (one round trip per
        node, in parallel).
        """
        if not stores:
            return []
        client = stores[0].client
        pipe = client.pipeline(transaction=not hasattr(client, "get_node_from_key"))
        for store in stores:
            store._queue_export(pipe)
        results = pipe.execute()
        out: list[dict[str, Any] | None] = []
        for i in range(len(stores)):
            mine = results[i * RedisStore._EXPORT_READS : (i + 1) * RedisStore._EXPORT_READS]
            out.append(RedisStore._parse_export(mine) if RedisStore._has_state_in(mine) else None)
        return out

    def clear(self) -> None:
        """Delete every key of the namespace and of its scopes."""
        keys = self.all_keys()
        if not self._scope:  # a scope has no scopes of its own
            for name in SCOPES:
                keys += self.scoped(name).all_keys()
        self.client.delete(*keys)

    def __repr__(self) -> str:
        return f"RedisStore(namespace={self.namespace!r})"


def load_scripts(client: Any) -> int:
    """Load every script of ``redis/lua`` into ``client``'s Redis (``SCRIPT LOAD``; one
    round trip each), so that no call pays the ``NOSCRIPT`` answer and the load on its first
    use of a script. Returns how many. A worker does it when it starts."""
    names = sorted(path.stem for path in _LUA.glob("*.lua"))
    for name in names:
        client.script_load(_source(name))
    return len(names)


#: Scripts built on others: their text is preceded by these scripts', each wrapped as a
#: local function of that name taking its own KEYS and ARGV (one copy of every rule).
_PRELUDES = {"allow_step": (("allow", "allow"), ("dependency", "step")),
             "check_step": (("dependency", "step"),),
             "shared_attempt": (("shared_queue", "shared_queue"),),
             "shared_poll": (("shared_queue", "shared_queue"),)}  # fmt: skip


@functools.cache
def _source(name: str) -> str:
    """A script's text, read once per process (a store is built for every burst)."""
    prelude = "".join(
        f"local function {function}(KEYS, ARGV)\n{_source(script)}\nend\n"
        for script, function in _PRELUDES.get(name, ())
    )
    return prelude + (_LUA / f"{name}.lua").read_text()


class _Script:
    """One Lua script of ``redis/lua``, registered with redis-py's ``register_script`` and
    called as a single ``EVALSHA`` (if Redis lost the script, the registered object loads it
    again and retries)."""

    __slots__ = ("client", "registered", "sha")

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.registered = client.register_script(_source(name))
        self.sha = self.registered.sha

    def __call__(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        try:
            return self.client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return self.registered(keys=list(keys), args=list(args))

    def send(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run the script for a caller that will not read its reply. A client that can send
        without waiting (``send_nowait``: the engine hub's, ``labs.worker.hub``) sends it with
        its next round trip and None is returned; any other client runs it as a call."""
        nowait = getattr(self.client, "send_nowait", None)
        if nowait is None:
            return self(keys, args)
        return nowait(("EVALSHA", self.sha, len(keys), *keys, *args), self.registered.script)
