"""Server-side chart geometry: round ticks, points inside the plot, checksums that follow the data."""

from __future__ import annotations

from labs.experiments.base import Chart, Series
from labs.experiments.charts import layout, nice_step, nice_ticks


def _line(values=(0.0, 5.0, 10.0)) -> Chart:
    return Chart("c", "T", "line", (0, 50, 100), "x", "y", (Series("a", tuple(values)),))


def test_nice_ticks_cover_the_maximum_with_round_steps():
    assert nice_ticks(810) == [0, 200, 400, 600, 800, 1000]
    assert nice_ticks(9.4) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(0) == [0, 1]
    assert nice_step(190, 6) == 50


def test_line_points_stay_inside_the_plot_area():
    geo = layout(_line())
    plot = geo["plot"]
    for pair in geo["series"][0]["points"].split():
        x, y = map(float, pair.split(","))
        assert plot["x0"] <= x <= plot["x1"]
        assert plot["y0"] <= y <= plot["y1"]


def test_bars_one_group_per_category():
    chart = Chart(
        "b",
        "T",
        "bar",
        ("t1", "leaf"),
        "x",
        "y",
        (Series("a", (30.0, 810.0)), Series("b", (30.0, 71.0))),
    )
    geo = layout(chart)
    assert [t["label"] for t in geo["x_ticks"]] == ["t1", "leaf"]
    assert len(geo["series"]) == 2 and len(geo["series"][0]["bars"]) == 2
    tallest = geo["series"][0]["bars"][1]
    assert tallest["y"] < geo["series"][1]["bars"][1]["y"]


def test_checksum_changes_with_the_data_only():
    assert _line().checksum() == _line().checksum()
    assert _line().checksum() != _line((0.0, 5.0, 11.0)).checksum()
    assert layout(_line())["checksum"] == _line().checksum()
