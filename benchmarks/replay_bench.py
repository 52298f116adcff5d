"""Replay benchmark: what a 20-call replay or comparison costs the server. Prints one table.

    .venv/bin/python benchmarks/replay_bench.py [--runs N]

Rows (milliseconds, median and 95th percentile over ``--runs``):

* engine replay: :func:`labs.engine.replay.replay` of a recorded 20-call burst (a flaky
  dependency failing every attempt, 4 attempts per call, full jitter, threshold 20 so the
  breaker never opens: the most attempts a 20-call burst can make), in virtual time.
* engine compare: the same start state under two policies (:func:`compare`).
* what-if POST: the whole request through Django's test client (session middleware, the
  login, the selectors, both replays, the SVG timelines, the template), on a throwaway
  SQLite test database, with the settings the environment gives (DEBUG included); Redis is
  not touched by a replay.
* compare page GET: the tour scenario under two presets, the same way.

Target: under 50 ms each. A benchmark informs; no test asserts on these figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_common import Bench, int_range, pct, run  # noqa: E402

DEPENDENCY = {"mode": "flaky", "fail_count": 100, "latency_ms": 5}
POLICY = {"max_attempts": 4, "jitter": "full", "breaker": {"failure_threshold": 20}}


def timed(fn, runs: int) -> list[float]:
    fn()  # warm up
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int_range(1, 100_000), default=50, help="1 to 100,000")
    return parser


def measure(args, bench: Bench) -> None:

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab_project.settings")
    # A database of its own: the test suite's (db/test_db.sqlite3) may be in use by a run,
    # and creating the benchmark's test database would destroy it under that run.
    os.environ.setdefault(
        "LAB_TEST_DB_NAME", str(Path(__file__).resolve().parent.parent / "db" / "bench_db.sqlite3")
    )
    import django

    django.setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse

    from labs.engine import parse_dependency, parse_policy
    from labs.engine.replay import capture_start, compare, replay

    dependency = parse_dependency(DEPENDENCY).to_dict()
    policy = parse_policy(POLICY).to_dict()
    start = capture_start(
        dependency=dependency, policy=policy, store_state=None, now_us=1_700_000_000_000_000,
        rng_seed="7:1", size=20, concurrency=1, first_call=1, burst=1,
    )  # fmt: skip
    other = dict(policy, breaker=dict(policy["breaker"], failure_threshold=1))
    rows = [
        ("engine replay, 20 calls", timed(lambda: replay(start), args.runs)),
        ("engine compare, 2 x 20 calls", timed(lambda: compare(start, None, other), args.runs)),
    ]

    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0)
    try:
        from labs.journal import store as journal
        from labs.models import Burst
        from labs.services import lab
        from tests.conftest import make_classroom, make_scenario, make_student

        scenario = make_scenario("tour", title="The tour")
        room = make_classroom("Bench", join_code="BENCH001")
        room.scenarios.add(scenario)
        student = make_student("bench", room)
        session = lab.session_open(user=student, classroom=room, scenario=scenario)
        ran = replay(start)
        burst = Burst.objects.create(
            session=session, number=1, size=20, status=Burst.Status.DONE, first_call_no=1,
            start_state=start, summary=ran.summary,
        )  # fmt: skip
        journal.record(
            [
                journal.entry_from_event(
                    e, session_id=session.pk, classroom_id=room.pk, burst_id=burst.pk
                )
                for e in ran.events
            ]
        )
        client = Client()
        client.force_login(student)
        url = reverse("labs:burst_replay", args=[session.pk, 1])

        def post():
            answer = client.post(url, {"breaker_failure_threshold": "1"}, HTTP_HX_REQUEST="true")
            assert answer.status_code == 200, answer.status_code

        compare_url = reverse("labs:compare") + "?scenario=tour&seed=7&a=defaults&b=threshold-1"

        def get_compare():
            answer = client.get(compare_url)
            assert answer.status_code == 200, answer.status_code

        rows.append(("what-if POST (htmx), 20 calls", timed(post, args.runs)))
        rows.append(("compare page GET, tour x 2", timed(get_compare, args.runs)))
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)

    print(f"{'':<32}  {'median ms':>9}  {'p95 ms':>7}  {'target':>7}")
    print("-" * 62)
    for name, values in rows:
        print(
            f"{name:<32}  {statistics.median(values):>9.2f}  {pct(values, 0.95):>7.2f}  {'< 50':>7}"
        )
    print(f"({args.runs} runs each, after one warm-up)")


if __name__ == "__main__":
    run("replay_bench", parser(), measure)
