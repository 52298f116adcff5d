"""``manage.py run_scenario FILE.json``: a scenario script through the real stack.

Creates a throwaway lab session (its own user, class and scenario), runs every step through
the services, a Celery worker and Redis, prints the engine runner's JSON with real wall times,
then removes the throwaway rows and Redis keys (``--keep`` leaves them for a look in the admin).
The steps' expectations are checked on what the worker journaled: the JSON's ``checks``
section lists them, each failed one is also named on stderr, and the exit status is 1 when
one fails. A worker must be running (``make run`` starts one). Exit status 2 for an invalid
script.
"""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from labs.engine import parse_scenario, run_scenario
from labs.grading import validate_lesson
from labs.live import runtime
from labs.models import Classroom, Membership, Scenario
from labs.services.lab import session_open
from labs.services.scenario_runner import NoWorker, WorkerExecutor


class Command(BaseCommand):
    help = "Run a scenario script (docs/engine.md) on the real worker and print its JSON."

    def add_arguments(self, parser):
        parser.add_argument("file", help="scenario script (JSON)")
        parser.add_argument("--keep", action="store_true", help="keep the throwaway session")
        parser.add_argument(
            "--burst-timeout", type=float, default=120.0, help="seconds to wait for each burst"
        )

    def handle(self, *args, **options):
        path = Path(options["file"])
        try:
            script = json.loads(path.read_text())
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}", returncode=2) from exc
        except json.JSONDecodeError as exc:
            raise CommandError(
                f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                returncode=2,
            ) from exc
        problems = validate_lesson(script)
        if problems:
            for problem in problems:
                self.stderr.write(str(problem))
            sys.exit(2)
        scenario = parse_scenario(script)

        tag = secrets.token_hex(4)
        with transaction.atomic():
            user = get_user_model().objects.create_user(f"headless-{tag}", password=None)
            room = Classroom.objects.create(name=f"headless run {tag}")
            Membership.objects.create(user=user, classroom=room, role=Membership.Role.STUDENT)
            row = Scenario.objects.create(
                slug=f"headless-{tag}", title=f"{scenario.name} (headless {tag})", script=script
            )
            room.scenarios.add(row)
        session = session_open(user=user, classroom=room, scenario=row)
        try:
            output = run_scenario(
                scenario,
                executor=WorkerExecutor(
                    session, user=user, burst_timeout=options["burst_timeout"]
                ),
            )
        except NoWorker as exc:
            raise CommandError(str(exc)) from exc
        finally:
            if not options["keep"]:
                runtime.session_store(session.pk).clear()
                room.delete()  # cascades to the session, its bursts and journal
                row.delete()
                user.delete()
        self.stdout.write(json.dumps(output, indent=2))
        failed = [c for c in output["checks"] if not c["ok"]]
        for check in failed:
            self.stderr.write(
                f"step {check['step']} (burst {check['burst']}) {check['measure']}: "
                f"expected {check['expected']}, observed {check['observed']}"
            )
        if failed:
            sys.exit(1)
