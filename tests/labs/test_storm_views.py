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

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _clean_shared_model(classroom):
    runtime.shared_model(classroom.pk).clear()
    yield
    runtime.shared_model(classroom.pk).clear()


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
