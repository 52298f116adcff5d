"""The lab page's dependency and policy forms take hosts, dependency B, side effects,
fallbacks, the bulkhead and idempotency keys; a bad value is shown beside its field naming
its range, and changes nothing."""

from __future__ import annotations

import pytest

from labs.forms.lab import hosts_from_text, hosts_text
from tests.labs.test_lab_views import HTMX, journal_count, url

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_redis():
    from tests.conftest import flush_test_redis

    flush_test_redis()


@pytest.fixture
def session(student, classroom, scenario):
    from labs.services import lab

    return lab.session_open(user=student, classroom=classroom, scenario=scenario)


@pytest.fixture
def owner_client(client, student):
    client.force_login(student)
    return client


def _field(html: str, name: str) -> str:
    return html.split(f'data-field="{name}"')[1].split('<div class="field')[0]


def test_hosts_b_side_effect_and_fallbacks_are_set_from_the_dependency_form(owner_client, session):
    response = owner_client.post(
        url("session_dependency", session),
        {
            "hosts": "same, down, slow:300",
            "spread": "random",
            "side_effect": "charge",
            "honours_keys": "true",
            "fallbacks": "cached, default",
            "b_mode": "slow",
            "b_latency_ms": "1000",
            "b_every": "3",
        },
        **HTMX,
    )
    assert response.status_code == 200, response.content.decode()[:2000]
    session.refresh_from_db()
    dep = session.dependency
    assert dep["hosts"] == [{}, {"mode": "down"}, {"mode": "slow", "latency_ms": 300}]
    assert (dep["spread"], dep["side_effect"], dep["honours_keys"]) == ("random", "charge", True)
    assert dep["fallbacks"] == ["cached", "default"]
    assert (dep["b"]["mode"], dep["b"]["latency_ms"], dep["b_every"]) == ("slow", 1000, 3)
    html = owner_client.get(url("session_detail", session)).content.decode()
    assert 'value="same, down, slow:300"' in _field(html, "hosts")
    owner_client.post(url("session_dependency", session), {"b_mode": ""}, **HTMX)
    session.refresh_from_db()
    assert session.dependency["b"] is None


def test_a_bad_host_is_shown_beside_the_hosts_field_and_changes_nothing(owner_client, session):
    before = (dict(session.dependency), journal_count(session))
    response = owner_client.post(
        url("session_dependency", session), {"hosts": "same, sideways"}, **HTMX
    )
    assert response.status_code == 422
    field = _field(response.content.decode(), "hosts")
    assert "Hosts: each host&#x27;s mode: must be one of healthy" in field
    assert 'value="same, sideways"' in field
    response = owner_client.post(
        url("session_dependency", session), {"hosts": ", ".join(["same"] * 9)}, **HTMX
    )
    assert "must be [] (one host) or a list of 1 to 8 hosts (got 9)" in _field(
        response.content.decode(), "hosts"
    )
    response = owner_client.post(
        url("session_dependency", session), {"b_mode": "slow", "b_latency_ms": "9000"}, **HTMX
    )
    assert "must be between 0 and 2000 ms (got 9000)" in _field(
        response.content.decode(), "b_latency_ms"
    )
    session.refresh_from_db()
    assert (session.dependency, journal_count(session)) == before


def test_the_policy_form_sets_scope_bulkhead_pool_fallback_and_keys(owner_client, session):
    owner_client.post(url("session_dependency", session), {"fallbacks": "cached"}, **HTMX)
    response = owner_client.post(
        url("session_policy", session),
        {
            "nesting": "retry_outside",
            "breaker_scope": "host",
            "bulkhead": "2",
            "pool_wait_ms": "200",
            "fallback": "cached",
            "fallback_max_age_ms": "3000",
            "idempotency_keys": "true",
        },
        **HTMX,
    )
    assert response.status_code == 200
    session.refresh_from_db()
    p = session.policy
    assert (p["breaker_scope"], p["bulkhead"], p["pool_wait_ms"]) == ("host", 2, 200)
    assert (p["fallback"], p["fallback_max_age_ms"], p["idempotency_keys"]) == (
        "cached", 3000, True,
    )  # fmt: skip
    owner_client.post(url("session_policy", session), {"bulkhead": "", "fallback": ""}, **HTMX)
    session.refresh_from_db()
    assert (session.policy["bulkhead"], session.policy["fallback"]) == (None, None)


def test_bad_policy_values_are_named_beside_their_fields(owner_client, session):
    before = (dict(session.policy), journal_count(session))
    response = owner_client.post(
        url("session_policy", session),
        {"bulkhead": "11", "fallback_max_age_ms": "0", "fallback": "cached"},
        **HTMX,
    )
    assert response.status_code == 422
    html = response.content.decode()
    assert "Bulkhead: calls in flight per dependency: must be null (off) or between 1 and 10" in (
        _field(html, "bulkhead")
    )
    assert "must be between 1 and 3600000 ms (got 0)" in _field(html, "fallback_max_age_ms")
    response = owner_client.post(url("session_policy", session), {"fallback": "cached"}, **HTMX)
    assert response.status_code == 422
    assert "cached is not offered by the dependency (offered: none)" in _field(
        response.content.decode(), "fallback"
    )
    session.refresh_from_db()
    assert (session.policy, journal_count(session)) == before


def test_hosts_text_round_trips():
    dependency = {
        "mode": "healthy",
        "hosts": [{}, {"mode": "down"}, {"mode": "slow", "latency_ms": 300}],
    }
    assert hosts_text(dependency) == "same, down, slow:300"
    assert hosts_from_text(["same", "down", "slow:300"]) == dependency["hosts"]


