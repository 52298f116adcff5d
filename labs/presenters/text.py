"""Words for people: who did something, why a run stopped, why a burst has no what-if,
the dependency's modes, and the durations the pages write.
"""

from __future__ import annotations

import re
from typing import Any

import redis
from django.db import InterfaceError, OperationalError

#: Each dependency mode as the pages name it (the lab page's mode buttons, the dashboard).
MODE_LABELS: dict[str, str] = {
    "healthy": "Healthy",
    "flaky": "Flaky",
    "down": "Down",
    "slow": "Slow",
    "error_rate": "Error rate",
    "outage": "Outage",
    "rate_limited": "Rate limited",
    "script": "Script",
    "shared": "Shared (the class's)",
    "server": "Server with a queue",
}


def mode_label(mode: str | None) -> str:
    """A dependency mode as the lab page's button names it (``Server with a queue``)."""
    return MODE_LABELS.get(mode or "", (mode or "").replace("_", " "))


# --- people ----------------------------------------------------------------------------------


def actor_name(user) -> str:
    """Who did something, as a journal message says it (``the lab`` for no one)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return "the lab"
    return user.get_username()


# --- what-if ---------------------------------------------------------------------------------
# (A journal row's HTML and JSON are labs.journal.rows': the journal writer renders each once.)


#: A network address in an error's text (``127.0.0.1:6379``, ``redis:6379``, ``[::1]:5432``):
#: internal, never shown to a student.
_ADDRESS = re.compile(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):\d{2,5}")


def lab_error(exc: BaseException) -> str:
    """Why a run stopped, in words for the student's journal: a lost connection to Redis or
    to the database is said as such, and no internal address (``host:port``) is ever shown."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return (
            "the lab lost its connection to Redis (it restarted or is unreachable); "
            "a call in flight may or may not have reached the dependency"
        )
    if isinstance(exc, (OperationalError, InterfaceError)):
        return "the lab lost its connection to the database (it restarted or is unreachable)"
    text = _ADDRESS.sub("(an internal address)", str(exc)).strip()
    return text or type(exc).__name__


def whatif_refusal(number: Any, status: str, recorded: bool) -> str:
    """Why burst ``number`` (its ``status``, whether its start state was ``recorded``) has no
    what-if, as the what-if view says it; "" when it can be replayed."""
    status = str(status)
    if status == "done":
        if recorded:
            return ""
        return (
            f"Burst {number} was recorded before replay existed: the lab did not keep the "
            "state it started from (the dependency's counters, the breaker, the retry budget, "
            "the seed), so it cannot be replayed. Bursts run since then can."
        )
    if status in ("queued", "running"):
        return (
            f"Burst {number} is still {status}: its what-if opens once it has finished "
            "(follow the link again then)."
        )
    if status == "interrupted":
        return (
            f"Burst {number} was interrupted before it finished (its worker stopped), so "
            "there is no finished burst to replay; only a finished burst can be replayed."
        )
    return (
        f"Burst {number} stopped on an error in the lab before it finished; only a finished "
        "burst can be replayed."
    )


def seconds_text(ms: Any) -> str:
    """Milliseconds as seconds with one decimal (the ``seconds`` template filter): ``1940``
    -> ``1.9``; "" for None."""
    if ms is None:
        return ""
    return f"{max(0.0, float(ms)) / 1000:.1f}"


def ms_text(value: Any) -> str:
    """A duration in ms as the pages write it (the ``ms`` template filter): ``175.0`` ->
    ``175 ms``, ``12.25`` -> ``12.3 ms``, None -> ``-``."""
    if value is None:
        return "-"
    value = float(value)
    return f"{value:.0f} ms" if value.is_integer() or value >= 100 else f"{value:.1f} ms"


def chain_place(tier: int, depth: int) -> str:
    """Where a service sits in a chain of students of ``depth`` tiers, in the student's
    words (its journal's ``chain_set`` row and its lab page say it)."""
    if tier == 1:
        return (
            f"tier 1 of {depth}, the front: its calls go through the services of tiers 2 to "
            f"{depth} before the shared dependency"
        )
    if tier == depth:
        return (
            f"tier {tier} of {depth}, the back: it answers tier {tier - 1}'s calls by calling "
            "the shared dependency"
        )
    return (
        f"tier {tier} of {depth}: it answers tier {tier - 1}'s calls by calling tier {tier + 1}'s"
    )
