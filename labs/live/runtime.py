"""The engine on Redis for the lab: one session's store, engine and breaker snapshot, and
every read of a class's shared dependency a page makes.

A ``LabSession`` row becomes a ``GuardedClient`` on a ``RedisStore`` namespaced
``fl:{s<id>}``; breaker state lives in Redis (shared by every worker), and the database keeps a
snapshot written on every transition and at each burst's end, put back if Redis loses the
session's keys. A page's tick reads the class's shared model in one call (:func:`shared_now`),
from Redis alone.
"""

from __future__ import annotations

import functools
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from django.conf import settings
from django.db import connection
from django.db.models import Max

from labs.engine import (
    Breaker,
    FakeDependency,
    GuardedClient,
    SharedConfig,
    SharedDependency,
    SystemClock,
    parse_dependency,
    parse_policy,
)
from labs.engine.config import DependencyConfig
from labs.engine.redis import RedisSharedModel, RedisStore
from labs.engine.redis.shared import CONFIG_FIELDS, config_from_fields
from labs.engine.replay import capture_start
from labs.engine.routes import build_routes, needs_routes
from labs.engine.shared import (
    SECOND_FIELDS,
    WAIT_BOUNDS_MS,
    Second,
    private_server,
    seconds_from_fields,
    session_field_names,
    session_seconds_from_fields,
)
from labs.journal.store import Written
from labs.models import Burst, LabSession, SharedDependencyConfig

_client: redis.Redis | None = None
_client_lock = threading.Lock()

#: Wall time: breaker timestamps are shared by processes (and machines) and shown in browsers.
CLOCK = SystemClock(source="wall")


def engine_redis() -> redis.Redis:
    """The process-wide Redis client for engine stores (thread-safe connection pool)."""
    global _client
    if _client is None:
        with _client_lock:
            if _client is None:
                _client = redis.Redis.from_url(
                    settings.LAB_ENGINE_REDIS_URL, health_check_interval=30
                )
    return _client


def namespace(session_id: int) -> str:
    """Redis key namespace of one session's engine state.

    ``{s<id>}`` is a Redis Cluster hash tag: every key of the session hashes to one slot, so
    its Lua scripts and MULTI/EXEC blocks run on a cluster too, and sessions spread over the
    cluster's nodes.
    """
    return f"fl:{{s{session_id}}}"


def session_store(session_id: int, client: redis.Redis | None = None) -> RedisStore:
    """The engine store holding one session's breaker, dependency and budget state
    (through ``client``, by default the process-wide one)."""
    return RedisStore(
        client or engine_redis(), namespace(session_id), probe_lease_ms=settings.LAB_PROBE_LEASE_MS
    )


def shared_model_id(classroom_id: int) -> str:
    """The id of a class's shared dependency model in Redis (keys under ``{shared:<id>}``)."""
    return f"class:{classroom_id}"


def shared_model(classroom_id: int, client: redis.Redis | None = None) -> RedisSharedModel:
    """The class's shared dependency model in Redis (arrivals stamped by Redis's ``TIME``, so
    every worker process agrees on their order)."""
    return RedisSharedModel(client or engine_redis(), shared_model_id(classroom_id))


def private_model(session_id: int, client: redis.Redis | None = None) -> RedisSharedModel:
    """A student's own server with a queue (dependency mode ``server``) in Redis: the shared
    model's scripts under ``{shared:session:<id>}``, called by this session's runs alone."""
    return RedisSharedModel(client or engine_redis(), f"session:{session_id}")


def shared_config(classroom_id: int) -> SharedConfig:
    """The class's shared dependency settings from the database (the engine's defaults when
    the class has none saved)."""
    row = SharedDependencyConfig.objects.filter(classroom_id=classroom_id).first()
    if row is None:
        return SharedConfig()
    return SharedConfig(**row.to_dict())


def configure_shared(
    classroom_id: int, config: SharedConfig | None = None, client: redis.Redis | None = None
) -> RedisSharedModel:
    """Write the class's settings into its Redis model (one ``HSET``; idempotent, queued work
    and a running trigger are kept) and return the model."""
    model = shared_model(classroom_id, client)
    model.configure(config or shared_config(classroom_id))
    return model


