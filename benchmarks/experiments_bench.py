"""Wall time of every experiment at its default size, with its headline figures.

Run by hand (for information; no test asserts on speed)::

    .venv/bin/python benchmarks/experiments_bench.py [--runs 7]

Prints one row per experiment: the median and the fastest of ``--runs`` runs (after one
warm-up run), whether the median is under the 0.5 s target, and the headline figures.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_common import Bench, int_range, run
from labs.experiments import EXPERIMENTS

TARGET_S = 0.5

#: The headline figures shown per experiment (figure keys).
HEADLINES = {
    "amplification": ("leaf_hits", "factor", "leaf_hits_budget", "fewer"),
    "storm": ("burst_none", "burst_jitter", "peak_none", "peak_jitter"),
    "breaker": ("sick_none", "sick_breaker", "waiting_none", "waiting_breaker", "rejected"),
    "deadline": ("wasted_per_tier", "wasted_deadline", "saved"),
    "contention": (
        "calls_none",
        "calls_exponential",
        "calls_full",
        "calls_equal",
        "calls_decorrelated",
        "slowest",
    ),
    "metastable": ("peak_naive", "peak_chosen", "recovery_naive", "recovery_chosen"),
    "tipping_point": ("stable_line", "lowest_locked", "below_line"),
    "queueing": ("fifo_spike", "lifo_spike", "fifo_overload"),
}


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int_range(1, 1000), default=7,
                        help="timed runs per experiment (1 to 1,000, default 7)")  # fmt: skip
    return parser


def measure(args, bench: Bench) -> int:
    print(
        f"experiments at default size, median of {args.runs} runs after a warm-up "
        f"(Python {platform.python_version()}, {platform.machine()})"
    )
    print()
    header = f"{'experiment':<14} {'median s':>9} {'min s':>7}  {'< 0.5 s':<7}  headline figures"
    print(header)
    print("-" * len(header))
    all_fast = True
    for name, experiment in EXPERIMENTS.items():
        params = experiment.defaults()
        result = experiment.run(params)  # warm-up
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            result = experiment.run(params)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        fast = median < TARGET_S
        all_fast &= fast
        figures = "; ".join(
            f"{result.figure(key).label}: {result.figure(key).text}" for key in HEADLINES[name]
        )
        print(
            f"{name:<14} {median:>9.3f} {min(times):>7.3f}  {'yes' if fast else 'NO':<7}  {figures}"
        )
    return 0 if all_fast else 1


if __name__ == "__main__":
    run("experiments_bench", parser(), measure)
