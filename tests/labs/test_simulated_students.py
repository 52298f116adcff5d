"""Bots that know they are bots: ``simulate_class`` marks its students simulated; grades,
prediction pages and student counts leave them out, the dashboard counts them apart, and
``--cleanup`` removes them with their sessions and journals (real Redis and database; no
worker: the bots' traffic stays queued and is stopped by the cleanup)."""

from __future__ import annotations

import csv
import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse

from labs.journal import store as journal
from labs.live import runtime
from labs.management.commands.simulate_class import Command
from labs.models import JournalEvent, LabSession, Membership, Prediction, Traffic
from labs.services import lab
from labs.services.simulate import classroom_simulate, classroom_simulation_cleanup

pytestmark = pytest.mark.django_db

BOTS = 3


@pytest.fixture
def simulated(classroom, scenario, student):
    """A class with one real student (alice, with a session and a prediction) and 3 bots."""
    session = lab.session_open(user=student, classroom=classroom, scenario=scenario)
    journal.record([journal.entry(session, "policy_set", message="alice was here")])
    Prediction.objects.create(
        session=session, owner=student, step=1, measure="attempts_total", answer="4"
    )
    simulation = classroom_simulate(
        classroom=classroom, students=BOTS, policy="naive", rate=1, duration_s=5
    )
    return {"real": session, "bots": simulation.sessions}


def bot_names(classroom) -> set[str]:
    return {f"bot-c{classroom.pk}-{i:03d}" for i in range(BOTS)}


def test_simulate_class_marks_its_students_simulated(classroom, simulated):
    memberships = Membership.objects.filter(classroom=classroom)
    assert {m.user.username for m in memberships.filter(simulated=True)} == bot_names(classroom)
    assert [m.user.username for m in memberships.filter(simulated=False)] == ["alice"]
    assert {s.pk for s in LabSession.objects.simulated()} == {s.pk for s in simulated["bots"]}
    assert list(LabSession.objects.people()) == [simulated["real"]]


def test_the_instructors_home_counts_real_students_and_names_the_simulated_apart(
    client, instructor, classroom, simulated
):
    client.force_login(instructor)
    body = client.get(reverse("labs:home")).content.decode()
    assert "1 student (and 3 simulated)," in body
    assert "4 students" not in body


def test_the_dashboard_lists_real_students_and_counts_the_simulated(
    client, instructor, classroom, simulated
):
    client.force_login(instructor)
    response = client.get(reverse("labs:class_dashboard", args=[classroom.pk]))
    assert [r.username for r in response.context["rows"]] == ["alice"]
    body = response.content.decode()
    assert "<strong>3</strong> simulated" in body
    assert "bot-c" not in body.split('id="storm"')[0]  # no bot row (the storm panel aside)
    export = client.get(reverse("labs:class_export_summary", args=[classroom.pk]))
    rows = list(csv.reader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert [row[2] for row in rows[1:]] == ["alice"]


def test_a_class_without_bots_shows_no_simulated_count(client, instructor, classroom, student):
    client.force_login(instructor)
    body = client.get(reverse("labs:class_dashboard", args=[classroom.pk])).content.decode()
    assert "simulated-count" not in body
    home = client.get(reverse("labs:home")).content.decode()
    assert "1 student," in home and "simulated" not in home


def test_the_predictions_page_and_its_export_leave_the_bots_out(
    client, instructor, classroom, simulated
):
    client.force_login(instructor)
    response = client.get(reverse("labs:class_predictions", args=[classroom.pk]))
    progress = response.context["progress"]
    assert [row["session"].owner.username for row in progress] == ["alice"]
    assert "bot-c" not in response.content.decode()
    export = client.get(reverse("labs:class_predictions_csv", args=[classroom.pk]))
    text = b"".join(export.streaming_content).decode()
    assert "alice" in text and "bot-c" not in text


def test_the_admin_class_list_counts_real_students(client, superuser, classroom, simulated):
    client.force_login(superuser)
    response = client.get(reverse("admin:labs_classroom_changelist"))
    (row,) = response.context["cl"].result_list
    assert row._students == 1


def test_cleanup_removes_the_bots_their_sessions_and_journals_and_nothing_else(
    classroom, simulated, django_capture_on_commit_callbacks
):
    bot_ids = [s.pk for s in simulated["bots"]]
    assert JournalEvent.objects.filter(session__in=bot_ids).exists()
    keys_before = runtime.engine_redis().keys(f"{runtime.namespace(bot_ids[0])}*")
    assert keys_before

    with django_capture_on_commit_callbacks(execute=True):  # the Redis state goes on commit
        done = classroom_simulation_cleanup(classroom=classroom, wait_s=5)

    assert (done.accounts, done.sessions, done.still_running) == (BOTS, BOTS, [])
    assert done.journal_rows > 0
    assert not get_user_model().objects.filter(username__in=bot_names(classroom)).exists()
    assert not LabSession.objects.filter(pk__in=bot_ids).exists()
    assert not JournalEvent.objects.filter(session__in=bot_ids).exists()
    assert not Traffic.objects.filter(session__in=bot_ids).exists()
    assert not Membership.objects.filter(classroom=classroom, simulated=True).exists()
    assert runtime.engine_redis().keys(f"{runtime.namespace(bot_ids[0])}*") == []
    # The real student, her session, journal and prediction are untouched.
    real = simulated["real"]
    assert LabSession.objects.filter(pk=real.pk).exists()
    assert JournalEvent.objects.filter(session=real, message="alice was here").exists()
    assert Prediction.objects.filter(session=real).count() == 1


def test_the_cleanup_command_says_what_it_removed(classroom, simulated, capsys):
    call_command("simulate_class", str(classroom.pk), "--cleanup")
    out = capsys.readouterr().out
    assert f"{classroom}: removed {BOTS} simulated students, {BOTS} sessions and" in out
    assert not Membership.objects.filter(simulated=True).exists()
    call_command("simulate_class", str(classroom.pk), "--cleanup")  # nothing left: no error
    assert "removed 0 simulated students, 0 sessions and 0 journal rows" in capsys.readouterr().out


def test_help_shows_every_default():
    text = Command().create_parser("manage.py", "simulate_class").format_help()
    text = " ".join(text.split())  # argparse wraps lines
    for option, default in [
        ("--students", "30"),
        ("--policy", "naive"),
        ("--rate", "5"),
        ("--for", "60"),
        ("--arrivals", "poisson"),
    ]:
        assert f"(default: {default})" in text.split(option, 2)[2], option
    assert "(default: do not wait)" in text
    assert "--cleanup" in text and "(default: off)" in text


def test_the_migration_marks_bots_made_before_bots_were_marked(classroom, other_classroom):
    import importlib

    from django.apps import apps

    migration = importlib.import_module(
        "labs.migrations.0009_instructors_shared_dependency_mark_bots"
    )
    users = get_user_model().objects
    bot = users.create_user(f"bot-c{classroom.pk}-007")
    bot.set_unusable_password()
    bot.save()
    person = users.create_user(f"bot-c{classroom.pk}-008", password="a real password 1")
    elsewhere = users.create_user(f"bot-c{classroom.pk}-009")  # a bot name, another class
    elsewhere.set_unusable_password()
    elsewhere.save()
    for user, room in ((bot, classroom), (person, classroom), (elsewhere, other_classroom)):
        Membership.objects.create(user=user, classroom=room)

    migration.forwards(apps, None)

    marked = set(Membership.objects.filter(simulated=True).values_list("user__username", flat=True))
    assert marked == {bot.username}