#: The model hash's fields a page reads: the settings and the latest trigger.
_MODEL_FIELDS = (
    *CONFIG_FIELDS, "trig", "trig_from", "trig_until", "trig_pct", "trig_servers",
)  # fmt: skip
#: A second's fields in the counters hash (its counts and its wait histogram).
_SECOND_NAMES = (*SECOND_FIELDS, *(f"q{i}" for i in range(len(WAIT_BOUNDS_MS))))


def shared_now(
    classroom_id: int,
    *,
    back_s: int,
    sessions: Sequence[int] = (),
    window_s: int = 0,
    window_unless: int | None = None,
    fallback: SharedConfig | None = None,
) -> dict[str, Any]:
    """Everything a page's tick shows of the class's shared dependency, from Redis alone in
    two round trips (``TIME``, then one pipeline), never the database:

    - ``now``, ``now_us``: Redis's clock, the one that stamps the counters;
    - ``seconds``: the class's counters of every second from ``now - back_s`` to ``now``
      (``Second.to_dict``, zero rows for quiet seconds; one ``HMGET`` of exactly those
      fields, never the whole hash, which holds up to an hour of seconds);
    - ``model``: the settings (``config``, ``capacity_per_s``; ``fallback``, else the
      engine's defaults, when Redis has none) and the latest trigger with its span in
      seconds (``from_s``, ``until_s``);
    - with ``window_s``: ``window``, the complete seconds ``now - window_s``
      to ``now - 1`` (``first``, ``last``), the class's offered attempts over them
      (``class_offered``) and each session's own rows over them (``sessions``, by id),
      unless ``now`` is ``window_unless`` (a caller that already has that second's window).
    """
    client = engine_redis()
    model = shared_model(classroom_id, client)
    seconds, micros = client.time()
    now = int(seconds)
    if now == window_unless:
        window_s = 0
    win_first, win_last = now - window_s, now - 1
    reach = min(now - back_s, win_first) if window_s else now - back_s
    fields = [f"{s}:{name}" for s in range(reach, now + 1) for name in _SECOND_NAMES]
    names = session_field_names(win_first, win_last) if window_s else []
    pipe = client.pipeline(transaction=False)
    pipe.hmget(model.k_counters, fields)
    pipe.hmget(model.k_model, _MODEL_FIELDS)
    for session in sessions if window_s else ():
        pipe.hmget(model.session_key(str(session)), names)
    counters, settings_, *own = pipe.execute()
    found = {row.second: row for row in seconds_from_fields(
        {k: v for k, v in zip(fields, counters, strict=True) if v is not None}
    )}  # fmt: skip
    result: dict[str, Any] = {
        "now": now,
        "now_us": now * 1_000_000 + int(micros),
        "seconds": [
            (found.get(s) or Second(second=s)).to_dict() for s in range(now - back_s, now + 1)
        ],
        "model": _model_now(settings_, fallback),
    }
    if window_s:
        result["window"] = {
            "first": win_first,
            "last": win_last,
            "class_offered": sum(
                found[s].offered for s in range(win_first, win_last + 1) if s in found
            ),
            "sessions": {
                int(session): session_seconds_from_fields(
                    dict(zip(names, values, strict=True)), win_first, win_last
                )
                for session, values in zip(sessions, own, strict=True)
            },
        }
    return result


def shared_seconds(classroom_id: int, first: int, last: int) -> dict[str, Any]:
    """The class's recorded counters of the seconds ``first`` to ``last`` (``Second.to_dict``,
    zero rows for quiet seconds) and Redis's ``now`` (the clock that stamps them): two round
    trips, one ``HMGET`` of exactly those fields. What a recovery question is graded on
    (Redis keeps a model's seconds for an hour)."""
    client = engine_redis()
    model = shared_model(classroom_id, client)
    now = int(client.time()[0])
    last = min(last, now)
    fields = [f"{s}:{name}" for s in range(first, last + 1) for name in _SECOND_NAMES]
    values = client.hmget(model.k_counters, fields) if fields else []
    found = {row.second: row for row in seconds_from_fields(
        {k: v for k, v in zip(fields, values, strict=True) if v is not None}
    )}  # fmt: skip
    return {
        "now": now,
        "seconds": [(found.get(s) or Second(second=s)).to_dict() for s in range(first, last + 1)],
    }


