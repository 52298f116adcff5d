"""No process left behind by a benchmark, however it ends (benchmarks/bench_common.py).

Each script in benchmarks/ runs with ``--help`` and with an out-of-range argument: both end
in argparse, before anything starts (no redis-server, worker or daphne is even looked up: the
ones on PATH here only note that they were called). The scripts that start servers also run
a measurement that gets SIGTERM (as ``timeout`` sends it) a few seconds after their servers
started (one of them also Ctrl-C's SIGINT and a closed terminal's SIGHUP); every process they
started must be gone after they exit. An exception in the body is the in-process test below.

Each run happens under tests/adopter.py (tests/leftovers.py): whatever the script starts stays
a descendant of the adopter, also after the script exited and also in a process group or
session of its own, and carries the run's ``LAB_TEST_RUN_MARK`` in its environment, so a scan
of /proc after the exit finds whatever survived, as does a look at the script's own group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.leftovers import MARK, Adopted, in_group, new_mark

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"

#: script: (an out-of-range argument and the option the error must name)
# fmt: off
BAD_ARGUMENTS = {
    "burst_bench.py": (["--sessions", "0"], "--sessions"),
    "dashboard_bench.py": (["--students", "0"], "--students"),
    "engine_bench.py": (["--redis-url", "localhost"], "--redis-url"),
    "experiments_bench.py": (["--runs", "0"], "--runs"),
    "layer_probe.py": (["0"], "SESSIONS"),
    "push_bench.py": (["--calls", "21"], "--calls"),
    "replay_bench.py": (["--runs", "0"], "--runs"),
    "run_burst_bench.py": (["--requests", "0"], "--requests"),
    "shared_script_bench.py": (["--runs", "0"], "--runs"),
    "storm_bench.py": (["--rate", "21"], "--rate"),
    "storm_panel_bench.py": (["--rate", "0", "--classroom", "1", "--username", "u",
                              "--password", "p"], "--rate"),
    "wakeup_bench.py": (["--runs", "0"], "--runs"),
    "cpu_profile/report.py": (["profiles", "--top", "many"], "--top"),
}

#: script: (a run that lasts well beyond the SIGTERM, what must be running before it is sent)
RUNS = {
    "burst_bench.py": (["--sessions", "50", "--calls", "20", "--tour-runs", "20",
                        "--concurrency", "8"], ("redis-server", "celery")),
    "dashboard_bench.py": (["--students", "2", "--rows", "20", "--requests", "1",
                            "--bursting", "200", "--calls", "20", "--skip-browser"],
                           ("redis-server", "celery", "daphne")),
    "layer_probe.py": (["100"], ("redis-server", "celery")),
    "push_bench.py": (["--sessions", "30", "--rounds", "20", "--worker-concurrency", "8"],
                      ("redis-server", "celery", "daphne")),
    "run_burst_bench.py": (["--requests", "5000"], ("redis-server",)),
    "shared_script_bench.py": (["--runs", "100", "--attempts", "1000000"], ("redis-server",)),
    "storm_bench.py": (["--sessions", "2", "--rate", "1", "--for", "300", "--workers", "2",
                        "--concurrency", "4"], ("redis-server", "celery")),
    "wakeup_bench.py": (["--runs", "100000", "--hub-seconds", "600"], ("redis-server",)),
}
# fmt: on

#: Seconds from the servers' start to the signal: a few into the run, wherever it is; less
#: where the run after its last server starts is short (the dashboard bench's burst phase
#: once ended within 6 s, and the signal met its cleanup).
MIDWAY_S = {"dashboard_bench.py": 1.5}
#: Generous: a loaded 2-core machine boots Django, migrates and starts workers slowly.
SERVERS_UP_TIMEOUT_S = 240
EXIT_TIMEOUT_S = 150


def test_every_script_is_covered():
    scripts = {
        str(p.relative_to(BENCH))
        for p in BENCH.rglob("*.py")
        if p.name not in {"bench_common.py", "sitecustomize.py", "__init__.py"}
    }
    assert scripts == set(BAD_ARGUMENTS)


UNSET = {"DATABASE_URL", "LAB_SQLITE_PATH", "BENCH_REDIS_URL", "REDIS_DB_BASE",
         "DJANGO_ALLOW_ASYNC_UNSAFE"}  # fmt: skip


def bench_env(mark: str, tmp_path: Path) -> dict[str, str]:
    """This test run's environment without its database and Redis settings (a benchmark
    picks its own), with the run's mark."""
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env[MARK] = mark
    env["PYTHONUNBUFFERED"] = "1"
    env["TMPDIR"] = str(tmp_path)  # the benchmarks' logs and SQLite files
    return env


