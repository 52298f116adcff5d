"""Helpers every benchmark here shares (no Django at import time).

Import them as ``from benchmarks.bench_common import pct`` (each script puts the project root on
sys.path first).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Servers a benchmark starts run as deployed (docker-compose.yml): DJANGO_DEBUG=false, so no
#: query logging (with SQLite, DEBUG also runs a second query per query to quote its
#: parameters). Plain HTTP on 127.0.0.1, so no TLS redirect and no secure-only cookies.
SERVER_ENV = {
    "DJANGO_DEBUG": "false",
    "DJANGO_SECURE_SSL_REDIRECT": "false",
    "DJANGO_SECURE_COOKIES": "false",
}


def ensure_database() -> None:
    """When ``DATABASE_URL`` names a PostgreSQL database, create it if it does not exist; exit
    with a message naming the server when it does not answer."""
    import os

    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        return
    sys.path.insert(0, str(ROOT / "scripts"))
    import services  # scripts/services.py: what make test and make run use

    try:
        services.ensure_database(url)
    except Exception as exc:  # psycopg.OperationalError: no server, wrong credentials
        sys.exit(f"DATABASE_URL {url}: cannot reach its PostgreSQL server ({exc})")


def pct(values, q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank, no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def free_port() -> int:
    """A TCP port nobody listens on at the moment (127.0.0.1)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_private_redis(bench: str) -> tuple[subprocess.Popen, int]:
    """A ``redis-server`` of the benchmark's own on a free port (nothing saved), in a session
    of its own: other benchmarks and test runs on the machine use the shared one, and their
    brokers would take its tasks and their flushes its keys. Returns it and its port; exits
    naming what is missing when ``redis-server`` is not on PATH."""
    import shutil

    if not shutil.which("redis-server"):
        raise SystemExit(f"{bench} needs redis-server on PATH (it starts its own)")
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    return proc, port


def collect_static(env: dict[str, str]) -> None:
    """Production static files (a manifest) for servers started with ``SERVER_ENV``, as
    ``make run`` does for DJANGO_DEBUG=false."""
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"],
        cwd=ROOT, env=env, check=True,
    )  # fmt: skip
