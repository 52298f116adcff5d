"""Parameters of every experiment: defaults inside their ranges, strings parsed like typed
values, and every refusal naming the field and its allowed range."""

from __future__ import annotations

import dataclasses

import pytest

from labs.engine import Problem, ValidationError
from labs.experiments import EXPERIMENTS, get
from labs.experiments.base import Param

ALL = list(EXPERIMENTS)


def test_the_eight_experiments():
    assert ALL == [
        "amplification", "storm", "breaker", "deadline", "contention", "metastable",
        "tipping_point", "queueing",
    ]  # fmt: skip
    with pytest.raises(KeyError, match="experiments: amplification, storm"):
        get("nope")


@pytest.mark.parametrize("name", ALL)
def test_limits_table_matches_the_dataclass_and_its_defaults_are_valid(name):
    experiment = EXPERIMENTS[name]
    defaults = experiment.defaults()
    assert list(experiment.limits) == [f.name for f in dataclasses.fields(defaults)]
    for key, spec in experiment.limits.items():
        assert spec.name == key
        assert spec.default == getattr(defaults, key)
    assert experiment.validate(defaults) == []
    assert experiment.parse({}) == (defaults, [])


@pytest.mark.parametrize("name", ALL)
def test_defaults_written_as_strings_parse_back_to_the_defaults(name):
    experiment = EXPERIMENTS[name]
    defaults = experiment.defaults()
    raw = {k: spec.format(getattr(defaults, k)) for k, spec in experiment.limits.items()}
    assert experiment.parse(raw) == (defaults, [])


def _numeric(name):
    return [
        (name, spec) for spec in EXPERIMENTS[name].limits.values() if spec.kind in ("int", "number")
    ]


@pytest.mark.parametrize(
    ("name", "spec"),
    [c for n in ALL for c in _numeric(n)],
    ids=lambda v: v if isinstance(v, str) else v.name,
)
def test_every_numeric_field_refuses_values_past_either_end_with_its_range(name, spec):
    experiment = EXPERIMENTS[name]
    unit = f" {spec.unit}" if spec.unit else ""
    for bad in (spec.min - 1, spec.max + 1, -(10**9)):
        params, problems = experiment.parse({spec.name: bad})
        assert params is None
        assert problems[0].field == spec.name
        text = str(problems[0])
        assert text.startswith(f"{spec.name}: must be between ")
        assert f"and {spec.format(spec.max)}{unit} (got " in text


@pytest.mark.parametrize("name", ALL)
def test_unknown_and_malformed_parameters_are_problems_and_nothing_runs(name):
    experiment = EXPERIMENTS[name]
    first = next(iter(experiment.limits))
    params, problems = experiment.parse({"bogus": 1, first: "abc"})
    assert params is None
    fields = [p.field for p in problems]
    assert fields == ["bogus", first]
    assert "unknown parameter (parameters: " in problems[0].message
    with pytest.raises(ValidationError):
        experiment.run_checked(dataclasses.replace(experiment.defaults(), **{first: -1}))


def test_problems_are_the_engines_type():
    _, problems = get("amplification").parse({"tiers": 0})
    assert isinstance(problems[0], Problem)
    assert str(problems[0]) == "tiers: must be between 1 and 6 (got 0)"


@pytest.mark.parametrize(
    ("spec", "raw", "value"),
    [
        (Param("n", "N", 1, 1, 10), "7", 7),
        (Param("n", "N", 1, 1, 10), " 7 ", 7),
        (Param("n", "N", 1, 1, 10), "7.0", 7),
        (Param("n", "N", 1, 1, 10), 7.0, 7),
        (Param("x", "X", 1.0, 0, 10, kind="number"), "2.5", 2.5),
        (Param("x", "X", 1.0, 0, 10, kind="number"), 3, 3.0),
        (Param("c", "C", "a", kind="choice", choices=("a", "b")), "b", "b"),
        (Param("l", "L", (2,), 2, 9, kind="int_list"), "2, 3,4", (2, 3, 4)),
    ],
)
def test_param_parses_strings_and_values(spec, raw, value):
    assert spec.parse(raw) == (value, None)


@pytest.mark.parametrize(
    ("spec", "raw", "message"),
    [
        (
            Param("n", "N", 1, 1, 10),
            "7.5",
            "n: must be a whole number between 1 and 10 (got '7.5')",
        ),
        (Param("n", "N", 1, 1, 10), True, "n: must be a whole number between 1 and 10 (got True)"),
        (Param("n", "N", 1, 1, 10), "", "n: must be a whole number between 1 and 10 (got '')"),
        (
            Param("x", "X", 1.0, 0, 10, "ms", kind="number"),
            "nan",
            "x: must be a number between 0 and 10 ms (got 'nan')",
        ),
        (
            Param("x", "X", 1.0, 0, 10, "ms", kind="number"),
            "inf",
            "x: must be a number between 0 and 10 ms (got 'inf')",
        ),
        (
            Param("l", "L", (2,), 2, 9, kind="int_list", max_items=2),
            "2,3,4",
            "l: must be 1 to 2 whole numbers separated by commas, each between 2 and 9 (got 2,3,4)",
        ),
        (
            Param("l", "L", (2,), 2, 9, kind="int_list"),
            "",
            "l: must be 1 to 12 whole numbers separated by commas, each between 2 and 9 (got )",
        ),
    ],
)
def test_param_refuses_junk_with_field_and_range(spec, raw, message):
    value, problem = spec.parse(raw)
    assert value is None
    assert str(problem) == message
