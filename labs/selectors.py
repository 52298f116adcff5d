"""Reads that grow beyond one line (HackSoft style: selectors read, services write)."""

from __future__ import annotations

from dataclasses import dataclass, field

from labs.models import Classroom, LabSession, Membership, Scenario


@dataclass
class ScenarioRun:
    """A scenario run in virtual time: the engine's result, or the problems that stopped it."""

    scenario: Scenario
    result: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def calls(self) -> list[dict]:
        return self.result.get("calls", [])

    @property
    def bursts(self) -> list[dict]:
        return self.result.get("bursts", [])

    @property
    def transitions(self) -> list[dict]:
        return self.result.get("transitions", [])


def scenario_run_virtual(*, scenario: Scenario) -> ScenarioRun:
    """Run ``scenario``'s script with the engine in virtual time (no Redis, no sleeps).

    Never raises for a bad script: the engine's problems are returned for display.
    """
    from labs.engine import ValidationError as ScriptError
    from labs.engine import parse_scenario, run_scenario

    try:
        result = run_scenario(parse_scenario(scenario.script))
    except ScriptError as exc:
        return ScenarioRun(scenario=scenario, problems=[str(p) for p in exc.problems])
    return ScenarioRun(scenario=scenario, result=result)


@dataclass
class StudentScenario:
    scenario: Scenario
    session: LabSession | None


@dataclass
class StudentClass:
    classroom: Classroom
    scenarios: list[StudentScenario]


def student_classes(*, user) -> list[StudentClass]:
    """The classes ``user`` studies in, each with its active assigned scenarios and the
    user's lab session for each (None until opened)."""
    classrooms = list(
        Classroom.objects.for_student(user).prefetch_related("scenarios").order_by("name", "pk")
    )
    sessions = {
        (s.classroom_id, s.scenario_id): s
        for s in LabSession.objects.filter(owner=user, classroom__in=classrooms)
    }
    result = []
    for classroom in classrooms:
        scenarios = sorted(
            (s for s in classroom.scenarios.all() if s.is_active),
            key=lambda s: (s.position, s.title, s.pk),
        )
        result.append(
            StudentClass(
                classroom=classroom,
                scenarios=[
                    StudentScenario(scenario=s, session=sessions.get((classroom.pk, s.pk)))
                    for s in scenarios
                ],
            )
        )
    return result


def instructor_classes(*, user) -> list[Classroom]:
    """The classes ``user`` teaches (every class for a superuser), with student counts."""
    from django.db.models import Count, Q

    # pk__in, not a join: a join on memberships here would also narrow the Count below.
    return list(
        Classroom.objects.filter(pk__in=Classroom.objects.for_instructor(user).values("pk"))
        .annotate(
            student_count=Count(
                "memberships",
                filter=Q(memberships__role=Membership.Role.STUDENT),
                distinct=True,
            )
        )
        .prefetch_related("scenarios")
        .order_by("name", "pk")
    )
