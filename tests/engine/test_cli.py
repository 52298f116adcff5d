"""``python -m labs.engine run``: table, JSON, real time, and bad input (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .helpers import ROOT, SCENARIOS


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "labs.engine", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_default_output_is_a_readable_table():
    done = run_cli("run", SCENARIOS / "tour.json")
    assert done.returncode == 0, done.stderr
    assert "scenario tour (seed 7, virtual time)" in done.stdout
    assert "[4, 1, 1, 1, 1, 1]" in done.stdout and "[4, 4, 4, 0, 0, 0]" in done.stdout
    assert "half_open -> closed  (call 13): probe call #13 succeeded" in done.stdout


def test_json_output_is_the_contract():
    done = run_cli("run", SCENARIOS / "tour.json", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out) >= {"calls", "transitions", "bursts"}
    assert [b["attempts"] for b in out["bursts"]] == [[4, 1, 1, 1, 1, 1], [4, 4, 4, 0, 0, 0], [1]]
    assert set(out["calls"][0]) >= {
        "call",
        "burst",
        "attempts",
        "outcome",
        "backoff_ms",
        "start_ms",
        "end_ms",
    }
    assert set(out["transitions"][0]) == {"at_ms", "from", "to", "call", "reason"}
    assert set(out["bursts"][0]) >= {"calls", "succeeded", "attempts", "wall_ms"}


def test_real_mode_gives_the_same_counts():
    virtual = json.loads(run_cli("run", SCENARIOS / "tour.json", "--json").stdout)
    done = run_cli("run", SCENARIOS / "tour.json", "--json", "--real")
    assert done.returncode == 0, done.stderr
    real = json.loads(done.stdout)
    assert real["clock"] == "real"

    def counts(out):
        return [(c["call"], c["attempts"], c["outcome"]) for c in out["calls"]], [
            (t["from"], t["to"], t["call"]) for t in out["transitions"]
        ]

    assert counts(real) == counts(virtual)
    # (no assertion on wall-clock speed: the benchmark reports how close real time comes)


@pytest.mark.parametrize(
    ("content", "lines"),
    [
        (
            {
                "name": "x",
                "dependency": {"mode": "sideways"},
                "policy": {"max_attempts": 9},
                "steps": [{"burst": 0}],
            },
            [
                "dependency.mode: must be one of healthy, flaky, down, slow, error_rate, outage, rate_limited, script, shared, server (got 'sideways')",
                "policy.max_attempts: must be between 1 and 5 (got 9)",
                "steps[0].burst: must be between 1 and 20 calls (got 0)",
            ],
        ),
        ('{"name": "x", "steps": [', None),
    ],
)
def test_bad_input_exits_2_with_one_line_per_problem_and_runs_nothing(tmp_path, content, lines):
    path = tmp_path / "bad.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    done = run_cli("run", path, "--json")
    assert done.returncode == 2
    assert done.stdout == ""  # nothing ran
    if lines is None:
        assert len(done.stderr.strip().splitlines()) == 1
        assert "malformed JSON at line 1" in done.stderr
    else:
        assert done.stderr.strip().splitlines() == lines


def test_missing_file_exits_2(tmp_path):
    done = run_cli("run", tmp_path / "nope.json")
    assert done.returncode == 2 and "cannot read" in done.stderr


def test_in_process_main_returns_the_status(tmp_path, capsys):
    from labs.engine.cli import main

    assert main(["run", str(SCENARIOS / "deadline.json")]) == 0
    assert "deadline_exceeded" in capsys.readouterr().out
