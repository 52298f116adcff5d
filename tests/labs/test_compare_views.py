"""The compare page over HTTP: policies picked from the presets, my current policy, a burst's
policy and a lesson step's, JSON only in the closed advanced part; reached from the lab page
and the burst history; a lesson on the shared dependency compared on the shared model, a
dependency script on it refused with a sentence."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from labs.engine import merge_settings, parse_policy
from labs.engine.replay import PRESETS
from labs.experiments import metastable
from labs.selectors.replay import SHARED_COMPARE
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
    assert "data-attempts=" not in html  # never a 5-call script run of a private dependency


def storm_figures(storm, preset: str) -> dict:
    """What the shared model gives the storm lesson's policy with ``preset`` over it."""
    params = metastable.MetastableParams(**{**SHARED_COMPARE.__dict__, "seed": storm.script["seed"]})
    policy = parse_policy(merge_settings(storm.script["policy"], PRESETS[preset]))
    return metastable.figures_for(params, policy)


def test_the_shared_goodput_chart_gets_the_models_figures_as_json(client, student, storm):
    client.force_login(student)
    html = client.get(compare_url(scenario="storm_lesson", a="defaults", b="retry-budget")).content
    block = re.search(r'<script id="compare-goodput-data" type="application/json">(.+?)</script>',
                      html.decode(), re.S)  # fmt: skip
    chart = json.loads(block.group(1))
    a, b = storm_figures(storm, "defaults"), storm_figures(storm, "retry-budget")
    assert chart["a"] == a["goodput_per_s"] and chart["b"] == b["goodput_per_s"]
    assert chart["a"] != chart["b"]
    assert chart["x"] == [s + 0.5 for s in range(60)]
    assert chart["baseline"] == a["baseline_goodput"]
    assert chart["trigger"] == {"from_s": 10, "until_s": 18, "label": "trigger: down"}
    assert chart["labels"]["a"] == "policy A" and chart["labels"]["b"] == "policy B"
    assert b'data-goodput="compare-goodput-data"' in html
    assert b"<svg" not in html


def test_the_shared_goodput_chart_is_summarised_in_words(client, student, storm):
    client.force_login(student)
    html = client.get(compare_url(scenario="storm_lesson", a="defaults", b="retry-budget"))
    summary = re.search(r'<figcaption class="help" id="compare-goodput-summary">([^<]+)<',
                        html.content.decode()).group(1)  # fmt: skip
    healthy = round(storm_figures(storm, "defaults")["baseline_goodput"])
    assert f"before the trigger, about {healthy} under either policy" in summary
    assert "The dependency was down from 10\u00a0s to 18\u00a0s." in summary
    assert ("Policy A fell to 0 a second and was not back to 90 % of the healthy rate by the end "
            "of the run at 60\u00a0s.") in summary  # fmt: skip
    assert ("Policy B fell to 0 a second and was back to 90 % of the healthy rate in the first "
            "second after the trigger.") in summary  # fmt: skip
    chart = re.search(r'<div class="shared-chart"[^>]*>', html.content.decode()).group(0)
    assert 'role="img"' in chart and 'aria-describedby="compare-goodput-summary"' in chart


def test_a_dependency_script_cannot_use_the_shared_dependency(client, student):
    client.force_login(student)
    answer = client.get(compare_url(dependency='{"mode": "shared"}', a="defaults", b="defaults"))
    assert answer.status_code == 400
    assert "a dependency script alone cannot simulate" in answer.content.decode()


# --- a policy edited field by field ----------------------------------------------------------


def field_value(html: str, field_id: str) -> str:
    select = re.search(rf'<select[^>]*id="{field_id}"[^>]*>(.*?)</select>', html, re.S)
    if select:
        found = re.search(r'<option value="([^"]*)" selected>', select.group(1))
        return found.group(1) if found else ""
    tag = re.search(rf'<input[^>]*id="{field_id}"[^>]*>', html)
    assert tag, field_id
    found = re.search(r'value="([^"]*)"', tag.group(0))
    return found.group(1) if found else ""


def test_each_policy_has_its_own_grouped_form_prefilled_with_the_pick(client, student, scenario):
    client.force_login(student)
    html = client.get(
        compare_url(scenario=scenario.slug, a="no-retries", b="threshold-1")
    ).content.decode()
    for key in ("a", "b"):
        assert re.search(rf'<details class="compare-edit" id="compare-edit-{key}">\s*'
                         rf'<summary>Edit policy {key.upper()} field by field</summary>', html)  # fmt: skip
        assert f'name="{key}-max_attempts"' in html
        assert f'id="compare-{key}-group-retries"' in html  # the lab page's groups
    # A shows no-retries, B the lesson's own attempts with a breaker opening after 1 failure.
    assert field_value(html, "id_a-max_attempts") == "1"
    assert field_value(html, "id_b-max_attempts") == str(scenario.script["policy"]["max_attempts"])
    assert field_value(html, "id_b-breaker_failure_threshold") == "1"
    # Two forms on one page: no id twice, every label points at its own form's input.
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
    for target in re.findall(r'<label for="(id_[ab]-[^"]+)"', html):
        assert f'id="{target}"' in html