def shared_trigger_span(classroom_id: int) -> dict[str, int] | None:
    """The span of the class's latest trigger as the Redis model stamped it (``from_us``,
    ``until_us``), or None: one ``HMGET``, read right after a trigger is fired so its journal
    row records the times the recovery clock measures from."""
    client = engine_redis()
    start, until = client.hmget(
        shared_model(classroom_id, client).k_model, "trig_from", "trig_until"
    )
    if start is None or until is None:
        return None
    return {"from_us": int(start), "until_us": int(until)}


def shared_sessions_now(
    classroom_id: int, session_ids: Sequence[int], *, now: int, back_s: int, window_s: int
) -> dict[int, dict[str, Any]]:
    """For each of ``session_ids``, by id: the session's own rows of the seconds
    ``now - back_s`` to ``now - 1`` (``seconds``) and the class's offered attempts over the
    last ``window_s`` of them (``class_offered``). One pipelined round trip to Redis however
    many sessions (every lab page of a class in a web process, at its tick), never the
    database."""
    model = shared_model(classroom_id)
    first, last = now - back_s, now - 1
    names = session_field_names(first, last)
    offered = [f"{s}:offered" for s in range(now - window_s, now)]
    pipe = model.client.pipeline(transaction=False)
    for session_id in session_ids:
        pipe.hmget(model.session_key(str(session_id)), names)
    pipe.hmget(model.k_counters, offered)
    *owns, class_offered = pipe.execute()
    total = sum(int(v) for v in class_offered if v)
    return {
        session_id: {
            "now": now,
            "seconds": session_seconds_from_fields(dict(zip(names, own, strict=True)), first, last),
            "class_offered": total,
        }
        for session_id, own in zip(session_ids, owns, strict=True)
    }


def _model_now(values: Sequence[Any], fallback: SharedConfig | None) -> dict[str, Any]:
    """The settings and latest trigger from the model hash's :data:`_MODEL_FIELDS`."""
    settings_values = values[: len(CONFIG_FIELDS)]
    kind, from_us, until_us, pct, trig_servers = (
        None if v is None else (v.decode() if isinstance(v, bytes) else str(v))
        for v in values[len(CONFIG_FIELDS) :]
    )
    if settings_values[0]:
        config = config_from_fields(settings_values)
    else:
        config = fallback or SharedConfig()
    trigger = None
    if kind:
        trigger = {
            "kind": kind,
            "from_us": int(from_us),
            "until_us": int(until_us),
            "factor_pct": int(pct),
            "servers": int(trig_servers),
            "from_s": int(from_us) / 1e6,
            "until_s": int(until_us) / 1e6,
        }
    return {"config": config.to_dict(), "capacity_per_s": config.capacity_per_s, "trigger": trigger}


def inbound_key(session_id: int) -> str:
    """The counter a service past the front of a chain numbers the calls it answers from."""
    return f"{namespace(session_id)}:inbound"


def reserve_call_numbers(session_id: int, base: int, count: int) -> int:
    """Take ``count`` numbers from the session's counter of answered calls (started at
    ``base`` if Redis has none); returns the first."""
    pipe = engine_redis().pipeline(transaction=True)
    pipe.set(inbound_key(session_id), base, nx=True)
    pipe.incrby(inbound_key(session_id), count)
    _, last = pipe.execute()
    return int(last) - count + 1


def chain_key(classroom_id: int, second: int) -> str:
    """One second's counts of the class's chain (``in:<tier>``: calls entering the tier,
    ``out:<tier>``: attempts leaving it, ``req:<tier>``: users' requests entering the chain
    there), under the shared model's hash tag; kept :data:`CHAIN_KEEP_S`."""
    return f"fl:{{shared:{shared_model_id(classroom_id)}}}:chain:{second}"


