"""The storm panel's reads: the shared dependency's settings, seconds and students."""

from __future__ import annotations

from typing import Any

from labs.engine.shared import SECOND_FIELDS, WAIT_BOUNDS_MS, Second, seconds_from_fields
from labs.engine.validate import traffic_defaults
from labs.live.runtime import shared_config, shared_model
from labs.models import (
    Classroom,
    LabSession,
    Scenario,
    SharedDependencyConfig,
)
from labs.presenters.storm import SESSION_WINDOW_S, offered_load_text, session_window

# --- the storm panel -------------------------------------------------------------------------

#: Seconds of history the storm panel shows (and sends in a snapshot).
STORM_WINDOW_S = 300
#: Complete seconds over which the per-student table's rates are measured (the sessions'
#: own counters in Redis; the lab page's card uses the same window).
STORM_STUDENT_WINDOW_S = SESSION_WINDOW_S


def storm_traffic_defaults(classroom_id: int) -> dict[str, Any]:
    """What the storm panel's Start traffic offers: the class's lesson's traffic (the first
    of its scenarios, by position, whose script names one; a shared-dependency lesson before
    any other), else the lab's defaults; with the number of sessions on the shared dependency
    and its capacity, so the form can say the load it will offer before it starts."""
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
    sessions = LabSession.objects.filter(
        classroom_id=classroom_id, dependency__mode="shared"
    ).count()
    capacity = shared_config(classroom_id).capacity_per_s
    return {
        **values,
        "sessions": sessions,
        "capacity_per_s": capacity,
        "load": offered_load_text(sessions, values["rate"], capacity),
    }


def storm_configured(classroom_id: int) -> bool:
    """Whether the class has saved shared-dependency settings (the storm panel needs them)."""
    return SharedDependencyConfig.objects.filter(classroom_id=classroom_id).exists()


def _storm_fields(second: int) -> list[str]:
    names = [*SECOND_FIELDS, *(f"q{i}" for i in range(len(WAIT_BOUNDS_MS)))]
    return [f"{second}:{name}" for name in names]


def storm_now_s(classroom_id: int) -> int:
    """The current second on the clock that stamps the counters (Redis's ``TIME``)."""
    return int(shared_model(classroom_id).client.time()[0])


def storm_seconds(classroom_id: int, first: int, last: int) -> list[dict[str, Any]]:
    """The shared dependency's counters for every second from ``first`` to ``last``
    (inclusive), a zero row for a second nobody called in; one ``HMGET`` of exactly those
    fields, never the whole hash (which holds up to an hour of seconds)."""
    if last < first:
        return []
    model = shared_model(classroom_id)
    fields = [f for s in range(first, last + 1) for f in _storm_fields(s)]
    values = model.client.hmget(model.k_counters, fields)
    found = seconds_from_fields(
        {k: v for k, v in zip(fields, values, strict=True) if v is not None}
    )
    by_second = {row.second: row for row in found}
    return [(by_second.get(s) or Second(second=s)).to_dict() for s in range(first, last + 1)]


def storm_model_state(classroom_id: int) -> dict[str, Any]:
    """The class's shared dependency: settings, capacity and the latest trigger (with its
    span in seconds), from the Redis model (the database's settings when Redis has none)."""
    state = shared_model(classroom_id).state()
    config = shared_config(classroom_id)
    trigger = state["trigger"]
    if trigger is not None:
        trigger = {
            **trigger,
            "from_s": trigger["from_us"] / 1e6,
            "until_s": trigger["until_us"] / 1e6,
        }
    return {
        "config": config.to_dict(),
        "capacity_per_s": config.capacity_per_s,
        "trigger": trigger,
    }


def storm_recent(classroom_id: int, back_s: int) -> dict[str, Any]:
    """The shared dependency now: ``now_us`` (Redis's ``TIME``), the counters of the seconds
    ``now - back_s`` to ``now`` (:func:`storm_seconds`) and :func:`storm_model_state`."""
    model = shared_model(classroom_id)
    seconds, micros = model.client.time()
    now = int(seconds)
    return {
        "now": now,
        "now_us": now * 1_000_000 + int(micros),
        "seconds": storm_seconds(classroom_id, now - back_s, now),
        "model": storm_model_state(classroom_id),
    }


