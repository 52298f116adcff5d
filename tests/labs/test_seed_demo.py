"""``manage.py seed_demo``: demo accounts, the demo class and every scenario file; idempotent."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from labs.models import Classroom, Membership, Scenario

pytestmark = pytest.mark.django_db

SCENARIO_FILES = sorted(Path(settings.LAB_SCENARIOS_DIR).glob("*.json"))


def seed(**kwargs) -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out, **kwargs)
    return out.getvalue()


def test_seed_demo_creates_the_demo_class_with_three_students_and_an_instructor():
    seed()
    room = Classroom.objects.get(join_code="DEMO2026")
    assert room.name == "Resilience 101"
    students = Membership.objects.filter(classroom=room, role="student")
    assert sorted(m.user.username for m in students) == ["student1", "student2", "student3"]
    instructor = Membership.objects.get(classroom=room, role="instructor").user
    assert instructor.username == "instructor"
    assert instructor.is_staff and not instructor.is_superuser
    assert instructor.groups.filter(name="Instructors").exists()


def test_seed_demo_creates_a_superuser_admin():
    seed()
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff


def test_seed_demo_loads_every_scenario_file_assigned_to_the_class():
    seed()
    slugs = {path.stem for path in SCENARIO_FILES}
    assert "tour" in slugs
    assert set(Scenario.objects.values_list("slug", flat=True)) == slugs
    room = Classroom.objects.get(join_code="DEMO2026")
    assert set(room.scenarios.values_list("slug", flat=True)) == slugs
    tour = Scenario.objects.get(slug="tour")
    assert tour.position == min(Scenario.objects.values_list("position", flat=True))
    edge, storm = (Scenario.objects.get(slug=s) for s in ("find_the_edge", "storm_lesson"))
    assert edge.position > storm.position  # a lesson that builds on another comes after it
    for scenario in Scenario.objects.all():
        scenario.full_clean()


def test_seed_demo_gives_the_demo_class_the_storm_lesson_and_a_shared_dependency():
    from labs.models import SharedDependencyConfig
    from labs.selectors.storm import storm_configured

    seed()
    room = Classroom.objects.get(join_code="DEMO2026")
    lesson = room.scenarios.get(slug="storm_lesson")
    assert lesson.script["dependency"]["mode"] == "shared"
    assert "**What to watch.**" in lesson.instructions
    assert storm_configured(room.pk)
    config = SharedDependencyConfig.objects.get(classroom=room)
    assert (config.servers, config.service_ms, config.max_queue_ms) == (8, 40, 2000)
    # An instructor's own settings survive a second seed.
    SharedDependencyConfig.objects.filter(classroom=room).update(servers=4)
    seed()
    assert SharedDependencyConfig.objects.get(classroom=room).servers == 4


def test_seed_demo_is_idempotent():
    seed()
    counts = (
        get_user_model().objects.count(),
        Classroom.objects.count(),
        Membership.objects.count(),
        Scenario.objects.count(),
    )
    seed()
    assert counts == (
        get_user_model().objects.count(),
        Classroom.objects.count(),
        Membership.objects.count(),
        Scenario.objects.count(),
    )


def test_demo_password_defaults_to_failurelab(monkeypatch):
    monkeypatch.delenv("LAB_DEMO_PASSWORD", raising=False)
    seed()
    assert get_user_model().objects.get(username="student1").check_password("failurelab")


def test_demo_password_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("LAB_DEMO_PASSWORD", "classroom-secret-7")
    output = seed()
    for username in ("student1", "student2", "student3", "instructor", "admin"):
        assert get_user_model().objects.get(username=username).check_password("classroom-secret-7")
    assert "classroom-secret-7" in output


def test_seed_demo_prints_the_logins():
    output = seed()
    for username in ("student1", "student2", "student3", "instructor", "admin"):
        assert username in output
    assert "DEMO2026" in output


def test_demo_student_can_log_in_and_open_the_tour(client):
    from django.urls import reverse

    seed()
    response = client.post(reverse("login"), {"username": "student1", "password": "failurelab"})
    assert response.status_code == 302
    room = Classroom.objects.get(join_code="DEMO2026")
    tour = Scenario.objects.get(slug="tour")
    response = client.post(reverse("labs:session_open", args=[room.pk, tour.pk]))
    assert response.status_code == 302
    assert client.get(response["Location"]).status_code == 200


def test_invalid_scenario_file_stops_the_command_naming_the_file(tmp_path):
    bad = json.loads((Path(settings.LAB_SCENARIOS_DIR) / "tour.json").read_text())
    bad["policy"]["max_attempts"] = 99
    (tmp_path / "broken.json").write_text(json.dumps(bad))
    with pytest.raises(CommandError, match=r"broken\.json.*policy\.max_attempts"):
        seed(scenarios_dir=str(tmp_path))
    assert not Scenario.objects.filter(slug="broken").exists()


def test_unreadable_scenario_file_stops_the_command(tmp_path):
    (tmp_path / "garbled.json").write_text("{not json")
    with pytest.raises(CommandError, match=r"garbled\.json"):
        seed(scenarios_dir=str(tmp_path))


def test_there_are_at_least_four_scenario_files():
    assert len(SCENARIO_FILES) >= 4, [p.name for p in SCENARIO_FILES]
