"""The class's shared dependency: its settings and the triggers an instructor fires.

Every session of a class whose dependency is in ``shared`` mode calls one server model in
Redis (:func:`labs.live.runtime.shared_model`). :func:`classroom_set_shared` changes its
servers, service time, queue limit and the server's defences; :func:`classroom_fire_trigger`
fires a ``down``, ``slow`` or ``capacity`` trigger for a duration. Both validate with the
engine's validator first (``SettingsInvalid`` naming each field and its range; nothing
changes then), both are refused unless the user teaches the class, and both are journaled in
every session of the class, naming who acted. A trigger fired while another runs replaces
it, and every journal says which one it replaced.

Redis holds the model, the database its settings: after a Redis restart every worker's
sweeper (:func:`shared_restore_lost`, on the worker's sweeper) writes the settings back from the database within a few
seconds (:func:`shared_restore_lost`, as a session's breaker is restored from its snapshot),
and a trigger that was running when the store lost it is ended with a line in every journal
of the class saying so, not left to look as if it still ran.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from labs.engine import Problem, SharedConfig
from labs.engine.shared import DEFENCES
from labs.engine.validate import parse_shared, parse_trigger, validate_shared, validate_trigger
from labs.journal import store as journal
from labs.live import runtime
from labs.models import Classroom, JournalEvent, LabSession, SharedDependencyConfig
from labs.presenters.server import describe_config
from labs.presenters.text import actor_name
from labs.services.lab import SettingsInvalid

logger = logging.getLogger(__name__)

SHARED_FIELDS = ("servers", "service_ms", "max_queue_ms", *DEFENCES)

#: What a lost trigger's line says in every journal of the class.
TRIGGER_LOST = "the trigger ended early: the store restarted"


def _check_teaches(*, user, classroom: Classroom) -> None:
    if not Classroom.objects.for_instructor(user).filter(pk=classroom.pk).exists():
        raise PermissionDenied("You do not teach this class.")


def shared_problems(values: Any) -> list:
    """The engine validator's problems with shared-dependency settings, each named by its
    bare field (``servers``, not ``shared.servers``) so forms can put it beside the input."""
    return [Problem(p.field.removeprefix("shared."), p.message) for p in validate_shared(values)]


def _journal_class(classroom: Classroom, kind: str, user, message: str, data: dict) -> int:
    sessions = list(LabSession.objects.filter(classroom=classroom).order_by("pk"))
    if sessions:
        journal.record(
            [journal.entry(s, kind, user=user, message=message, data=data) for s in sessions]
        )
    return len(sessions)


def classroom_set_shared(*, classroom: Classroom, user, values: dict) -> SharedDependencyConfig:
    """Set the class's shared dependency (``values``: any of :data:`SHARED_FIELDS`, the
    server's defences included, merged into the current settings; None turns a defence off).

    Validated by the engine (SettingsInvalid naming each field and its range, nothing
    changed); saved, journaled ``shared_set`` in every session of the class; written into the
    Redis model after the commit (queued work and a running trigger are kept). Raises
    PermissionDenied unless ``user`` teaches the class.
    """
    _check_teaches(user=user, classroom=classroom)
    if not isinstance(values, dict):
        raise SettingsInvalid([Problem("shared", "must be an object")])
    current = runtime.shared_config(classroom.pk).to_dict()
    merged = {**current, **values}
    problems = shared_problems(merged)
    if problems:
        raise SettingsInvalid(problems)
    config = parse_shared(merged)
    with transaction.atomic():
        row, _ = SharedDependencyConfig.objects.select_for_update().get_or_create(
            classroom=classroom
        )
        for name, value in config.to_dict().items():
            setattr(row, name, value)
        row.save()
        _journal_class(
            classroom,
            "shared_set",
            user,
            f"shared dependency set by {actor_name(user)}: {describe_config(config)}",
            {"shared": config.to_dict()},
        )
        transaction.on_commit(lambda: runtime.configure_shared(classroom.pk, config))
    return row


def classroom_fire_trigger(*, classroom: Classroom, user, values: dict) -> dict[str, Any]:
    """Fire a trigger on the class's shared dependency, from now for its duration.

    ``values``: ``kind`` (down, slow, capacity), ``duration_ms``, ``factor`` (slow),
    ``servers`` (capacity: the servers left, fewer than the class has). Validated by the
    engine (SettingsInvalid, nothing changed); one round trip to the Redis model, which
    replaces any trigger still running; journaled ``shared_trigger`` in every session of the
    class, saying which trigger it replaced, if any, with its span as the model stamped it
    (``span``: ``from_us``, ``until_us`` by Redis's clock; the recovery questions are graded
    from it, ``labs.services.predictions``). Returns ``{"trigger", "replaced",
    "sessions"}``. Raises PermissionDenied unless ``user`` teaches the class.
    """
    _check_teaches(user=user, classroom=classroom)
    config = runtime.shared_config(classroom.pk)
    problems = validate_trigger(values, servers=config.servers)
    if problems:
        raise SettingsInvalid(problems)
    trigger = parse_trigger(values, servers=config.servers)
    model = runtime.configure_shared(classroom.pk, config)
    replaced = model.trigger(trigger)
    span = runtime.shared_trigger_span(classroom.pk)
    if span is not None and span["until_us"] - span["from_us"] != trigger.duration_ms * 1000:
        span = None  # another trigger replaced this one already: its times are not ours
    detail = {
        "down": "every attempt fails with 503 after its service time",
        "slow": f"service time x {trigger.factor:g}",
        "capacity": f"{trigger.servers} of {config.servers} servers in service",
    }[trigger.kind]
    message = (
        f"shared dependency trigger by {actor_name(user)}: {trigger.kind} ({detail}) "
        f"for {trigger.duration_ms / 1000:g} s"
    )
    if replaced is not None:
        left_s = max(0.0, replaced["until_us"] / 1e6 - time.time())
        message += (
            f"; it replaces the running {replaced['kind']} trigger ({left_s:.1f} s were left)"
        )
    with transaction.atomic():
        count = _journal_class(
            classroom,
            "shared_trigger",
            user,
            message,
            {"trigger": trigger.to_dict(), "replaced": replaced, "span": span},
        )
    return {"trigger": trigger.to_dict(), "replaced": replaced, "sessions": count}


def shared_restore_lost() -> int:
    """Write back from the database the settings of every class's shared dependency that
    Redis has lost (a restart empties it); returns how many were restored.

    One pipelined ``EXISTS`` for all classes; a lost one is claimed with ``HSETNX`` on its
    model (so when several workers sweep together one restores it and journals it), then
    configured from its ``SharedDependencyConfig``. If the class's latest trigger (its last
    ``shared_trigger`` row) would still be running, Redis lost it with the rest: every
    session of the class is journaled ``shared_restored`` saying the trigger ended early
    (:data:`TRIGGER_LOST`). Settings alone are restored without a journal line (a class whose
    model was never written, on a fresh Redis, is configured the same way).
    """
    rows = list(SharedDependencyConfig.objects.all())
    if not rows:
        return 0
    client = runtime.engine_redis()
    models = [runtime.shared_model(row.classroom_id, client) for row in rows]
    pipe = client.pipeline(transaction=False)
    for model in models:
        pipe.exists(model.k_model)
    present = pipe.execute()
    restored = 0
    for row, model, exists in zip(rows, models, present, strict=True):
        if exists:
            continue
        config = SharedConfig(**row.to_dict())
        if not client.hsetnx(model.k_model, "servers", config.servers):
            continue  # another process is restoring it
        model.configure(config)
        restored += 1
        lost = _running_trigger(row.classroom_id)
        logger.warning("class %s: the shared dependency's settings were restored from the "
                       "database (Redis had lost them)", row.classroom_id)  # fmt: skip
        if lost is None:
            continue  # nothing a student saw changed: the settings are what they were
        with transaction.atomic():
            _journal_class(
                Classroom(pk=row.classroom_id),
                "shared_restored",
                None,
                f"{TRIGGER_LOST} (the {lost} trigger); the shared dependency's settings were "
                f"restored from the database ({describe_config(config)})",
                {"shared": config.to_dict(), "trigger_lost": lost},
            )
    return restored


def _running_trigger(classroom_id: int) -> str | None:
    """The kind of the class's latest trigger if its time has not run out, else None."""
    row = (
        JournalEvent.objects.filter(session__classroom_id=classroom_id)
        .filter(kind__in=("shared_trigger", "shared_restored"))
        .order_by("-created_at", "-pk")
        .values_list("kind", "created_at", "data")
        .first()
    )
    if row is None or row[0] != "shared_trigger":
        return None  # none fired, or the last restore already said it ended
    trigger = (row[2] or {}).get("trigger") or {}
    until = row[1] + timedelta(milliseconds=int(trigger.get("duration_ms", 0)))
    return trigger.get("kind", "running") if until > timezone.now() else None
