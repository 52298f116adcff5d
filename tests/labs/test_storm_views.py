"""The storm panel over HTTP: only the class's instructors see it (404 for a student and for
another class's instructor), it says how to configure a shared dependency when there is none,
its traffic form is validated like the service (field and range, nothing started), and its
CSV exports equal the counters in the real Redis model."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from labs.live import runtime
from labs.models import Traffic
from labs.services import lab
from labs.services import shared as shared_services
from tests.conftest import make_student

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clean_shared_model")]

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def configured(classroom, instructor):
    shared_services.classroom_set_shared(
        classroom=classroom, user=instructor, values={"servers": 2, "service_ms": 50}
    )
    runtime.configure_shared(classroom.pk)
    return classroom


@pytest.fixture
def shared_sessions(classroom, scenario, student):
    bob = make_student("bob_a", classroom)
    out = []
    for user in (student, bob):
        session = lab.session_open(user=user, classroom=classroom, scenario=scenario)
        lab.session_set_dependency(session=session, user=user, changes={"mode": "shared"})
        out.append(session)
    return out


def rows(response) -> list[dict[str, str]]:
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.parametrize("name", ["storm_panel", "storm_export_seconds", "storm_export_students"])
def test_a_student_and_another_classes_instructor_get_404(
    client, classroom, student, other_instructor, name
):
    url = reverse(f"labs:{name}", args=[classroom.pk])
    for user in (student, other_instructor):
        client.force_login(user)
        assert client.get(url).status_code == 404
    client.force_login(student)
    post = client.post(reverse("labs:storm_traffic", args=[classroom.pk]), {"action": "stop"})
    assert post.status_code == 404


def test_without_a_shared_dependency_the_panel_says_how_to_configure_one(
    client, classroom, instructor
):
    client.force_login(instructor)
    response = client.get(reverse("labs:storm_panel", args=[classroom.pk]))
    assert response.status_code == 200
    text = response.content.decode()
    assert "No shared dependency is configured for this class" in text
    assert reverse("labs:class_dashboard", args=[classroom.pk]) + "#shared-form" in text
    assert 'id="chart-load"' not in text
    # nothing connects without a dependency: no status claims it does; words, not commands
    assert "Connecting" not in text and 'id="storm-status"' not in text
    assert "Shared (the class's)" in text
    assert "manage.py" not in text


def test_the_configured_panel_has_its_chart_table_and_controls(client, configured, instructor):
    client.force_login(instructor)
    text = client.get(reverse("labs:storm_panel", args=[configured.pk])).content.decode()
    for needle in (
        'id="chart-load"',
        'id="student-rows"',
        'id="trigger-form"',
        'id="traffic-form"',
        "vendor/uplot/uPlot.iife.min.js",
        f'data-ws-path="/ws/classes/{configured.pk}/storm/"',
    ):
        assert needle in text, needle
    assert "<style" not in text and " style=" not in text
    assert "<script>" not in text


@pytest.mark.parametrize(
    ("post", "field"),
    [
        ({"rate": "0", "duration_s": "10", "arrivals": "even"}, "Calls per second"),
        ({"rate": "25", "duration_s": "10", "arrivals": "even"}, "Calls per second"),
        ({"rate": "5", "duration_s": "301", "arrivals": "even"}, "Duration"),
        ({"rate": "5", "duration_s": "1e1", "arrivals": "even"}, "Duration"),
        ({"rate": "5", "duration_s": "10", "arrivals": "bursty"}, "Arrivals"),
    ],
)
def test_bad_traffic_is_refused_naming_field_and_range_and_starts_nothing(
    client, configured, instructor, shared_sessions, post, field
):
    client.force_login(instructor)
    response = client.post(
        reverse("labs:storm_traffic", args=[configured.pk]), {**post, "action": "start"}, **HTMX
    )
    assert response.status_code == 422
    text = response.content.decode()
    assert f"{field}:" in text
    assert "between" in text or "one of" in text
    assert Traffic.objects.count() == 0


def test_traffic_starts_and_stops_in_every_shared_session(
    client, configured, instructor, shared_sessions, scenario
):
    loner = make_student("carol_a", configured)
    lab.session_open(user=loner, classroom=configured, scenario=scenario)  # not shared
    client.force_login(instructor)
    url = reverse("labs:storm_traffic", args=[configured.pk])
    response = client.post(
        url, {"action": "start", "rate": "5", "duration_s": "30", "arrivals": "even"}, **HTMX
    )
    assert response.status_code == 200
    assert "traffic started in 2 sessions" in response.content.decode()
    started = Traffic.objects.order_by("session_id")
    assert [t.session_id for t in started] == [s.pk for s in shared_sessions]
    assert all(t.rate == 5 and t.duration_s == 30 for t in started)
    response = client.post(url, {"action": "stop"}, **HTMX)
    assert "traffic stopped in 2 sessions" in response.content.decode()
    assert not Traffic.objects.filter(status__in=Traffic.ACTIVE_STATUSES).exists()


def test_traffic_with_no_shared_session_is_refused(client, configured, instructor):
    client.force_login(instructor)
    response = client.post(
        reverse("labs:storm_traffic", args=[configured.pk]),
        {"action": "start", "rate": "5", "duration_s": "30", "arrivals": "even"},
        **HTMX,
    )
    assert response.status_code == 422
    assert "sessions: no session of the class calls the shared dependency" in (
        response.content.decode()
    )


def test_series_csv_equals_the_redis_counters(client, configured, instructor):
    model = runtime.shared_model(configured.pk)
    for _ in range(7):
        model.decide(attempt=1)
    model.decide(attempt=2)
    stored = {s.second: s for s in model.counters()}
    assert sum(s.offered for s in stored.values()) == 8
    client.force_login(instructor)
    response = client.get(reverse("labs:storm_export_seconds", args=[configured.pk]))
    assert response["Content-Type"].startswith("text/csv")
    exported = rows(response)
    assert len(exported) == 300
    by_second = {int(r["second"]): r for r in exported}
    for second, counters in stored.items():
        if second not in by_second:  # a finish second in the future
            continue
        row = by_second[second]
        for name in ("offered", "ok", "shed", "timeout", "calls", "calls_ok", "retries"):
            assert int(row[name]) == getattr(counters, name), (second, name)
    assert sum(int(r["offered"]) for r in exported) == 8
    assert sum(int(r["retries"]) for r in exported) == 1


def test_students_csv_lists_every_session(client, configured, instructor, shared_sessions):
    client.force_login(instructor)
    exported = rows(client.get(reverse("labs:storm_export_students", args=[configured.pk])))
    assert [int(r["session"]) for r in exported] == sorted(s.pk for s in shared_sessions)
    assert {r["mode"] for r in exported} == {"shared"}
    assert all(r["attempts_in_window"] == "0" and r["share"] == "0.0" for r in exported)


def test_the_dashboard_links_to_the_storm_panel(client, classroom, instructor):
    client.force_login(instructor)
    text = client.get(reverse("labs:class_dashboard", args=[classroom.pk])).content.decode()
    assert f'href="{reverse("labs:storm_panel", args=[classroom.pk])}"' in text


def test_without_javascript_the_traffic_form_redirects_back_with_the_problem(
    client, configured, instructor, shared_sessions
):
    client.force_login(instructor)
    response = client.post(
        reverse("labs:storm_traffic", args=[configured.pk]),
        {"action": "start", "rate": "99", "duration_s": "10", "arrivals": "even"},
        follow=True,
    )
    assert response.redirect_chain == [(reverse("labs:storm_panel", args=[configured.pk]), 302)]
    assert "Calls per second: must be between 1 and 20 calls/s (got 99)" in response.content.decode()
    assert Traffic.objects.count() == 0


def test_the_dashboard_has_a_storm_section_only_with_a_shared_dependency(
    client, classroom, instructor
):
    client.force_login(instructor)
    url = reverse("labs:class_dashboard", args=[classroom.pk])
    page = client.get(url).content.decode()
    assert 'id="storm"' not in page and "js/storm.js" not in page
    shared_services.classroom_set_shared(classroom=classroom, user=instructor, values={})
    page = client.get(url).content.decode()
    # The panel's own parts, script and websocket; one trigger form (the dashboard's).
    assert f'data-ws-path="/ws/classes/{classroom.pk}/storm/"' in page
    for part in ('id="chart-load"', 'id="student-rows"', 'data-metric="recovery"',
                 'id="traffic-form"', 'id="export-png"', "js/storm.js", "uPlot.iife.min.js"):
        assert part in page, part  # fmt: skip
    assert page.count('id="trigger-form"') == 1
    assert page.count('id="action-result"') == 1
    panel = client.get(reverse("labs:storm_panel", args=[classroom.pk])).content.decode()
    assert panel.count('id="chart-load"') == 1 and 'id="traffic-form"' in panel


def test_the_lab_page_has_the_shared_dependency_card(client, classroom, student, scenario):
    session = lab.session_open(user=student, classroom=classroom, scenario=scenario)
    client.force_login(student)
    page = client.get(reverse("labs:session_detail", args=[session.pk])).content.decode()
    # Hidden until the websocket's first "shared" message says the session calls it.
    assert 'id="shared-status"' in page and 'data-role="shared-share"' in page
    assert "queue wait p99 reached 250 ms" in page


# -- every default the panel offers ------------------------------------------------------------


def field_value(text: str, element_id: str) -> str:
    """The ``value`` of the input, or the selected option of the select, with that id."""
    import re

    tag = re.search(rf'<(input|select)[^>]*id="{element_id}"[^>]*>', text)
    assert tag, element_id
    if tag.group(1) == "input":
        return re.search(r'value="([^"]*)"', tag.group(0)).group(1)
    rest = text[tag.end() : text.index("</select>", tag.end())]
    return re.search(r'<option value="([^"]*)"[^>]*selected', rest).group(1)


@pytest.fixture
def storm_lesson(configured):
    """The class's lesson is the shipped storm lesson (its script names 5 calls/s, 300 s)."""
    import json
    from pathlib import Path

    from tests.conftest import make_scenario

    path = Path(__file__).resolve().parents[2] / "scenarios" / "storm_lesson.json"
    lesson = make_scenario("storm_lesson", title="The storm", script=json.loads(path.read_text()))
    configured.scenarios.add(lesson)
    return lesson


