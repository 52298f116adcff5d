"""``make test``: the whole test suite, then the model and service tests on PostgreSQL.

1. Creates the virtual environment if needed (scripts/bootstrap.py, shared with make run).
2. ``pytest``: every test, on the embedded SQLite database.
3. ``pytest -m postgres`` once more with DATABASE_URL pointing at PostgreSQL
   (LAB_TEST_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/failurelab; the
   database is created if missing, pytest-django creates and drops ``test_<name>``).
   LAB_SKIP_POSTGRES=1 skips this step, loudly.

Extra arguments go to both pytest runs (``make test ARGS="-x -k admin"``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bootstrap

ROOT = bootstrap.ROOT
DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/failurelab"


def say(message: str) -> None:
    print(f"[test] {message}", flush=True)


def ensure_database(url: str) -> None:
    """Create the database that ``url`` names if it does not exist."""
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


def pytest(args: list[str], env: dict[str, str]) -> int:
    cmd = [sys.executable, "-m", "pytest", *args]
    say(" ".join(cmd[2:]))
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def main() -> int:
    bootstrap.reexec_in_venv(__file__)
    extra = sys.argv[1:]
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("DATABASE_URL", None)  # the first run is the embedded default

    say("1/2 the whole suite (SQLite)")
    first = pytest(extra, env)
    if first not in (0,):
        say(f"the suite failed (exit {first})")
        return first

    if os.environ.get("LAB_SKIP_POSTGRES", "").strip().lower() in {"1", "true", "yes", "on"}:
        say("2/2 SKIPPED: LAB_SKIP_POSTGRES is set, the PostgreSQL run did not happen")
        return 0
    pg_url = os.environ.get("LAB_TEST_DATABASE_URL", "").strip() or DEFAULT_PG_URL
    say(f"2/2 model and service tests on PostgreSQL ({pg_url})")
    try:
        ensure_database(pg_url)
    except Exception as exc:
        say(f"PostgreSQL is not reachable at {pg_url}: {exc}")
        say("start it, or set LAB_TEST_DATABASE_URL (LAB_SKIP_POSTGRES=1 to skip)")
        return 1
    env["DATABASE_URL"] = pg_url
    second = pytest(["-m", "postgres", *extra], env)
    if second == 5:
        say("no test is marked postgres")
        return 1
    return second


if __name__ == "__main__":
    sys.exit(main())
