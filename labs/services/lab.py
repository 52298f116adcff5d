"""Lab session services.

Started by the platform with ``session_open`` only; the lab engineer owns this module and adds
bursts, resets and fault injection here.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction

from labs.models import Classroom, LabSession, Membership, Scenario


def _initial_settings(scenario: Scenario) -> tuple[dict, dict, int]:
    """Canonical dependency and policy dicts and the seed, from the scenario's script."""
    from labs.engine import parse_dependency, parse_policy

    script = scenario.script if isinstance(scenario.script, dict) else {}
    dependency = parse_dependency(script.get("dependency") or {}).to_dict()
    policy = parse_policy(script.get("policy") or {}).to_dict()
    seed = script.get("seed", 0)
    return dependency, policy, seed if isinstance(seed, int) else 0


def session_open(*, user, classroom: Classroom, scenario: Scenario) -> LabSession:
    """The student's lab session for ``scenario`` in ``classroom``, created on first open.

    Idempotent: a second call returns the same session, unchanged. Raises PermissionDenied
    unless ``user`` is a student member of ``classroom`` and ``scenario`` is assigned to it
    (and active). A concurrent first open by the same student (double click) is settled by the
    unique constraint: the loser reads the winner's row.
    """
    is_student = Membership.objects.filter(
        user=user, classroom=classroom, role=Membership.Role.STUDENT
    ).exists()
    if not is_student:
        raise PermissionDenied("You are not a student in this class.")
    if not classroom.scenarios.filter(pk=scenario.pk, is_active=True).exists():
        raise PermissionDenied("This scenario is not assigned to your class.")

    existing = LabSession.objects.filter(owner=user, classroom=classroom, scenario=scenario).first()
    if existing is not None:
        return existing
    dependency, policy, seed = _initial_settings(scenario)
    try:
        with transaction.atomic():
            return LabSession.objects.create(
                owner=user,
                classroom=classroom,
                scenario=scenario,
                dependency=dependency,
                policy=policy,
                seed=seed,
            )
    except IntegrityError:
        return LabSession.objects.get(owner=user, classroom=classroom, scenario=scenario)
