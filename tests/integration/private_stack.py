"""A whole lab on servers one test owns, for the restart drills (docs/operations.md).

:class:`PgStack` starts a PostgreSQL of the test's own (``scripts.services.PrivatePostgres``
on a free port), migrates it, writes a class, a scenario, a student and her session into it
(``manage.py shell`` in a child process: the test's own database is not this one), and starts
workers and daphne pointed at it (and at a Redis of the test's own when given). The test
restarts the servers under them and reads the outcome straight from the database with
psycopg: what the database holds is what the pages must show.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import psycopg
import pytest

from scripts import services
from tests.integration.conftest import ROOT, DaphneProcess, WorkerProcess, subprocess_env

SETUP = """
import json
from django.contrib.auth import get_user_model
from django.test import Client
from labs.models import Classroom, Membership, Scenario
from labs.services import lab
spec = json.loads({spec!r})
User = get_user_model()
student = User.objects.create_user("rita", password="not-used-here")
teacher = User.objects.create_user("teo", password="not-used-here", is_staff=True)
room = Classroom.objects.create(name="Restart drills", join_code="RESTART1")
Membership.objects.create(user=student, classroom=room, role=Membership.Role.STUDENT)
Membership.objects.create(user=teacher, classroom=room, role=Membership.Role.INSTRUCTOR)
scenario = Scenario.objects.create(slug="restarts", title="Restarts", script=spec["script"])
room.scenarios.add(scenario)
session = lab.session_open(user=student, classroom=room, scenario=scenario)
cookies = {{}}
for name, user in (("student", student), ("teacher", teacher)):
    client = Client()
    client.force_login(user)
    cookies[name] = client.cookies["sessionid"].value
print("SETUP " + json.dumps({{"session": session.pk, "classroom": room.pk, "cookies": cookies}}))
"""


class PgStack:
    """A private PostgreSQL (and the processes of the lab pointed at it) for one test."""

    def __init__(self, tmp_path: Path, redis_url: str | None = None) -> None:
        bin_dir = services.find_postgres_bin()
        if bin_dir is None:
            pytest.fail("the restart drills need the PostgreSQL binaries (initdb, postgres)")
        self.tmp_path = tmp_path
        self.procs = services.Processes(services.Output("drill"))
        self.pg = services.PrivatePostgres(self.procs, bin_dir)
        self.pg.start()
        services.ensure_database(self.pg.url, say=lambda _m: None)
        self.url = self.pg.url
        self.env = {**subprocess_env(), "DATABASE_URL": self.url}
        self.env.pop("LAB_SQLITE_PATH", None)
        if redis_url is not None:
            self.env["REDIS_URL"] = redis_url.rsplit("/", 1)[0]
        self.workers: list[WorkerProcess] = []
        self.webs: list[DaphneProcess] = []
        self._manage("migrate", "--noinput", "-v", "0")

    def _manage(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, input=stdin,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        return done.stdout

    def seed(self, script: dict) -> dict:
        """A student's session of a scenario with ``script``; returns its ids and the
        student's and the instructor's session cookies."""
        code = SETUP.format(spec=json.dumps({"script": script}))
        out = self._manage("shell", "-c", code)
        line = next(ln for ln in out.splitlines() if ln.startswith("SETUP "))
        return json.loads(line.removeprefix("SETUP "))

    def worker(self, concurrency: int = 8, **env: str) -> WorkerProcess:
        worker = WorkerProcess(
            self.tmp_path / f"worker-{len(self.workers)}.log", concurrency, {**self.env, **env}
        )
        self.workers.append(worker)
        return worker

    def web(self) -> DaphneProcess:
        web = DaphneProcess(self.tmp_path / f"daphne-{len(self.webs)}.log", env=self.env)
        self.webs.append(web)
        return web

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Rows of ``sql`` on the private database (a connection of its own each time)."""
        with psycopg.connect(self.url, connect_timeout=10, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def close(self) -> None:
        for proc in [*self.webs, *self.workers]:
            proc.stop()
        self.procs.stop_all()
        self.pg.remove()


def http_get(base_url: str, path: str, cookie: str, timeout: float = 60) -> tuple[int, str]:
    """GET ``path`` with the session cookie; (status, body)."""
    host, port = base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", path, headers={"Cookie": f"sessionid={cookie}"})
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


def http_post(
    base_url: str, path: str, cookie: str, data: dict, timeout: float = 60
) -> tuple[int, str]:
    """An htmx POST of ``data`` with the session cookie and a CSRF token; (status, body)."""
    token = "t" * 32
    host, port = base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(
            "POST",
            path,
            body=urlencode(data),
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Cookie": f"sessionid={cookie}; csrftoken={token}",
                "X-CSRFToken": token,
                "HX-Request": "true",
                "Origin": base_url,
            },
        )
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


def wait_until(predicate, timeout: float, message: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout}s waiting for {message}")
