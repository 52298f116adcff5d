"""Scale-out on one machine: two web processes and two workers on one Redis and PostgreSQL.

Two ``daphne`` processes and two ``celery worker`` processes (each with its journal-writer
process), started with the commands of ``lab_project.processes``, share the test run's Redis
and the PostgreSQL test database. Eight students' pages are spread over the two web
processes, and each student's Run burst is pressed through the *other* web process (an htmx
POST with the student's session cookie and a CSRF token). Two instructor dashboards, one on
each web process, watch the class. Every burst has ten concurrent callers against a
dependency that is down, so every session's breaker goes open, half-open, open again, round
after round, on whichever worker took the burst. The test checks:

- every page gets every journal row of its session, exactly once, whichever process wrote it;
- each dashboard gets live updates of every session, up to each session's last row;
- bursts ran on both workers, and each session admitted exactly one half-open probe per
  half-open period (the probe lease in Redis), with the other callers refused meanwhile;
- the dependency's attempt counter in Redis equals the attempts in the journal.

Runs on PostgreSQL only (``make test`` runs it in its PostgreSQL step); on SQLite it is
skipped and says so. No assertion on wall-clock speed: every wait is a generous deadline.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import secrets
import string
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test import Client

from labs.live import runtime
from labs.models import Burst, JournalEvent
from labs.services.lab import session_open
from tests.conftest import make_instructor, make_student
from tests.integration.conftest import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.postgres,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]

SESSIONS = 8
ROUNDS = 4
SIZE, CONCURRENCY = 20, 10
#: Per worker: with prefetch 1, a worker holds at most this many bursts, so eight bursts at
#: once cannot all land on one worker.
WORKER_CONCURRENCY = 4
COOLDOWN_MS = 100
SCRIPT = {
    "name": "scale-out",
    "seed": 5,
    # A probe's attempt lasts longer than the cooldown, so the other nine callers all ask
    # while it is in flight and are refused (rejected_half_open).
    "dependency": {"mode": "down", "latency_ms": 150},
    "policy": {
        "max_attempts": 1,
        "backoff_base_ms": 10,
        "backoff_cap_ms": 100,
        "jitter": "none",
        "nesting": "breaker_outside",
        "breaker": {
            "kind": "consecutive",
            "failure_threshold": 2,
            "cooldown_ms": COOLDOWN_MS,
            "half_open_max_probes": 1,
            "success_threshold": 1,
        },
    },
    "steps": [{"burst": SIZE, "concurrency": CONCURRENCY}],
}


@pytest.fixture(autouse=True)
def _postgres_only():
    if connection.vendor != "postgresql":
        pytest.fail(
            "scale-out needs PostgreSQL (four processes and two journal writers on one "
            "database): make test runs it in its PostgreSQL step; or set "
            "DATABASE_URL=postgres://... and run pytest -m postgres"
        )


# --- websocket clients, in an event loop on a thread of their own ----------------------------


@dataclass
class Socket:
    """One websocket client: every JSON message it got, in order."""

    url: str
    origin: str
    cookie: str
    messages: list[dict] = field(default_factory=list)
    opened: threading.Event = field(default_factory=threading.Event)
    error: str = ""

    def of_type(self, kind: str) -> list[dict]:
        return [m for m in list(self.messages) if m.get("type") == kind]


class Sockets:
    """Websocket clients (the ``websockets`` package, as a browser's page would connect) run
    in an asyncio loop on a thread, so the test thread stays free for the ORM."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.tasks: list = []

    def open(self, base_url: str, path: str, cookie: str) -> Socket:
        ws_url = base_url.replace("http://", "ws://") + path
        sock = Socket(ws_url, base_url, cookie)
        self.tasks.append(asyncio.run_coroutine_threadsafe(self._run(sock), self.loop))
        return sock

    @staticmethod
    async def _run(sock: Socket) -> None:
        from websockets.asyncio.client import connect

        try:
            async with connect(
                sock.url,
                origin=sock.origin,
                additional_headers={"Cookie": f"sessionid={sock.cookie}"},
                max_size=None,
                ping_interval=None,
            ) as ws:
                async for raw in ws:
                    sock.messages.append(json.loads(raw))
                    sock.opened.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # reported by the test; a page here never reconnects
            sock.error = repr(exc)
            sock.opened.set()

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        time.sleep(0.2)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def sockets():
    clients = Sockets()
    yield clients
    clients.close()


# --- helpers ---------------------------------------------------------------------------------


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def press_run_burst(presses: list[tuple[str, int, str]]) -> list[int]:
    """Press Run burst on every page at once: one htmx POST per (web process base URL,
    session id, session cookie), each with a CSRF token, released together by a barrier.
    Returns the HTTP statuses."""
    alphabet = string.ascii_letters + string.digits  # Django's CSRF token alphabet
    token = "".join(secrets.choice(alphabet) for _ in range(32))
    barrier = threading.Barrier(len(presses))
    statuses: list[int] = []

    def press(base_url: str, session_id: int, cookie: str) -> None:
        host, port = base_url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            conn.connect()
            barrier.wait(60)
            conn.request(
                "POST",
                f"/sessions/{session_id}/bursts/",
                body=urlencode({"size": SIZE, "concurrency": CONCURRENCY}),
                headers={
                    "Content-Type": "application/x-www-form-urlencoded",
                    "Cookie": f"sessionid={cookie}; csrftoken={token}",
                    "X-CSRFToken": token,
                    "HX-Request": "true",
                    "Origin": base_url,
                },
            )
            response = conn.getresponse()
            response.read()
            statuses.append(response.status)
        finally:
            conn.close()

    threads = [threading.Thread(target=press, args=p) for p in presses]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    return statuses


def journal(session_id: int) -> list[JournalEvent]:
    return list(JournalEvent.objects.filter(session_id=session_id).order_by("seq"))


# --- the test --------------------------------------------------------------------------------


def test_two_web_processes_and_two_workers_share_pushes_dashboards_and_probes(
    daphne_process, worker_process, scenario, classroom, sockets
):
    scenario.script = SCRIPT
    scenario.save()
    webs = [daphne_process(), daphne_process()]
    workers = [worker_process(WORKER_CONCURRENCY), worker_process(WORKER_CONCURRENCY)]

    instructor = make_instructor("teacher_scale", classroom)
    students = [make_student(f"student{i}", classroom) for i in range(SESSIONS)]
    sessions = [session_open(user=s, classroom=classroom, scenario=scenario) for s in students]
    cookies = [session_cookie(s) for s in students]

    # Page i on web process i % 2; its Run burst goes through the other one.
    pages = [
        sockets.open(webs[i % 2].base_url, f"/ws/sessions/{s.pk}/?after=0", cookies[i])
        for i, s in enumerate(sessions)
    ]
    teacher = session_cookie(instructor)
    dashboards = [
        sockets.open(web.base_url, f"/ws/classes/{classroom.pk}/", teacher) for web in webs
    ]
    for sock in [*pages, *dashboards]:
        assert sock.opened.wait(60), f"no first message on {sock.url}"
        assert not sock.error, (sock.url, sock.error)
    assert all(p.of_type("state") for p in pages)
    assert all(d.of_type("snapshot") for d in dashboards)

    ids = [s.pk for s in sessions]
    for round_no in range(ROUNDS):
        presses = [(webs[(i + 1) % 2].base_url, s.pk, cookies[i]) for i, s in enumerate(sessions)]
        statuses = press_run_burst(presses)
        assert statuses == [200] * SESSIONS, (round_no, statuses)
        wait_for(
            lambda: (
                not Burst.objects.filter(
                    session_id__in=ids, status__in=Burst.ACTIVE_STATUSES
                ).exists()
            ),
            timeout=180,
            interval=0.2,
            message=f"round {round_no}'s bursts to finish",
        )
        # Let every breaker's cooldown pass (five times over), so the next round's first
        # callers find it due for a half-open probe.
        time.sleep(5 * COOLDOWN_MS / 1000)

    bursts = list(Burst.objects.filter(session_id__in=ids))
    assert len(bursts) == SESSIONS * ROUNDS
    assert {b.status for b in bursts} == {"done"}, [(b.pk, b.status, b.error) for b in bursts]

    # Both workers ran bursts (WORKER_ID is host:pid of the worker's main process).
    ran_on = Counter(b.worker.rsplit(":", 1)[1] for b in bursts)
    assert set(ran_on) == {str(w.proc.pid) for w in workers}, ran_on

    rows = {sid: journal(sid) for sid in ids}

    # Every page, on either web process, gets every row of its session exactly once,
    # including the rows the other web process wrote (burst_queued) and both workers' rows.
    def pages_complete() -> bool:
        for page, sid in zip(pages, ids, strict=True):
            got = [e["seq"] for m in page.of_type("events") for e in m["events"]]
            if sorted(set(got)) != [r.seq for r in rows[sid]]:
                return False
        return True

    wait_for(pages_complete, timeout=60, interval=0.2, message="every row on every page")
    for page in pages:
        got = [e["seq"] for m in page.of_type("events") for e in m["events"]]
        assert len(got) == len(set(got)), f"a row sent twice on {page.url}"
        assert not page.error, (page.url, page.error)

    # Each dashboard, whichever web process serves it, gets live updates of every session,
    # up to the session's last row.
    last = {sid: rows[sid][-1].seq for sid in ids}

    def dashboards_current() -> bool:
        for board in dashboards:
            seen: dict[int, int] = {}
            for update in board.of_type("session"):
                sid = update["session"]
                seen[sid] = max(seen.get(sid, 0), update["last_seq"] or 0)
            if any(seen.get(sid, 0) < last[sid] for sid in ids):
                return False
        return True

    wait_for(
        dashboards_current, timeout=60, interval=0.2, message="every session on both dashboards"
    )
    assert not any(d.error for d in dashboards)

    # Single-flight half-open probes: each half-open period of a session admitted exactly one
    # probe. Every move to half-open happens inside the admission that leases the probe, and
    # the probe's failure ends the period, so probes == periods unless two callers (threads of
    # a burst, or bursts on the two workers) were both let through in one period.
    refused_half_open = 0
    for sid in ids:
        periods = sum(1 for r in rows[sid] if r.kind == "transition" and r.state_to == "half_open")
        results = [r for r in rows[sid] if r.kind == "call_result"]
        probes = sum(1 for r in results if r.data.get("probe"))
        assert probes == periods, (sid, probes, periods)
        # After the first round, every round starts past the cooldown: a period each.
        assert periods >= ROUNDS - 1, (sid, periods)
        refused_half_open += sum(1 for r in results if r.outcome == "rejected_half_open")
        attempts = sum(1 for r in rows[sid] if r.kind == "attempt")
        exported = runtime.session_store(sid).export_state()
        assert exported["dependency"]["attempts"] == attempts, sid
    assert refused_half_open > 0  # other callers did ask while a probe was in flight