def test_the_panel_s_traffic_defaults_come_from_the_class_s_lesson(
    client, configured, instructor, storm_lesson, student
):
    for name in ("carol_a", "dave_a"):
        user = make_student(name, configured)
        session = lab.session_open(user=user, classroom=configured, scenario=storm_lesson)
        assert session.dependency["mode"] == "shared"
    client.force_login(instructor)
    text = client.get(reverse("labs:storm_panel", args=[configured.pk])).content.decode()
    assert field_value(text, "traffic-rate") == "5"
    assert field_value(text, "traffic-duration") == "300"
    assert field_value(text, "traffic-arrivals") == "poisson"
    # The load it will offer, against the capacity (2 servers x 50 ms: 40 attempts/s).
    assert "2 sessions x 5 calls/s = 10 calls/s, capacity 40 attempts/s" in text
    assert 'data-sessions="2"' in text and 'data-capacity="40.0"' in text
    # The trigger: the lesson's down trigger of 8 s.
    assert field_value(text, "trigger-kind") == "down"
    assert field_value(text, "trigger-duration_ms") == "8000"
    # The dashboard's storm section offers the same.
    text = client.get(reverse("labs:class_dashboard", args=[configured.pk])).content.decode()
    assert field_value(text, "traffic-rate") == "5"
    assert "2 sessions x 5 calls/s = 10 calls/s, capacity 40 attempts/s" in text


