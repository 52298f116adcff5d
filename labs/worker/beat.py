"""The worker's health beat, read by ``/healthz`` (:mod:`labs.live.health`).

Every ``HEARTBEAT_SECONDS`` the beat asks the worker's journal writer to flush (a marker
through the same queue the run events take, so the time it takes is how far behind the writer
is), then records the beat and that lag in the broker's Redis.
"""

from __future__ import annotations

import logging
import time

import redis
from django.conf import settings

from labs.live.health import (
    HEARTBEAT_SECONDS,
    KEY_TTL_SECONDS,
    WORKER_ID,
    WORKERS_KEY,
    WRITER_FLUSH_TIMEOUT,
    WRITER_LAG_KEY,
    redis_client,
)
from labs.worker.once import daemon_once
from labs.worker.writers import get_writer

logger = logging.getLogger(__name__)


def _beat_forever() -> None:
    while True:
        try:
            beat()
        except Exception:  # the heartbeat must outlive a Redis outage
            logger.warning("health heartbeat not recorded", exc_info=True)
        time.sleep(HEARTBEAT_SECONDS)


def beat() -> float:
    """Measure the journal writer's lag (a flush) and record it with this worker's beat.
    Returns the lag in seconds, -1 if the flush timed out."""
    started = time.monotonic()
    flushed = get_writer().flush(WRITER_FLUSH_TIMEOUT)
    lag = time.monotonic() - started if flushed else -1.0
    now = time.time()
    pipe = redis_client(settings.CELERY_BROKER_URL).pipeline(transaction=False)
    pipe.zadd(WORKERS_KEY, {WORKER_ID: now})
    pipe.hset(WRITER_LAG_KEY, WORKER_ID, f"{lag:.6f}")
    pipe.zremrangebyscore(WORKERS_KEY, "-inf", now - KEY_TTL_SECONDS)
    pipe.expire(WORKERS_KEY, KEY_TTL_SECONDS)
    pipe.expire(WRITER_LAG_KEY, KEY_TTL_SECONDS)
    pipe.execute()
    return lag


def stop_worker_heartbeat() -> None:
    """Withdraw this worker's beat (a worker shutting down cleanly is not live any more)."""
    try:
        pipe = redis_client(settings.CELERY_BROKER_URL).pipeline(transaction=False)
        pipe.zrem(WORKERS_KEY, WORKER_ID)
        pipe.hdel(WRITER_LAG_KEY, WORKER_ID)
        pipe.execute()
    except redis.RedisError:
        logger.warning("health heartbeat not withdrawn", exc_info=True)


#: Start this worker's heartbeat thread (once per process); returns it.
start_worker_heartbeat = daemon_once(_beat_forever, "health-heartbeat")
