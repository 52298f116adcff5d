"""PostgreSQL restarted under a running lab (a server the test owns: tests/integration/
private_stack.py), between page loads and in the middle of a burst.

- Every page load after the restart succeeds: a pooled connection the restart cut is found
  dead before it is used and replaced (the pool's check), never handed to a request.
- A burst running through the restart ends DONE with every call journaled once: its own
  worker never marks it interrupted (heartbeats are stamped when written, and a worker never
  reaps its own live run), and the database says what the journal says.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import tour_script
from tests.integration.private_stack import PgStack, http_get, http_post, wait_until

pytestmark = [pytest.mark.integration]


@pytest.fixture
def stack(tmp_path):
    stack = PgStack(tmp_path)
    yield stack
    stack.close()


def database_check(web) -> str:
    """The database check of ``/healthz`` (no worker runs here, so the whole is 503)."""
    _, body = http_get(web.url, "/healthz", "")
    return json.loads(body)["checks"]["database"]["status"]


def test_every_page_load_after_a_postgresql_restart_succeeds(stack):
    ids = stack.seed(tour_script(dependency={"mode": "healthy", "latency_ms": 5}))
    web = stack.web()
    cookie = ids["cookies"]["student"]
    page = f"/sessions/{ids['session']}/"
    # Fill the web process's pool: several loads at once would, one after another reuses one.
    for _ in range(5):
        status, body = http_get(web.url, page, cookie)
        assert status == 200, body[-2000:]
    assert database_check(web) == "ok"

    stack.pg.restart(down_s=1.0)

    statuses = [http_get(web.url, page, cookie)[0] for _ in range(20)]
    assert statuses == [200] * 20
    assert database_check(web) == "ok"
    # A write too: the student's Run burst is queued (no worker here: it stays queued).
    status, body = http_post(web.url, f"/sessions/{ids['session']}/bursts/", cookie, {"size": 2})
    assert status == 200, body[-2000:]
    assert stack.query("SELECT status FROM labs_burst") == [("queued",)]


def test_a_burst_running_through_a_postgresql_restart_ends_done_and_journals_every_call(stack):
    ids = stack.seed(tour_script(dependency={"mode": "healthy", "latency_ms": 400}))
    # A short staleness window, shorter than the outage: a heartbeat that could not be
    # written during it leaves the row looking stale to this worker's own reaper.
    stack.worker(4, LAB_BURST_STALE_SECONDS="2")
    web = stack.web()
    cookie = ids["cookies"]["student"]
    size = 20
    status, body = http_post(web.url, f"/sessions/{ids['session']}/bursts/", cookie,
                             {"size": size})  # fmt: skip
    assert status == 200, body[-2000:]
    wait_until(
        lambda: (
            stack.query("SELECT count(*) FROM labs_journalevent WHERE kind = 'attempt'")[0][0] >= 3
        ),
        60,
        "a few attempts journaled",
    )
    stack.pg.restart(down_s=3.0)

    def final():
        rows = stack.query("SELECT status FROM labs_burst")
        return rows if rows and rows[0][0] not in ("queued", "running") else None

    assert wait_until(final, 120, "the burst to end") == [("done",)]
    kinds = [k for (k,) in stack.query(
        "SELECT kind FROM labs_journalevent WHERE session_id = %s ORDER BY seq", (ids["session"],)
    )]  # fmt: skip
    assert "burst_interrupted" not in kinds
    assert kinds[-1] == "burst_end"
    calls = stack.query(
        "SELECT call_no, count(*) FROM labs_journalevent WHERE kind = 'call_result' "
        "GROUP BY call_no ORDER BY call_no"
    )
    assert len(calls) == size and all(n == 1 for _, n in calls)
    # The page shows what the database holds: the burst done, not interrupted.
    status, body = http_get(web.url, f"/sessions/{ids['session']}/", cookie)
    assert status == 200
    assert "interrupted" not in body.lower()


#: The product's default ``LAB_BURST_STALE_SECONDS``.
STALE_S = 5


def test_a_burst_ending_while_postgresql_is_down_ends_done_on_its_return(stack):
    """The burst's last calls finish while the server is down: its rows and its final row are
    written once the server is back (not left RUNNING, nothing lost), and neither worker's
    reaper, both failing during the outage, marks it interrupted afterwards."""
    ids = stack.seed(tour_script(dependency={"mode": "healthy", "latency_ms": 400}))
    # The default staleness window: after the restart a worker's pool may take seconds to
    # connect again, and the heartbeat of the burst's worker goes through it (a 2 s window
    # once let the idle worker's reaper in first, in CI).
    stack.worker(4, LAB_BURST_STALE_SECONDS=str(STALE_S))
    stack.worker(4, LAB_BURST_STALE_SECONDS=str(STALE_S))
    web = stack.web()
    cookie = ids["cookies"]["student"]
    status, body = http_post(web.url, f"/sessions/{ids['session']}/bursts/", cookie, {"size": 6})
    assert status == 200, body[-2000:]
    wait_until(
        lambda: stack.query("SELECT count(*) FROM labs_journalevent WHERE kind = 'attempt'")[0][0]
        >= 2,
        60,
        "two attempts journaled",
    )
    stack.pg.stop_server()
    time.sleep(6.0)  # the burst's other calls (about 1.6 s) finish meanwhile
    stack.pg.restart()

    def final():
        rows = stack.query("SELECT status FROM labs_burst")
        return rows if rows and rows[0][0] not in ("queued", "running") else None

    assert wait_until(final, 120, "the burst to end") == [("done",)]
    time.sleep(STALE_S + 4.0)  # a reaper that was going to mark it would have by now
    assert stack.query("SELECT status FROM labs_burst") == [("done",)]
    kinds = [k for (k,) in stack.query(
        "SELECT kind FROM labs_journalevent WHERE session_id = %s ORDER BY seq", (ids["session"],)
    )]  # fmt: skip
    assert "burst_interrupted" not in kinds and "burst_failed" not in kinds
    assert kinds[-1] == "burst_end"
    assert kinds.count("call_result") == 6
