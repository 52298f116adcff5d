"""``manage.py experiment NAME [--json] [--param value ...]``: table, JSON, and exit status 2
with one line per problem on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from labs.experiments import EXPERIMENTS

ROOT = Path(__file__).resolve().parents[2]


def run_command(*args: str) -> str:
    out = StringIO()
    call_command("experiment", *args, stdout=out)
    return out.getvalue()


def test_table_output_shows_figures_beside_the_seed_and_the_table():
    text = run_command("amplification")
    assert text.startswith("Retry amplification\n")
    assert "Leaf hits without a budget" in text
    figure_line = next(line for line in text.splitlines() if line.startswith("Leaf hits without"))
    assert figure_line.split()[-2:] == ["810", "810"]
    assert "Budget denials" in text  # the per-tier table
    assert "chart calls_per_tier" in text


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_json_output_is_the_result(name):
    data = json.loads(run_command(name, "--json"))
    experiment = EXPERIMENTS[name]
    assert data["experiment"] == name
    assert data["checksum"] == experiment.run(experiment.defaults()).checksum()
    assert data["figures"] and data["rows"] and data["charts"]


def test_parameters_are_options_with_underscores_or_dashes():
    a = json.loads(run_command("amplification", "--tiers", "4", "--json"))
    assert a["metrics"]["leaf_hits"] == 30 * 3**4
    b = json.loads(run_command("amplification", "--budget-pct", "50", "--json"))
    assert b["params"]["budget_pct"] == 50
    c = json.loads(run_command("contention", "--clients", "10,20", "--focus", "20", "--json"))
    assert c["params"]["clients"] == [10, 20]


def test_bad_parameters_raise_command_error_with_returncode_2_one_line_per_problem():
    with pytest.raises(CommandError) as caught:
        run_command("amplification", "--tiers", "0", "--requests", "abc", "--seed", "3")
    assert caught.value.returncode == 2
    lines = str(caught.value).splitlines()
    assert lines[0] == "invalid parameters for amplification:"
    assert lines[1:] == [
        "seed: not a parameter of amplification (parameters: tiers, attempts, requests, "
        "budget_pct, budget_tokens, latency_ms, backoff_base_ms)",
        "tiers: must be between 1 and 6 (got 0)",
        "requests: must be a whole number between 1 and 1000 (got 'abc')",
    ]


def _manage(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "experiment", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_process_exits_2_on_bad_input_naming_field_and_range():
    proc = _manage("storm", "--clients", "100000", "--base-ms", "-5")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "clients: must be between 1 and 1000 (got 100000)" in proc.stderr.splitlines()
    assert "base_ms: must be between 1 and 1000 ms (got -5)" in proc.stderr.splitlines()


def test_process_exits_2_for_an_unknown_experiment():
    proc = _manage("nope")
    assert proc.returncode == 2
    assert "invalid choice: 'nope'" in proc.stderr


def test_process_exits_0_and_prints_the_table():
    proc = _manage("deadline", "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    assert "Wasted server work, per-tier timeouts" in proc.stdout
    assert "50,000 ms" in proc.stdout
