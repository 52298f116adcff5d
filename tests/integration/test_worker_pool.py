"""A worker on PostgreSQL with a small connection pool, twenty bursts queued at once.

A burst does its database work in the process's bookkeeping turn (``labs.worker.hub.
bookkeeping``: one run at a time), and the one holding the turn needs a connection from the
process's pool (``DATABASE_POOL_SIZE``). So a burst must never wait for the turn while it
holds a connection: once as many bursts as the pool has connections held theirs between two
turns, the holder of the turn waited for the pool, they waited for the turn, and after the
pool's 30 s timeout a burst failed or stayed queued (push_bench found it at 100 clicks with a
pool of 10; a pool of 2 finds it at twenty).
"""

from __future__ import annotations

import pytest
from django.db import connection

from labs.models import Burst
from labs.services import bursts
from tests.integration.test_bursts_worker import finished, new_session

pytestmark = [
    pytest.mark.integration,
    pytest.mark.postgres,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]

BURSTS = 20


def test_bursts_queued_at_once_never_starve_a_small_connection_pool(worker_process):
    if connection.vendor != "postgresql":
        pytest.fail(
            "the connection pool is PostgreSQL's (psycopg_pool): make test runs this in its "
            "PostgreSQL step; or set DATABASE_URL=postgres://... and run pytest -m postgres"
        )
    sessions = [new_session(username=f"pool{n}") for n in range(BURSTS)]
    worker_process(concurrency=BURSTS + 8, env={"DATABASE_POOL_SIZE": "2"})
    queued = [bursts.burst_start(session=s, user=s.owner, size=2) for s in sessions]
    ended = [finished(b, timeout=120) for b in queued]
    assert [b.status for b in ended] == [Burst.Status.DONE] * BURSTS, [
        (b.number, b.status, b.error) for b in ended
    ]
