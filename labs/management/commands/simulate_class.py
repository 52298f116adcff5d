"""``manage.py simulate_class CLASS --students 30 --policy naive --rate 5 --for 60``.

Creates (or reuses) bot students in the class (``CLASS``: its id, join code or exact name),
marked simulated (left out of grades, predictions and student counts), puts their sessions on
the class's shared dependency with the chosen policy and starts their steady traffic through
the real services: the workers run it. Prints one line per bot and, with ``--wait``, waits for
every run to end and prints their summaries; a waiting command stopped by Ctrl-C, SIGTERM or
SIGHUP stops its bots' traffic before it exits. ``--cleanup`` removes the class's bots, their
sessions and their journals instead. ``--help`` shows every default.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

from django.core.management.base import BaseCommand, CommandError

from labs.models import Classroom, Traffic
from labs.services.lab import SettingsInvalid
from labs.services.simulate import (
    POLICY_CHOICES,
    classroom_simulate,
    classroom_simulation_cleanup,
)
from labs.services.traffic import traffic_stop


class Command(BaseCommand):
    help = "Run a simulated class: bot students' steady traffic against the shared dependency."

    def add_arguments(self, parser) -> None:
        # Every default is in its option's help ("(default: ...)"), so --help shows them all.
        parser.add_argument("classroom", metavar="CLASS", help="class id, join code or name")
        parser.add_argument(
            "--students", type=int, default=30, help="bots, 1 to 200 (default: %(default)s)"
        )
        parser.add_argument(
            "--policy",
            default="naive",
            help=f"one of {', '.join(POLICY_CHOICES)} (default: %(default)s)",
        )
        parser.add_argument(
            "--rate", type=int, default=5, help="calls/s per bot, 1 to 20 (default: %(default)s)"
        )
        parser.add_argument(
            "--for",
            dest="duration_s",
            type=int,
            default=60,
            help="seconds of traffic, 1 to 300 (default: %(default)s)",
        )
        parser.add_argument(
            "--arrivals", default="poisson", help="poisson or even (default: %(default)s)"
        )
        parser.add_argument(
            "--wait",
            action="store_true",
            help="wait for every run to end and print their summaries (default: do not wait)",
        )
        parser.add_argument(
            "--cleanup",
            action="store_true",
            help="remove the class's bots, their sessions and journals instead of starting "
            "any (default: off)",
        )

    def handle(self, *args, **options) -> None:
        classroom = _find_class(options["classroom"])
        if options["cleanup"]:
            self._cleanup(classroom)
            return
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
        try:
            with _stop_signals_interrupt():
                while time.monotonic() < deadline:
                    active = Traffic.objects.filter(
                        pk__in=ids, status__in=Traffic.ACTIVE_STATUSES
                    )
                    if not active.exists():
                        break
                    time.sleep(0.5)
        except KeyboardInterrupt as exc:
            stopped = [
                traffic_stop(session=session, user=session.owner)
                for session in simulation.sessions
            ]
            count = sum(t is not None for t in stopped)
            raise CommandError(
                f"interrupted ({exc or 'Ctrl-C'}): stopped the bots' traffic "
                f"({count} run{'s' if count != 1 else ''} still going)"
            ) from None
        for traffic in Traffic.objects.filter(pk__in=ids).order_by("pk"):
            self.stdout.write(f"traffic {traffic.pk}: {traffic.status} {traffic.summary}")

    def _cleanup(self, classroom: Classroom) -> None:
        done = classroom_simulation_cleanup(classroom=classroom)
        self.stdout.write(
            f"{classroom}: removed {done.accounts} simulated students, {done.sessions} "
            f"sessions and {done.journal_rows} journal rows"
        )
        if done.still_running:
            raise CommandError(
                f"still running, left in place (try again in a moment): "
                f"{', '.join(done.still_running)}"
            )


def _find_class(key: str) -> Classroom:
    rooms = Classroom.objects.all()
    found = None
    if key.isdigit():
        found = rooms.filter(pk=int(key)).first()
    found = found or rooms.filter(join_code=key.upper()).first() or rooms.filter(name=key).first()
    if found is None:
        raise CommandError(f"CLASS: no class with id, join code or name {key!r}")
    return found


@contextlib.contextmanager
def _stop_signals_interrupt():
    """While inside: SIGTERM and SIGHUP raise KeyboardInterrupt, as Ctrl-C does (once; a
    second one while the command stops its traffic is ignored). Only in the main thread,
    where Python runs signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in signals}

    def interrupt(signum, frame):
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")

    for sig in signals:
        signal.signal(sig, interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
