"""Replay a burst from its recorded start state, in virtual time, with any policy.

A burst's *start state* is everything the engine reads when the burst begins: the
dependency's settings, the store's state (breaker state and generation, rolling window, the
dependency's flaky counter / start time / script position, retry-budget tokens), the policy,
the clock's time and the seed of the burst's rng. :func:`capture_start` builds it as a JSON
document; :func:`replay` rebuilds a :class:`MemoryStore` from it, starts a
:class:`VirtualClock` at the recorded instant and runs the same calls with the recorded
policy or another one. Nothing outside the replay's own store changes.

With the same policy, one caller and a mode whose answers do not depend on elapsed time
(healthy, flaky, down, slow, error_rate, script) and a breaker that stays open for the
whole burst or never opens, a replay gives exactly the real burst's attempts per call,
outcomes and transitions: the rng draws happen in the same order and every sleep is the same
length. :func:`fidelity` says, for one start state, where that promise weakens and why.

:func:`compare` runs one start state under two policies and :func:`diff_rows` lays the two
bursts side by side: succeeded, failed, fast-failed, attempts, dependency hits, time waiting,
total time.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from labs.engine.breaker import Breaker
from labs.engine.client import GuardedClient
from labs.engine.clock import VirtualClock
from labs.engine.dependency import FakeDependency
from labs.engine.events import Event
from labs.engine.routes import build_routes, needs_routes
from labs.engine.scenario import build_output, run_scenario
from labs.engine.shared import SharedDependency, private_server
from labs.engine.stores.memory import DEFAULT_PROBE_LEASE_MS, MemoryStore
from labs.engine.validate import (
    Problem,
    ValidationError,
    merge_settings,
    parse_dependency,
    parse_policy,
    parse_scenario,
    validate_policy,
)

__all__ = [
    "DIFF_ROWS",
    "PRESETS",
    "START_VERSION",
    "Replay",
    "StartState",
    "capture_start",
    "compare",
    "compare_scenario",
    "diff_rows",
    "fidelity",
    "parse_start",
    "policy_of",
    "replay",
    "scenario_metrics",
]

START_VERSION = 1

#: Modes whose answer depends on how much time has passed since the dependency was set.
TIMED_MODES = ("outage", "rate_limited")


@dataclass(frozen=True)
class StartState:
    """A parsed start-state document (see :func:`capture_start`)."""

    dependency: dict[str, Any]
    policy: dict[str, Any]
    store: dict[str, Any] | None
    now_us: int
    rng_seed: str
    size: int
    concurrency: int
    first_call: int
    burst: int | None
    probe_lease_ms: int

    def breaker(self) -> dict[str, Any]:
        """The breaker's recorded fields (state, generation, ...); empty when never used."""
        return dict((self.store or {}).get("breaker") or {})


def capture_start(
    *,
    dependency: dict[str, Any],
    policy: dict[str, Any],
    store_state: dict[str, Any] | None,
    now_us: int,
    rng_seed: str,
    size: int,
    concurrency: int,
    first_call: int,
    burst: int | None,
    probe_lease_ms: int = DEFAULT_PROBE_LEASE_MS,
) -> dict[str, Any]:
    """The JSON document of one burst's start state (what :func:`replay` reads)."""
    return {
        "version": START_VERSION,
        "dependency": dependency,
        "policy": policy,
        "store": store_state,
        "now_us": int(now_us),
        "rng_seed": str(rng_seed),
        "size": int(size),
        "concurrency": int(concurrency),
        "first_call": int(first_call),
        "burst": burst,
        "probe_lease_ms": int(probe_lease_ms),
    }