def test_degraded_calls_have_their_own_tone_and_count():
    from labs.journal.rows import row_tone, summary_delta

    degraded = {"kind": "call_result", "outcome": "degraded"}
    assert row_tone(degraded) == "degraded"
    assert summary_delta(degraded) == {"calls": 1, "degraded": 1}
    assert row_tone({"kind": "rejected", "outcome": "rejected_bulkhead"}) == "fast"


def test_the_summary_shows_each_dependency_degraded_calls_and_effects_against_calls():
    from labs.presenters.lab_page import summary_panel
    from tests.labs.panels import render_summary

    facts = {"id": 1, "number": 2, "size": 20, "concurrency": 4, "status": "done", "error": ""}
    counts = {
        "calls": 20, "succeeded": 12, "failed": 8, "degraded": 2, "wait_ms_total": 220.0,
        "rejected_bulkhead": 8, "pool_timeout": 0, "effects": {"applied": 9, "calls": 6},
        "by_dependency": {
            "a": {"calls": 10, "succeeded": 10, "failed": 0, "fast_failed": 0, "degraded": 0, "waited_ms": 100.0},
            "b": {"calls": 10, "succeeded": 2, "failed": 8, "fast_failed": 0, "degraded": 0, "waited_ms": 120.0},
        },
    }  # fmt: skip
    html = render_summary(summary_panel(facts, counts))
    assert 'data-stat="degraded">2<' in html
    assert 'data-stat="rejected_bulkhead">8<' in html
    assert '<span data-role="effects-applied">9</span> / <span data-role="effects-calls">6</span>' in html
    row_b = html.split('data-dependency="b">')[1].split("</tr>")[0]
    assert (
        '<td data-label="Calls">10</td><td data-label="Succeeded">2</td>'
        '<td data-label="Failed">8</td>'
    ) in row_b
    plain = render_summary(summary_panel(facts, {"calls": 6, "succeeded": 6}))
    assert "summary-extra" not in plain and "by-dependency" not in plain


def test_the_badge_shows_each_hosts_breaker(session):
    from labs.engine import Breaker, parse_dependency, parse_policy
    from labs.engine.routes import arm_routes
    from labs.live import runtime
    from labs.presenters.lab_page import badge, render_badge
    from labs.selectors.lab import breaker_now

    policy = parse_policy({"nesting": "retry_outside", "breaker_scope": "host"})
    store = runtime.session_store(session.pk)
    arm_routes(
        parse_dependency({"hosts": [{}, {"mode": "down"}, {}]}), store=store, clock=runtime.CLOCK
    )
    host1 = Breaker(policy.breaker, store=store.scoped("h1"), clock=runtime.CLOCK)
    for _ in range(3):
        host1.record(host1.allow(), "failure")
    # The dependency-wide breaker, open from before the switch to per-host breakers: stale,
    # since no call asks it any more, so the badge does not show it.
    Breaker(policy.breaker, store=store, clock=runtime.CLOCK).force_open("before the switch")
    view = breaker_now(session.pk, policy.to_dict())
    assert view["per_host"] is True
    assert [(p["name"], p["state"]) for p in view["parts"]] == [
        ("host 0", "closed"), ("host 1", "open"), ("host 2", "closed"),
    ]  # fmt: skip
    html = render_badge(badge(view))
    assert "Circuit breakers, one per host" in html and 'data-scope="host"' in html
    assert 'data-state=""' in html and "breaker-big" not in html and "held open" not in html
    host_1 = html.split('<li data-part="h1"')[1].split("</li>")[0]
    assert 'data-state="open"' in host_1 and ">OPEN</strong>" in host_1
    assert "half-open in" in host_1  # its own cooldown, counting down
    assert html.count("<li data-part=") == 3
    assert breaker_now(session.pk, session.policy)["parts"] == []  # one breaker: no parts


@pytest.mark.django_db
def test_the_badge_reads_the_breaker_in_two_round_trips_and_always_as_it_is_now(session):
    """A page's badge is read after every push that moves a breaker: one read of the
    breaker (its effective state included) and one pipelined look for host and B breakers.
    The store it reads through is kept between reads, and each read still sees Redis now."""
    from labs.engine import Breaker, parse_policy
    from labs.live import runtime
    from labs.selectors.lab import breaker_now

    client = runtime.engine_redis()
    sent: list[str] = []
    original = client.execute_command
    original_pipeline = client.pipeline

    def counted(*args, **kwargs):
        sent.append(str(args[0]))
        return original(*args, **kwargs)

    def pipeline(*args, **kwargs):
        sent.append("PIPELINE")
        return original_pipeline(*args, **kwargs)

    policy = parse_policy(session.policy)
    client.execute_command = counted
    client.pipeline = pipeline
    try:
        assert breaker_now(session.pk, session.policy)["state"] == "closed"
        assert sent == ["EVALSHA", "PIPELINE"], sent
        breaker = Breaker(policy.breaker, store=runtime.session_store(session.pk),
                          clock=runtime.CLOCK)  # fmt: skip
        breaker.force_open("instructor")
        sent.clear()
        view = breaker_now(session.pk, session.policy)
    finally:
        del client.execute_command, client.pipeline
    assert (view["state"], view["forced"]) == ("open", "open")
    assert sent == ["EVALSHA", "PIPELINE"], sent