def recording_path(tmp_path: Path) -> tuple[str, Path]:
    """A PATH whose redis-server, celery, daphne, postgres and initdb only note their call."""
    shims, calls = tmp_path / "shims", tmp_path / "calls.log"
    shims.mkdir()
    for name in ("redis-server", "celery", "daphne", "postgres", "initdb", "chromium"):
        shim = shims / name
        shim.write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\nexit 1\n')
        shim.chmod(0o755)
    return f"{shims}{os.pathsep}{os.environ.get('PATH', '')}", calls


def run_to_the_end(script: str, args: list[str], tmp_path: Path) -> tuple[int, str]:
    """Run a script to its end; fail when it started anything (seen running meanwhile,
    left behind, or a server command called). Returns its exit code and output."""
    env = bench_env(new_mark(), tmp_path)
    env["PATH"], calls = recording_path(tmp_path)
    log = tmp_path / "out.log"
    run = Adopted([sys.executable, str(BENCH / script), *args], env=env, cwd=ROOT, log=log,
                  status=tmp_path / "status")  # fmt: skip
    seen, left = [], []
    try:
        deadline = time.monotonic() + 120
        while (code := run.poll()) is None:  # anything started meanwhile, even briefly
            seen += run.running()
            if time.monotonic() > deadline:
                pytest.fail(f"{script} {' '.join(args)} did not end in 120 s")
            time.sleep(0.02)
        left = run.left_behind()
    finally:
        run.close()
    assert not left, f"left running: {left}"
    assert not seen, f"started: {seen}"
    assert not calls.exists(), f"called: {calls.read_text()}"
    return code, log.read_text()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", sorted(BAD_ARGUMENTS))
def test_help_starts_nothing(script, tmp_path):
    code, output = run_to_the_end(script, ["--help"], tmp_path)
    assert code == 0, output
    assert output.startswith("usage:"), output


@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", sorted(BAD_ARGUMENTS))
def test_an_out_of_range_argument_is_refused_before_anything_starts(script, tmp_path):
    args, option = BAD_ARGUMENTS[script]
    code, output = run_to_the_end(script, args, tmp_path)
    assert code == 2, output
    assert f"error: argument {option}" in output, output


#: storm_bench's other options: each refused, naming it, before anything starts.
STORM_BENCH_BAD = {
    "pages": (["--pages", "201"], "--pages"),
    "servers": (["--servers", "65"], "--servers"),
    "storm with a policy": (["--storm", "--policy", "naive"], "--policy"),
    "tiers": (["--tiers", "7"], "--tiers"),
    "storm with tiers": (["--storm", "--tiers", "3"], "--tiers"),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", sorted(STORM_BENCH_BAD))
def test_storm_bench_refuses_its_other_options_before_anything_starts(case, tmp_path):
    args, option = STORM_BENCH_BAD[case]
    code, output = run_to_the_end("storm_bench.py", args, tmp_path)
    assert code == 2, output
    assert f"error: argument {option}" in output, output


@pytest.mark.timeout(SERVERS_UP_TIMEOUT_S + EXIT_TIMEOUT_S + 120)
@pytest.mark.parametrize("script", sorted(RUNS))
def test_sigterm_midway_stops_every_server_it_started(script, tmp_path):
    stop_midway(script, signal.SIGTERM, tmp_path)


@pytest.mark.timeout(SERVERS_UP_TIMEOUT_S + EXIT_TIMEOUT_S + 120)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=["Ctrl-C", "SIGHUP"])
def test_ctrl_c_and_a_closed_terminal_stop_them_too(sig, tmp_path):
    stop_midway("storm_bench.py", sig, tmp_path)


