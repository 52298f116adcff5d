"""The class's chain of students on the web side: the dashboard's form, the admin's fields,
the service's refusals (each in the form's words, nothing changed), and a service past the
front numbering its own runs on from the calls it answered. The chain running on a worker: tests/integration/
test_chain_worker.py; in the browser: tests/e2e/test_chain_lesson.py."""

from __future__ import annotations

import pytest
from django.urls import reverse

from labs.models import JournalEvent, LabSession, SharedDependencyConfig, Traffic
from labs.services import bursts, lab
from labs.services import chain as svc
from tests.conftest import make_student

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.postgres,
    pytest.mark.usefixtures("clean_shared_model"),
]

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def sessions(classroom, scenario, student):
    """Four sessions on the shared dependency, one on a private one."""
    made = []
    for i, user in enumerate([student, *(make_student(f"chain_{i}", classroom) for i in range(4))]):
        session = lab.session_open(user=user, classroom=classroom, scenario=scenario)
        if i < 4:
            lab.session_set_dependency(session=session, user=user, changes={"mode": "shared"})
        made.append(LabSession.objects.get(pk=session.pk))
    return made


def tiers_of(classroom) -> dict[int, int | None]:
    return dict(LabSession.objects.filter(classroom=classroom).values_list("pk", "tier"))


def test_the_dashboard_form_arranges_the_tiers_and_says_so(client, classroom, instructor, sessions):
    client.force_login(instructor)
    page = client.get(reverse("labs:class_dashboard", args=[classroom.pk])).content.decode()
    assert "Chain of students" in page
    assert "Now: no chain; 4 sessions on the shared dependency." in page
    assert 'id="chain-tiers" value="" step="1" min="2" max="4"' in page
    url = reverse("labs:class_set_chain", args=[classroom.pk])
    ok = client.post(url, {"tiers": "2", "order": "even"}, **HTMX)
    assert ok.status_code == 200
    text = ok.content.decode()
    assert "chain set: 2 tiers (2, 2 services); tier 1 runs the traffic" in text
    assert 'id="chain-now" hx-swap-oob="true">Now: 2 tiers (2, 2 services)' in text
    tiers = tiers_of(classroom)
    assert sorted(t for t in tiers.values() if t) == [1, 1, 2, 2]
    assert tiers[sessions[4].pk] is None  # the private one is not in the chain
    first = JournalEvent.objects.filter(session=sessions[0], kind="chain_set").get()
    assert "this service is tier 1 of 2, the front" in first.message
    private = JournalEvent.objects.filter(session=sessions[4], kind="chain_set").get()
    assert "not in it (it is not on the shared dependency)" in private.message

    removed = client.post(url, {"tiers": "", "order": "even"}, **HTMX)
    assert "chain removed" in removed.content.decode()
    assert set(tiers_of(classroom).values()) == {None}


@pytest.mark.parametrize(
    ("posted", "words"),
    [
        ({"tiers": "9"}, "Tiers: must be blank (no chain) or between 2 and 4 tiers (got 9)"),
        ({"tiers": "1"}, "Tiers: must be blank (no chain) or between 2 and 4 tiers (got 1)"),
        ({"tiers": "two"}, "Tiers: must be blank (no chain) or between 2 and 4 tiers (got two)"),
        ({"tiers": "2", "order": "alphabetical"},
         "Order: must be even (in the order they joined) or random (at random) "
         "(got alphabetical)"),
    ],
)  # fmt: skip
def test_the_dashboard_form_refuses_a_bad_layout_in_its_words(
    client, classroom, instructor, sessions, posted, words
):
    client.force_login(instructor)
    refused = client.post(reverse("labs:class_set_chain", args=[classroom.pk]), posted, **HTMX)
    assert refused.status_code == 422
    assert words in refused.content.decode()
    assert set(tiers_of(classroom).values()) == {None}
    assert not JournalEvent.objects.filter(kind="chain_set").exists()


def test_the_tiers_do_not_change_while_traffic_runs(client, classroom, instructor, sessions):
    Traffic.objects.create(session=sessions[1], rate=1, duration_s=5, calls=5)
    client.force_login(instructor)
    refused = client.post(reverse("labs:class_set_chain", args=[classroom.pk]), {"tiers": "2"},
                          **HTMX)  # fmt: skip
    assert refused.status_code == 409
    assert "1 session(s) of the class are running traffic or a burst" in refused.content.decode()
    assert set(tiers_of(classroom).values()) == {None}


def test_a_student_cannot_arrange_the_class(client, classroom, student, sessions):
    client.force_login(student)
    response = client.post(reverse("labs:class_set_chain", args=[classroom.pk]), {"tiers": "2"})
    assert response.status_code == 404
    assert set(tiers_of(classroom).values()) == {None}


def test_a_service_past_the_front_numbers_its_own_burst_on_from_the_calls_it_answered(
    classroom, instructor, sessions
):
    from labs.live import runtime

    layout = svc.classroom_set_chain(classroom=classroom, user=instructor, values={"tiers": 2})
    back = LabSession.objects.get(pk=layout[1][0])
    runtime.engine_redis().set(runtime.inbound_key(back.pk), 50)  # it answered calls 1 to 50
    burst = bursts.burst_start(session=back, user=back.owner, size=3)
    assert (burst.number, burst.first_call_no) == (1, 51)
    back.refresh_from_db()
    assert back.next_call_no == 54
    assert int(runtime.engine_redis().get(runtime.inbound_key(back.pk))) == 53
    front = LabSession.objects.get(pk=layout[0][0])
    assert bursts.burst_start(session=front, user=front.owner, size=3).first_call_no == 1


def test_the_admin_sets_the_tiers_and_refuses_them_out_of_range(
    client, superuser, classroom, sessions
):
    row = SharedDependencyConfig.objects.create(classroom=classroom)
    client.force_login(superuser)
    url = reverse("admin:labs_shareddependencyconfig_change", args=[row.pk])
    page = client.get(url).content.decode()
    assert "Chain of students" in page and "Blank: no chain" in page
    base = {"servers": "8", "service_ms": "40", "max_queue_ms": "2000", "chain_order": "even"}
    refused = client.post(url, {**base, "chain_tiers": "7"})
    assert refused.status_code == 200
    errors = refused.context["adminform"].form.errors
    assert errors["chain_tiers"] == ["Must be blank (no chain) or between 2 and 4 tiers (got 7)"]
    assert set(tiers_of(classroom).values()) == {None}
    saved = client.post(url, {**base, "chain_tiers": "4"})
    assert saved.status_code == 302
    assert sorted(t for t in tiers_of(classroom).values() if t) == [1, 2, 3, 4]
    assert 'name="chain_tiers" value="4"' in client.get(url).content.decode()
