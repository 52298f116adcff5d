"""Redis restarted under a running lab: a redis-server the test owns (``own_redis``), with a
worker and daphne of the test pointed at it, the burst clicked through the real view.

- Between bursts: the next burst succeeds, every time (the engine hub's connection, closed
  by the restart, is replaced before a batch is written on it).
- Mid-burst: the burst ends FAILED with a journal line that says in words that the lab lost
  its connection to Redis (no internal address in it), nothing of it runs after its end, and
  the next burst succeeds.
"""

from __future__ import annotations

import time

import pytest
import redis
from django.conf import settings
from django.test import Client

from labs.live import runtime
from labs.models import Burst, JournalEvent, LabSession, Traffic
from labs.services import lab
from tests.conftest import make_classroom, make_scenario, make_student, tour_script
from tests.integration.conftest import DaphneProcess, subprocess_env, wait_for
from tests.integration.private_stack import http_post
from tests.integration.test_shared_worker import shared_class

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def lab_on_own_redis(own_redis, worker_process, tmp_path):
    """(daphne, worker) of the test, both on the test's own Redis."""
    env = {"REDIS_URL": own_redis.url.rsplit("/", 1)[0]}
    worker = worker_process(4, env=env)
    web = DaphneProcess(tmp_path / "daphne.log", env={**subprocess_env(), **env})
    yield web, worker
    web.stop()


def new_session(latency_ms: int) -> LabSession:
    scenario = make_scenario(
        "restart", script=tour_script(dependency={"mode": "healthy", "latency_ms": latency_ms})
    )
    room = make_classroom("Restarts", join_code="RESTART2")
    room.scenarios.add(scenario)
    student = make_student("rosa", room)
    return lab.session_open(user=student, classroom=room, scenario=scenario)