def test_without_a_lesson_traffic_the_panel_offers_the_lab_s_defaults_and_warns_of_overload(
    client, configured, instructor, shared_sessions
):
    client.force_login(instructor)
    text = client.get(reverse("labs:storm_panel", args=[configured.pk])).content.decode()
    assert field_value(text, "traffic-rate") == "5"
    assert field_value(text, "traffic-duration") == "60"
    assert "2 sessions x 5 calls/s = 10 calls/s, capacity 40 attempts/s" in text
    shared_services.classroom_set_shared(
        classroom=configured, user=instructor, values={"servers": 1, "service_ms": 200}
    )
    text = client.get(reverse("labs:storm_panel", args=[configured.pk])).content.decode()
    assert "capacity 5 attempts/s: over capacity before any trigger" in text


def test_a_student_s_traffic_form_starts_from_the_lesson_s_traffic(
    client, configured, storm_lesson, student
):
    session = lab.session_open(user=student, classroom=configured, scenario=storm_lesson)
    client.force_login(student)
    text = client.get(reverse("labs:session_detail", args=[session.pk])).content.decode()
    assert field_value(text, "traffic-rate") == "5"
    assert field_value(text, "traffic-duration") == "300"


def test_the_dashboard_s_class_wide_dependency_defaults_to_no_choice(
    client, configured, instructor, shared_sessions
):
    client.force_login(instructor)
    text = client.get(reverse("labs:class_dashboard", args=[configured.pk])).content.decode()
    assert field_value(text, "fault-mode") == ""
    assert "Choose a mode" in text
    # Sent as it comes: refused, naming the field, and nothing changes.
    response = client.post(
        reverse("labs:class_set_dependency", args=[configured.pk]), {"mode": ""}, **HTMX
    )
    assert response.status_code == 422
    assert "mode" in response.content.decode()
    for session in shared_sessions:
        session.refresh_from_db()
        assert session.dependency["mode"] == "shared"


