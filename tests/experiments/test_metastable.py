"""The class's own retry storm in virtual time: naive clients keep the shared dependency down
long after an 8 s outage; full jitter + a retry budget + a breaker recover within seconds."""

from __future__ import annotations

import dataclasses

import pytest

from labs.engine import MemorySharedModel, SharedDependency
from labs.experiments import get
from labs.experiments.metastable import MetastableParams

EXPERIMENT = get("metastable")


@pytest.fixture(scope="module")
def result():
    return EXPERIMENT.run(MetastableParams())


def test_defaults_are_30_clients_at_about_70_percent_of_capacity_and_an_8_s_trigger(result):
    params = MetastableParams()
    assert (params.clients, params.trigger, params.trigger_s) == (30, "down", 8)
    capacity = result.metrics["capacity_per_s"]
    assert capacity == 200
    load = result.metrics["naive"]["baseline_offered"] / capacity
    assert 0.68 <= load <= 0.72


def test_naive_clients_stay_collapsed_for_at_least_30_s_after_the_trigger(result):
    naive = result.metrics["naive"]
    assert naive["below_20_s"] >= 30
    assert naive["recovery_s"] is None
    assert result.figure("recovery_naive").text == "never"


def test_jitter_budget_and_breaker_keep_the_load_near_the_baseline_and_recover_in_5_s(result):
    chosen = result.metrics["resilient"]
    assert chosen["peak_over_baseline"] <= 1.3
    assert chosen["recovery_s"] is not None and chosen["recovery_s"] <= 5


def test_pinned_default_figures(result):
    naive, chosen = result.metrics["naive"], result.metrics["resilient"]
    assert (naive["calls"], naive["offered"], naive["retries"]) == (8460, 29610, 21150)
    assert (naive["peak_offered"], naive["below_20_s"]) == (782, 42)
    assert naive["wasted_ms"] == 413_440
    assert (chosen["offered"], chosen["retries"], chosen["peak_offered"]) == (7634, 30, 146)
    assert (chosen["wasted_ms"], chosen["recovery_s"]) == (0, 0)
    assert result.figure("peak_naive").text == "5.53x"
    assert result.figure("peak_chosen").text == "1.03x"
    assert result.figure("retries_per_call").value == "2.50 / 0.00"
    assert result.figure("wasted").text == "413.4 / 0.0 s"


@pytest.mark.parametrize("seed", range(10))
def test_the_figures_hold_for_other_seeds(seed):
    metrics = EXPERIMENT.run(MetastableParams(seed=seed)).metrics
    assert metrics["naive"]["below_20_s"] >= 30
    assert metrics["resilient"]["peak_over_baseline"] <= 1.3
    assert metrics["resilient"]["recovery_s"] <= 5


@pytest.mark.parametrize("seed", range(3))
def test_with_poisson_arrivals_the_naive_run_collapses_and_the_resilient_one_recovers(seed):
    metrics = EXPERIMENT.run(MetastableParams(seed=seed, arrivals="poisson")).metrics
    assert metrics["naive"]["below_20_s"] >= 30
    assert metrics["resilient"]["recovery_s"] <= 5


def test_each_policy_alone_and_the_mix():
    runs = {
        policy: EXPERIMENT.run(MetastableParams(policy=policy)).metrics[policy]
        for policy in ("jitter", "budget", "breaker", "mixed")
    }
    assert runs["jitter"]["recovery_s"] is None  # jitter spreads retries, it does not cut them
    assert runs["budget"]["recovery_s"] is not None
    assert runs["breaker"]["recovery_s"] is not None
    assert runs["mixed"]["recovery_s"] is None  # two naive-ish fifths keep it down for all


def test_same_seed_same_numbers_other_seed_other_numbers(result):
    assert EXPERIMENT.run(MetastableParams()).checksum() == result.checksum()
    assert EXPERIMENT.run(MetastableParams(seed=8)).checksum() != result.checksum()


def test_the_model_is_the_engine_s_shared_model(monkeypatch):
    seen = []
    original = SharedDependency.__init__

    def spy(self, model, **kwargs):
        seen.append(model)
        original(self, model, **kwargs)

    monkeypatch.setattr(SharedDependency, "__init__", spy)
    EXPERIMENT.run(dataclasses.replace(MetastableParams(), clients=2, duration_s=12))
    assert seen and all(type(m) is MemorySharedModel for m in seen)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"trigger_at_s": 55}, "trigger_at_s: must be between 2 and 52 s so the trigger ends"),
        (
            {"trigger": "capacity", "trigger_servers": 8},
            "trigger_servers: must be between 0 and 7 (fewer than the 8 servers; got 8)",
        ),
        ({"clients": 100, "rate": 20}, "duration_s: must be between 10 and 10 s with 100 clients"),
        ({"servers": 65}, "servers: must be between 1 and 64 (got 65)"),
        ({"policy": "yolo"}, "policy: must be one of naive, jitter, budget, breaker"),
    ],
)
def test_bad_parameters_name_the_field_and_its_range(raw, message):
    params, problems = EXPERIMENT.parse(raw)
    assert params is None
    assert str(problems[0]).startswith(message)
