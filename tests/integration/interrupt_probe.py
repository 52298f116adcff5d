"""Not a check of its own: the test run that tests/test_interrupted_runs.py interrupts.

Named so that pytest does not collect it; that test passes its path explicitly. It starts
the integration fixtures' servers (a worker process, a daphne process, a redis-server of its
own), writes ``up`` to the file named by LAB_INTERRUPT_PROBE, and waits to be interrupted.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.mark.timeout(900)
def test_servers_run_until_the_run_is_interrupted(worker_process, daphne_process, own_redis):
    worker = worker_process(concurrency=2)
    web = daphne_process()
    Path(os.environ["LAB_INTERRUPT_PROBE"]).write_text(
        f"up worker {worker.proc.pid} daphne {web.proc.pid} redis {own_redis.proc.pid}\n"
    )
    time.sleep(600)