def test_the_students_csv_reads_the_sessions_own_counters(
    client, configured, instructor, shared_sessions
):
    """Each session's attempts and retries, counted per session where the model decided
    them, over the complete seconds before the export's second."""
    import time as _time

    model = runtime.shared_model(configured.pk)
    mine, theirs = (str(s.pk) for s in shared_sessions)
    for attempt in (1, 2, 3, 4):
        model.decide(attempt=attempt, session=mine)
    model.decide(attempt=1, session=theirs)
    model.refuse(session=theirs, state="open")
    now = int(model.client.time()[0])
    while int(model.client.time()[0]) == now:  # those seconds complete
        _time.sleep(0.05)
    client.force_login(instructor)
    exported = {
        int(r["session"]): r
        for r in rows(client.get(reverse("labs:storm_export_students", args=[configured.pk])))
    }
    first, second = (exported[s.pk] for s in shared_sessions)
    assert first["attempts_in_window"] == "4" and first["retries_in_window"] == "3"
    assert first["retry_ratio"] == "0.75" and first["share"] == "0.8"
    assert first["breaker_state"] == "closed"
    assert second["attempts_in_window"] == "1" and second["refused_in_window"] == "1"
    assert second["breaker_state"] == "open" and second["share"] == "0.2"
    assert first["scenario"] and first["student"] == "alice"


def test_the_dashboard_names_each_session_by_student_and_scenario(
    client, configured, instructor, storm_lesson, scenario, student
):
    """A student with two sessions has two rows, told apart by the scenario (also when the
    class has one scenario per session only)."""
    lab.session_open(user=student, classroom=configured, scenario=scenario)
    lab.session_open(user=student, classroom=configured, scenario=storm_lesson)
    client.force_login(instructor)
    text = client.get(reverse("labs:class_dashboard", args=[configured.pk])).content.decode()
    assert text.count(">alice</a>") == 2
    assert f'scenario-name">{scenario.title}</span>' in text
    assert 'scenario-name">The storm</span>' in text