#: How long a second's chain counts are kept (the panel reads the last ten).
CHAIN_KEEP_S = 300


def chain_layout(classroom_id: int) -> list[list[LabSession]]:
    """The class's chain, front tier first (each tier's sessions in the order they joined);
    empty when the class has none."""
    tiers: dict[int, list[LabSession]] = {}
    for session in LabSession.objects.filter(
        classroom_id=classroom_id, tier__isnull=False
    ).order_by("tier", "pk"):
        tiers.setdefault(session.tier, []).append(session)
    return [tiers[number] for number in sorted(tiers)]


def chain_depth(classroom_id: int) -> int | None:
    """How many tiers the class's chain has (None: no chain); one query."""
    return LabSession.objects.filter(classroom_id=classroom_id).aggregate(depth=Max("tier"))[
        "depth"
    ]


def chain_now(classroom_id: int, depth: int, *, now: int, window_s: int = 10) -> dict[str, Any]:
    """What the panel shows of the chain over the complete seconds ``now - window_s`` to
    ``now - 1``: per tier the calls entering it per second and the attempts leaving it per
    call entering it (the tier's amplification), and the back tier's attempts per user
    request (a call of a run, entering the chain at the run's tier: the leaf's hits per user
    request). One pipeline of ``HGETALL``."""
    client = engine_redis()
    pipe = client.pipeline(transaction=False)
    for second in range(now - window_s, now):
        pipe.hgetall(chain_key(classroom_id, second))
    totals: dict[str, int] = {}
    for row in pipe.execute():
        for name, value in row.items():
            key = name.decode() if isinstance(name, bytes) else name
            totals[key] = totals.get(key, 0) + int(value)
    tiers = []
    for number in range(1, depth + 1):
        calls_in, out = totals.get(f"in:{number}", 0), totals.get(f"out:{number}", 0)
        tiers.append({
            "tier": number,
            "calls_per_s": round(calls_in / window_s, 1),
            "attempts_per_s": round(out / window_s, 1),
            "amplification": round(out / calls_in, 2) if calls_in else None,
        })  # fmt: skip
    # A user's request enters where its run is: the front's traffic, or a student's own
    # burst at another tier.
    requests = sum(totals.get(f"req:{n}", 0) for n in range(1, depth + 1))
    back = totals.get(f"out:{depth}", 0)
    return {
        "window_s": window_s,
        "tiers": tiers,
        "requests": requests,
        "requests_per_s": round(requests / window_s, 1),
        "leaf_per_request": round(back / requests, 2) if requests else None,
    }


def is_shared(dependency: dict[str, Any] | None) -> bool:
    """Whether a session's dependency settings point at the class's shared dependency."""
    return (dependency or {}).get("mode") == "shared"


@dataclass
class SessionEngine:
    """The engine objects for one session, wired to one store, clock and sink."""

    store: RedisStore
    breaker: Breaker
    dependency: FakeDependency | SharedDependency
    client: GuardedClient
    rng: random.Random
    #: In a chain of students (labs.worker.chain): the client calls the next tier, whatever
    #: the session's own dependency settings say, so a change of them is not applied.
    chained: bool = False


