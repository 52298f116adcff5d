"""The circuit breaker: a two-step surface over a store's atomic state machine.

``allow()`` answers before a call with a :class:`Permit` or a :class:`Rejection` saying why;
``record(permit, outcome)`` reports ``"success"``, ``"failure"`` or ``"ignored"``. CLOSED ->
OPEN -> HALF_OPEN, read at the clock's now. Every transition bumps a generation, and a result
from an older generation, or from a probe whose lease no longer holds its token, changes
nothing: a late caller cannot undo what the breaker has moved on from. docs/engine.md, "The breaker"."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeVar

from labs.engine.clock import Clock
from labs.engine.config import BreakerConfig
from labs.engine.events import Event, Sink, fmt_ms, fmt_seconds
from labs.engine.stores.base import (
    ADMIT,
    APPLIED,
    CLOSED,
    HOLD,
    OPENED,
    PROBE,
    REJECT_OPEN,
    REOPENED,
    STALE,
    BreakerSpec,
    RecordReply,
    Store,
    effective_state,
)

__all__ = [
    "HALF_OPEN",
    "OPEN",
    "STATES",
    "STATE_CLOSED",
    "STATE_LABELS",
    "Breaker",
    "CircuitOpenError",
    "Outcome",
    "Permit",
    "Recorded",
    "Rejection",
    "state_label",
]

STATE_CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
#: The breaker's states: the values stores, snapshots and events carry.
STATES = (STATE_CLOSED, OPEN, HALF_OPEN)
#: What a person reads for each state (event sentences, pages, model choices).
STATE_LABELS = {STATE_CLOSED: "CLOSED", OPEN: "OPEN", HALF_OPEN: "HALF-OPEN"}
Outcome = Literal["success", "failure", "ignored"]
_OUTCOME_CODE = {"success": "s", "failure": "f", "ignored": "i"}
T = TypeVar("T")
#: How long a call held back by strict admission waits before asking again.
HOLD_POLL_S = 0.001


def state_label(state: str | None) -> str:
    """The human label of a state: ``half_open`` -> ``HALF-OPEN`` (unknown: upper-cased)."""
    return STATE_LABELS.get(state or "", (state or "").upper())


class Recorded(NamedTuple):
    """What :meth:`Breaker.record` did: counted or not (stale), and the new state if it moved."""

    applied: bool
    transition: str | None


_STALE = Recorded(False, None)
_COUNTED = Recorded(True, None)
_TO_OPEN = Recorded(True, "open")
_TO_CLOSED = Recorded(True, "closed")


class Permit:
    """Leave to make one call. Truthy. ``probe`` is True for a half-open probe. ``step`` is
    what the call's first attempt got from the fake dependency when the admission carried it
    along (:meth:`Breaker.allow` with ``dependency_step``), else None."""

    __slots__ = ("burst", "call", "generation", "probe", "slot", "step", "token")

    def __init__(
        self,
        generation: int,
        probe: bool = False,
        slot: int = -1,
        token: str = "",
        call: int | None = None,
        burst: int | None = None,
    ) -> None:
        self.generation = generation
        self.probe = probe
        self.slot = slot
        self.token = token
        self.call = call
        self.burst = burst
        self.step: tuple[int, int, int] | None = None

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        kind = f"probe slot {self.slot}" if self.probe else "closed"
        return f"Permit(generation={self.generation}, {kind}, call={self.call})"


@dataclass(frozen=True, slots=True)
class Rejection:
    """A refused call. Falsy. ``reason`` is ``"open"`` or ``"half_open"`` (all probe slots
    taken); ``retry_in_ms`` is the cooldown left when open (None if forced open or half-open)."""

    reason: Literal["open", "half_open"]
    generation: int
    retry_in_ms: float | None
    explain: str

    def __bool__(self) -> bool:
        return False


class CircuitOpenError(RuntimeError):
    """Raised by :meth:`Breaker.call` when the breaker rejects the call."""

    def __init__(self, rejection: Rejection) -> None:
        self.rejection = rejection
        super().__init__(rejection.explain)


class Breaker:
    """A circuit breaker whose state lives in ``store`` (memory or Redis).

    Any number of Breaker objects (threads, processes) may share one store's state; each
    decision is one atomic store operation. ``rng`` only draws the cooldown jitter.
    Transitions are emitted to ``sink`` as ``transition`` events with a reason.
    """

    def __init__(
        self,
        config: BreakerConfig,
        *,
        store: Store,
        clock: Clock,
        rng: random.Random | None = None,
        sink: Sink | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.rng = rng if rng is not None else random.Random(0)
        self.sink = sink
        self._spec = BreakerSpec.of(config)
        self._slow_us = self._spec.slow_us
        self._cooldown_us = round(config.cooldown_ms * 1000)
        self._now = clock.now
        self._allow = store.breaker_allow
        self._record = store.breaker_record
        self._jitter_pct = config.cooldown_jitter_pct
        self._plain: Permit | None = None
        self._door = getattr(store, "breaker_door", None)
        spec = self._spec
        if spec.counts or spec.interval_us or spec.strict:
            self._door = None  # every admission is counted, may end an interval, or holds a place
        # a result needs the time for a rolling window or a counting interval
        self._timed = spec.rolling or bool(spec.interval_us)
        # a closed-state success can move nothing, and its reply tells nothing worth waiting
        # for (see record(reply=False))
        self._blind_ok = not (self._timed or spec.counts or spec.strict or spec.slow_us)

    # -- the two steps -----------------------------------------------------------------------

    def allow(
        self,
        *,
        call: int | None = None,
        burst: int | None = None,
        dependency_step: int | None = None,
    ) -> Permit | Rejection:
        """Decide whether a call may proceed now. One store operation.

        With ``dependency_step`` (the store's fake dependency's flaky count, as the store's
        ``dependency_step`` takes it to arm with) an admitted call's first attempt reaches the dependency in the same store
        operation (``breaker_allow_step``: on Redis one round trip for both) and the permit's
        ``step`` holds what it got; a refused call reaches nothing.

        Guarantees: in half-open at most ``half_open_max_probes`` permits with ``probe=True``
        are outstanding (leases; a lease whose holder vanished expires after the store's
        ``probe_lease_ms``). An open breaker never admits a call. With ``admission: strict``
        a closed consecutive breaker admits a call only while the failure streak plus the
        calls in flight is below ``failure_threshold``; a call beyond waits on the clock
        (asking again every ``HOLD_POLL_S``) for a result, or for a place whose holder
        vanished to expire after ``probe_lease_ms``.
        """
        if self._door is not None:
            # Hot path: a store that can tell "closed" without the time (MemoryStore) spares
            # the clock read; an unlabelled permit is immutable, so one per generation will do:
            # a clock read and a Permit allocation saved per admitted call.
            door = self._door()
            if door is not None:
                gen = door[1]
                if dependency_step is not None:
                    permit = Permit(gen, False, -1, "", call, burst)
                    permit.step = self.store.dependency_step(
                        dependency_step, int(self._now() * 1e6 + 0.5)
                    )
                    return permit
                if call is None and burst is None:
                    permit = self._plain
                    if permit is None or permit.generation != gen:
                        permit = self._plain = Permit(gen)
                    return permit
                return Permit(gen, False, -1, "", call, burst)
        now = self._now()
        reply, stepped = self._ask(now, dependency_step)
        code, gen, slot, token, open_until_us, moved = reply
        while code == HOLD:
            # strict admission: the calls in flight could still reach the threshold; wait for
            # their results (or for their places to expire) and ask again
            self.clock.sleep(HOLD_POLL_S)
            now = self._now()
            reply, stepped = self._ask(now, dependency_step)
            code, gen, slot, token, open_until_us, moved = reply
        permit = self._admission(code, gen, slot, token, open_until_us, moved, now, call, burst)
        if stepped is not None and isinstance(permit, Permit):
            permit.step = stepped
        return permit

    def step_if_closed(self, fail_left: int) -> tuple[int, int, int] | None:
        """A retry of a call admitted earlier: the store's fake dependency step (as
        ``dependency_step(fail_left, now)``) when the breaker reads CLOSED now, else None and
        nothing reaches the dependency. One store operation (``breaker_check_step``)."""
        _, stepped = self.store.breaker_check_step(
            self._spec, int(self._now() * 1e6 + 0.5), fail_left
        )
        return stepped

    def _ask(self, now: float, dependency_step: int | None):
        """The store's admission reply at ``now`` and, with ``dependency_step`` (see
        :meth:`allow`), the admitted attempt's dependency step (else None)."""
        if dependency_step is None:
            return self._allow(self._spec, int(now * 1e6 + 0.5)), None
        return self.store.breaker_allow_step(self._spec, int(now * 1e6 + 0.5), dependency_step)

    def _admission(
        self,
        code: int,
        gen: int,
        slot: int,
        token: str,
        open_until_us: int,
        moved: bool,
        now: float,
        call: int | None,
        burst: int | None,
    ) -> Permit | Rejection:
        """A store's admission reply as a permit or a rejection (and its transition, if the
        call moved an expired OPEN to HALF_OPEN)."""
        if code == ADMIT and not moved:
            return Permit(gen, False, -1, token, call, burst)
        if moved:
            if self.config.cooldown_multiplier == 1:
                why = f"cooldown of {fmt_ms(self.config.cooldown_ms)} elapsed"
            else:
                why = "cooldown elapsed"
            self._transition(now, OPEN, HALF_OPEN, why, call, burst, gen)
        if code == ADMIT:
            return Permit(gen, False, -1, "", call, burst)
        if code == PROBE:
            return Permit(gen, True, slot, token, call, burst)
        if code == REJECT_OPEN:
            if open_until_us < 0:
                return Rejection(
                    "open", gen, None, "rejected: breaker forced OPEN; dependency not called"
                )
            left = max(0.0, open_until_us / 1000 - now * 1000)
            return Rejection(
                "open",
                gen,
                left,
                f"rejected: breaker OPEN for another {fmt_seconds(left)}; dependency not called",
            )
        probes = self.config.half_open_max_probes
        return Rejection(
            "half_open",
            gen,
            None,
            f"rejected: breaker HALF-OPEN with {probes} probe{'s' if probes > 1 else ''} "
            "already in flight; dependency not called",
        )

    def record(
        self,
        permit: Permit,
        outcome: Outcome,
        *,
        error: str | None = None,
        duration_ms: float | None = None,
        reply: bool = True,
    ) -> Recorded | None:
        """Report the result of a permitted call, in one store operation. Returns whether it
        was counted (not for a stale generation or an expired probe lease) and the state it
        moved the breaker to. A ``duration_ms`` above ``slow_call_ms`` makes it a slow call.
        ``reply=False``: where the result cannot move the breaker, it is sent without waiting
        and None is returned. Raises ValueError for an unknown outcome."""
        code = _OUTCOME_CODE.get(outcome)
        if code is None:
            raise ValueError(f"outcome must be success, failure or ignored (got {outcome!r})")
        now, now_us, cooldown_us = self._record_time(code, permit)
        if (
            duration_ms is not None
            and self._slow_us
            and code != "i"
            and round(duration_ms * 1000) > self._slow_us
        ):
            code = code.upper()  # S / F: a slow success / failure
        if not reply and self._blind_ok and code in ("s", "i") and not permit.probe:
            # Nothing to report back: the reply could only say counted (or stale), and no
            # transition can follow from it.
            self._record(
                self._spec, permit.generation, permit.slot, permit.token, code, now_us,
                cooldown_us, wait=False,
            )  # fmt: skip
            return None
        reply = self._record(
            self._spec, permit.generation, permit.slot, permit.token, code, now_us, cooldown_us
        )
        rc = reply[0]
        if rc == APPLIED:
            return _COUNTED
        if rc == STALE:
            return _STALE
        if rc == OPENED:
            cooldown = fmt_ms((reply.open_until_us - int(now * 1e6 + 0.5)) / 1000)
            why = f"{self._opened_why(reply)}; cooldown {cooldown}"
            self._transition(
                now, STATE_CLOSED, OPEN, why, permit.call, permit.burst, reply.generation
            )
        elif rc == REOPENED:
            cooldown = fmt_ms((reply.open_until_us - int(now * 1e6 + 0.5)) / 1000)
            why = f"{_reopened_why(reply, permit, error)}; fresh cooldown {cooldown}"
            self._transition(now, HALF_OPEN, OPEN, why, permit.call, permit.burst, reply.generation)
        elif rc == CLOSED:
            why = self._closed_why(reply, permit)
            self._transition(
                now, HALF_OPEN, STATE_CLOSED, why, permit.call, permit.burst, reply.generation
            )
            return _TO_CLOSED
        else:
            return _COUNTED
        return _TO_OPEN

    def _record_time(self, code: str, permit: Permit) -> tuple[float, int, int]:
        """The time of a result (seconds, microseconds) and the cooldown (with its jitter)
        that a failure would start. A success (or ignored) of a closed-state permit under a
        consecutive breaker can neither move the breaker nor feed a time window: the clock
        is then not read."""
        cooldown_us = self._cooldown_us
        if not (code == "f" or permit.probe or self._timed):
            return 0.0, 0, cooldown_us
        now = self._now()
        if code == "f" and self._jitter_pct:
            cooldown_us = round(cooldown_us * (1 + self.rng.random() * self._jitter_pct / 100))
        return now, int(now * 1e6 + 0.5), cooldown_us

    def _opened_why(self, reply: RecordReply) -> str:
        """Why a closed breaker opened: the slow-call or failure ratio over the window, or
        the consecutive failures."""
        if self._spec.rolling and reply.a < 0:
            ratio = -reply.a / reply.b
            return (
                f"slow-call ratio {ratio:.0%} >= {self.config.slow_call_ratio:.0%} "
                f"over the last {reply.b} calls (slower than "
                f"{fmt_ms(self.config.slow_call_ms or 0)})"
            )
        if self._spec.rolling:
            ratio = reply.a / reply.b if reply.b else 0.0
            return (
                f"failure ratio {ratio:.0%} >= {self.config.failure_ratio:.0%} "
                f"over the last {reply.b} calls"
            )
        return f"{reply.a} consecutive failed calls"

    def _closed_why(self, reply: RecordReply, permit: Permit) -> str:
        """Why a half-open breaker closed: its probes' successes."""
        what = f"probe call #{permit.call}" if permit.call is not None else "probe"
        if reply.b:
            return f"{reply.a} of {reply.b} probes succeeded"
        if self.config.success_threshold > 1:
            return f"{reply.a} probe successes (last: {what})"
        return f"{what} succeeded"

    # -- reading -----------------------------------------------------------------------------

    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half_open"`` as read at the clock's now."""
        now_us = int(self._now() * 1e6 + 0.5)
        fields = self.store.breaker_read(self._spec, now_us)
        return effective_state(fields, now_us, self._spec.strict_edge)

    def snapshot(self) -> dict[str, Any]:
        """The breaker at the clock's now, JSON-serialisable.

        Keys: state, generation, forced (``open``/``closed``/None), failure_streak,
        window_successes, window_failures, window_slow (slow calls, with ``slow_call_ms``),
        counts (gobreaker's Counts with ``counts: gobreaker``, else None),
        half_open_successes, half_open_failures,
        half_open_admitted (counted only with ``half_open_calls``), openings (consecutive
        openings since the breaker last closed), opened_at_ms, open_until_ms,
        open_for_ms (cooldown left), probes_in_flight, and the config.
        """
        now_us = int(self._now() * 1e6 + 0.5)
        f = self.store.breaker_read(self._spec, now_us)
        state = effective_state(f, now_us, self._spec.strict_edge)
        stored_open = f["state"] == "open" and not f["forced"]
        return {
            "state": state,
            "generation": f["gen"],
            "forced": f["forced"] or None,
            "failure_streak": f["streak"],
            "window_successes": f["win_s"],
            "window_failures": f["win_f"],
            "window_slow": f["win_w"],
            "counts": {
                "requests": f["c_req"],
                "total_successes": f["c_ts"],
                "total_failures": f["c_tf"],
                "consecutive_successes": f["c_cs"],
                "consecutive_failures": f["c_cf"],
            }
            if self._spec.counts
            else None,
            "half_open_successes": f["ho_succ"],
            "half_open_failures": f["ho_fail"],
            "half_open_admitted": f["ho_adm"],
            "openings": f["opens"],
            "opened_at_ms": f["opened_at"] / 1000 if f["state"] == "open" else None,
            "open_until_ms": f["open_until"] / 1000 if stored_open else None,
            "open_for_ms": max(0.0, (f["open_until"] - now_us) / 1000) if stored_open else None,
            "probes_in_flight": f["probes_in_flight"],
            "config": self.config.to_dict(),
        }

    # -- operator controls -------------------------------------------------------------------

    def force_open(self, reason: str) -> bool:
        """Open until :meth:`force_closed` or :meth:`reset`; every call is rejected.

        Returns False, and emits nothing, when the breaker is already forced open."""
        return self._force("open", reason)

    def force_closed(self, reason: str) -> bool:
        """Closed until :meth:`reset`; every call passes and results are not counted.

        Returns False, and emits nothing, when the breaker is already forced closed."""
        return self._force("closed", reason)

    def reset(self, reason: str) -> bool:
        """Back to a fresh CLOSED breaker (counters, window and probe leases cleared)."""
        return self._force("reset", reason)

    def _force(self, action: str, reason: str) -> bool:
        now = self._now()
        before, gen, changed = self.store.breaker_force(action, int(now * 1e6 + 0.5))
        if not changed:
            return False
        after = OPEN if action == "open" else STATE_CLOSED
        label = {"open": "forced open", "closed": "forced closed", "reset": "reset"}[action]
        self._transition(now, before, after, f"{label}: {reason}", None, None, gen)
        return True

    # -- one-call wrapper --------------------------------------------------------------------

    def call(
        self,
        fn: Callable[[], T],
        *,
        is_failure: Callable[[BaseException], bool] = lambda exc: True,
        is_success: Callable[[BaseException], bool] = lambda exc: False,
    ) -> T:
        """Run ``fn`` through the breaker: allow, call, record.

        A return value records success. An exception propagates after recording:

        * a cancellation or an interpreter exit (any ``BaseException`` that is not an
          ``Exception``: ``asyncio.CancelledError``, ``KeyboardInterrupt``, ``SystemExit``,
          ``GeneratorExit``) records ``ignored``: the caller gave up, the dependency did not
          fail, and a cancelled probe frees its slot;
        * an exception ``is_success`` accepts records success (pybreaker's ``exclude``,
          gobreaker's ``IsSuccessful``: an expected error such as a 404 proves the dependency
          answered);
        * any other exception records failure when ``is_failure`` says so, else ignored.

        With ``slow_call_ms`` set, the call's duration on the breaker's clock goes with its
        result, so a slow call counts as slow.

        Raises :class:`CircuitOpenError` when rejected (``fn`` is not called).
        """
        permit = self.allow()
        if not permit:
            assert isinstance(permit, Rejection)
            raise CircuitOpenError(permit)
        assert isinstance(permit, Permit)
        started = self._now() if self._slow_us else None
        try:
            result = fn()
        except Exception as exc:
            took = self._took(started)
            if is_success(exc):
                self.record(permit, "success", duration_ms=took)
            else:
                self.record(permit, "failure" if is_failure(exc) else "ignored", duration_ms=took)
            raise
        except BaseException:
            self.record(permit, "ignored")
            raise
        self.record(permit, "success", duration_ms=self._took(started))
        return result

    def _took(self, started: float | None) -> float | None:
        """Milliseconds since ``started`` (None when slow calls are not counted)."""
        return None if started is None else (self._now() - started) * 1000

    # -- events ------------------------------------------------------------------------------

    def _transition(
        self,
        now: float,
        before: str,
        after: str,
        reason: str,
        call: int | None,
        burst: int | None,
        generation: int,
    ) -> None:
        if self.sink is None:
            return
        self.sink(
            Event(
                kind="transition",
                at_ms=now * 1000,
                explain=f"breaker {state_label(before)} -> {state_label(after)}: {reason}",
                call=call,
                burst=burst,
                state_from=before,
                state_to=after,
                reason=reason,
                data={"generation": generation},
            )
        )


def _reopened_why(reply: RecordReply, permit: Permit, error: str | None) -> str:
    """Why a half-open breaker opened again; ``reply.b``: decided on the failure ratio of
    the half-open period's probes."""
    if reply.a < 0:
        return f"{-reply.a} of {reply.b} probes were slow"
    if reply.b:
        return f"{reply.a} of {reply.b} probes failed"
    what = f"probe call #{permit.call}" if permit.call is not None else "probe"
    detail = f" ({error})" if error else ""
    return f"{what} failed{detail}"