def parse_start(doc: Any) -> StartState:
    """A :class:`StartState` from a document. Raises ValueError naming what is wrong."""
    if not isinstance(doc, dict) or doc.get("version") != START_VERSION:
        raise ValueError(f"not a burst start state (version {START_VERSION})")
    for key in ("dependency", "policy"):
        if not isinstance(doc.get(key), dict):
            raise ValueError(f"start state: {key} must be an object")
    for key in ("now_us", "size", "concurrency", "first_call", "probe_lease_ms"):
        value = doc.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"start state: {key} must be a whole number >= 0 (got {value!r})")
    if doc["size"] < 1 or doc["concurrency"] < 1:
        raise ValueError("start state: size and concurrency must be >= 1")
    store = doc.get("store")
    if store is not None and not isinstance(store, dict):
        raise ValueError("start state: store must be an object or null")
    burst = doc.get("burst")
    if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int)):
        raise ValueError(f"start state: burst must be a whole number or null (got {burst!r})")
    return StartState(
        dependency=doc["dependency"],
        policy=doc["policy"],
        store=store,
        now_us=doc["now_us"],
        rng_seed=str(doc.get("rng_seed", "")),
        size=doc["size"],
        concurrency=doc["concurrency"],
        first_call=doc["first_call"],
        burst=burst,
        probe_lease_ms=doc["probe_lease_ms"],
    )


@dataclass
class Replay:
    """One replayed burst: its events (each with its ``explain`` sentence), the scenario
    output of those events (times in ms from the burst's start), the policy it ran with and
    how close it is to the real burst."""

    policy: dict[str, Any]
    events: list[Event]
    output: dict[str, Any]
    fidelity: dict[str, Any]

    @property
    def summary(self) -> dict[str, Any]:
        """The burst's summary (``succeeded``, ``attempts``, ... as in ``Burst.summary``)."""
        return self.output["bursts"][0] if self.output["bursts"] else {}

    def metrics(self) -> dict[str, float]:
        """The numbers of the diff table (see :data:`DIFF_ROWS`)."""
        s = self.summary
        return {
            "succeeded": s.get("succeeded", 0),
            "failed": s.get("failed", 0),
            "fast_failed": s.get("fast_failed", 0),
            "attempts": s.get("attempts_total", 0),
            "dependency_hits": sum(1 for e in self.events if e.kind == "attempt"),
            "waiting_ms": waiting_ms(s),
            "total_ms": round(s.get("end_ms", 0.0) - s.get("start_ms", 0.0), 3),
        }


def replay(start: StartState | dict[str, Any], *, policy: dict[str, Any] | None = None) -> Replay:
    """Run the recorded burst again in virtual time, with ``policy`` (default: the recorded
    one). Raises ValidationError for an invalid policy (nothing runs) and ValueError for a
    malformed start state."""
    if not isinstance(start, StartState):
        start = parse_start(start)
    chosen = parse_policy(start.policy if policy is None else policy)
    try:
        dependency_config = parse_dependency(start.dependency)
    except ValidationError as exc:
        raise ValueError(f"start state: {exc}") from exc
    clock = VirtualClock(start.now_us / 1e6)
    store = MemoryStore(probe_lease_ms=start.probe_lease_ms)
    if start.store:
        store.import_state(start.store)
    rng = random.Random(start.rng_seed)
    events: list[Event] = []
    sink = events.append
    dependency: FakeDependency | SharedDependency
    if dependency_config.mode == "server":  # its queue as the burst found it is not recorded
        dependency = private_server(dependency_config.server, clock=clock)
    else:
        dependency = FakeDependency(dependency_config, store=store, clock=clock, rng=rng)
    breaker = Breaker(chosen.breaker, store=store, clock=clock, rng=rng, sink=sink)
    routes = None
    if needs_routes(dependency_config, chosen):  # hosts, B, bulkhead, fallback, keys
        routes = build_routes(
            dependency_config, chosen, store=store, clock=clock, rng=rng, sink=sink,
            breaker=breaker,
        )  # fmt: skip
    client = GuardedClient(
        chosen, breaker=breaker, dependency=dependency, clock=clock, rng=rng, sink=sink,
        store=store, routes=routes,
    )  # fmt: skip
    t0 = clock.now() * 1000
    client.run_burst(
        start.size, concurrency=start.concurrency, first_call=start.first_call, burst=start.burst
    )
    return Replay(
        policy=chosen.to_dict(),
        events=events,
        output=build_output(events, t0),
        fidelity=fidelity(start),
    )


