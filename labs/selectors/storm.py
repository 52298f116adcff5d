"""The storm panel's reads: the shared dependency's settings, seconds and students."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import Count

from labs.engine.chain import MAX_TIERS, MIN_TIERS
from labs.engine.config import LIMITS
from labs.engine.shared import SharedConfig
from labs.engine.validate import traffic_defaults
from labs.live import runtime
from labs.models import Classroom, LabSession, Scenario, SharedDependencyConfig
from labs.presenters.storm import SESSION_WINDOW_S

#: Seconds of history the storm panel shows (and sends in a snapshot).
STORM_WINDOW_S = 300
#: Complete seconds over which the per-student table's rates are measured (the sessions'
#: own counters in Redis; the lab page's card uses the same window).
STORM_STUDENT_WINDOW_S = SESSION_WINDOW_S


def storm_traffic_defaults(classroom_id: int) -> dict[str, Any]:
    """What the storm panel's Start traffic offers: the class's lesson's traffic (the first
    of its scenarios, by position, whose script names one; a shared-dependency lesson before
    any other), else the lab's defaults; with the number of sessions on the shared dependency
    (of the front tier, while the class is a chain of students: ``chained``) and its capacity, so the form can say the load it will offer before it starts
    (:func:`labs.presenters.storm.offered_load_text`)."""
    scenarios = sorted(
        Scenario.objects.filter(classrooms__pk=classroom_id).values("position", "slug", "script"),
        key=lambda r: (
            not isinstance(r["script"], dict) or "traffic" not in r["script"],
            ((r["script"] or {}).get("dependency") or {}).get("mode") != "shared",
            r["position"],
            r["slug"],
        ),
    )
    values = traffic_defaults(scenarios[0]["script"] if scenarios else {})
    shared = LabSession.objects.filter(classroom_id=classroom_id, dependency__mode="shared")
    # In a chain of students, Start traffic starts the front tier's (labs.services.storm).
    chained = shared.filter(tier__isnull=False).exists()
    sessions = shared.filter(tier=1).count() if chained else shared.count()
    capacity = runtime.shared_config(classroom_id).capacity_per_s
    return {
        **values,
        "sessions": sessions,
        "chained": chained,
        "capacity_per_s": capacity,
    }


def storm_configured(classroom_id: int) -> bool:
    """Whether the class has saved shared-dependency settings (the storm panel needs them)."""
    return SharedDependencyConfig.objects.filter(classroom_id=classroom_id).exists()


def storm_config(classroom_id: int) -> SharedConfig:
    """The class's shared-dependency settings from the database (the engine's defaults when
    none are saved): what a page shows while Redis has lost the model's settings."""
    return runtime.shared_config(classroom_id)


def storm_now(
    classroom_id: int,
    back_s: int,
    sessions: Sequence[int] | None = None,
    config: SharedConfig | None = None,
    unless_now: int | None = None,
) -> dict[str, Any]:
    """The class's shared dependency now, in one read of Redis (no database): the counters
    of the seconds ``now - back_s`` to ``now``, the settings (``config`` when Redis has none)
    and the latest trigger, and with ``sessions`` (a list, maybe empty) each one's own
    counters over the last ``STORM_STUDENT_WINDOW_S`` complete seconds (:func:`labs.live.runtime.shared_now`),
    unless ``now`` is ``unless_now`` (the caller has that second's table already)."""
    return runtime.shared_now(
        classroom_id,
        back_s=back_s,
        sessions=sessions or (),
        window_s=0 if sessions is None else STORM_STUDENT_WINDOW_S,
        window_unless=unless_now,
        fallback=config,
    )