def build_engine(
    session: LabSession,
    *,
    sink=None,
    rng: random.Random | None = None,
    clock=CLOCK,
    client: redis.Redis | None = None,
    wrap: Callable[[Any], Any] | None = None,
) -> SessionEngine:
    """Engine objects for ``session``'s current settings (their store talks to Redis through
    ``client``; a running burst or traffic run passes the engine hub's (``labs.worker.hub``),
    with the hub's clock).

    ``wrap`` replaces the dependency the guarded client calls by ``wrap(dependency)`` (a
    chain of students: the next tier, or the leaf counted); the engine is then ``chained``.

    ``rng`` defaults to one seeded from the session's seed and burst count, so a burst can be
    replayed. The dependency is :func:`dependency_for`'s: the class's shared model, the
    student's own server with a queue, or a private fake dependency in the session's store.
    Raises labs.engine.ValidationError if the stored settings are invalid (they never are:
    services validate before they save).
    """
    if rng is None:
        rng = random.Random(burst_rng_seed(session))
    store = session_store(session.pk, client)
    dependency, config = dependency_for(
        session.dependency, session_id=session.pk, classroom_id=session.classroom_id,
        store=store, clock=clock, rng=rng, client=client,
    )  # fmt: skip
    policy = parse_policy(session.policy)
    breaker = Breaker(policy.breaker, store=store, clock=clock, rng=rng, sink=sink)
    # Hosts, B, a bulkhead, a fallback, keys (labs.engine.routes): only when configured.
    routes = (
        build_routes(config, policy, store=store, clock=clock, rng=rng, sink=sink, breaker=breaker)
        if config is not None and needs_routes(config, policy) and wrap is None
        else None
    )
    client = GuardedClient(
        policy, breaker=breaker, dependency=dependency if wrap is None else wrap(dependency),
        clock=clock, rng=rng, sink=sink, store=store, routes=routes,
    )  # fmt: skip
    return SessionEngine(
        store=store, breaker=breaker, dependency=dependency, client=client, rng=rng,
        chained=wrap is not None,
    )  # fmt: skip


def dependency_for(
    settings_: dict[str, Any] | None,
    *,
    session_id: int,
    classroom_id: int,
    store: RedisStore,
    clock,
    rng: random.Random,
    client: redis.Redis | None = None,
) -> tuple[FakeDependency | SharedDependency, DependencyConfig | None]:
    """What a session's guarded client calls for its dependency settings ``settings_``, and
    their config when they are a fake dependency's (None otherwise: no routes then).

    ``shared``: the class's one model, configured from the database first (an idempotent
    HSET, so a Redis that lost the model's keys gets them back before the first attempt);
    ``server``: the student's own server with a queue (:func:`private_model`), configured
    from the settings the same way; any other mode: a private fake dependency in ``store``.
    """
    if is_shared(settings_):
        model = configure_shared(classroom_id, client=client)
        return SharedDependency(model, clock=clock, session=session_id), None
    config = parse_dependency(settings_ or {})
    if config.mode == "server":
        model = private_model(session_id, client)
        return private_server(config.server, clock=clock, model=model), None
    return FakeDependency(config, store=store, clock=clock, rng=rng), config


def burst_rng_seed(session: LabSession) -> str:
    """The seed of the rng of the session's current burst, recorded in its start state so the
    burst's jitter and error-rate draws can be replayed: the session's seed (the scenario's)
    and burst count, so a private dependency's burst draws what the scenario run in virtual
    time draws. On the class's shared dependency the session's id is mixed in: students
    bursting together there back off independently, never with one class-wide jitter."""
    if is_shared(session.dependency):
        return f"{session.seed}:s{session.pk}:{session.burst_count}"
    return f"{session.seed}:{session.burst_count}"


def start_state(session: LabSession, burst: Burst, rng_seed: str) -> tuple[dict[str, Any], bool]:
    """The replayable start state of ``burst`` (see :mod:`labs.engine.replay`): the
    session's dependency and policy, its store's state in Redis and the time, read now, just
    before the burst's first call; and whether Redis had lost the session's state, in which
    case the database snapshot is put back first (as :func:`restore_if_lost`; the caller
    journals it). One export of the store (the check for lost state is that export)."""
    store = session_store(session.pk)
    exported = store.export_state()
    parts = ("breaker", "dependency", "budget", "peer_budget")
    lost = not any(exported.get(part) for part in parts)
    restored = lost and _put_snapshot_back(session, store)
    if restored:
        exported = store.export_state()
    return (
        capture_start(
            dependency=session.dependency,
            policy=session.policy,
            store_state=exported,
            now_us=int(CLOCK.now() * 1e6 + 0.5),
            rng_seed=rng_seed,
            size=burst.size,
            concurrency=burst.concurrency,
            first_call=burst.first_call_no or 1,
            burst=burst.number,
            probe_lease_ms=settings.LAB_PROBE_LEASE_MS,
        ),
        restored,
    )


