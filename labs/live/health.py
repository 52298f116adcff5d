"""The lab's health, for ``/healthz``: the database, Redis, the broker, a live worker and its
journal writer's lag, read from the beats every worker records in the broker's Redis
(``labs.worker.beat``): ``WORKERS_KEY`` (a sorted set, worker -> time of its last beat) and
``WRITER_LAG_KEY`` (a hash, worker -> seconds). Redis rather than the metrics files, so a web
process sees workers on other machines too.

:func:`run_checks` makes three round trips at most (a query, two Redis pipelines), each bounded
by ``CHECK_TIMEOUT`` seconds, and reports statuses, counts and durations only: no address,
host name, worker name or error text, since ``/healthz`` needs no login.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

import redis
from django.conf import settings
from django.db import connection
from redis.backoff import NoBackoff
from redis.retry import Retry

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 5.0
#: A worker whose last beat is older than this is not counted as live.
WORKER_STALE_SECONDS = 30.0
#: The writer is unhealthy when a flush takes longer than this.
WRITER_MAX_LAG_SECONDS = 5.0
#: A flush still unanswered after this long is recorded as timed out (lag -1).
WRITER_FLUSH_TIMEOUT = 10.0
#: Connect and read timeout of every Redis call a check makes.
CHECK_TIMEOUT = 1.0

WORKERS_KEY = "failurelab:ops:workers"
WRITER_LAG_KEY = "failurelab:ops:writer-lag"
#: Both keys expire this long after the last beat of any worker.
KEY_TTL_SECONDS = 3600

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"

_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def redis_client(url: str) -> redis.Redis:
    """A client for ``url`` that fails within CHECK_TIMEOUT and does not retry: a health
    check must answer quickly, above all when Redis does not."""
    with _clients_lock:
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = redis.Redis.from_url(
                url,
                socket_timeout=CHECK_TIMEOUT,
                socket_connect_timeout=CHECK_TIMEOUT,
                retry=Retry(NoBackoff(), 0),
            )
        return client


# --- Anywhere -----------------------------------------------------------------------------


def _timed(check) -> dict[str, Any]:
    started = time.monotonic()
    try:
        result = check() or {}
        result.setdefault("status", "ok")
    except Exception as exc:
        result = {"status": "fail", "error": type(exc).__name__}
    result["ms"] = round((time.monotonic() - started) * 1000, 1)
    return result


def _database() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {}


def _redis_check() -> dict[str, Any]:
    redis_client(settings.LAB_ENGINE_REDIS_URL).ping()
    return {}


def run_checks() -> dict[str, Any]:
    """Every check's result and the overall status ("ok" only when every check is ok)."""
    checks: dict[str, dict[str, Any]] = {
        "database": _timed(_database),
        "redis": _timed(_redis_check),
    }
    beats: dict[str, Any] = {}

    def broker() -> dict[str, Any]:
        now = time.time()
        pipe = redis_client(settings.CELERY_BROKER_URL).pipeline(transaction=False)
        pipe.ping()
        pipe.zrangebyscore(WORKERS_KEY, now - WORKER_STALE_SECONDS, "+inf", withscores=True)
        pipe.hgetall(WRITER_LAG_KEY)
        _, live, lags = pipe.execute()
        beats["now"] = now
        beats["live"] = {member.decode(): score for member, score in live}
        beats["lags"] = {key.decode(): float(value) for key, value in lags.items()}
        return {}

    checks["broker"] = _timed(broker)
    checks["worker"], checks["writer"] = _worker_and_writer(beats)
    healthy = all(check["status"] == "ok" for check in checks.values())
    return {"status": "ok" if healthy else "fail", "checks": checks}


def _worker_and_writer(beats: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    if "live" not in beats:
        unknown = {"status": "fail", "error": "broker unreachable"}
        return unknown, dict(unknown)
    live = beats["live"]
    if not live:
        return (
            {"status": "fail", "workers": 0, "error": "no worker heartbeat"},
            {"status": "fail", "error": "no live worker"},
        )
    worker = {
        "status": "ok",
        "workers": len(live),
        "last_beat_s": round(beats["now"] - max(live.values()), 1),
    }
    lags = [beats["lags"].get(name, -1.0) for name in live]
    if any(lag < 0 for lag in lags):
        writer = {"status": "fail", "error": "a journal writer did not answer a flush"}
    else:
        worst = max(lags)
        writer = {
            "status": "ok" if worst <= WRITER_MAX_LAG_SECONDS else "fail",
            "lag_s": round(worst, 3),
        }
        if writer["status"] != "ok":
            writer["error"] = f"lag above {WRITER_MAX_LAG_SECONDS:g} s"
    return worker, writer
