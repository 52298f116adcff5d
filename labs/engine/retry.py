"""Retry arithmetic: backoff, jitter, Retry-After, the retry budget, and classification.

The functions are pure (randomness comes from the ``rng`` passed in), so simulations reuse
exactly the formulas the guarded client uses. Backoff after the n-th failed attempt is
``min(cap, base * 2^(n-1))``, jittered as the policy says; a 429's Retry-After is honoured up
to the cap, so every sleep is at most ``cap``. docs/engine.md, "Backoff, jitter, Retry-After",
gives each jitter's formula and bounds."""

from __future__ import annotations

import random
from dataclasses import dataclass

from labs.engine.clock import Clock
from labs.engine.config import JITTERS, RetryBudgetConfig
from labs.engine.events import fmt_ms
from labs.engine.stores.base import Store

__all__ = [
    "RETRYABLE_ERRORS",
    "Delay",
    "RetryBudget",
    "backoff_ms",
    "counts_against_dependency",
    "is_retryable",
    "jitter_bounds_ms",
    "jittered_backoff_ms",
    "retry_delay",
]

#: Failure kinds worth another attempt: the dependency's trouble, not the caller's.
RETRYABLE_ERRORS = frozenset({"503", "500", "timeout", "429"})


def is_retryable(error: str | None) -> bool:
    """Whether a failed attempt with this error kind may be retried (4xx but 429: no)."""
    return error in RETRYABLE_ERRORS


def counts_against_dependency(error: str | None) -> bool:
    """Whether a failure counts toward opening the breaker (a 400 is the caller's fault).

    The same rule as retrying, by design: an error worth another attempt is the dependency's
    trouble, and only the dependency's trouble should open its breaker.
    """
    return is_retryable(error)


def backoff_ms(failed_attempt: int, base_ms: float, cap_ms: float) -> float:
    """``min(cap, base * 2^(n-1))`` after the n-th failed attempt. Raises ValueError if n < 1."""
    if failed_attempt < 1:
        raise ValueError(f"failed_attempt must be >= 1 (got {failed_attempt})")
    if failed_attempt > 64:  # 2^63 * base is past any cap; keep the float finite
        return float(cap_ms)
    return float(min(cap_ms, base_ms * 2 ** (failed_attempt - 1)))


def jitter_bounds_ms(
    jitter: str,
    failed_attempt: int,
    base_ms: float,
    cap_ms: float,
    previous_ms: float | None = None,
) -> tuple[float, float]:
    """The interval a jittered sleep is drawn from (see the module table)."""
    d = backoff_ms(failed_attempt, base_ms, cap_ms)
    if jitter == "none":
        return d, d
    if jitter == "full":
        return 0.0, d
    if jitter == "equal":
        return d / 2, d
    if jitter == "decorrelated":
        prev = base_ms if previous_ms is None else previous_ms
        lo = min(base_ms, cap_ms)
        return lo, max(lo, min(cap_ms, 3 * prev))
    if jitter == "proportional":
        return min(0.8 * d, cap_ms), min(cap_ms, 1.2 * d)
    raise ValueError(f"jitter must be one of {', '.join(JITTERS)} (got {jitter!r})")


def jittered_backoff_ms(
    jitter: str,
    failed_attempt: int,
    base_ms: float,
    cap_ms: float,
    rng: random.Random,
    previous_ms: float | None = None,
) -> float:
    """One sleep drawn with ``jitter`` (one ``rng`` draw unless ``none``); within
    :func:`jitter_bounds_ms`. Raises ValueError for an unknown jitter."""
    lo, hi = jitter_bounds_ms(jitter, failed_attempt, base_ms, cap_ms, previous_ms)
    if jitter == "none":
        return lo
    if jitter == "proportional":
        d = backoff_ms(failed_attempt, base_ms, cap_ms)
        return min(cap_ms, d * (0.8 + 0.4 * rng.random()))
    return lo + (hi - lo) * rng.random()


@dataclass(frozen=True, slots=True)
class Delay:
    """A sleep before a retry, with the arithmetic behind it in words."""

    ms: float
    backoff_ms: float
    formula: str
    retry_after_ms: float | None = None


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def retry_delay(
    jitter: str,
    failed_attempt: int,
    base_ms: float,
    cap_ms: float,
    rng: random.Random,
    previous_ms: float | None = None,
    retry_after_ms: float | None = None,
) -> Delay:
    """The sleep after the n-th failed attempt: jittered backoff, raised to a Retry-After
    hint up to the cap. ``formula`` explains it, e.g. ``min(500, 25 x 2^1)``."""
    ms = jittered_backoff_ms(jitter, failed_attempt, base_ms, cap_ms, rng, previous_ms)
    d = backoff_ms(failed_attempt, base_ms, cap_ms)
    exp = f"min({_n(cap_ms)}, {_n(base_ms)} x 2^{failed_attempt - 1})"
    if jitter == "none":
        formula = exp
    elif jitter == "full":
        formula = f"random in [0, {_n(d)}], {_n(d)} = {exp} (full jitter)"
    elif jitter == "equal":
        formula = f"{_n(d / 2)} + random in [0, {_n(d / 2)}], {_n(d)} = {exp} (equal jitter)"
    elif jitter == "decorrelated":
        lo, hi = jitter_bounds_ms(jitter, failed_attempt, base_ms, cap_ms, previous_ms)
        prev = base_ms if previous_ms is None else previous_ms
        formula = f"random in [{_n(lo)}, {_n(hi)}] = min({_n(cap_ms)}, [base, 3 x {_n(prev)}]) (decorrelated jitter)"
    else:
        formula = f"{_n(d)} x random in [0.8, 1.2], at most {_n(cap_ms)}; {_n(d)} = {exp} (proportional jitter)"
    if retry_after_ms is not None and retry_after_ms > 0:
        honoured = min(cap_ms, retry_after_ms)
        if honoured > ms:
            capped = f" capped at {_n(cap_ms)}" if retry_after_ms > cap_ms else ""
            formula = f"Retry-After {fmt_ms(retry_after_ms)}{capped} (backoff alone: {fmt_ms(ms)})"
            return Delay(float(honoured), ms, formula, float(retry_after_ms))
    return Delay(ms, ms, formula, retry_after_ms)