def session_shared_classroom(session_id: int) -> int | None:
    """The session's classroom id when its dependency is in ``shared`` mode, else None."""
    row = LabSession.objects.filter(pk=session_id).values_list("classroom_id", "dependency").first()
    if row is None or not isinstance(row[1], dict) or row[1].get("mode") != "shared":
        return None
    return row[0]


def storm_sessions(classroom_id: int) -> list[dict[str, Any]]:
    """The class's sessions as the panel's table names them (one query): id, the student's
    username, the scenario's title and the dependency mode, by student then id."""
    from django.db.models.fields.json import KT

    rows = (
        LabSession.objects.filter(classroom_id=classroom_id)
        .annotate(mode=KT("dependency__mode"))
        .values("pk", "owner__username", "scenario__title", "mode")
        .order_by("owner__username", "pk")
    )
    return [
        {
            "session": r["pk"],
            "student": r["owner__username"],
            "scenario": r["scenario__title"] or "",
            "mode": r["mode"] or "",
        }
        for r in rows
    ]


def _class_offered(model, first: int, last: int) -> int:
    """The class's offered attempts over seconds ``first`` to ``last`` (one ``HMGET``)."""
    fields = [f"{sec}:offered" for sec in range(first, last + 1)]
    return sum(int(v) for v in model.client.hmget(model.k_counters, fields) if v)


def storm_window(classroom_id: int, session_ids: list[int], now: int) -> dict[str, Any]:
    """The per-session figures of the ``STORM_STUDENT_WINDOW_S`` complete seconds before
    ``now`` (``session_window``), read from the per-session counters the shared
    model keeps beside its own (one pipelined round trip), with the class's offered
    attempts over the same seconds (one ``HMGET``): ``{"now", "first", "last",
    "class_offered", "sessions": {id: figures}}``."""
    first, last = now - STORM_STUDENT_WINDOW_S, now - 1
    model = shared_model(classroom_id)
    class_offered = _class_offered(model, first, last)
    own = model.session_seconds(session_ids, first, last)
    return {
        "now": now,
        "first": first,
        "last": last,
        "class_offered": class_offered,
        "sessions": {
            int(sid): session_window(rows, class_offered, STORM_STUDENT_WINDOW_S)
            for sid, rows in own.items()
        },
    }


def storm_students(
    classroom_id: int, now: int, sessions: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The panel's per-student table at ``now``: every session of the class
    (:func:`storm_sessions`, or ``sessions`` already read) with its figures over the last
    ``STORM_STUDENT_WINDOW_S`` complete seconds (:func:`storm_window`, Redis only). Rows
    carry ``now`` so a page can tell which second they describe."""
    if sessions is None:
        sessions = storm_sessions(classroom_id)
    window = storm_window(classroom_id, [s["session"] for s in sessions], now)
    out = []
    for s in sessions:
        figures = window["sessions"][s["session"]]
        out.append(
            {
                **s,
                "now": now,
                "attempts": figures["attempts"],
                "retries": figures["retries"],
                "attempts_per_s": figures["attempts_per_s"],
                "retry_ratio": figures["retry_ratio"] or 0.0,
                "state": figures["state"] or "idle",
                "fast": figures["fast"],
                "share": figures["share"] or 0.0,
            }
        )
    return out


def storm_session_recent(classroom_id: int, session_id: int, now: int, back_s: int) -> dict:
    """One session's own per-second counters from ``now - back_s`` to ``now - 1`` (its
    strip chart's share row) and its window figures at ``now`` (its card), Redis only."""
    model = shared_model(classroom_id)
    back_s = max(back_s, STORM_STUDENT_WINDOW_S)
    rows = model.session_seconds([session_id], now - back_s, now - 1)[str(session_id)]
    class_offered = _class_offered(model, now - STORM_STUDENT_WINDOW_S, now - 1)
    return {
        "now": now,
        "seconds": [
            {k: r[k] for k in ("second", "offered", "retries", "fast", "state")} for r in rows
        ],
        "window": session_window(
            rows[-STORM_STUDENT_WINDOW_S:], class_offered, STORM_STUDENT_WINDOW_S
        ),
    }


def shared_settings(*, classroom: Classroom) -> dict[str, Any]:
    """The class's shared-dependency settings (the engine's defaults when none are saved)."""
    return shared_config(classroom.pk).to_dict()
