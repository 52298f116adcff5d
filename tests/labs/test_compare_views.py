"""The compare page over HTTP: policies picked from the presets, my current policy, a burst's
policy and a lesson step's, JSON only in the closed advanced part; reached from the lab page
and the burst history; a lesson on the shared dependency compared on the shared model, a
dependency script on it refused with a sentence."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from labs.services import lab
from tests.conftest import make_scenario, make_student
from tests.e2e.conftest import ROOT
from tests.labs.test_replay_views import compare_url, diff_cell, finished_burst

pytestmark = pytest.mark.django_db


@pytest.fixture
def session(student, classroom, scenario):
    return lab.session_open(user=student, classroom=classroom, scenario=scenario)


def selected(html: str, select_id: str) -> str:
    body = html.split(f'id="{select_id}"')[1].split("</select>")[0]
    found = re.search(r'<option value="([^"]*)" selected>', body)
    return found.group(1) if found else ""


def test_the_lab_page_links_to_compare_with_its_lesson_and_my_policy(client, student, session):
    client.force_login(student)
    page = client.get(session.get_absolute_url()).content.decode()
    link = re.search(r'<a href="([^"]+)" id="compare-link">', page).group(1)
    assert link == f"{reverse('labs:compare')}?from={session.pk}"
    answer = client.get(link)
    assert answer.status_code == 200
    html = answer.content.decode()
    assert selected(html, "compare-scenario") == session.scenario.slug
    assert selected(html, "compare-a") == f"mine:{session.pk}"
    assert selected(html, "compare-b") == "defaults"
    assert 'id="compare-diff"' not in html  # filled in, nothing run yet
    assert f"My current policy ({session.scenario.title})" in html
    # JSON is the advanced option: in a closed disclosure, with help in words, no file paths.
    assert re.search(r'<details class="compare-advanced" id="compare-advanced">', html)
    assert "docs/" not in html and ".md" not in html


def test_my_current_policy_against_a_preset(client, student, session):
    lab.session_set_policy(session=session, user=student, changes={"max_attempts": 1})
    client.force_login(student)
    html = client.get(
        compare_url(scenario=session.scenario.slug, seed=7, a=f"mine:{session.pk}", b="defaults")
    ).content.decode()
    # The tour: flaky 3 then down. One attempt a call against the lesson's 4.
    mine, lessons = int(diff_cell(html, "attempts", 0)), int(diff_cell(html, "attempts", 1))
    assert mine < lessons
    assert html.count('data-attempts="') == 2
    assert f"A: My current policy ({session.scenario.title})." in html
    assert "B: The lesson&#x27;s own policy, unchanged." in html


def test_someone_elses_session_policy_is_refused_in_words(client, classroom, session):
    other = make_student("mallory", classroom)
    client.force_login(other)
    answer = client.get(compare_url(scenario="tour", a=f"mine:{session.pk}", b="defaults"))
    assert answer.status_code == 400
    assert "is the policy of a session you cannot see" in answer.content.decode()


def test_a_burst_in_the_history_links_to_compare_with_its_policy(client, student, session):
    burst = finished_burst(session, 1)
    client.force_login(student)
    history = client.get(reverse("labs:burst_history", args=[session.pk])).content.decode()
    link = re.search(r'<a href="([^"]+)" class="compare-link" id="compare-burst-1">', history)
    assert link.group(1) == f"{reverse('labs:compare')}?burst={burst.pk}"
    html = client.get(link.group(1)).content.decode()
    assert selected(html, "compare-a") == f"burst:{burst.pk}"
    assert "The policy burst 1 ran with" in html
    ran = client.get(compare_url(scenario="tour", seed=7, a=f"burst:{burst.pk}", b="threshold-1"))
    assert ran.status_code == 200 and 'id="compare-diff"' in ran.content.decode()


def test_a_lesson_steps_policy_can_be_picked(client, student):
    script = json.loads((ROOT / "scenarios" / "bulkhead.json").read_text())
    make_scenario("bulkhead", title="Bulkhead", script=script)
    client.force_login(student)
    form = client.get(reverse("labs:compare")).content.decode()
    offered = re.findall(r'<option value="(step:bulkhead:\d+)"', form)
    assert offered == ["step:bulkhead:2"] * 2  # in both pickers
    html = client.get(
        compare_url(scenario="bulkhead", a="defaults", b="step:bulkhead:2")
    ).content.decode()
    # Each run keeps its policy (the lesson's own change of policy is left out): without a
    # bulkhead 12 calls give up waiting in each burst, with the step's bulkhead of 2 none do.
    assert (diff_cell(html, "succeeded", 0), diff_cell(html, "succeeded", 1)) == ("16", "24")
    assert "B: Bulkhead: After step 2" in html
    bad = client.get(compare_url(scenario="bulkhead", a="step:bulkhead:99"))
    assert bad.status_code == 400
    assert "is not a lesson step that changes the policy" in bad.content.decode()


def test_json_written_in_the_advanced_part_is_used_instead_of_the_pick(client, student, scenario):
    client.force_login(student)
    query = {"scenario": scenario.slug, "seed": 7, "a": "defaults", "b": "defaults",
             "b_json": '{"breaker": {"failure_threshold": 1}}'}  # fmt: skip
    html = client.get(compare_url(**query)).content.decode()
    assert int(diff_cell(html, "attempts", 1)) < int(diff_cell(html, "attempts", 0))
    assert "B: a policy written as JSON." in html
    assert '<details class="compare-advanced" id="compare-advanced" open>' in html


@pytest.fixture
def storm(db):
    script = json.loads((ROOT / "scenarios" / "storm_lesson.json").read_text())
    return make_scenario("storm_lesson", title="The class makes its own retry storm", script=script)


def test_the_storm_lesson_is_compared_on_the_shared_model(client, student, storm):
    client.force_login(student)
    answer = client.get(compare_url(scenario="storm_lesson", a="defaults", b="retry-budget"))
    assert answer.status_code == 200
    html = answer.content.decode()
    assert "both policies ran on the shared dependency's model" in html
    assert "30 students" in html
    naive = re.search(r'<tr data-key="recovery_s"><th scope="row">[^<]+</th><td>([^<]+)</td>'
                      r'<td class="delta-(\w+)">([^<]+)</td>', html)  # fmt: skip
    assert naive.group(1) == "not within the run"  # the naive policy: the storm sustains
    assert naive.group(3).startswith("after ") and naive.group(2) == "better"
    assert html.count('class="shared-line shared-line-') == 2
    assert "data-attempts=" not in html  # never a 5-call script run of a private dependency


def test_a_dependency_script_cannot_use_the_shared_dependency(client, student):
    client.force_login(student)
    answer = client.get(compare_url(dependency='{"mode": "shared"}', a="defaults", b="defaults"))
    assert answer.status_code == 400
    assert "a dependency script alone cannot simulate" in answer.content.decode()