def storm_sessions_now(
    classroom_id: int, session_ids: Sequence[int], now: int, back_s: int
) -> dict[int, dict]:
    """Each session's own per-second counters from ``now - back_s`` to ``now - 1`` (its strip
    chart's share row) and the class's offered attempts over the last
    ``STORM_STUDENT_WINDOW_S`` complete seconds before ``now`` (its card), by session id:
    Redis only, one round trip for them all."""
    return runtime.shared_sessions_now(
        classroom_id, session_ids, now=now, back_s=max(back_s, STORM_STUDENT_WINDOW_S),
        window_s=STORM_STUDENT_WINDOW_S,
    )  # fmt: skip


def session_shared_classroom(session_id: int) -> int | None:
    """The session's classroom id when its dependency is in ``shared`` mode, else None."""
    row = LabSession.objects.filter(pk=session_id).values_list("classroom_id", "dependency").first()
    if row is None or not isinstance(row[1], dict) or row[1].get("mode") != "shared":
        return None
    return row[0]


def storm_sessions(classroom_id: int) -> list[dict[str, Any]]:
    """The class's sessions as the panel's table names them (one query): id, the student's
    username, the scenario's title, the dependency mode and the policy's attempts per call
    (``max_attempts``: the class's largest retry count, the stable line's r, comes from
    these rows, ``labs.presenters.storm.class_retries``), by student then id."""
    from django.db.models.fields.json import KT

    rows = (
        LabSession.objects.filter(classroom_id=classroom_id)
        .annotate(mode=KT("dependency__mode"), max_attempts=KT("policy__max_attempts"))
        .values("pk", "owner__username", "scenario__title", "mode", "max_attempts", "tier")
        .order_by("owner__username", "pk")
    )
    return [
        {
            "session": r["pk"],
            "student": r["owner__username"],
            "scenario": r["scenario__title"] or "",
            "mode": r["mode"] or "",
            "max_attempts": _attempts(r["max_attempts"]),
            "tier": r["tier"],
        }
        for r in rows
    ]


#: The chain's figures are over this many complete seconds.
CHAIN_WINDOW_S = 10


def storm_chain(classroom_id: int, sessions: Sequence[dict[str, Any]], now: int) -> dict | None:
    """The class's chain of students as the panel shows it (None: no chain): per tier its
    services, calls in per second, attempts out per second and per call, and the shared
    dependency's hits per user request, over the last :data:`CHAIN_WINDOW_S` complete
    seconds before ``now`` (Redis only: :func:`labs.live.runtime.chain_now`)."""
    sizes: dict[int, int] = {}
    for row in sessions:
        if row.get("tier"):
            sizes[row["tier"]] = sizes.get(row["tier"], 0) + 1
    if not sizes:
        return None
    depth = max(sizes)
    chain = runtime.chain_now(classroom_id, depth, now=now, window_s=CHAIN_WINDOW_S)
    for tier in chain["tiers"]:
        tier["services"] = sizes.get(tier["tier"], 0)
    return chain


def _attempts(value: Any) -> int:
    """A policy's ``max_attempts`` as the JSON field's text gives it; the engine's default
    when the policy leaves it out (the guarded client then makes that many)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return LIMITS["policy.max_attempts"].default


def shared_settings(*, classroom: Classroom) -> dict[str, Any]:
    """The class's shared-dependency settings (the engine's defaults when none are saved)."""
    return runtime.shared_config(classroom.pk).to_dict()


def chain_settings(*, classroom: Classroom) -> dict[str, Any]:
    """The class's chain as its dashboard form shows it: the tiers' sizes (front first,
    empty: no chain), the sessions a chain can be made of (those on the shared dependency)
    and the most tiers they allow."""
    sessions = LabSession.objects.filter(classroom=classroom)
    sizes = dict(
        sessions.filter(tier__isnull=False).order_by().values_list("tier").annotate(n=Count("pk"))
    )
    available = sessions.filter(dependency__mode="shared").count()
    return {
        "sizes": [sizes.get(n, 0) for n in range(1, max(sizes, default=0) + 1)],
        "available": available,
        "most": max(MIN_TIERS, min(MAX_TIERS, available)),
    }