class RetryBudget:
    """A retry budget shared through the store, of one of three kinds (``config.kind``).

    ``per_call`` (the engine's own; tokens held as integer micro-tokens, so every store
    agrees exactly):

    * the bucket starts full, at ``max_tokens``;
    * every call that starts its retry loop deposits ``token_ratio`` tokens, never above
      ``max_tokens``;
    * every retry (attempt 2, 3, ...) first withdraws 1 whole token; with less than 1 token
      left the call stops with ``budget_exhausted`` instead of retrying.

    With ratio r, a long run of failing calls can retry about r times per call: the budget
    caps retry load at roughly ``r`` extra attempts per call (plus the initial ``max_tokens``).
    The balance never goes negative.

    ``grpc`` (gRPC retry throttling, gRFC A6 as grpc-go's ``retryThrottler``): the bucket
    starts full at ``max_tokens``; every failed attempt (a retryable error) takes one token
    (never below 0), every successful attempt adds ``token_ratio`` (never above
    ``max_tokens``); a retry is allowed only while ``tokens > max_tokens / 2`` after the
    failure that asks for it. Milli-tokens, as A6 allows three decimals: no drift.

    ``finagle`` (Finagle's ``RetryBudget``): every call deposits 1000 (none when
    ``percent_can_retry`` is 0), a retry withdraws ``int(1000 / percent_can_retry)`` (1 when
    it is 0); deposits and withdrawals count for ``ttl_ms`` (10 slices of ``ttl_ms / 10``);
    the balance is their sum plus a reserve of ``min_retries_per_sec x ttl seconds x
    withdrawal``. It starts with the reserve only.
    """

    def __init__(
        self, config: RetryBudgetConfig, *, store: Store, clock: Clock | None = None
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.kind = config.kind
        self._ratio = round(config.token_ratio * 1_000_000)
        self._max = round(config.max_tokens * 1_000_000)
        self._ratio_milli = round(config.token_ratio * 1000)
        self._max_milli = round(config.max_tokens * 1000)
        percent = config.percent_can_retry
        self._deposit = 0 if percent == 0 else 1000
        self._withdraw = 1 if percent == 0 else int(1000 / percent)
        ttl_s = int(config.ttl_ms // 1000)
        self._reserve = config.min_retries_per_sec * ttl_s * self._withdraw
        self._slice_us = round(config.ttl_ms * 1000) // 10
        if self.kind == "finagle" and clock is None:
            raise ValueError("a finagle retry budget needs a clock")

    def _now_us(self) -> int:
        assert self.clock is not None
        return int(self.clock.now() * 1e6 + 0.5)

    def deposit(self, *, reply: bool = True) -> float | None:
        """Credit one call (``per_call``, ``finagle``); returns the balance. ``reply=False``:
        the caller will not read the balance, and a ``per_call`` deposit may go out without
        waiting for it (see the store's ``budget_deposit``), returning None."""
        if self.kind == "per_call":
            balance = self.store.budget_deposit(self._ratio, self._max, wait=reply)
            return None if balance is None else balance / 1_000_000
        if self.kind == "finagle":
            _, count = self.store.budget_window(
                "deposit", self._now_us(), self._slice_us, self._reserve, self._deposit
            )
            return count / self._withdraw
        return self.store.budget_throttle("read", 0, self._max_milli)[1] / 1000

    def observe(self, ok: bool) -> tuple[bool, float]:
        """gRPC throttling: count one attempt's result (a success, or a retryable failure);
        returns (a retry is allowed, tokens). Other kinds: (True, 0.0), nothing counted."""
        if self.kind != "grpc":
            return True, 0.0
        allowed, tokens = self.store.budget_throttle(
            "success" if ok else "failure", self._ratio_milli, self._max_milli
        )
        return allowed, tokens / 1000

    def try_withdraw(self) -> tuple[bool, float]:
        """Spend for one retry if the budget allows it; returns (spent, balance). For
        ``grpc`` the answer is :meth:`observe`'s, so this only reads."""
        if self.kind == "per_call":
            taken, balance = self.store.budget_withdraw(self._max)
            return taken, balance / 1_000_000
        if self.kind == "finagle":
            taken, count = self.store.budget_window(
                "withdraw", self._now_us(), self._slice_us, self._reserve, self._withdraw
            )
            return taken, count / self._withdraw
        allowed, tokens = self.store.budget_throttle("read", 0, self._max_milli)
        return allowed, tokens / 1000

    def refusal(self, balance: float) -> str:
        """Why a retry was refused, in words."""
        if self.kind == "grpc":
            return (
                f"retry throttling has {balance:.3f} tokens (a retry needs more than "
                f"{self.config.max_tokens / 2:g})"
            )
        if self.kind == "finagle":
            return f"retry budget holds {balance:.2f} retries (a retry needs 1)"
        return f"retry budget has {balance:.2f} tokens (a retry needs 1)"
