"""CPU one Run burst request costs in Django, measured in one process with nothing else running.

    .venv/bin/python benchmarks/run_burst_bench.py [--requests 60] [--profile 40]

Sets up like push_bench.py (its own SQLite file or DATABASE_URL, its own redis-server on a
free port, the deployed settings), creates one student and lab session per request, and
POSTs Run burst once per session through Django's test client, as htmx sends a click in the
burst form. No worker runs, so each burst stays queued; the Celery message goes to the
private broker.

Printed per request: CPU time of the thread that served it (``time.thread_time``, so other
processes on the machine do not count), wall time, and the number of SQL statements; then
what each of the two answers of a queued burst costs to render. This is
Django's part only: daphne's ASGI hop and its thread per request are not in it (push_bench's
``LAB_REQUEST_TIMING=true`` log has those, docs/scaling.md).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.update({"DJANGO_DEBUG": "false", "DJANGO_SECURE_SSL_REDIRECT": "false",
                   "DJANGO_SECURE_COOKIES": "false"})  # fmt: skip
from benchmarks import push_bench  # noqa: E402  (its setup: a private redis-server, a database)
from benchmarks.bench_common import Bench, int_range, pct, run  # noqa: E402


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int_range(1, 10_000), default=60, help="1 to 10,000")
    parser.add_argument("--profile", metavar="N", type=int_range(0, 1000), default=0,
                        help="print cProfile's N most expensive functions (cumulative) over "
                             "the timed requests")  # fmt: skip
    return parser


def measure(args, bench: Bench) -> None:
    push_bench.prepare(bench)
    push_bench.setup_django()
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    sessions = push_bench.make_sessions(2 * (args.requests + 5))
    sessions, socket_sessions = sessions[: args.requests + 5], sessions[args.requests + 5 :]
    warm, timed = sessions[:5], sessions[5:]
    cpu_ms, wall_ms, queries = [], [], []
    # One client: each new one builds its middleware again (whitenoise scans every
    # static file when it is built, as daphne does once at its first request).
    client = Client(HTTP_HOST="127.0.0.1")
    profiler = cProfile.Profile() if args.profile else None
    for n, (session_id, cookie) in enumerate(warm + timed):
        if profiler is not None and n == len(warm):
            profiler.enable()
        client.cookies[settings.SESSION_COOKIE_NAME] = cookie
        with CaptureQueriesContext(connection) as captured:
            cpu, wall = time.thread_time(), time.perf_counter()
            response = client.post(
                f"/sessions/{session_id}/bursts/", {"size": "20", "concurrency": "1"},
                HTTP_HX_REQUEST="true", HTTP_HX_TRIGGER="burst-form",
                HTTP_HX_TARGET="burst-form",
            )  # fmt: skip
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
        if response.status_code != 200:
            sys.exit(f"Run burst answered {response.status_code}: {response.content[:300]!r}")
        if n >= len(warm):
            cpu_ms.append(cpu * 1000)
            wall_ms.append(wall * 1000)
            queries.append(len(captured.captured_queries))
    if profiler is not None:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)
    db = "SQLite" if "sqlite" in settings.DATABASES["default"]["ENGINE"] else "PostgreSQL"
    print(f"run_burst_bench: {db}, {len(timed)} Run burst requests through Django's test "
          f"client, one per session (after {len(warm)} untimed)")  # fmt: skip
    print(f"{'':>10} {'p50':>7} {'mean':>7} {'max':>7}")
    for name, values in (("CPU ms", cpu_ms), ("wall ms", wall_ms), ("queries", queries)):
        mean = sum(values) / len(values)
        print(f"{name:>10} {pct(values, 0.5):7.2f} {mean:7.2f} {max(values):7.2f}")
    render_answers(timed[0][0])
    socket_clicks(socket_sessions, profile=args.profile)


def socket_clicks(sessions: list[tuple[int, str]], profile: int = 0) -> None:
    """Thread CPU of a click over the page's socket (``labs.clicks.socket_run_burst``, what
    the lab page's consumer runs in its actions' pool), one per session: the user read from
    the session's cookie, the ownership and limit checks, the burst queued (its transaction,
    the Celery message, the push). No daphne, no event loop: the click's own work."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from labs.clicks import socket_run_burst

    warm, timed = sessions[:5], sessions[5:]
    cpu_ms, queries = [], []
    profiler = cProfile.Profile() if profile else None
    for n, (session_id, cookie) in enumerate(warm + timed):
        if profiler is not None and n == len(warm):
            profiler.enable()
        with CaptureQueriesContext(connection) as captured:
            cpu = time.thread_time()
            reply = socket_run_burst(cookie, session_id, {"size": 20, "concurrency": 1})
            cpu = time.thread_time() - cpu
        if reply.get("status") != 200:
            sys.exit(f"a socket click answered {reply}")
        if n >= len(warm):
            cpu_ms.append(cpu * 1000)
            queries.append(len(captured.captured_queries))
    if profiler is not None:
        profiler.disable()
        stats = pstats.Stats(profiler)
        print(f"socket clicks: {stats.total_calls} function calls for {len(timed)} clicks")
        stats.sort_stats("cumulative").print_stats(profile)
    print(f"a click over the socket ({len(timed)}, one per session):")
    for name, values in (("CPU ms", cpu_ms), ("queries", queries)):
        mean = sum(values) / len(values)
        print(f"{name:>10} {pct(values, 0.5):7.2f} {mean:7.2f} {max(values):7.2f}")


def render_answers(session_id: int, repeat: int = 500) -> None:
    """Thread CPU of the two answers a successful Run burst can render: the whole burst form
    (a step's Do it, or a form that showed errors) and its message line alone (a click in the
    form). The request's figures above are too noisy on a shared machine to show the gap."""
    from django.middleware.csrf import get_token
    from django.template.loader import render_to_string
    from django.test import RequestFactory

    from labs.forms.lab import BurstForm
    from labs.models import LabSession

    session = LabSession.objects.get(pk=session_id)
    request = RequestFactory().post("/", {"size": "20", "concurrency": "1"})
    get_token(request)
    form = BurstForm(request.POST)
    form.is_valid()
    saved = "Burst 1 queued: 20 calls."
    print("answer rendered (thread CPU per render):")
    for partial, context in (
        ("burst-form", {"session": session, "burst_form": form, "burst_error": "", "saved": saved}),
        ("burst-message", {"session": session, "burst_error": "", "saved": saved}),
    ):
        name = f"labs/session.html#{partial}"
        for _ in range(50):
            render_to_string(name, context, request=request)
        cpu = time.thread_time()
        for _ in range(repeat):
            render_to_string(name, context, request=request)
        print(f"{partial:>14} {(time.thread_time() - cpu) / repeat * 1000:7.3f} ms")


if __name__ == "__main__":
    run("run_burst_bench", parser(), measure)
