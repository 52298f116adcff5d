"""In-process store: the breaker state machine in Python, one lock per store.

Mirrors the Redis store's Lua scripts rule for rule (a differential test drives both with
the same random sequence and compares every decision). Probe leases expire on the caller's
clock here, since there is no other process to outlive.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from typing import Any

from labs.engine.stores.base import (
    ADMIT,
    APPLIED,
    CLOSED,
    DEFAULT_PROBE_LEASE_MS,
    HOLD,
    OPENED,
    PROBE,
    REJECT_HALF_OPEN,
    REJECT_OPEN,
    REOPENED,
    STALE,
    WINDOW_SLICES,
    AllowReply,
    BreakerSpec,
    RecordReply,
    effective_state,
    from_doc,
    peer_budget_doc,
    peer_budget_from_doc,
    scaled_cooldown_us,
    to_doc,
)

__all__ = ["MemoryStore"]

_FRESH = {
    "state": "closed",
    "gen": 0,
    "streak": 0,
    "opened_at": 0,
    "open_until": 0,
    "ho_succ": 0,
    "win_s": 0,
    "win_f": 0,
    "forced": "",
    "opens": 0,
    "ho_adm": 0,
    "ho_fail": 0,
    "win_w": 0,
    "ho_slow": 0,
    # gobreaker's Counts (``counts: gobreaker``) and the closed state's interval expiry
    "c_req": 0,
    "c_ts": 0,
    "c_tf": 0,
    "c_cs": 0,
    "c_cf": 0,
    "c_exp": 0,
}
_NO_COUNTS = {"c_req": 0, "c_ts": 0, "c_tf": 0, "c_cs": 0, "c_cf": 0}


class MemoryStore:
    """Breaker, dependency and budget state of one process, guarded by a lock.

    Thread-safe; every operation is atomic with respect to the others. The lock is never
    held while anyone sleeps, so cooperative callers of a VirtualClock cannot deadlock on it.
    """

    def __init__(self, probe_lease_ms: int = DEFAULT_PROBE_LEASE_MS) -> None:
        self.probe_lease_ms = int(probe_lease_ms)
        self._lock = threading.Lock()
        self._tokens = itertools.count(1)
        self._b: dict[str, Any] = dict(_FRESH)
        self._b_written = False  # has_state / export: a fresh breaker is no state at all
        # Replies that do not change within a generation, reused on the hot path. ``_door``
        # is the admit reply while the breaker is closed, None otherwise: reading it is one
        # atomic attribute load, so a closed breaker admits without taking the lock.
        self._door: AllowReply | None = AllowReply(ADMIT, 0, -1, "", 0, False)
        self._applied = RecordReply(APPLIED, 0, 0, 0, 0)
        # ``_quiet`` is the applied reply while a success cannot change anything (closed, no
        # failure streak), None otherwise: such a success is recorded without the lock.
        # Together they spare the lock and a reply allocation on both steps of an admitted
        # call.
        self._quiet: RecordReply | None = self._applied
        self._buckets: dict[int, list[int]] = {}
        self._calls: deque[str] = deque()
        self._probes: dict[int, tuple[str, int]] = {}  # slot -> (token, expires_at_us)
        self._inflight: dict[str, int] = {}  # strict admission: token -> expires_at_us
        self._dep: dict[str, int] | None = None
        self._budget: int | None = None
        self._throttle: int | None = None  # gRPC retry throttling, milli-tokens
        self._slices: dict[int, int] = {}  # Finagle's retry budget: slice -> net amount
        self._scopes: dict[str, MemoryStore] = {}  # a host's or dependency B's own state
        self._last_success: int | None = None  # the cached fallback's answer time
        self._keys: set[str] = set()  # idempotency keys whose effect was applied

    # -- scopes, cache, effects --------------------------------------------------------------

    def scoped(self, name: str) -> MemoryStore:
        """The store of one part of this one (a host ``h0``.., dependency ``b``): its own
        breaker and dependency state, the same for every call with the same name."""
        with self._lock:
            child = self._scopes.get(name)
            if child is None:
                child = self._scopes[name] = MemoryStore(self.probe_lease_ms)
            return child

    def fallback_note(self, now_us: int) -> None:
        """A success happened at ``now_us``: the cached answer is this fresh."""
        with self._lock:
            self._last_success = int(now_us)

    def fallback_last(self) -> int | None:
        """The time of the last success (the cached answer), or None."""
        return self._last_success

    def effect_once(self, key: str) -> bool:
        """Whether ``key``'s effect is applied now (True the first time only)."""
        with self._lock:
            if key in self._keys:
                return False
            self._keys.add(key)
            return True

    # -- breaker -----------------------------------------------------------------------------

    def breaker_door(self) -> AllowReply | None:
        """The admit reply if the breaker is closed right now (no lock, no clock), else None.

        Optional store method: :class:`~labs.engine.breaker.Breaker` uses it as a fast path.
        """
        return self._door

    def breaker_allow(self, spec: BreakerSpec, now_us: int) -> AllowReply:
        """Admission decision (see :class:`~labs.engine.stores.base.AllowReply`)."""
        door = self._door
        if door is not None and not (spec.counts or spec.interval_us or spec.strict):
            return door
        with self._lock:
            if self._door is not None:
                if self._b["forced"] or not (spec.counts or spec.interval_us or spec.strict):
                    return self._door
                return self._closed_admit(spec, now_us)
            b = self._b
            gen = b["gen"]
            state = b["state"]
            forced = b["forced"]
            if forced == "open":
                return AllowReply(REJECT_OPEN, gen, -1, "", -1, False)
            moved = False
            if state == "open":
                until = b["open_until"]
                if now_us < until or (spec.strict_edge and now_us == until):
                    return AllowReply(REJECT_OPEN, gen, -1, "", until, False)
                gen += 1
                b.update(state="half_open", gen=gen, ho_succ=0, ho_adm=0, ho_fail=0, ho_slow=0)
                b.update(_NO_COUNTS)
                self._sync()
                moved = True
            probes = self._probes
            limit = spec.half_open_calls
            if limit and b["ho_adm"] >= limit:
                # Every admission of the period is used. If no probe is in flight, those
                # without a result died (their results could only arrive stale): give
                # their admissions back, so a dead holder cannot keep the breaker half-open.
                if any(probes[i][1] > now_us for i in range(spec.max_probes) if i in probes):
                    return AllowReply(REJECT_HALF_OPEN, gen, -1, "", 0, moved)
                b["ho_adm"] = b["ho_succ"] + b["ho_fail"]
                if b["ho_adm"] >= limit:
                    return AllowReply(REJECT_HALF_OPEN, gen, -1, "", 0, moved)
            for slot in range(spec.max_probes):
                lease = probes.get(slot)
                if lease is None or lease[1] <= now_us:
                    token = f"m{next(self._tokens)}"
                    probes[slot] = (token, now_us + self.probe_lease_ms * 1000)
                    if limit:
                        b["ho_adm"] += 1
                    if spec.counts:
                        b["c_req"] += 1
                    return AllowReply(PROBE, gen, slot, token, 0, moved)
            return AllowReply(REJECT_HALF_OPEN, gen, -1, "", 0, moved)

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
    ) -> RecordReply:
        """Count one result (see :class:`~labs.engine.stores.base.RecordReply`); the reply
        is always there, whatever ``wait`` says (nothing to wait for in memory)."""
        quiet = self._quiet
        # Consecutive kind (spec[0] is ``rolling``): a success in a closed breaker with no
        # failure streak changes nothing, so it needs no lock.
        if (
            quiet is not None
            and quiet[1] == generation
            and outcome != "f"
            and slot < 0
            and not spec[0]
            and not spec.counts
            and not spec.interval_us
            and not spec.strict
        ):
            return quiet
        with self._lock:
            b = self._b
            gen = b["gen"]
            if slot < 0 and token:
                self._inflight.pop(token, None)  # a strict admission's place is given back
            if slot >= 0:
                # A probe counts only while its lease still holds its token: once the lease
                # expired (and perhaps went to a replacement probe) the result is stale.
                lease = self._probes.get(slot)
                if lease is None or lease[0] != token:
                    return RecordReply(STALE, gen, 0, 0, 0)
                del self._probes[slot]
                if lease[1] <= now_us:
                    return RecordReply(STALE, gen, 0, 0, 0)
            if generation != gen:
                return RecordReply(STALE, gen, 0, 0, 0)
            applied = self._applied
            if outcome == "i" or b["forced"]:
                if slot >= 0 and spec.half_open_calls and not b["forced"] and b["ho_adm"]:
                    b["ho_adm"] -= 1  # an ignored probe gives its admission back
                return applied
            state = b["state"]
            if state == "closed" and spec.interval_us and now_us >= b["c_exp"] > 0:
                # gobreaker: the interval's end starts a new generation, to which this
                # result does not belong
                self._new_interval(spec, now_us)
                return RecordReply(STALE, b["gen"], 0, 0, 0)
            if spec.counts:
                self._b_written = True
                if outcome in "sS":
                    b["c_ts"] += 1
                    b["c_cs"] += 1
                    b["c_cf"] = 0
                else:
                    b["c_tf"] += 1
                    b["c_cf"] += 1
                    b["c_cs"] = 0
            if state == "closed":
                if not spec[0]:  # consecutive (spec.rolling, read by index on the hot path)
                    if outcome == "s":
                        if b["streak"]:
                            b["streak"] = 0
                            self._quiet = applied  # not forced: returned above
                        return applied
                    self._b_written = True
                    self._quiet = None
                    streak = b["streak"] + 1
                    if streak >= spec.failure_threshold:
                        return self._open(spec, OPENED, now_us, cooldown_us, streak, 0)
                    b["streak"] = streak
                    return applied
                self._b_written = True
                successes, failures, slow = self._window_add(spec, outcome, now_us)
                total = successes + failures
                if (outcome == "f" or not spec.failure_only) and total >= spec.min_calls:
                    if failures * 1_000_000 >= spec.ratio_ppm * total:
                        return self._open(spec, OPENED, now_us, cooldown_us, failures, total)
                    # resilience4j: the slow-call rate opens the breaker as the failure rate does
                    if spec.slow_us and slow * 1_000_000 >= spec.slow_ppm * total:
                        return self._open(spec, OPENED, now_us, cooldown_us, -slow, total)
                return applied
            if state == "half_open":
                self._b_written = True
                if spec.half_open_ratio:
                    succ = b["ho_succ"] + (outcome in "sS")
                    fails = b["ho_fail"] + (outcome in "fF")
                    slow = b["ho_slow"] + (outcome in "SF")
                    n = succ + fails
                    if n >= spec.half_open_calls:
                        if fails * 1_000_000 >= spec.ratio_ppm * n:
                            return self._open(spec, REOPENED, now_us, cooldown_us, fails, n)
                        if spec.slow_us and slow * 1_000_000 >= spec.slow_ppm * n:
                            return self._open(spec, REOPENED, now_us, cooldown_us, -slow, n)
                        return self._close(spec, now_us, succ, n)
                    b["ho_succ"], b["ho_fail"], b["ho_slow"] = succ, fails, slow
                    return applied
                if outcome in "fF":
                    return self._open(spec, REOPENED, now_us, cooldown_us, 0, 0)
                succ = b["ho_succ"] + 1
                if succ >= spec.success_threshold:
                    return self._close(spec, now_us, succ, 0)
                b["ho_succ"] = succ
                return applied
            return applied

    def _closed_admit(self, spec: BreakerSpec, now_us: int) -> AllowReply:
        """A closed-state admission with gobreaker's counting (the interval, then Requests)
        or strict admission (held back while streak + calls in flight reach the threshold)."""
        b = self._b
        self._b_written = True
        if spec.interval_us:
            if not b["c_exp"]:
                b["c_exp"] = now_us + spec.interval_us
            elif now_us >= b["c_exp"]:
                self._new_interval(spec, now_us)
        token = ""
        if spec.strict:
            # a holder that never reports gives its place back after the lease
            live = {t: e for t, e in self._inflight.items() if e > now_us}
            self._inflight = live
            if b["streak"] + len(live) >= spec.failure_threshold:
                return AllowReply(HOLD, b["gen"], -1, "", 0, False)
            token = f"m{next(self._tokens)}"
            live[token] = now_us + self.probe_lease_ms * 1000
        if spec.counts:
            b["c_req"] += 1
        if token:
            return AllowReply(ADMIT, b["gen"], -1, token, 0, False)
        assert self._door is not None
        return self._door

    def _new_interval(self, spec: BreakerSpec, now_us: int) -> None:
        """gobreaker ``toNewGeneration`` in the closed state: counts cleared, a new generation
        (results of calls admitted before are stale), the next interval from now."""
        b = self._b
        b.update(_NO_COUNTS, gen=b["gen"] + 1, streak=0, c_exp=now_us + spec.interval_us)
        self._inflight.clear()
        self._sync()

    def _close(self, spec: BreakerSpec, now_us: int, a: int, c: int) -> RecordReply:
        b = self._b
        gen = b["gen"] + 1
        b.update(_NO_COUNTS, c_exp=now_us + spec.interval_us if spec.interval_us else 0)
        self._inflight.clear()
        b.update(
            state="closed",
            gen=gen,
            streak=0,
            ho_succ=0,
            win_s=0,
            win_f=0,
            opens=0,
            ho_adm=0,
            ho_fail=0,
            win_w=0,
            ho_slow=0,
        )
        self._buckets.clear()
        self._calls.clear()
        self._sync()
        return RecordReply(CLOSED, gen, a, c, 0)

    def _open(
        self, spec: BreakerSpec, code: int, now_us: int, cooldown_us: int, a: int, c: int
    ) -> RecordReply:
        b = self._b
        gen = b["gen"] + 1
        opens = b["opens"]
        until = now_us + scaled_cooldown_us(spec, cooldown_us, opens)
        b.update(_NO_COUNTS, c_exp=0)
        self._inflight.clear()  # results of the calls in flight are stale now
        b.update(
            state="open",
            gen=gen,
            opened_at=now_us,
            open_until=until,
            streak=0,
            ho_succ=0,
            win_s=0,
            win_f=0,
            opens=opens + 1,
            ho_adm=0,
            ho_fail=0,
            win_w=0,
            ho_slow=0,
        )
        self._buckets.clear()
        self._calls.clear()
        self._sync()
        return RecordReply(code, gen, a, c, until)

    def _sync(self) -> None:
        """After a transition: refresh the cached replies (call with the lock held)."""
        b = self._b
        gen = b["gen"]
        self._b_written = True
        self._applied = RecordReply(APPLIED, gen, 0, 0, 0)
        closed = (b["state"] == "closed" and not b["forced"]) or b["forced"] == "closed"
        self._door = AllowReply(ADMIT, gen, -1, "", 0, False) if closed else None
        self._quiet = self._applied if closed and not b["streak"] else None

    def _window_add(self, spec: BreakerSpec, outcome: str, now_us: int) -> tuple[int, int, int]:
        """Count ``outcome`` in the rolling window: (successes, failures, slow calls).

        ``S`` and ``F`` are a slow success and a slow failure."""
        b = self._b
        if spec.window_calls:
            successes = b["win_s"] + (outcome in "sS")
            failures = b["win_f"] + (outcome in "fF")
            slow = b["win_w"] + (outcome in "SF")
            self._calls.appendleft(outcome)
            if len(self._calls) > spec.window_calls:
                oldest = self._calls.pop()
                if oldest in "sS":
                    successes -= 1
                else:
                    failures -= 1
                if oldest in "SF":
                    slow -= 1
            b["win_s"], b["win_f"], b["win_w"] = successes, failures, slow
            return successes, failures, slow
        idx = now_us // spec.bucket_us
        counts = self._buckets.setdefault(idx, [0, 0, 0])
        counts[0 if outcome in "sS" else 1] += 1
        if outcome in "SF":
            counts[2] += 1
        successes = failures = slow = 0
        for key in list(self._buckets):
            if key > idx - spec.buckets:
                s, f, w = self._buckets[key]
                successes += s
                failures += f
                slow += w
            else:
                del self._buckets[key]
        return successes, failures, slow

    def breaker_force(self, action: str, now_us: int) -> tuple[str, int, bool]:
        """Force open / closed (until reset), or reset; returns (state before, generation,
        changed). Forcing the state the breaker is already forced to changes nothing."""
        with self._lock:
            b = self._b
            before = effective_state(b, now_us)
            if action in ("open", "closed") and b["forced"] == action:
                return before, b["gen"], False
            gen = b["gen"] + 1
            fresh = dict(_FRESH, gen=gen)
            if action == "open":
                fresh.update(state="open", forced="open", opened_at=now_us)
            elif action == "closed":
                fresh.update(forced="closed")
            elif action != "reset":
                raise ValueError(f"unknown action {action!r}")
            self._b = fresh
            self._buckets.clear()
            self._calls.clear()
            self._probes.clear()
            self._inflight.clear()
            self._sync()
            return before, gen, True

    def breaker_read(self, spec: BreakerSpec, now_us: int) -> dict[str, Any]:
        """Stored breaker fields plus ``probes_in_flight`` (live leases); for a time window,
        ``win_s`` / ``win_f`` are the counts of the buckets still in the window at ``now_us``."""
        with self._lock:
            fields = dict(self._b)
            if spec.rolling and not spec.window_calls:
                oldest = now_us // spec.bucket_us - spec.buckets
                live = [v for k, v in self._buckets.items() if k > oldest]
                fields["win_s"] = sum(v[0] for v in live)
                fields["win_f"] = sum(v[1] for v in live)
                fields["win_w"] = sum(v[2] for v in live)
            if (
                spec.interval_us
                and fields["state"] == "closed"
                and not fields["forced"]
                and now_us >= fields["c_exp"] > 0
            ):
                fields.update(_NO_COUNTS, streak=0)  # the interval is over: read as cleared
            fields["probes_in_flight"] = sum(
                1 for _, expires in self._probes.values() if expires > now_us
            )
            return fields

    # -- dependency --------------------------------------------------------------------------

    def dependency_arm(self, fail_left: int, now_us: int) -> None:
        """Fresh dependency state."""
        with self._lock:
            self._dep = {"fail_left": int(fail_left), "started": now_us, "attempts": 0}

    def breaker_allow_step(
        self, spec: BreakerSpec, now_us: int, fail_left: int
    ) -> tuple[AllowReply, tuple[int, int, int] | None]:
        """:meth:`breaker_allow`, then the admitted call's first attempt's
        :meth:`dependency_step` (None when not admitted)."""
        reply = self.breaker_allow(spec, now_us)
        if reply.code != ADMIT and reply.code != PROBE:
            return reply, None
        return reply, self.dependency_step(fail_left, now_us)

    def breaker_check_step(
        self, spec: BreakerSpec, now_us: int, fail_left: int
    ) -> tuple[str, tuple[int, int, int] | None]:
        """The state as read at ``now_us``, then, only when closed, :meth:`dependency_step`."""
        with self._lock:
            state = effective_state(self._b, now_us, spec.strict_edge)
        if state != "closed":
            return state, None
        return state, self.dependency_step(fail_left, now_us)

    def dependency_step(self, fail_left: int, now_us: int) -> tuple[int, int, int]:
        """One attempt: (flaky counter before, armed-at, attempts before); arms lazily."""
        with self._lock:
            dep = self._dep
            if dep is None:
                dep = self._dep = {"fail_left": int(fail_left), "started": now_us, "attempts": 0}
            if dep["started"] < 0:  # armed to start at its first attempt (a rate limit)
                dep["started"] = now_us
            left, attempts = dep["fail_left"], dep["attempts"]
            if left > 0:
                dep["fail_left"] = left - 1
            dep["attempts"] = attempts + 1
            return left, dep["started"], attempts

    # -- retry budget ------------------------------------------------------------------------

    def budget_deposit(self, ratio_micro: int, max_micro: int, *, wait: bool = True) -> int:
        """Deposit micro-tokens up to the ceiling; the bucket starts full (the balance is
        returned whatever ``wait`` says)."""
        with self._lock:
            tokens = max_micro if self._budget is None else self._budget
            self._budget = min(max_micro, tokens + ratio_micro)
            return self._budget

    def budget_withdraw(self, max_micro: int) -> tuple[bool, int]:
        """Take one whole token (1 000 000 micro-tokens) if available."""
        with self._lock:
            tokens = max_micro if self._budget is None else self._budget
            if tokens >= 1_000_000:
                self._budget = tokens - 1_000_000
                return True, self._budget
            self._budget = tokens
            return False, tokens

    def budget_throttle(self, op: str, ratio_milli: int, max_milli: int) -> tuple[bool, int]:
        """gRPC retry throttling: success adds the ratio, failure takes one token."""
        with self._lock:
            tokens = max_milli if self._throttle is None else self._throttle
            if op == "success":
                tokens = min(max_milli, tokens + ratio_milli)
            elif op == "failure":
                tokens = max(0, tokens - 1000)
            self._throttle = tokens
            return 2 * tokens > max_milli, tokens

    def budget_window(
        self, op: str, now_us: int, slice_us: int, reserve: int, amount: int
    ) -> tuple[bool, int]:
        """Finagle's retry budget: deposits and withdrawals live for the last 10 slices."""
        with self._lock:
            idx = now_us // slice_us
            slices = self._slices
            for key in [k for k in slices if k <= idx - WINDOW_SLICES]:
                del slices[key]
            count = reserve + sum(slices.values())
            taken = True
            if op == "deposit":
                slices[idx] = slices.get(idx, 0) + amount
                count += amount
            elif count >= amount:
                slices[idx] = slices.get(idx, 0) - amount
                count -= amount
            else:
                taken = False
            return taken, count

    # -- whole state -------------------------------------------------------------------------

    def export_state(self) -> dict[str, Any]:
        """JSON-serialisable copy of everything (the document of :func:`to_doc`)."""
        with self._lock:
            return to_doc(
                self._b if self._b_written else None,
                {str(k): list(v) for k, v in self._buckets.items()},
                list(self._calls),
                dict(self._dep) if self._dep is not None else None,
                self._budget,
                peer_budget_doc(self._throttle, self._slices),
            )

    def import_state(self, state: dict[str, Any]) -> None:
        """Replace everything with an exported state; probe leases start empty."""
        breaker, buckets, calls, dep, budget = from_doc(state)
        with self._lock:
            self._b = dict(_FRESH, **(breaker or {}))
            self._sync()
            self._b_written = breaker is not None
            self._buckets = {int(k): list(v) for k, v in buckets.items()}  # [s, f, slow]
            self._calls = deque(calls)
            self._dep = dep
            self._budget = budget
            self._throttle, self._slices = peer_budget_from_doc(state)
            self._probes.clear()
            self._inflight.clear()

    def has_state(self) -> bool:
        """Whether any breaker, dependency or budget state exists."""
        with self._lock:
            return (
                self._b_written
                or self._dep is not None
                or self._budget is not None
                or self._throttle is not None
                or bool(self._slices)
            )

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._b = dict(_FRESH)
            self._sync()
            self._b_written = False
            self._buckets.clear()
            self._calls.clear()
            self._probes.clear()
            self._inflight.clear()
            self._dep = None
            self._budget = None
            self._throttle = None
            self._slices.clear()
            self._last_success = None
            self._keys.clear()
            scopes = list(self._scopes.values())
        for child in scopes:
            child.clear()
