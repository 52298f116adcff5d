"""Lesson mode over HTTP, for every shipped scenario: the page holds "This step" with a panel
per step (the first one not done shown), every setting under one closed "All settings", and
each step that changes settings has a form of just those fields, filled with the step's values,
which the server takes as they are (posted as the page posts them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from labs.management.commands.seed_demo import upsert_scenario
from labs.services import lab
from labs.services.predictions import step_mark
from tests.conftest import make_classroom, make_student

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(path.stem for path in (ROOT / "scenarios").glob("*.json"))
HTMX = {"HTTP_HX_REQUEST": "true"}


def lesson(name: str):
    document = json.loads((ROOT / "scenarios" / f"{name}.json").read_text())
    room = make_classroom(f"Lesson {name}", join_code="LESSON01")
    scenario = upsert_scenario(name, document, position=10)
    room.scenarios.add(scenario)
    student = make_student("alice", room)
    return student, lab.session_open(user=student, classroom=room, scenario=scenario), document


def step_forms(html: str) -> dict[int, tuple[str, dict[str, str]]]:
    """Each step form on the page: its action and the values it would post."""
    forms = {}
    for index, body in re.findall(r'<form[^>]*data-step-form="(\d+)"(.*?)</form>', html, re.S):
        action = re.search(r'hx-post="([^"]+)"', body).group(1)
        values = dict(
            re.findall(r'<input type="(?:text|number)" name="(\w+)" value="([^"]*)"', body)
        )
        values |= {
            name: re.search(r'<option value="([^"]*)" selected', options).group(1)
            for name, options in re.findall(r'<select name="(\w+)"[^>]*>(.*?)</select>', body, re.S)
        }
        forms[int(index)] = (action, values)
    return forms


@pytest.mark.parametrize("name", SHIPPED)
def test_every_step_form_of_a_shipped_lesson_is_taken_as_it_is(client, name):
    student, session, document = lesson(name)
    client.force_login(student)
    html = client.get(session.get_absolute_url()).content.decode()
    assert 'id="this-step"' in html
    assert '<details class="card all-settings" id="all-settings">' in html  # closed
    panels = re.findall(r'data-step-panel="(\d+)"( hidden)?>', html)
    assert [int(i) for i, _ in panels] == list(range(1, len(document["steps"]) + 1))
    assert [hidden for _, hidden in panels].count("") == 1 and panels[0][1] == ""
    forms = step_forms(html)
    changing = {
        i
        for i, step in enumerate(document["steps"], 1)
        if {"set_dependency", "set_policy"} & set(step)
    }
    assert set(forms) == changing
    for index, (action, values) in forms.items():
        assert values, f"step {index} shows no field"
        response = client.post(action, values, **HTMX)
        assert response.status_code == 200, (index, values, response.content.decode()[:500])


def test_the_panel_shown_is_the_first_step_not_done(client):
    student, session, _ = lesson("tour")
    step_mark(session=session, step=1, done=True)
    step_mark(session=session, step=2, done=True)
    client.force_login(student)
    html = client.get(session.get_absolute_url()).content.decode()
    shown = re.findall(r'data-step-panel="(\w+)">', html)
    assert shown == ["3"]
    assert "Step 3 of 6:" in html
    for step in range(3, 7):
        step_mark(session=session, step=step, done=True)
    html = client.get(session.get_absolute_url()).content.decode()
    assert re.findall(r'data-step-panel="(\w+)">', html) == ["done"]
    assert "Every step is done." in html


def test_a_step_form_sets_the_step_values(client):
    student, session, _ = lesson("idempotency_keys")
    client.force_login(student)
    html = client.get(session.get_absolute_url()).content.decode()
    action, values = step_forms(html)[2]
    assert values == {"idempotency_keys": "true"}
    assert client.post(action, values, **HTMX).status_code == 200
    session.refresh_from_db()
    assert session.policy["idempotency_keys"] is True
