"""The Experiments pages: login required, defaults run on GET, htmx partials, refusals."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from labs.experiments import EXPERIMENTS
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def client_in(client):
    client.force_login(make_user("carol"))
    return client


def _checksum(html: str) -> str:
    match = re.search(r'id="results"[^>]*data-checksum="([0-9a-f]*)"', html, re.S)
    assert match, "results section without a checksum"
    return match.group(1)


@pytest.mark.parametrize("url", ["/experiments/", "/experiments/amplification/"])
def test_pages_require_login(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_index_lists_every_experiment(client_in):
    response = client_in.get(reverse("experiments:index"))
    assert response.status_code == 200
    html = response.content.decode()
    for name, experiment in EXPERIMENTS.items():
        assert reverse("experiments:detail", args=[name]) in html
        assert experiment.title in html


def test_index_opens_in_plain_words(client_in):
    html = client_in.get(reverse("experiments:index")).content.decode()
    lead = re.search(r'<p class="lead">(.*?)</p>', html, re.S).group(1)
    assert lead.startswith("What a crowd of clients does to a struggling service")
    assert "Seed 004" not in html


def test_nav_links_to_experiments(client_in):
    html = client_in.get(reverse("labs:home")).content.decode()
    assert f'href="{reverse("experiments:index")}"' in html


def test_unknown_experiment_is_404(client_in):
    assert client_in.get("/experiments/nope/").status_code == 404


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_get_runs_the_defaults_and_shows_figures_chart_table_and_ranges(client_in, name):
    experiment = EXPERIMENTS[name]
    response = client_in.get(reverse("experiments:detail", args=[name]))
    assert response.status_code == 200
    html = response.content.decode()
    result = experiment.run(experiment.defaults())
    assert _checksum(html) == result.checksum()
    for chart in result.charts:
        assert f'data-checksum="{chart.checksum()}"' in html
        assert "<polyline" in html or "<rect" in html
    for figure in result.figures:
        assert f'data-figure="{figure.key}"' in html
    for spec in experiment.limits.values():
        assert f'name="{spec.name}"' in html
        assert f"Allowed: {spec.describe()}" in html
    assert 'hx-post="' in html and 'hx-target="#results"' in html


def test_amplification_page_shows_810_beside_the_seed(client_in):
    html = client_in.get(reverse("experiments:detail", args=["amplification"])).content.decode()
    row = re.search(r'data-figure="leaf_hits">(.*?)</tr>', html, re.S).group(1)
    assert row.count("810") == 2  # this run, and seed 004's figure


def test_post_runs_the_submitted_parameters(client_in):
    url = reverse("experiments:detail", args=["amplification"])
    response = client_in.post(url, {"tiers": "4", "attempts": "3", "requests": "30"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "<!doctype html>" in html.lower()  # no JS: the whole page
    assert "2,430" in html  # 30 x 3^4
    assert 'value="4"' in html


def test_htmx_post_returns_the_results_partial_and_the_form_out_of_band(client_in):
    url = reverse("experiments:detail", args=["amplification"])
    response = client_in.post(url, {"tiers": "2"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<!doctype" not in html.lower() and "<body" not in html
    assert html.lstrip().startswith('<section id="results"')
    assert 'id="experiment-form"' in html and 'hx-swap-oob="true"' in html
    assert "270" in html  # 30 x 3^2
    defaults = EXPERIMENTS["amplification"].run(EXPERIMENTS["amplification"].defaults())
    assert _checksum(html) != defaults.checksum()


@pytest.mark.parametrize("htmx", [False, True])
def test_out_of_range_input_runs_nothing_and_shows_the_range_beside_the_field(client_in, htmx):
    url = reverse("experiments:detail", args=["amplification"])
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    response = client_in.post(url, {"tiers": "0", "requests": "100000"}, **headers)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Nothing was run" in html
    assert _checksum(html) == ""
    assert 'data-chart="' not in html
    tiers_field = re.search(
        r'<div class="field has-error">\s*<label for="id_tiers">.*?</div>', html, re.S
    )
    assert tiers_field, "the tiers field is not marked as in error"
    assert "tiers: must be between 1 and 6 (got 0)" in tiers_field.group(0)
    assert 'aria-invalid="true"' in tiers_field.group(0)
    assert "requests: must be between 1 and 1000 (got 100000)" in html
    assert 'value="0"' in html  # the student's input is kept for correction


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("storm", {"clients": "100000"}, "clients: must be between 1 and 1000 (got 100000)"),
        ("breaker", {"hang_ms": "-5"}, "hang_ms: must be between 1 and 5000 ms (got -5)"),
        (
            "deadline",
            {"client_timeout_ms": "-1"},
            "client_timeout_ms: must be between 1 and 10000 ms (got -1)",
        ),
        ("contention", {"clients": "10,abc"}, "clients: must be 1 to 12 whole numbers"),
        (
            "storm",
            {"jitter": "sometimes"},
            "jitter: must be one of full, equal, decorrelated, proportional",
        ),
        (
            "amplification",
            {"tiers": ""},
            "tiers: must be a whole number between 1 and 6 (got &#x27;&#x27;)",
        ),
    ],
)
def test_each_page_refuses_bad_input_with_field_and_range(client_in, name, data, message):
    response = client_in.post(reverse("experiments:detail", args=[name]), data)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert _checksum(response.content.decode()) == ""


def test_other_methods_are_refused(client_in):
    assert client_in.put(reverse("experiments:detail", args=["storm"])).status_code == 405
