"""The student's home page: the class's lessons in groups (the tour first, with a sentence
saying what it is; the lessons beyond one dependency under that heading), each with how many
of its steps are done in the current attempt."""

from __future__ import annotations

import html as html_text
import re
from pathlib import Path

import pytest
from django.urls import reverse

from labs.management.commands.seed_demo import load_scenario_files, seed_order, upsert_scenario
from labs.services import lab
from labs.services.predictions import step_mark
from tests.conftest import make_classroom, make_student

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
BEYOND = {"per_host_breakers", "bulkhead", "fallback_cached", "idempotency_keys"}


@pytest.fixture
def shipped_class():
    room = make_classroom("Resilience A", join_code="CLASSA01")
    documents = seed_order(load_scenario_files(ROOT / "scenarios"))
    for index, (slug, document) in enumerate(documents):
        room.scenarios.add(upsert_scenario(slug, document, position=10 * (index + 1)))
    return room, make_student("alice", room)


def groups_of(html: str) -> list[tuple[str, list[str]]]:
    sections = re.findall(
        r'<h4 id="lessons-\d+-\w+" class="lesson-group-heading">([^<]+)</h4>(.*?)</section>',
        html,
        re.S,
    )
    return [
        (html_text.unescape(heading), re.findall(r'data-scenario="([\w-]+)"', body))
        for heading, body in sections
    ]


def test_the_lessons_are_grouped_with_the_tour_first(client, shipped_class):
    _room, alice = shipped_class
    client.force_login(alice)
    html = client.get(reverse("labs:home")).content.decode()
    groups = groups_of(html)
    assert [heading for heading, _ in groups] == [
        "Start here",
        "Retries and circuit breakers",
        "Beyond one dependency",
        "The server's side",
        "The whole class",
    ]
    assert groups[0][1] == ["tour"]
    assert set(groups[2][1]) == BEYOND
    # each after the one it builds on
    assert groups[3][1] == ["own_server"]
    assert groups[4][1] == ["storm_lesson", "find_the_edge", "server_defences", "chain_of_students"]
    assert sum(len(slugs) for _, slugs in groups) == 16
    tour = html.split('data-scenario="tour"')[1].split("</li>")[0]
    assert "The guided first lesson" in tour and "6 steps" in tour


def test_each_lesson_shows_its_steps_done_in_the_current_attempt(client, shipped_class):
    room, alice = shipped_class
    tour = room.scenarios.get(slug="tour")
    session = lab.session_open(user=alice, classroom=room, scenario=tour)
    for step in (1, 2, 3):
        step_mark(session=session, step=step, done=True)
    client.force_login(alice)

    def progress() -> str:
        html = client.get(reverse("labs:home")).content.decode()
        item = html.split('data-scenario="tour"')[1].split("</li>")[0]
        return re.search(r'data-role="progress">([^<]+)<', item).group(1)

    assert progress() == "3 of 6 steps done"
    for step in (4, 5, 6):
        step_mark(session=session, step=step, done=True)
    assert progress() == "every step done (6 of 6)"
    lab.session_reset(session=session, user=alice)  # a new attempt starts with none done
    assert progress() == "6 steps"
