"""The tipping point in virtual time: the map's boundary at the defaults, the C / (1 + r)
rule over several seeds and retry counts, and the hysteresis of a lock-in."""

from __future__ import annotations

import pytest

from labs.experiments import get
from labs.experiments.tipping_point import TippingParams, simulate, stable_line_pct

EXPERIMENT = get("tipping_point")


@pytest.fixture(scope="module")
def result():
    return EXPERIMENT.run(TippingParams())


def test_defaults_put_the_stable_line_at_a_quarter_of_the_capacity(result):
    assert result.metrics["capacity_per_s"] == 50
    assert result.metrics["stable_line_pct"] == 25.0
    assert result.figure("stable_line").text == "25.0 % (12.5 calls/s)"


def test_the_map_at_the_defaults_is_pinned(result):
    grid = result.metrics["grid"]
    assert grid == {
        "down, 2 s": {"10": 0, "20": 0, "30": 0, "40": None, "60": None},
        "down, 8 s": {"10": 0, "20": 0, "30": None, "40": None, "60": None},
        "capacity drop, 2 s": {"10": 1, "20": 0, "30": 0, "40": None, "60": None},
        "capacity drop, 8 s": {"10": 0, "20": 0, "30": None, "40": None, "60": None},
    }
    # the boundary: the lowest load that locks in, per trigger; a longer trigger tips lower
    assert result.metrics["boundary"] == {
        "down, 2 s": 40,
        "down, 8 s": 30,
        "capacity drop, 2 s": 40,
        "capacity drop, 8 s": 30,
    }
    assert result.figure("lowest_locked").text == "30 %"
    assert result.figure("below_line").text == "yes"
    assert [row["load_30"] for row in result.rows] == ["0 s", "never", "0 s", "never"]


@pytest.mark.parametrize("seed", range(6))
def test_below_the_line_every_trigger_recovers_and_well_above_it_a_long_one_locks_in(seed):
    metrics = EXPERIMENT.run(TippingParams(seed=seed)).metrics
    grid, boundary = metrics["grid"], metrics["boundary"]
    for label, cells in grid.items():
        assert cells["10"] is not None and cells["20"] is not None, label
        assert cells["60"] is None, label
        if label.endswith("8 s"):
            assert cells["40"] is None, label
    assert all(load > 25 for load in boundary.values())


@pytest.mark.parametrize(("retries", "seed"), [(1, 0), (1, 3), (4, 0), (4, 2)])
def test_the_line_moves_with_the_retry_count_as_c_over_1_plus_r(retries, seed):
    line = stable_line_pct(retries)  # 50 % for 1 retry, 20 % for 4
    below, far_above = round(line * 0.6), round(line * 1.75)
    params = TippingParams(seed=seed, retries=retries, loads=(below, far_above), triggers_s=(8,))
    grid = EXPERIMENT.run(params).metrics["grid"]
    for label, cells in grid.items():
        assert cells[str(below)] is not None, (label, below)
        assert cells[str(far_above)] is None, (label, far_above)


@pytest.mark.parametrize("seed", range(5))
def test_hysteresis_the_pre_trigger_load_stays_locked_in_only_below_the_line_recovers(seed):
    params = TippingParams(seed=seed, observe_s=40)
    end = params.trigger_at_s + 8
    # 40 % of C was healthy before the trigger (no timeouts, no retries) ...
    before = simulate(params, 40, "down", 8)
    assert sum(before["calls_ok_per_s"][1:4]) >= 0.9 * sum(before["calls_per_s"][1:4])
    assert sum(before["offered_per_s"][1:4]) == sum(before["calls_per_s"][1:4])
    # ... and after an 8 s outage the same load never comes back
    assert before["recovery_s"] is None
    # back below capacity but above the line (30 %): still locked in
    assert simulate(params, 40, "down", 8, later_load_pct=30, later_at_s=20)["recovery_s"] is None
    # below the line (20 %): recovers, and only after the load dropped
    for kind in ("down", "capacity"):
        out = simulate(params, 40, kind, 8, later_load_pct=20, later_at_s=20)
        assert out["recovery_s"] is not None
        assert end + out["recovery_s"] >= 20


def test_a_capacity_drop_must_leave_fewer_servers_and_the_map_is_capped():
    params, problems = EXPERIMENT.parse({"servers": "2", "trigger_servers": "2"})
    assert params is None
    assert [p.field for p in problems] == ["trigger_servers"]
    assert "between 0 and 1" in problems[0].message
    big = {"loads": ",".join(["100"] * 10), "triggers_s": "60,60,60,60", "observe_s": "120"}
    params, problems = EXPERIMENT.parse(big)
    assert params is None and problems[0].field == "loads"
    params, problems = EXPERIMENT.parse({"loads": "0,50"})
    assert params is None
    assert str(problems[0]) == (
        "loads: must be 1 to 10 whole numbers separated by commas, each between 1 and 100 "
        "% of capacity (got 0,50)"
    )


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("discipline", ["lifo", "adaptive_lifo"])
def test_a_server_taking_the_newest_waiting_attempt_first_escapes_the_lock_in(seed, discipline):
    """At 40 % of C (above the line), an 8 s outage locks a FIFO server in; taking the newest
    waiting attempt first serves fresh attempts before their callers give up, and the same
    load comes back within a few seconds of the trigger's end."""
    params = TippingParams(seed=seed, observe_s=40)
    assert simulate(params, 40, "down", 8)["recovery_s"] is None
    out = simulate(params, 40, "down", 8, defences={"discipline": discipline})
    assert out["recovery_s"] is not None and out["recovery_s"] <= 3, out["recovery_s"]