def cookie_of(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def click_run_burst(web, session: LabSession, cookie: str, size: int) -> Burst:
    before = Burst.objects.filter(session=session).count()
    status, body = http_post(web.url, f"/sessions/{session.pk}/bursts/", cookie, {"size": size})
    assert status == 200, body[-2000:]
    return Burst.objects.filter(session=session).order_by("number")[before]


def ended(burst: Burst, timeout: float = 90) -> Burst:
    def done():
        burst.refresh_from_db()
        return burst.status not in Burst.ACTIVE_STATUSES

    wait_for(done, timeout, interval=0.2, message=f"burst {burst.number} to end")
    return burst


def test_the_first_burst_after_each_redis_restart_succeeds(lab_on_own_redis, own_redis):
    web, _ = lab_on_own_redis
    session = new_session(latency_ms=5)
    cookie = cookie_of(session.owner)
    assert ended(click_run_burst(web, session, cookie, 5)).status == Burst.Status.DONE
    for restart in range(3):
        own_redis.restart()
        burst = ended(click_run_burst(web, session, cookie, 5))
        failed = JournalEvent.objects.filter(burst=burst, kind="burst_failed").first()
        assert burst.status == Burst.Status.DONE, (restart, failed and failed.message)
        calls = JournalEvent.objects.filter(burst=burst, kind="call_result").count()
        assert calls == 5


@pytest.mark.parametrize("down_s", [0.0, 2.0], ids=["restart", "down-2s"])
def test_a_redis_restart_mid_burst_ends_it_with_a_reason_in_words(
    lab_on_own_redis, own_redis, down_s
):
    """Restarted at once, the burst may go on (its round trips fall before and after the
    restart) or end; down for two seconds it cannot go on and ends FAILED, saying why."""
    web, _ = lab_on_own_redis
    session = new_session(latency_ms=300)
    cookie = cookie_of(session.owner)
    burst = click_run_burst(web, session, cookie, 20)
    wait_for(
        lambda: JournalEvent.objects.filter(burst=burst, kind="call_result").count() >= 2,
        60,
        message="a few calls made",
    )
    own_redis.kill()
    time.sleep(down_s)
    own_redis.start()
    burst = ended(burst)
    if down_s:
        assert burst.status == Burst.Status.FAILED
    rows = list(JournalEvent.objects.filter(session=session).order_by("seq"))
    kinds = [row.kind for row in rows if row.burst_id == burst.pk]
    # The run either got through (the restart fell between two round trips) or says why not.
    if burst.status == Burst.Status.FAILED:
        last = [row for row in rows if row.burst_id == burst.pk][-1]
        assert last.kind == "burst_failed"
        assert "lost its connection to Redis" in last.message
        assert "127.0.0.1" not in last.message and str(own_redis.port) not in last.message
        assert "burst_end" not in kinds
        assert burst.error and "127.0.0.1" not in burst.error  # the summary panel shows it
    else:
        assert burst.status == Burst.Status.DONE
        assert kinds.count("call_result") == 20
    # Nothing of the burst is journaled after its end.
    end_seq = max(row.seq for row in rows if row.kind in ("burst_failed", "burst_end"))
    assert not [row for row in rows if row.burst_id == burst.pk and row.seq > end_seq]
    # And the next burst runs.
    assert ended(click_run_burst(web, session, cookie, 3)).status == Burst.Status.DONE


# --- traffic ------------------------------------------------------------------------------------


def start_traffic(web, session: LabSession, cookie: str, rate: int, duration_s: int) -> Traffic:
    before = Traffic.objects.filter(session=session).count()
    status, body = http_post(
        web.url, f"/sessions/{session.pk}/traffic/", cookie,
        {"action": "start", "rate": rate, "duration_s": duration_s, "arrivals": "even"},
    )  # fmt: skip
    assert status == 200, body[-2000:]
    return Traffic.objects.filter(session=session).order_by("pk")[before]


def traffic_ended(run: Traffic, timeout: float = 120) -> Traffic:
    def done():
        run.refresh_from_db()
        return not run.is_active

    wait_for(done, timeout, interval=0.2, message=f"traffic {run.pk} to end")
    return run


def rows_of(run: Traffic) -> list[JournalEvent]:
    """The run's rows: its calls' (by call number) and its traffic_start/traffic_end."""
    last = run.first_call_no + run.calls
    return [
        row
        for row in JournalEvent.objects.filter(session_id=run.session_id).order_by("seq")
        if (row.call_no is not None and run.first_call_no <= row.call_no < last)
        or (row.kind == "traffic_end" and row.data.get("traffic") == run.pk)
    ]


def test_traffic_that_loses_redis_stops_and_journals_nothing_after_its_end(
    lab_on_own_redis, own_redis
):
    """Redis down for two seconds under a running traffic run: the run cannot go on and ends
    FAILED saying why; its schedule stops (no call after its end), its calls in flight finish
    first, and the session's next run runs alone and ends DONE."""
    web, _ = lab_on_own_redis
    session = new_session(latency_ms=50)
    cookie = cookie_of(session.owner)
    run = start_traffic(web, session, cookie, rate=10, duration_s=60)
    wait_for(
        lambda: len([r for r in rows_of(run) if r.kind == "call_result"]) >= 5,
        90,
        interval=0.2,
        message="a few traffic calls",
    )
    own_redis.kill()
    time.sleep(2.0)
    own_redis.start()
    run = traffic_ended(run)
    assert run.status == Traffic.Status.FAILED
    rows = rows_of(run)
    ends = [row for row in rows if row.kind == "traffic_end"]
    assert len(ends) == 1
    assert "lost its connection to Redis" in ends[0].message
    assert str(own_redis.port) not in ends[0].message
    assert rows[-1].kind == "traffic_end", "a row of the run came after its end"
    # Its schedule is over: a few seconds later nothing more of it was journaled.
    count = len(rows)
    time.sleep(3.0)
    assert len(rows_of(run)) == count
    # Every call started finished (its call_result): none cut in half, none left running.
    assert ends[0].data["started"] == ends[0].data["finished"] >= 5
    results = [row for row in rows if row.kind == "call_result"]
    assert len(results) == ends[0].data["finished"] - ends[0].data["outcomes"].get("lab_error", 0)
    # The next run of the session runs alone and ends DONE.
    again = traffic_ended(start_traffic(web, session, cookie, rate=5, duration_s=2))
    assert again.status == Traffic.Status.DONE, again.error
    assert len([r for r in rows_of(again) if r.kind == "call_result"]) == again.calls
    assert len(rows_of(run)) == count


# --- the shared dependency ---------------------------------------------------------------------


def test_a_redis_restart_mid_traffic_with_a_trigger_running_restores_the_settings_and_says_so(
    lab_on_own_redis, own_redis
):
    """Redis restarted under a class's shared dependency with a down trigger running: the
    worker writes the settings back from the database within a few seconds, every journal
    of the class says the trigger ended early, and the calls succeed again without anyone
    saving the settings."""
    web, _ = lab_on_own_redis
    room, teacher, (session,) = shared_class(servers=4, service_ms=20)
    engine = redis.Redis.from_url(
        own_redis.url.rsplit("/", 1)[0] + f"/{settings.REDIS_DB_BASE + 2}"
    )
    model = runtime.shared_model(room.pk, engine)
    model.configure(runtime.shared_config(room.pk))
    student_cookie, teacher_cookie = cookie_of(session.owner), cookie_of(teacher)
    run = start_traffic(web, session, student_cookie, rate=5, duration_s=120)
    wait_for(lambda: len([r for r in rows_of(run) if r.kind == "call_result"]) >= 3, 90,
             interval=0.2, message="a few calls")  # fmt: skip
    status, body = http_post(web.url, f"/classes/{room.pk}/shared/trigger/", teacher_cookie,
                             {"kind": "down", "duration_ms": 120000})  # fmt: skip
    assert status == 200, body[-2000:]
    assert model.state()["trigger"]["kind"] == "down"

    own_redis.restart()
    restored = wait_for(
        lambda: JournalEvent.objects.filter(session=session, kind="shared_restored").first(),
        30, interval=0.2, message="the lost trigger's line",
    )  # fmt: skip
    assert "the trigger ended early: the store restarted" in restored.message
    assert model.state()["config"] == runtime.shared_config(room.pk).to_dict()
    assert model.state()["trigger"] is None
    # The calls after the restore are answered by the restored dependency: ok again.
    wait_for(
        lambda: JournalEvent.objects.filter(
            session=session, kind="call_result", outcome="success", seq__gt=restored.seq
        ).count() >= 3,
        60, interval=0.2, message="successful calls after the restore",
    )  # fmt: skip
    status, _ = http_post(web.url, f"/sessions/{session.pk}/traffic/", student_cookie,
                          {"action": "stop"})  # fmt: skip
    assert status == 200
    run = traffic_ended(run)
    assert run.status == Traffic.Status.STOPPED, run.error
    rows = rows_of(run)
    assert rows[-1].kind == "traffic_end"
    assert JournalEvent.objects.filter(session=session, kind="shared_restored").count() == 1


# --- websockets ----------------------------------------------------------------------------------


def test_the_first_socket_opened_after_a_redis_restart_with_none_open_connects(
    own_redis, tmp_path
):
    """The web process's channel layer keeps its connection to Redis after its last socket
    closed; a restart closes it. The next socket to open must connect and get its state
    (daphne's error and a reconnect were the first socket's lot)."""
    from websockets.sync.client import connect

    session = new_session(latency_ms=5)
    cookie = cookie_of(session.owner)
    env = {**subprocess_env(), "REDIS_URL": own_redis.url.rsplit("/", 1)[0]}
    web = DaphneProcess(tmp_path / "daphne.log", env=env)
    try:

        def first_message() -> str:
            with connect(
                f"ws://127.0.0.1:{web.port}/ws/sessions/{session.pk}/",
                origin=web.base,
                additional_headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}"},
                open_timeout=20,
            ) as ws:
                return ws.recv(timeout=20)

        assert '"state"' in first_message()
        for restart in range(3):
            own_redis.restart()
            try:
                text = first_message()
            except Exception as exc:
                log = web.log_path.read_text(errors="replace")[-4000:]
                pytest.fail(f"after restart {restart + 1}: {exc!r}\n{log}")
            assert '"state"' in text, f"after restart {restart + 1}"
    finally:
        web.stop()
