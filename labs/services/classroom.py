"""Class-wide actions of an instructor: one change applied to every lab session of a class.

Each action goes through the session services of ``labs.services.lab`` (so each session's
journal names who did it, exactly as when the student acts) and is refused as a whole, before
any session is touched, when its input is invalid (``SettingsInvalid`` naming the field and
its range) or the user does not teach the class (``PermissionDenied``).

A timed fault (``duration_s``) is a :class:`~labs.models.ClassFault` row holding, per session,
the dependency to put back; ``labs.worker.tasks.restore_class_fault`` runs with a countdown and
calls :func:`classroom_fault_restore`, which claims the row with a conditional UPDATE, so a task
delivered twice (or a sweep racing the task) restores once. A second injection in the same
class supersedes the first: the first's restore then does nothing, and the second restores the
modes the first had saved (the modes from before any class-wide fault), not the first fault.
A fault whose task was lost (its worker died holding it) is restored by a sweep
(:func:`classroom_faults_restore_due`) that every worker runs every few seconds from the moment
it is ready (:func:`sweep_faults`), and that a class dashboard runs when it loads.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from labs.engine import Problem
from labs.live import enqueue
from labs.models import ClassFault, Classroom, LabSession, Scenario
from labs.presenters.text import actor_name
from labs.services.bursts import BurstAlreadyRunning
from labs.services.lab import SettingsInvalid, session_reset, session_set_dependency

logger = logging.getLogger(__name__)

#: A class-wide fault lasts 1 s to 1 h.
FAULT_DURATION_RANGE_S = (1, 3600)


@dataclass
class ClassActionResult:
    """What a class-wide action did: the sessions changed and those left alone (and why)."""

    changed: list[int] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)
    fault: ClassFault | None = None

    def describe(self, verb: str) -> str:
        """One sentence for the instructor, e.g. ``down applied to 12 sessions; 2 skipped``."""
        n = len(self.changed)
        text = f"{verb} {n} session{'s' if n != 1 else ''}"
        if self.skipped:
            text += (
                f"; {len(self.skipped)} skipped ({'; '.join(sorted(set(self.skipped.values())))})"
            )
        return text


def _check_teaches(*, user, classroom: Classroom) -> None:
    if not Classroom.objects.for_instructor(user).filter(pk=classroom.pk).exists():
        raise PermissionDenied("You do not teach this class.")


def validate_duration(duration_s: object) -> list:
    """Problems with a fault duration (None means no duration: the fault stays)."""
    if duration_s is None:
        return []
    low, high = FAULT_DURATION_RANGE_S
    if isinstance(duration_s, bool) or not isinstance(duration_s, int):
        return [
            Problem(
                "duration_s",
                f"must be a whole number of seconds between {low} and {high} (got {duration_s!r})",
                "Duration",
            )
        ]
    if not low <= duration_s <= high:
        return [
            Problem(
                "duration_s", f"must be between {low} and {high} s (got {duration_s})", "Duration"
            )
        ]
    return []


def _validate_for_every_session(sessions: list[LabSession], changes: object) -> list:
    """The engine's problems with ``changes`` merged into each session (deduplicated)."""
    from labs.engine import merge_settings
    from labs.engine.config import default_dependency
    from labs.engine.validate import validate_dependency

    if not isinstance(changes, dict) or not changes:
        return [Problem("dependency", "must be an object with at least a mode")]
    problems, seen = [], set()
    # With no session yet, still validate against the defaults: a bad request is bad anyway.
    bases = [s.dependency or {} for s in sessions] or [default_dependency()]
    for base in bases:
        for problem in validate_dependency(merge_settings(base, changes)):
            if str(problem) not in seen:
                seen.add(str(problem))
                problems.append(problem)
    return problems