def breaker_view(session: LabSession) -> dict[str, Any]:
    """The breaker as a page shows it, read from Redis (the live truth) at now.

    Call :func:`labs.services.lab.session_ensure_state` first if Redis may have lost the
    session (it restores the snapshot and journals that it did).
    """
    return breaker_view_of(session.pk, session.policy)


def breaker_view_of(session_id: int, policy: dict[str, Any]) -> dict[str, Any]:
    """:func:`breaker_view` from the session's id and policy alone: Redis, no database (a
    websocket consumer keeps the policy and asks this after every state change and burst).

    Two round trips: the breaker's snapshot (its ``state`` is the effective one at the same
    instant) and one pipelined look for host and B breakers (then one read per such part).
    The store comes from :func:`_viewing_store`: a badge is read once per push that changes
    a breaker, for every page, and building a store registers its nine scripts."""
    parsed = parse_policy(policy)
    store = _viewing_store(session_id, engine_redis())
    view = Breaker(parsed.breaker, store=store, clock=CLOCK).snapshot()
    view["parts"] = part_breakers(store, parsed)
    # With a breaker per host (and several hosts) no call asks the dependency-wide breaker:
    # whatever it last held (open from before the switch) is stale, so the badge shows the
    # hosts' breakers only (the ``breaker-badge`` partial).
    view["per_host"] = any(p["key"].startswith("h") for p in view["parts"])
    return view


@functools.lru_cache(maxsize=4096)
def _viewing_store(session_id: int, client: redis.Redis) -> RedisStore:
    """A session's store kept for reading its breakers (never for a burst: the breaker read
    keeps no state between calls, so the store can be shared by every thread)."""
    return session_store(session_id, client)


def part_breakers(store: RedisStore, policy) -> list[dict[str, Any]]:
    """The breakers beside the dependency's: each host's (with ``breaker_scope: host``) and
    dependency B's, for the badge; [] when there are none. The hosts and B that exist are
    those whose dependency state was armed (one pipelined ``EXISTS`` per scope)."""
    names = [f"h{i}" for i in range(8)] if policy.breaker_scope == "host" else []
    names.append("b")
    pipe = store.client.pipeline(transaction=False)
    for name in names:
        pipe.exists(store.scoped(name).k_dependency)
    present = [name for name, found in zip(names, pipe.execute(), strict=True) if found]
    hosts = [n for n in present if n.startswith("h")]
    parts = []
    for name in present:
        if name.startswith("h") and len(hosts) < 2:
            continue  # one host: its breaker is the dependency's
        snap = Breaker(policy.breaker, store=store.scoped(name), clock=CLOCK).snapshot()
        parts.append(
            {
                "name": f"host {name[1:]}" if name.startswith("h") else "B",
                "key": name,
                "state": snap["state"],
                "open_until_ms": snap.get("open_until_ms"),
                "open_for_ms": snap.get("open_for_ms"),
            }
        )
    return parts


def save_snapshot(session_id: int) -> None:
    """Copy the session's Redis engine state into ``LabSession.breaker_snapshot``."""
    save_snapshots([session_id])


def save_snapshots(session_ids: Sequence[int]) -> None:
    """:func:`save_snapshot` for several sessions: one Redis round trip, one UPDATE per
    session (one ``executemany``).

    A session whose Redis namespace holds no state keeps its snapshot as it is. Plain SQL
    rather than ``bulk_update``: the journal writer calls this in every batch with a
    transition or a burst's end, and building ``bulk_update``'s CASE expression cost more
    than the statement.
    """
    ids = sorted(set(session_ids))
    exported = RedisStore.export_states([session_store(sid) for sid in ids])
    field = LabSession._meta.get_field("breaker_snapshot")
    params = [
        (field.get_db_prep_save({"store": doc, "state": _state_of(doc)}, connection), sid)
        for sid, doc in zip(ids, exported, strict=True)
        if doc is not None
    ]
    if params:
        table = connection.ops.quote_name(LabSession._meta.db_table)
        column = connection.ops.quote_name(field.column)
        with connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {table} SET {column} = %s WHERE id = %s",  # noqa: S608
                params,
            )


