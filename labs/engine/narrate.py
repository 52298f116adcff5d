"""The sentences a guarded call tells its sink: one function per event's ``explain``, and the
small data dicts that go with them. Pure: they read results and settings, never a clock."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from labs.engine.dependency import AttemptResult
from labs.engine.events import fmt_ms, fmt_seconds, is_fast_fail
from labs.engine.outcomes import BurstResult, CallResult, round_ms
from labs.engine.retry import Delay

if TYPE_CHECKING:
    from labs.engine.routes import Route


def plural(n: int, word: str) -> str:
    """``1 attempt``, ``2 attempts``."""
    return f"{n} {word}{'s' if n != 1 else ''}"


def attempt_data(answer: AttemptResult) -> dict[str, Any]:
    """An attempt event's data: the Retry-After hint and what the dependency added."""
    data = {"retry_after_ms": answer.retry_after_ms} if answer.retry_after_ms else {}
    if answer.data:
        data.update(answer.data)
    return data


def label(route: Route) -> dict[str, Any]:
    """An event's dependency label when the session has two dependencies."""
    return {"dependency": route.name} if route.name else {}


def whose(route: Route) -> str:
    """``dependency B `` / ``dependency A `` when there are two, else nothing."""
    return f"dependency {route.name.upper()} " if route.name else ""


def attempt(call: int, n: int, answer: AttemptResult, where: str = "") -> str:
    """``call 3, attempt 2: 503 after 40 ms, Retry-After 100 ms``; ``where`` names the host."""
    head = f"call {call}, attempt {n}: {where}"
    took = fmt_ms(answer.latency_ms)
    why = server_words(answer.data)
    if answer.ok:
        return f"{head}ok after {took}{why}"
    hint = (
        f", Retry-After {fmt_ms(round_ms(answer.retry_after_ms))}" if answer.retry_after_ms else ""
    )
    return f"{head}{answer.error} after {took}{hint}{why}"


#: Why a server model shed an attempt (labs.engine.shared.SHED_REASONS), in words.
_SHED_WORDS = {
    "queue_full": "shed: the queue was full",
    "concurrency": "shed: the server's concurrency limit was reached",
    "codel": "shed by CoDel: waits had stayed over its target",
}


def server_words(decision: dict[str, Any] | None) -> str:
    """What a server model's decision adds to an attempt's sentence: why it was shed or
    skipped, or how long it waited in the queue (nothing for a fake dependency)."""
    if not decision or "outcome" not in decision:
        return ""
    outcome, wait = decision["outcome"], decision.get("wait_us", 0) / 1000
    if outcome == "shed":
        reason = decision.get("reason", "")
        words = _SHED_WORDS.get(reason) or (
            f"shed: it would have waited {fmt_ms(round_ms(wait))} in the queue, past the "
            "longest wait"
        )
        return f" ({words})"
    if outcome == "skipped":
        return " (skipped: it could not start before the caller stopped waiting)"
    if outcome == "limited":
        return " (the server's rate limit)"
    if wait > 0 and outcome in ("ok", "error"):
        return f" ({fmt_ms(round_ms(wait))} of it waiting in the queue)"
    return ""


def effect(kind: str, effect: str | None, ok: bool, key: str | None) -> str:
    """What an attempt did to a dependency with side effects."""
    if effect == "applied":
        return f"; {kind} applied" + (
            " (the work was done; the client stopped waiting)" if not ok else ""
        )
    if effect == "duplicate":
        return f"; {kind} not applied again: key {key} was seen before"
    return ""


def sleep(n: int, error: str | None, delay: Delay) -> str:
    """The pause before the next attempt, with its formula."""
    return f"attempt {n} failed ({error}); sleeping {fmt_ms(round_ms(delay.ms))} = {delay.formula}"


def deadline(n: int, error: str | None, delay: Delay, deadline_ms: float) -> str:
    """Giving up because the next pause would end at or past the deadline."""
    return (
        f"attempt {n} failed ({error}); sleeping {fmt_ms(delay.ms)} would end at or past "
        f"the {fmt_ms(deadline_ms)} deadline; giving up"
    )


def bulkhead(route: Route, size: int) -> str:
    """A call refused because its dependency already has the bulkhead's calls in flight."""
    return (
        f"rejected: {whose(route)}already has {size} call"
        f"{'s' if size != 1 else ''} in flight (the bulkhead); not called"
    )