def classroom_set_dependency(
    *, classroom: Classroom, user, changes: dict, duration_s: int | None = None
) -> ClassActionResult:
    """Put every session of ``classroom`` into the dependency ``changes`` (e.g. ``{"mode": "down"}``).

    With ``duration_s`` (1 to 3600), each session's previous dependency comes back after that
    long (journaled ``fault_restored``); the fault is journaled ``fault_injected`` in every
    session, naming ``user``. Without it the change stays (journaled ``fault_injected`` too).
    Either way an active timed fault of the class is superseded.

    All or nothing: the mode and duration are validated for every session first (raises
    SettingsInvalid, field and range, nothing touched), then every session changes in one
    transaction. Raises PermissionDenied unless ``user`` teaches the class.
    """
    from labs.engine import merge_settings, parse_dependency

    _check_teaches(user=user, classroom=classroom)
    sessions = list(LabSession.objects.filter(classroom=classroom).order_by("pk"))
    problems = validate_duration(duration_s) + _validate_for_every_session(sessions, changes)
    if problems:
        raise SettingsInvalid(problems)

    mode = changes.get("mode", "")
    note = f"class-wide, for {duration_s} s" if duration_s else "class-wide"
    result = ClassActionResult()
    with transaction.atomic():
        # Lock the class's active fault (if any) so two instructors injecting at once queue up.
        previous_fault = (
            ClassFault.objects.select_for_update()
            .filter(classroom=classroom, status=ClassFault.Status.ACTIVE)
            .first()
        )
        saved: dict[str, dict] = {}
        if previous_fault is not None:
            saved = dict(previous_fault.sessions or {})
            ClassFault.objects.filter(pk=previous_fault.pk).update(
                status=ClassFault.Status.SUPERSEDED,
                finished_at=timezone.now(),
                result={"superseded": True},
            )
        plan: dict[str, dict] = {}
        for session in sessions:
            # The mode from before any class-wide fault: the superseded fault saved it.
            before = (saved.get(str(session.pk)) or {}).get("previous") or session.dependency
            applied = parse_dependency(merge_settings(session.dependency or {}, changes)).to_dict()
            session_set_dependency(
                session=session, user=user, changes=changes, kind="fault_injected", note=note
            )
            plan[str(session.pk)] = {"previous": before, "applied": applied}
            result.changed.append(session.pk)
        if duration_s:
            fault = ClassFault.objects.create(
                classroom=classroom,
                created_by=user if getattr(user, "is_authenticated", False) else None,
                changes=changes,
                duration_s=duration_s,
                restore_at=timezone.now() + timedelta(seconds=duration_s),
                sessions=plan,
            )
            result.fault = fault
            transaction.on_commit(lambda: _schedule_restore(fault.pk, duration_s))
    logger.info(
        "class %s: %s by %s on %d session(s)%s",
        classroom.pk, mode, actor_name(user), len(result.changed),
        f" for {duration_s} s" if duration_s else "",
    )  # fmt: skip
    return result


def _schedule_restore(fault_id: int, countdown: int) -> None:
    enqueue.enqueue_fault_restore(fault_id, countdown)


def classroom_fault_restore(*, fault_id: int, now=None) -> ClassActionResult:
    """End timed fault ``fault_id``: each session gets its previous dependency back.

    Idempotent and safe to race: the fault is claimed ACTIVE -> RESTORED with a conditional
    UPDATE (only once ``restore_at`` has passed), so a second delivery, a superseded fault or
    an early call does nothing. A session whose dependency was changed since the fault (the
    student set another mode, or it was reset) keeps its new setting; its journal says so.
    A running burst picks the restored mode up at its next call boundary (the burst runner
    re-reads the dependency between calls), never in the middle of an attempt.
    """
    from labs.journal import store as journal

    now = now or timezone.now()
    result = ClassActionResult()
    with transaction.atomic():
        claimed = ClassFault.objects.filter(
            pk=fault_id, status=ClassFault.Status.ACTIVE, restore_at__lte=now
        ).update(status=ClassFault.Status.RESTORED, finished_at=now)
        if not claimed:
            return result
        fault = ClassFault.objects.select_related("created_by", "classroom").get(pk=fault_id)
        mode = (fault.changes or {}).get("mode", "fault")
        note = f"class-wide {mode} for {fault.duration_s} s is over"
        by_id = {
            str(s.pk): s
            for s in LabSession.objects.filter(
                classroom_id=fault.classroom_id, pk__in=[int(k) for k in fault.sessions]
            )
        }
        for key, entry in sorted(fault.sessions.items(), key=lambda kv: int(kv[0])):
            session = by_id.get(key)
            if session is None:
                continue  # deleted since
            if session.dependency != entry.get("applied"):
                result.skipped[session.pk] = "dependency changed since the fault"
                journal.record(
                    [
                        journal.entry(
                            session,
                            "fault_restored",
                            actor_id=fault.created_by_id,
                            message=(
                                f"{note}; this session's dependency was changed since, "
                                "so it stays as it is"
                            ),
                            data={"mode": (session.dependency or {}).get("mode"), "kept": True},
                        )
                    ]
                )
                continue
            session_set_dependency(
                session=session,
                user=fault.created_by,
                changes=entry["previous"],
                kind="fault_restored",
                note=note,
            )
            result.changed.append(session.pk)
        ClassFault.objects.filter(pk=fault.pk).update(
            result={"restored": result.changed, "kept": sorted(result.skipped)}
        )
        result.fault = fault
    return result