def fidelity(start: StartState) -> dict[str, Any]:
    """How closely a replay with the recorded policy matches the real burst.

    ``exact`` is True when nothing in the burst depends on real time or thread order;
    otherwise ``reasons`` says, in sentences, which parts may differ and why.
    """
    reasons = []
    mode = start.dependency.get("mode")
    if mode in TIMED_MODES:
        reasons.append(
            f"the dependency's {mode.replace('_', '-')} ends at a fixed instant; the real burst "
            "also spent time on Redis round trips and thread scheduling that the replay does "
            "not, so a call within a few milliseconds of that instant may land on the other side"
        )
    if mode == "shared":
        reasons.append(
            "the class's shared dependency answered from a queue that the whole class's load "
            "filled (waits, shed attempts, triggers); a replay has this session alone, so each "
            "attempt is answered as by a healthy dependency: only a burst that met no queue "
            "and no trigger replays the same"
        )
    if mode == "server":
        reasons.append(
            "your server's queue starts empty in the replay; the real burst met it as earlier "
            "calls left it, and its service times ran on Redis's clock: a burst that found "
            "the servers idle replays alike within a few milliseconds"
        )
    if start.concurrency > 1:
        reasons.append(
            f"{start.concurrency} callers ran on threads in the real burst; the replay runs them "
            "in virtual time, so who took which call number near a breaker transition may differ"
        )
    state = start.breaker().get("state") or "closed"
    reasons.append(
        "a breaker cooldown that ends during the burst ends at a wall-clock instant; the "
        "replay reaches it after exactly the configured waits, the real burst a little later"
        if state != "closed"
        else "a breaker that opens and cools down within the burst reopens after exactly the "
        "configured waits in the replay, a little later in the real burst"
    )
    parts = bool(start.dependency.get("hosts") or start.dependency.get("b"))
    remembered = start.policy.get("fallback") == "cached" or start.policy.get("idempotency_keys")
    if parts or remembered:
        reasons.append(
            "each host's and B's breaker and dependency state, the cached answer and the "
            "idempotency keys already seen are not in the start state: the replay starts them "
            "fresh"
        )
    exact = (
        mode not in TIMED_MODES
        and mode not in ("shared", "server")
        and start.concurrency == 1
        and not (parts or remembered)
    )
    return {"exact": exact, "reasons": reasons}


def compare(
    start: StartState | dict[str, Any],
    policy_a: dict[str, Any] | None,
    policy_b: dict[str, Any],
) -> tuple[Replay, Replay]:
    """The same start state replayed under two policies (``policy_a`` None: the recorded)."""
    if not isinstance(start, StartState):
        start = parse_start(start)
    return replay(start, policy=policy_a), replay(start, policy=policy_b)


def waiting_ms(summary: dict[str, Any]) -> float:
    """A burst's time waiting: its backoff sleeps and its calls' waits for a pool slot."""
    return round(summary.get("backoff_ms_total", 0.0) + summary.get("wait_ms_total", 0.0), 3)


#: (key, label, unit) of each diff-table row.
DIFF_ROWS = (
    ("succeeded", "succeeded", ""),
    ("failed", "failed", ""),
    ("fast_failed", "fast-failed", ""),
    ("attempts", "attempts", ""),
    ("dependency_hits", "dependency hits", ""),
    ("waiting_ms", "time waiting", "ms"),
    ("total_ms", "total time", "ms"),
)


def diff_rows(a: dict[str, float], b: dict[str, float]) -> list[dict[str, Any]]:
    """Rows of the diff table from two metric dicts: label, a, b, b - a, unit."""
    rows = []
    for key, label, unit in DIFF_ROWS:
        va, vb = a.get(key, 0), b.get(key, 0)
        delta = round(vb - va, 3)
        rows.append({"key": key, "label": label, "a": va, "b": vb, "delta": delta, "unit": unit})
    return rows


def scenario_metrics(output: dict[str, Any]) -> dict[str, float]:
    """The diff table's numbers for a whole scenario run (``run_scenario`` output with
    ``include_events``): sums over its bursts, and its total time."""
    bursts = output["bursts"]
    return {
        "succeeded": sum(b["succeeded"] for b in bursts),
        "failed": sum(b["failed"] for b in bursts),
        "fast_failed": sum(b["fast_failed"] for b in bursts),
        "attempts": sum(b["attempts_total"] for b in bursts),
        "dependency_hits": sum(1 for e in output.get("events", ()) if e["kind"] == "attempt"),
        "waiting_ms": round(sum(waiting_ms(b) for b in bursts), 3),
        "total_ms": output["total_ms"],
    }


