"""``manage.py simulate_class CLASS --students 30 --policy naive --rate 5 --for 60``.

Creates (or reuses) bot students in the class (``CLASS``: its id, join code or exact name),
puts their sessions on the class's shared dependency with the chosen policy and starts their
steady traffic through the real services: the workers run it. Prints one line per bot and,
with ``--wait``, waits for every run to end and prints their summaries.
"""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from labs.models import Classroom, Traffic
from labs.services.lab import SettingsInvalid
from labs.services.simulate import POLICY_CHOICES, classroom_simulate


class Command(BaseCommand):
    help = "Run a simulated class: bot students' steady traffic against the shared dependency."

    def add_arguments(self, parser) -> None:
        parser.add_argument("classroom", metavar="CLASS", help="class id, join code or name")
        parser.add_argument("--students", type=int, default=30, help="bots, 1 to 200")
        parser.add_argument("--policy", default="naive", help=f"one of {', '.join(POLICY_CHOICES)}")
        parser.add_argument("--rate", type=int, default=5, help="calls/s per bot, 1 to 20")
        parser.add_argument("--for", dest="duration_s", type=int, default=60, help="1 to 300 s")
        parser.add_argument("--arrivals", default="poisson", help="poisson or even")
        parser.add_argument("--wait", action="store_true", help="wait for every run to end")

    def handle(self, *args, **options) -> None:
        classroom = _find_class(options["classroom"])
        try:
            simulation = classroom_simulate(
                classroom=classroom,
                students=options["students"],
                policy=options["policy"],
                rate=options["rate"],
                duration_s=options["duration_s"],
                arrivals=options["arrivals"],
            )
        except SettingsInvalid as exc:
            raise CommandError("; ".join(str(p) for p in exc.problems)) from exc
        for session, traffic in zip(simulation.sessions, simulation.traffic, strict=True):
            self.stdout.write(
                f"{session.owner.get_username()}: session {session.pk}, "
                f"{simulation.policies[session.pk]}, traffic {traffic.pk} "
                f"({traffic.calls} calls scheduled)"
            )
        if not options["wait"]:
            return
        ids = [t.pk for t in simulation.traffic]
        deadline = time.monotonic() + options["duration_s"] + 120
        while time.monotonic() < deadline:
            if not Traffic.objects.filter(pk__in=ids, status__in=Traffic.ACTIVE_STATUSES).exists():
                break
            time.sleep(0.5)
        for traffic in Traffic.objects.filter(pk__in=ids).order_by("pk"):
            self.stdout.write(f"traffic {traffic.pk}: {traffic.status} {traffic.summary}")


def _find_class(key: str) -> Classroom:
    rooms = Classroom.objects.all()
    found = None
    if key.isdigit():
        found = rooms.filter(pk=int(key)).first()
    found = found or rooms.filter(join_code=key.upper()).first() or rooms.filter(name=key).first()
    if found is None:
        raise CommandError(f"CLASS: no class with id, join code or name {key!r}")
    return found
