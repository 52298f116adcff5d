"""Which runs a worker still runs, said through Redis apart from the database.

A run's heartbeat is its row's ``heartbeat_at``, written through the database. After a
PostgreSQL restart a worker's connection pool can take seconds to connect again, and until
its heartbeat lands the worker's live runs look stale to another worker's reaper. So each
worker also says which runs it has, every ``LAB_BURST_HEARTBEAT_SECONDS``, from a thread that
never touches the database: one key per run, naming the worker, that expires after
``LAB_BURST_STALE_SECONDS``. A reaper spares a stale-looking run whose key names its worker;
when Redis does not answer, the database's word stands.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

import redis
from django.conf import settings

from labs.live.health import redis_client
from labs.models import Run

logger = logging.getLogger(__name__)

PREFIX = "failurelab:ops:alive:"


def key(label: str, pk: int) -> str:
    """The key saying run ``pk`` of the model ``label`` (``labs.burst``) is alive."""
    return f"{PREFIX}{label}:{pk}"


def stamp(runs: Mapping[str, Iterable[int]], worker: str) -> None:
    """Say that ``worker`` runs these runs (model label -> pks), for a staleness window: one
    pipeline. Raises redis.RedisError when Redis does not answer."""
    ttl_ms = settings.LAB_BURST_STALE_SECONDS * 1000
    pipe = redis_client(settings.CELERY_BROKER_URL).pipeline(transaction=False)
    for label, pks in runs.items():
        for pk in pks:
            pipe.set(key(label, pk), worker, px=ttl_ms)
    pipe.execute()


def alive(runs: Sequence[Run]) -> set[int]:
    """The pks of ``runs`` whose worker said within the staleness window that it runs them
    (one ``MGET``); none when Redis does not answer."""
    if not runs:
        return set()
    keys = [key(run._meta.label_lower, run.pk) for run in runs]
    try:
        said = redis_client(settings.CELERY_BROKER_URL).mget(keys)
    except redis.RedisError:
        logger.warning("runs' liveness not read from Redis; the heartbeats' rows decide")
        return set()
    return {
        run.pk for run, worker in zip(runs, said, strict=True)
        if worker is not None and worker.decode() == run.worker
    }  # fmt: skip