def classroom_faults_restore_due(*, now=None) -> int:
    """Restore every active fault whose time has passed (a backstop for a lost task).

    The countdown task is the normal path; this sweep (run when a dashboard loads) covers a
    broker that lost the message. Returns how many faults it restored.
    """
    now = now or timezone.now()
    due = ClassFault.objects.filter(status=ClassFault.Status.ACTIVE, restore_at__lte=now)
    restored = 0
    for fault_id in due.values_list("pk", flat=True):
        if classroom_fault_restore(fault_id=fault_id, now=now).fault is not None:
            restored += 1
    return restored


def sweep_faults() -> None:
    """The worker's backstop for timed class faults whose restore task was lost (a worker
    that died holding it): restore every one due; the restore claims its row, so the task and
    the sweep never both restore a fault."""
    restored = classroom_faults_restore_due()
    if restored:
        logger.info("restored %d class fault(s) whose restore task was lost", restored)


def classroom_reset(*, classroom: Classroom, user) -> ClassActionResult:
    """Reset every session of ``classroom`` (scenario settings back, breaker closed).

    A session with a burst queued or running is skipped (resetting under a running burst would
    mix two sessions' histories); the result lists it so the instructor can retry. Each reset
    is its own transaction (through ``session_reset``), journaled with ``user``'s name.
    Raises PermissionDenied unless ``user`` teaches the class.
    """
    _check_teaches(user=user, classroom=classroom)
    result = ClassActionResult()
    sessions = LabSession.objects.filter(classroom=classroom).select_related("scenario")
    for session in sessions.order_by("pk"):
        try:
            session_reset(session=session, user=user)
        except BurstAlreadyRunning:
            result.skipped[session.pk] = "a burst is running"
        else:
            result.changed.append(session.pk)
    return result


def classroom_assign_scenario(
    *, classroom: Classroom, user, scenario: Scenario
) -> ClassActionResult:
    """Assign ``scenario`` to ``classroom``: its students can open it from their home page.

    Journals ``scenario_assigned`` (naming ``user``) in every existing session of the class,
    so students see it where they are working. Assigning a scenario the class already has
    changes nothing and journals nothing. Refuses an inactive scenario (SettingsInvalid,
    field ``scenario``). Raises PermissionDenied unless ``user`` teaches the class.
    """
    from labs.journal import store as journal

    _check_teaches(user=user, classroom=classroom)
    if not scenario.is_active:
        raise SettingsInvalid([Problem("scenario", "must be an active scenario")])
    result = ClassActionResult()
    with transaction.atomic():
        # Lock the class row: two instructors assigning the same scenario journal it once.
        Classroom.objects.select_for_update().filter(pk=classroom.pk).first()
        if classroom.scenarios.filter(pk=scenario.pk).exists():
            return result
        classroom.scenarios.add(scenario)
        sessions = list(LabSession.objects.filter(classroom=classroom).order_by("pk"))
        message = (
            f"scenario \u201c{scenario.title}\u201d assigned to {classroom.name} by "
            f"{actor_name(user)}; open it from your class page"
        )
        journal.record(
            [
                journal.entry(
                    s,
                    "scenario_assigned",
                    message,
                    user=user,
                    data={"scenario": scenario.pk, "slug": scenario.slug},
                )
                for s in sessions
            ]
        )
        result.changed = [s.pk for s in sessions]
    return result


def active_fault(*, classroom: Classroom) -> ClassFault | None:
    """The class's running timed fault, if any (for the dashboard's banner)."""
    return ClassFault.objects.filter(classroom=classroom, status=ClassFault.Status.ACTIVE).first()