def _state_of(exported: dict[str, Any]) -> str:
    breaker = exported.get("breaker") or {}
    state = breaker.get("state", "closed")
    return state if state in ("closed", "open", "half_open") else "closed"


def restore_if_lost(session: LabSession) -> bool:
    """Put the database snapshot back into Redis if Redis has lost this session's state.

    Returns True when it restored something (the caller journals it). A session with no
    snapshot yet (nothing ever happened) has nothing to restore.
    """
    store = session_store(session.pk)
    return not store.has_state() and _put_snapshot_back(session, store)


def _put_snapshot_back(session: LabSession, store: RedisStore) -> bool:
    """Import the session's database snapshot into ``store``; False when it has none."""
    snapshot = (session.breaker_snapshot or {}).get("store")
    if not snapshot:
        return False
    store.import_state(snapshot)
    return True


def store_snapshots_after_write(written: Sequence[Written]) -> None:
    """Journal-writer hook: after a batch with a transition or a burst end, snapshot.

    Runs in the writer thread inside the batch's transaction, so the snapshot commits with the
    rows that describe the change.
    """
    save_snapshots(
        [
            item.entry.session_id
            for item in written
            if item.entry.kind in ("transition", "burst_end") or item.entry.state_to
        ]
    )


# --- Dependency changes reach running bursts at call boundaries -----------------------------
#
# The dependency's *state* (flaky counter, outage start) already lives in the store. Its
# *settings* are the session's; a change (a student's click, an instructor's class-wide fault
# or its expiry) is published to ``fl:{s<id>}:dependency_config`` after the commit. A running
# burst reads that key once per finished call (from its journal sink, which sees every
# call_result, at most every ``DependencyWatch.interval``) and swaps its FakeDependency when it
# changed: a change never lands in the middle of an attempt.


def dependency_config_key(session_id: int) -> str:
    return f"{namespace(session_id)}:dependency_config"


def publish_dependency(session_id: int, dependency: dict[str, Any]) -> None:
    """Make ``dependency`` the settings running bursts of the session switch to."""
    engine_redis().set(dependency_config_key(session_id), json.dumps(dependency, sort_keys=True))


class DependencyWatch:
    """Swaps a running burst's dependency when the session's settings change (thread-safe)."""

    def __init__(
        self, session: LabSession, engine: SessionEngine, rng: random.Random, clock=CLOCK
    ) -> None:
        self._key = dependency_config_key(session.pk)
        self._classroom_id = session.classroom_id
        self._session_id = session.pk
        self._clock = clock
        self._engine = engine
        self._rng = rng
        self._current = json.dumps(session.dependency, sort_keys=True).encode()
        self._lock = threading.Lock()
        self._checked = 0.0

    #: Look at most this often (seconds): a burst of short calls should not pay a Redis
    #: round trip per call to learn that nothing changed. A change still lands between calls.
    interval = 0.25

    def check(self) -> bool:
        """Apply a published change, if any; True when the dependency was swapped."""
        now = time.monotonic()
        if self._engine.chained or now - self._checked < self.interval:
            return False
        self._checked = now
        raw = self._engine.store.client.get(self._key)
        if raw is None or raw == self._current:
            return False
        with self._lock:
            if raw == self._current:
                return False
            settings_ = json.loads(raw)
            dependency, config = dependency_for(
                settings_, session_id=self._session_id, classroom_id=self._classroom_id,
                store=self._engine.store, clock=self._clock, rng=self._rng,
            )  # fmt: skip
            client = self._engine.client
            # Hosts and B are routes: a change rebuilds them (at a call boundary, like the rest).
            routes = None
            if config is not None and needs_routes(config, client.policy):
                routes = build_routes(
                    config, client.policy, store=self._engine.store, clock=self._clock,
                    rng=self._rng, sink=client.sink, breaker=self._engine.breaker,
                )  # fmt: skip
            client.routes = routes
            self._engine.client.dependency = dependency
            self._engine.dependency = dependency
            self._current = raw
            return True