def stop_midway(script: str, sig: signal.Signals, tmp_path: Path) -> None:
    """Run ``script`` until its servers run, send ``sig`` to its process group, and check
    that it exits with 128 + the signal's number, having stopped everything."""
    args, wanted = RUNS[script]
    log = tmp_path / "bench.log"
    run = Adopted([sys.executable, str(BENCH / script), *args], env=bench_env(new_mark(), tmp_path),
                  cwd=ROOT, log=log, status=tmp_path / "status")  # fmt: skip
    seen: list[tuple[int, str]] = []
    left: list[tuple[int, str]] = []
    try:
        # Its servers come up (as processes; ready or not): then the signal.
        deadline = time.monotonic() + SERVERS_UP_TIMEOUT_S
        while not all(any(name in cmd for _, cmd in seen) for name in wanted):
            if run.poll() is not None:
                pytest.fail(f"{script} ended ({run.poll()}) before its servers ran:\n"
                            f"{log.read_text()[-3000:]}")  # fmt: skip
            if time.monotonic() > deadline:
                pytest.fail(f"{script}: {wanted} not all running after "
                            f"{SERVERS_UP_TIMEOUT_S} s: {seen}\n{log.read_text()[-3000:]}")  # fmt: skip
            time.sleep(0.2)
            seen = run.running()
        time.sleep(MIDWAY_S.get(script, 6))
        assert run.poll() is None, log.read_text()[-3000:]
        os.killpg(run.pid, sig)  # as `timeout` (or a terminal) does: the command's group
        code = run.wait(EXIT_TIMEOUT_S)
        if code is None:
            pytest.fail(f"{script} did not exit {EXIT_TIMEOUT_S} s after {sig.name}:\n"
                        f"{log.read_text()[-3000:]}")  # fmt: skip
        left = run.left_behind()
    finally:
        run.close()
    output = log.read_text()
    assert not left, f"left running after {sig.name}: {left}\n{output[-3000:]}"
    assert code == 128 + sig, output[-3000:]
    assert f"{sig.name} received: everything it started is stopped" in output, output[-3000:]


def test_an_exception_in_the_body_stops_every_child_and_what_it_forked():
    from benchmarks.bench_common import Bench

    with pytest.raises(RuntimeError, match="the measurement failed"), Bench("t") as bench:
        leader = bench.start("a server", ["sh", "-c", "sleep 300 & sleep 300"])
        deadline = time.monotonic() + 30
        while len(in_group(leader.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(in_group(leader.pid)) == 3  # sh and its two sleeps
        raise RuntimeError("the measurement failed")
    assert leader.poll() is not None
    # The group was sent SIGKILL on the way out; the kernel takes a moment to end what the
    # leader forked on a loaded machine.
    deadline = time.monotonic() + 15
    while in_group(leader.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert in_group(leader.pid) == []
    assert signal.getsignal(signal.SIGTERM) is not None  # the handlers are given back


def test_a_stop_that_surfaces_as_another_error_still_exits_as_the_stop(tmp_path):
    """The signal may land inside code that turns the stop into its own error (asyncio's
    websockets close the connection and the sender sees ``ConnectionClosedError``): the run
    still ends as a stop, 128 + SIGTERM, not as a failed measurement."""
    script = tmp_path / "bench.py"
    script.write_text(
        "import argparse, os, signal, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from benchmarks import bench_common\n"
        "def body(args, bench):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "    except BaseException as exc:\n"
        "        raise ConnectionError('the connection closed') from exc\n"
        "    return 0\n"
        "bench_common.run('t', argparse.ArgumentParser(), body)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "SIGTERM received: everything it started is stopped" in done.stderr


@pytest.mark.timeout(300)
def test_the_wakeup_bench_runs_to_its_hub_floor_table(tmp_path):
    """A short run of the whole script, to its last table: the engine hub it measures is
    imported only there (with Django set up first), where a stop test never reaches."""
    env = bench_env(new_mark(), tmp_path)
    done = subprocess.run(
        [sys.executable, str(BENCH / "wakeup_bench.py"), "--runs", "3", "--hub-seconds", "0.2"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    table = done.stdout.split("the engine hub's floor", 1)[1].splitlines()[2:]
    rates = [int(row.split()[0]) for row in table if row.strip()]
    assert rates == [100, 300, 1000, 3000], done.stdout
    assert all(int(row.split()[1]) > 0 for row in table if row.strip()), done.stdout
