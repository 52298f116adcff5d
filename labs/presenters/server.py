"""A server model's settings in words: the class's shared dependency and a student's own server
with a queue, as journal lines and confirmations say them."""

from __future__ import annotations

from labs.engine import SharedConfig

__all__ = ["CHOICE_WORDS", "SERVER_LABELS", "describe_config", "describe_defences"]

#: A server setting's choice as a form's option reads it, where the value alone is a code name.
CHOICE_WORDS = {
    "aimd": "AIMD: cut by slow answers, + 1 while half is used",
    "gradient": "gradient: with latency against the fastest",
    "fifo": "first come, first served (FIFO)",
    "lifo": "newest first (LIFO)",
    "adaptive_lifo": "adaptive LIFO: newest first once the oldest waits too long",
}

#: The settings of a student's own server a page names (the lab page's fields, a lesson's
#: steps), in the order the lab page shows them, with their labels.
SERVER_LABELS = {
    "servers": "Servers",
    "service_ms": "Service time per attempt",
    "max_queue_ms": "Longest queue wait before shedding",
    "discipline": "Queue order",
    "lifo_after_ms": "Adaptive LIFO: newest first past",
    "rate_per_s": "Rate limit",
    "queue_limit": "Queue limit",
    "concurrency_limit": "Concurrency limit",
    "codel_target_ms": "CoDel target wait",
}


def describe_config(config: SharedConfig) -> str:
    """``8 servers x 40 ms, queue up to 2000 ms (200 attempts/s)``, then the server's
    defences that are on (``; rate limit 150 attempts/s (burst 10)``)."""
    text = (
        f"{config.servers} server{'s' if config.servers != 1 else ''} x {config.service_ms} ms, "
        f"queue up to {config.max_queue_ms} ms ({config.capacity_per_s:g} attempts/s)"
    )
    return "; ".join([text, *describe_defences(config)])


def describe_defences(config: SharedConfig) -> list[str]:
    """The server's defences that are on, in words (empty when none is)."""
    out = []
    if config.rate_per_s is not None:
        out.append(f"rate limit {config.rate_per_s:g} attempts/s (burst {config.rate_burst})")
    if config.queue_limit is not None:
        out.append(f"at most {config.queue_limit} waiting")
    if config.concurrency_limit is not None and config.adaptive:
        how = (
            f"AIMD, slow past {config.limit_latency_ms} ms"
            if config.concurrency == "aimd"
            else "gradient"
        )
        out.append(
            f"an adaptive limit on attempts in the server ({how}), from "
            f"{config.concurrency_limit} up to {config.concurrency_max}"
        )
    elif config.concurrency_limit is not None:
        out.append(f"at most {config.concurrency_limit} in the server")
    if config.codel_target_ms is not None:
        out.append(
            f"CoDel sheds a wait over {config.codel_target_ms} ms once waits stay over it "
            f"for {config.codel_interval_ms} ms"
        )
    if config.discipline == "lifo":
        out.append("a freed server takes the newest waiting attempt (LIFO)")
    elif config.discipline == "adaptive_lifo":
        out.append(
            f"a freed server takes the newest waiting attempt once the oldest has waited "
            f"over {config.lifo_after_ms} ms (adaptive LIFO)"
        )
    return out