def compare_scenario(
    scenario: dict[str, Any],
    policy_b: dict[str, Any],
    *,
    policy_a: dict[str, Any] | None = None,
    names: tuple[str, str] = ("policy_a", "policy_b"),
) -> dict[str, Any]:
    """Run ``scenario`` (its seed, dependency and steps but its policy changes) twice in
    virtual time: with its own policy, or ``policy_a`` merged over it, and with ``policy_b``
    merged over it. Returns
    ``{"a": output, "b": output, "diff": rows}`` (outputs with their events).

    Raises ValidationError for an invalid scenario or policy (a policy's field names start
    with its name in ``names``); nothing runs then.
    """
    parsed = parse_scenario(scenario)
    base = parsed.policy.to_dict()
    policies = {}
    problems: list[Problem] = []
    for name, changes in zip(names, (policy_a or {}, policy_b), strict=True):
        if not isinstance(changes, dict):
            problems.append(Problem(name, "must be an object"))
            continue
        merged = merge_settings(base, changes)
        problems += [
            Problem(name + p.field.removeprefix("policy"), p.message)
            for p in validate_policy(merged)
        ]
        policies[name] = merged
    if problems:
        raise ValidationError(problems)
    runs = {}
    # The scenario's own policy changes are left out: each run keeps its policy throughout,
    # or both would end on the lesson's last policy.
    steps = [
        s for s in scenario.get("steps") or [] if not (isinstance(s, dict) and "set_policy" in s)
    ]
    for name, key in zip(names, ("a", "b"), strict=True):
        script = dict(scenario, policy=policies[name], steps=steps)
        runs[key] = run_scenario(script, include_events=True)
        runs[key]["policy"] = parse_policy(policies[name]).to_dict()
    runs["diff"] = diff_rows(scenario_metrics(runs["a"]), scenario_metrics(runs["b"]))
    return runs


#: Named policies a comparison may use instead of JSON (changes merged over the defaults).
PRESETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "no-retries": {"max_attempts": 1},
    "retries-no-jitter": {"max_attempts": 4, "jitter": "none"},
    "full-jitter": {"max_attempts": 4, "jitter": "full"},
    "retry-budget": {"max_attempts": 4, "retry_budget": {"token_ratio": 0.1, "max_tokens": 2}},
    "threshold-1": {"breaker": {"failure_threshold": 1}},
    "threshold-5": {"breaker": {"failure_threshold": 5}},
}


def step_policies(scenario: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """The policy in force after each ``set_policy`` step of ``scenario`` (1-based step
    number, the whole policy: the changes accumulate, as on the lab page), for a comparison
    to pick a lesson step's policy. Steps whose policy is invalid are left out."""
    policy = scenario.get("policy") if isinstance(scenario.get("policy"), dict) else {}
    out = []
    for number, step in enumerate(scenario.get("steps") or [], start=1):
        changes = step.get("set_policy") if isinstance(step, dict) else None
        if not isinstance(changes, dict):
            continue
        policy = merge_settings(policy, changes)
        try:
            out.append((number, parse_policy(policy).to_dict()))
        except ValidationError:
            continue
    return out


def policy_of(token: str, field: str) -> dict[str, Any]:
    """A policy change set from a preset name or a JSON object; raises ValidationError naming
    ``field`` when it is neither."""
    token = token.strip()
    if token in PRESETS:
        return dict(PRESETS[token])
    if not token.startswith("{"):
        raise ValidationError(
            [Problem(field, f"must be a preset ({', '.join(PRESETS)}) or a JSON object")]
        )
    try:
        value = json.loads(token)
    except json.JSONDecodeError as exc:
        raise ValidationError(
            [Problem(field, f"is not valid JSON (column {exc.colno}: {exc.msg})")]
        ) from exc
    if not isinstance(value, dict):
        raise ValidationError([Problem(field, "must be a JSON object")])
    return value
