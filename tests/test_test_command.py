"""The README's second command, `make test`, on a fresh copy with nothing to lean on.

Nothing answers at the Redis URL or the PostgreSQL URL it is given: it must start a private
Redis and a private PostgreSQL (the machine's binaries, initdb into a temporary directory),
say so, pass a small selection of tests in both its SQLite and its PostgreSQL run, and leave
nothing running. The copy's venv borrows this run's packages (tests/fresh_copy.py), so this
takes seconds; tests/test_run_command.py builds a venv from scratch.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.fresh_copy import (
    clean_environment,
    copy_repository,
    have_make,
    linked_venv,
    pid_alive,
    processes_under,
)

#: One model test (marked postgres: it runs in both phases) and one engine test on Redis.
SELECTION = (
    "tests/labs/test_models.py::test_join_code_is_unique_in_the_database "
    "tests/engine/test_redis_store.py::test_a_stale_generation_changes_nothing_in_redis"
)
TIMEOUT_S = 240


def unused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_make_test_starts_its_own_redis_and_postgresql_and_stops_them(tmp_path):
    if not have_make():
        pytest.fail("make is not installed")
    copy = tmp_path / "fresh-failure-lab"
    copy.mkdir()
    copy_repository(copy)
    linked_venv(copy)
    redis_url = f"redis://127.0.0.1:{unused_port()}"
    pg_url = f"postgres://postgres@127.0.0.1:{unused_port()}/failurelab"
    env = clean_environment()
    env.update(REDIS_URL=redis_url, LAB_TEST_DATABASE_URL=pg_url)
    log = tmp_path / "make-test.log"

    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["make", "test", f"ARGS={SELECTION}"],
            cwd=copy, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        try:
            code = proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"make test did not finish in {TIMEOUT_S} s:\n{log.read_text()[-4000:]}")
        output = log.read_text()
        assert code == 0, output[-6000:]

        assert f"nothing answers at {redis_url}" in output
        assert "STARTED a private redis-server at redis://127.0.0.1:" in output
        assert f"nothing answers at {pg_url}" in output
        started = re.search(
            r"STARTED a private server \(\S+/postgres, pid (\d+).*?\) at (\S+), data in (\S+) ",
            output,
        )
        assert started, output[-4000:]
        pg_pid, private_pg, data_dir = int(started.group(1)), started.group(2), started.group(3)
        assert private_pg != pg_url
        assert f"DATABASE_URL={private_pg}" in output

        # Both phases ran the selection and passed.
        assert "1/2 the whole suite (SQLite)" in output
        assert "2/2 model and service tests on PostgreSQL" in output
        results = re.findall(r"=+ (\d+) passed.* in [\d.]+s", output)
        assert [int(n) for n in results] == [2, 1], output[-4000:]

        # Everything it started is gone: PostgreSQL, its directory, the Redis it started.
        deadline = time.monotonic() + 10
        while (pid_alive(pg_pid) or processes_under(str(copy))) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not pid_alive(pg_pid), "the private PostgreSQL still runs"
        assert not Path(data_dir).exists(), "the private PostgreSQL's directory is still there"
        assert processes_under(str(copy)) == []
        assert "stopping a private Redis" in output
        assert "stopping a private PostgreSQL" in output
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid, _ in processes_under(str(copy)):  # only what this test started
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _load_test_script():
    import importlib.util
    import sys

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "scripts"))
    try:
        spec = importlib.util.spec_from_file_location("lab_test_script", root / "scripts/test.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(root / "scripts"))
    return module


def test_a_stop_while_a_part_starts_is_raised_once_the_part_holds_its_pytest(monkeypatch, tmp_path):
    """A stop signal between the fork and ``part.proc`` being set would leave a pytest that
    nobody stops (a CI run of the test below once found one): the part must hold its process
    before the stop is raised."""
    script = _load_test_script()
    monkeypatch.setattr(script, "ROOT", tmp_path)
    real_popen = subprocess.Popen
    children = []

    def popen_then_stop(cmd, **kwargs):
        child = real_popen(["sleep", "60"], start_new_session=True)
        children.append(child)
        os.kill(os.getpid(), signal.SIGTERM)  # the stop arrives before Popen returns
        for _ in range(50):
            time.sleep(0.01)  # the moment Python needs to run the handler
        return child

    monkeypatch.setattr(script.subprocess, "Popen", popen_then_stop)
    part = script.Part("the-rest", ["-q"])
    try:
        with (
            script.services.raise_on_stop_signals(lambda n: script.Stop(signal.Signals(n).name)),
            pytest.raises(script.Stop),
        ):
            script.start_part(part, dict(os.environ))
        assert part.proc is children[0]
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_no_browser_to_be_had_fails_naming_it(monkeypatch, capsys):
    script = _load_test_script()
    monkeypatch.delenv("LAB_SKIP_BROWSER_TESTS", raising=False)
    monkeypatch.setattr(script, "DEBIAN_CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setattr(script, "playwright_chromium", lambda: None)
    monkeypatch.setattr(script, "selects_browser_tests", lambda args, env: True)
    ran = []

    def failing_install(cmd, **kwargs):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 1)

    monkeypatch.setattr(script.subprocess, "run", failing_install)
    assert script.ensure_browser([], {}) is False
    assert ran and ran[0][-3:] == ["playwright", "install", "chromium"]
    err = capsys.readouterr().err
    assert "no Chromium for the browser tests" in err and "LAB_SKIP_BROWSER_TESTS=1" in err


def test_browser_tests_are_skipped_only_when_asked_and_loudly(monkeypatch, capsys):
    script = _load_test_script()
    monkeypatch.setenv("LAB_SKIP_BROWSER_TESTS", "1")
    assert script.ensure_browser([], {}) is True
    assert "SKIPPING THE BROWSER TESTS" in capsys.readouterr().out


def test_no_browser_needed_when_no_browser_test_is_selected(monkeypatch):
    script = _load_test_script()
    monkeypatch.delenv("LAB_SKIP_BROWSER_TESTS", raising=False)
    monkeypatch.setattr(script, "DEBIAN_CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setattr(script, "playwright_chromium", lambda: None)
    monkeypatch.setattr(script, "selects_browser_tests", lambda args, env: False)
    assert script.ensure_browser(["tests/test_settings.py"], {}) is True


def test_the_parts_hold_every_test_file_once():
    script = _load_test_script()
    files = script.test_files()
    parts = script.split_suite(files)
    held = [path for paths in parts.values() for path in paths]
    assert sorted(held) == files and len(set(held)) == len(held)
    assert all(parts.values()), parts
    assert parts["browser"] and all(p.startswith("tests/e2e/") for p in parts["browser"])
    assert not any(p.startswith("tests/integration/") for p in parts["the-rest"])


def test_test_paths_among_the_arguments_keep_the_run_serial():
    script = _load_test_script()
    assert script.names_tests(["-x", "tests/labs/test_models.py::test_x"])
    assert not script.names_tests(["-x", "-k", "admin"])


PARALLEL_SELECTION = "-k test_join_code_is_unique_in_the_database"


def _start_make_test(tmp_path):
    copy = tmp_path / "fresh-failure-lab"
    copy.mkdir()
    copy_repository(copy)
    linked_venv(copy)
    env = clean_environment()
    # A private PostgreSQL: the run that runs this test may use the machine's test database.
    env.update(
        LAB_SKIP_BROWSER_TESTS="1",
        REDIS_URL=f"redis://127.0.0.1:{unused_port()}",
        LAB_TEST_DATABASE_URL=f"postgres://postgres@127.0.0.1:{unused_port()}/failurelab",
    )
    log = tmp_path / "make-test.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["make", "test", f"ARGS={PARALLEL_SELECTION}"],
            cwd=copy, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    return copy, proc, log


def _nothing_left(copy, proc):
    deadline = time.monotonic() + 20
    while processes_under(str(copy)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = processes_under(str(copy))
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    for pid, _ in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_make_test_runs_its_parts_side_by_side_each_with_its_own_redis(tmp_path):
    if not have_make():
        pytest.fail("make is not installed")
    copy, proc, log = _start_make_test(tmp_path)
    try:
        code = proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        code = None
    left = _nothing_left(copy, proc)
    output = log.read_text()
    assert code == 0, output[-6000:]
    assert not left, left
    for part in ("integration-a-r", "integration-s-z", "browser", "the-rest", "postgresql"):
        assert re.search(
            rf"{part}: STARTED a private redis-server at redis://127.0.0.1:\d+", output
        )
        assert (copy / "artifacts" / f"test-{part}.log").is_file()
        assert re.search(rf"^\[test\] {part} +passed ", output, re.M), output[-4000:]
    # The selection is one test, marked postgres: it ran in the SQLite part that holds it and
    # in the PostgreSQL part; the other parts selected nothing, which is no failure here.
    assert re.search(r"^\[test\] the-rest +passed +\d+ +1 passed", output, re.M), output[-4000:]
    assert re.search(r"^\[test\] postgresql +passed +\d+ +1 passed", output, re.M), output[-4000:]
    assert output.count("stopping a private Redis") == 5, output[-4000:]


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_make_test_stopped_while_its_parts_run_leaves_nothing(tmp_path):
    if not have_make():
        pytest.fail("make is not installed")
    copy, proc, log = _start_make_test(tmp_path)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while "postgresql: pytest" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=TIMEOUT_S)
    finally:
        left = _nothing_left(copy, proc)
    output = log.read_text()
    assert code != 0, output[-4000:]
    assert "interrupted: letting every part stop its servers" in output, output[-4000:]
    assert not left, f"left running: {left}\n{output[-4000:]}"