def pool_timeout(call: int, waited_ms: float, slots: int, route: Route) -> str:
    """A call that waited for a pool slot until ``pool_wait_ms`` and gave up."""
    return (
        f"call {call} waited {fmt_ms(round_ms(waited_ms))} for a free slot of the pool "
        f"({slots} slot{'s' if slots != 1 else ''}, all busy) and gave up; "
        f"{whose(route)}not called"
    )


def cached_answer(age: float, limit: float, usable: bool) -> str:
    """The cached fallback answer's age against its max age."""
    if not usable:
        return f"the cached answer is {fmt_seconds(age)} old, past the max age {fmt_seconds(limit)}"
    # under a second in ms: "0.0 s old" would hide that it is fresh
    aged = fmt_ms(age) if age < 1000 else fmt_seconds(age)
    return f"the cached answer, {aged} old (max age {fmt_seconds(limit)})"


def failure_words(result: CallResult, why: str | None) -> str:
    """Why a call failed, in words, for the fallback's explanation."""
    text = result.outcome.replace("_", " ")
    if result.error:
        text += f" (last error {result.error})"
    return f"{text}; {why}" if why else text


def call_result(result: CallResult, why: str | None) -> str:
    """The ``call_result`` sentence: how the call ended and, for a failure, why."""
    call, outcome = result.call, result.outcome.replace("_", " ")
    if result.outcome == "success":
        explain = f"call {call}: success after {plural(result.attempts, 'attempt')}"
        if result.backoff_ms:
            explain += f", {fmt_ms(result.backoff_ms)} of backoff"
        return explain + (" (half-open probe)" if result.probe else "")
    if is_fast_fail(result.outcome):
        # a why only with the settings of labs.engine.routes: no usable fallback
        return f"call {call}: {outcome} in 0 attempts" + (f"; {why}" if why else "")
    if result.outcome == "degraded":
        fallback = (result.extra or {}).get("fallback", {})
        return (
            f"call {call}: degraded, answered by {why} instead of {fallback.get('why', 'an error')}"
        )
    if result.attempts == 0 and why:
        return f"call {call}: {outcome} in 0 attempts; {why}"
    explain = f"call {call}: {outcome} after {plural(result.attempts, 'attempt')}"
    if result.error:
        explain += f" (last error {result.error})"
    return explain + (f"; {why}" if why else "")


def burst_start(size: int, concurrency: int, burst: int | None) -> str:
    """``burst 2 starts: 6 calls by 3 callers``."""
    name = "burst" if burst is None else f"burst {burst}"
    return f"{name} starts: {plural(size, 'call')} by {plural(concurrency, 'caller')}"


def burst_end(outcome: BurstResult, size: int) -> str:
    """The ``burst_end`` sentence: the counts, the attempts, the backoff and the wall time."""
    return (
        f"burst ends: {outcome.succeeded}/{size} succeeded, {outcome.failed} failed, "
        f"{outcome.fast_failed} failed fast; {plural(outcome.attempts_total, 'attempt')}, "
        f"{fmt_ms(round_ms(outcome.backoff_ms_total))} of backoff, "
        f"{fmt_ms(round_ms(outcome.wall_ms))}{_extra(outcome.extra)}"
    )


def _extra(extra: dict[str, Any]) -> str:
    """The burst_end sentence's tail for the settings of labs.engine.routes."""
    parts = []
    if "degraded" in extra:
        parts.append(f"{extra['degraded']} degraded (answered by the fallback)")
    if "wait_ms_total" in extra:
        parts.append(
            f"{fmt_ms(extra['wait_ms_total'])} waiting for a pool slot, "
            f"{extra['rejected_bulkhead']} rejected by the bulkhead, "
            f"{extra['pool_timeout']} gave up waiting"
        )
    for name, counts in extra.get("by_dependency", {}).items():
        parts.append(f"{name.upper()}: {counts['succeeded']}/{counts['calls']} succeeded")
    if "effects" in extra:
        parts.append(
            f"effects applied {extra['effects']['applied']} for {extra['effects']['calls']} calls"
        )
    return "; " + "; ".join(parts) if parts else ""