def test_an_edited_field_changes_the_result_against_the_unedited_pick(client, student, scenario):
    client.force_login(student)
    base = {"scenario": scenario.slug, "seed": 7, "a": "defaults", "b": "defaults"}
    plain = client.get(compare_url(**base)).content.decode()
    assert diff_cell(plain, "attempts", 0) == diff_cell(plain, "attempts", 1)
    edited = client.get(compare_url(**base, **{"b-max_attempts": "1"}))
    assert edited.status_code == 200
    html = edited.content.decode()
    assert diff_cell(html, "attempts", 0) == diff_cell(plain, "attempts", 0)  # A as before
    assert int(diff_cell(html, "attempts", 1)) < int(diff_cell(html, "attempts", 0))
    # The form shows the edit, open; A's stays closed and as picked.
    assert '<details class="compare-edit" id="compare-edit-b" open>' in html
    assert '<details class="compare-edit" id="compare-edit-a">' in html
    assert field_value(html, "id_b-max_attempts") == "1"
    assert ("A: The lesson&#x27;s own policy, unchanged. "
            "B: The lesson&#x27;s own policy, edited: Max attempts per call 1.") in html  # fmt: skip


def test_a_submitted_form_redirects_to_an_address_holding_only_the_edits(
    client, student, scenario
):
    """The form sends every field of both policies; only the one changed counts, and the
    address the page lands on holds it alone, giving the same comparison."""
    client.force_login(student)
    query = {"scenario": scenario.slug, "seed": 7, "a": "defaults", "b": "defaults",
             "a_json": "", "b_json": "", "dependency": "", "calls": "",
             "edits_on": scenario.slug, "a_from": "defaults", "b_from": "defaults"}  # fmt: skip
    page = client.get(compare_url(**{k: query[k] for k in ("scenario", "a", "b")}))
    html = page.content.decode()
    for key in ("a", "b"):
        for name in re.findall(rf'<(?:input|select)[^>]*name="({key}-[^"]+)"', html):
            query[name] = field_value(html, f"id_{name}")
    query["b-max_attempts"] = "1"
    answer = client.get(compare_url(**query))
    assert answer.status_code == 302
    short = answer["Location"]
    assert "b-max_attempts=1" in short
    assert "a-max_attempts" not in short and "b-backoff_base_ms" not in short
    assert "edits_on" not in short and "b_from" not in short
    landed = client.get(short).content.decode()
    assert int(diff_cell(landed, "attempts", 1)) < int(diff_cell(landed, "attempts", 0))


def test_a_pick_changed_with_the_form_unedited_uses_the_new_pick(client, student, scenario):
    """The fields still show the old pick (defaults' 4 attempts): that is no edit, so
    no-retries, picked in the same submit, runs with its 1 attempt."""
    client.force_login(student)
    shown = str(scenario.script["policy"]["max_attempts"])
    query = {"scenario": scenario.slug, "seed": 7, "a": "defaults", "b": "no-retries",
             "edits_on": scenario.slug, "b_from": "defaults", "b-max_attempts": shown}  # fmt: skip
    short = client.get(compare_url(**query))["Location"]
    assert "max_attempts" not in short
    html = client.get(short).content.decode()
    nothing = client.get(
        compare_url(scenario=scenario.slug, seed=7, a="defaults", b="no-retries")
    ).content.decode()
    assert diff_cell(html, "attempts", 1) == diff_cell(nothing, "attempts", 1)
    assert int(diff_cell(html, "attempts", 1)) < int(diff_cell(html, "attempts", 0))


def test_a_bad_edited_value_is_refused_by_its_label_and_range(client, student, scenario):
    client.force_login(student)
    answer = client.get(
        compare_url(scenario=scenario.slug, a="defaults", b="defaults", **{"b-max_attempts": "50"})
    )
    assert answer.status_code == 400
    html = answer.content.decode()
    message = "Max attempts per call: must be between 1 and 5 (got 50)"
    assert f"Policy B, {message}" in html  # the summary above the form
    error = re.search(r'<p class="field-error" id="id_b-max_attempts_error" role="alert">'
                      r"([^<]+)</p>", html)  # fmt: skip
    assert error and error.group(1) == message  # beside the field, in its open form
    assert 'aria-describedby="id_b-max_attempts_helptext id_b-max_attempts_error"' in html
    assert '<details class="compare-edit" id="compare-edit-b" open>' in html
    assert 'id="compare-diff"' not in html  # nothing ran
    long = client.get(
        compare_url(scenario=scenario.slug, a="defaults", b="defaults", **{"a-jitter": "x" * 200})
    )
    assert long.status_code == 400
    assert "Policy A, Jitter: at most 100 characters (got 200)" in long.content.decode()
