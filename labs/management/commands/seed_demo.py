"""``manage.py seed_demo``: demo accounts, a class and every scenario in scenarios/*.json.

The demo class gets a shared dependency with the engine's defaults (8 servers x 40 ms, a
2000 ms queue) unless it has one, so the storm lesson (``scenarios/storm_lesson.json``) and
the storm panel work out of the box; settings an instructor saved are kept.

Idempotent: running it again updates the same rows (and resets the demo passwords), never
duplicates them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from labs.models import Classroom, Membership, Scenario, SharedDependencyConfig
from labs.services.accounts import instructor_enrol

DEMO_CLASS_NAME = "Resilience 101"
DEMO_JOIN_CODE = "DEMO2026"
DEMO_STUDENTS = [
    ("student1", "Ada", "Lovelace"),
    ("student2", "Grace", "Hopper"),
    ("student3", "Alan", "Turing"),
]
DEFAULT_DEMO_PASSWORD = "failurelab"  # noqa: S105  (demo accounts on a local machine)
SCRIPT_ONLY_FOR_MODEL = ("instructions",)
#: Lessons that build on another (Find the edge starts from the storm lesson's policy and
#: panel; The server defends itself from Find the edge's load): seeded after the others, so a
#: class's list shows them after what they build on.
FOLLOW_UPS = ("find_the_edge", "server_defences", "chain_of_students")


def load_scenario_files(directory: Path) -> list[tuple[str, dict]]:
    """(slug, document) for every scenarios/*.json, sorted by file name."""
    documents = []
    for path in sorted(directory.glob("*.json")):
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise CommandError(f"{path.name}: not readable JSON ({exc})") from exc
        if not isinstance(document, dict):
            raise CommandError(f"{path.name}: the top level must be a JSON object")
        documents.append((path.stem, document))
    return documents


def seed_order(documents: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """``documents`` in the order a class lists them: "tour" first (the guided introduction),
    then by file name, lessons that build on another (:data:`FOLLOW_UPS`) last, in that
    list's order."""

    def key(item: tuple[str, dict]) -> tuple[bool, int, str]:
        after = FOLLOW_UPS.index(item[0]) + 1 if item[0] in FOLLOW_UPS else 0
        return item[0] != "tour", after, item[0]

    return sorted(documents, key=key)


def upsert_scenario(slug: str, document: dict, position: int) -> Scenario:
    """Create or update the scenario ``slug`` from a scenario file, validated as a lesson
    (``labs.grading.validate_lesson``: the engine's checks and the questions')."""
    script = {k: v for k, v in document.items() if k not in SCRIPT_ONLY_FOR_MODEL}
    script["name"] = slug
    scenario = Scenario.objects.filter(slug=slug).first() or Scenario(slug=slug)
    scenario.title = str(document.get("title") or slug.replace("_", " ").replace("-", " ").title())
    scenario.description = str(document.get("description") or "")[:300]
    scenario.instructions = str(document.get("instructions") or scenario.instructions or "")
    scenario.script = script
    scenario.position = position
    scenario.is_active = True
    try:
        scenario.full_clean()
    except ValidationError as exc:
        details = "; ".join(
            f"{field}: {message}"
            for field, messages in exc.message_dict.items()
            for message in messages
        )
        raise CommandError(f"scenarios/{slug}.json is not a valid scenario: {details}") from exc
    scenario.save()
    return scenario


class Command(BaseCommand):
    help = "Create (or refresh) the demo instructor, class, students, admin and scenarios."

    def add_arguments(self, parser):
        parser.add_argument(
            "--scenarios-dir",
            default=None,
            help="Where the scenario files are (default: the repository's scenarios/).",
        )

    def handle(self, *args, **options):
        password = os.environ.get("LAB_DEMO_PASSWORD") or DEFAULT_DEMO_PASSWORD
        directory = Path(options["scenarios_dir"] or settings.LAB_SCENARIOS_DIR)
        documents = load_scenario_files(directory)
        User = get_user_model()

        with transaction.atomic():
            documents = seed_order(documents)
            scenarios = [
                upsert_scenario(slug, document, position=10 * (index + 1))
                for index, (slug, document) in enumerate(documents)
            ]

            admin = self._user(User, "admin", password, "Lab", "Admin")
            admin.is_staff = admin.is_superuser = True
            admin.save()

            instructor = self._user(User, "instructor", password, "Ingrid", "Instructor")
            classroom, _ = Classroom.objects.get_or_create(
                join_code=DEMO_JOIN_CODE, defaults={"name": DEMO_CLASS_NAME}
            )
            classroom.name = DEMO_CLASS_NAME
            classroom.join_code_expires_at = None
            classroom.save()
            instructor_enrol(user=instructor, classroom=classroom)
            classroom.scenarios.add(*scenarios)
            SharedDependencyConfig.objects.get_or_create(classroom=classroom)

            for username, first, last in DEMO_STUDENTS:
                student = self._user(User, username, password, first, last)
                Membership.objects.update_or_create(
                    user=student, classroom=classroom, defaults={"role": Membership.Role.STUDENT}
                )

        self.stdout.write(self.style.SUCCESS("Demo data ready."))
        self.stdout.write(
            f"  class: {classroom.name} (join code {classroom.join_code}), "
            f"{len(scenarios)} scenarios: {', '.join(s.slug for s in scenarios) or 'none'}"
        )
        self.stdout.write("  logins (username / password):")
        for username, role in [
            ("student1", "student"),
            ("student2", "student"),
            ("student3", "student"),
            ("instructor", "instructor (staff, back office)"),
            ("admin", "superuser"),
        ]:
            self.stdout.write(f"    {username:<11} / {password}   {role}")

    @staticmethod
    def _user(User, username: str, password: str, first: str, last: str):
        user, _ = User.objects.get_or_create(username=username)
        user.first_name, user.last_name = first, last
        user.email = f"{username}@example.com"
        user.is_active = True
        user.set_password(password)
        user.save()
        return user
