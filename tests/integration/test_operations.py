"""/metrics and /healthz through real parts: bursts on a real Celery worker process (its journal
writer in a process of its own), scraped from a real daphne sharing a fresh metrics directory,
compared with the journal; a websocket through daphne counted while it is open; /healthz
with every part up, and with a Redis server stopped under it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from django.db.models import Count
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

from labs.live import health
from labs.models import Burst, JournalEvent
from labs.services import bursts, lab
from labs.worker import beat
from tests.conftest import make_classroom, make_scenario, make_student, tour_script
from tests.integration.conftest import DaphneProcess, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

#: Down from the start: failed attempts and retries, the breaker opening, then fast-fails.
DOWN = tour_script(dependency={"mode": "down", "latency_ms": 2})



def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})  # noqa: S310 (our own server)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.fixture
def metrics_dir(tmp_path, monkeypatch) -> Path:
    """A fresh metrics directory for the processes this test starts (they inherit it)."""
    directory = tmp_path / "metrics"
    directory.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    return directory


@pytest.fixture
def daphne(metrics_dir, tmp_path, transactional_db):
    server = DaphneProcess(tmp_path / "daphne.log")
    yield server
    server.stop()


def scrape(url: str) -> dict[str, dict[tuple, float]]:
    """/metrics as {sample name: {sorted label items: value}}."""
    status, body = _get(f"{url}/metrics")
    assert status == 200, body[:300]
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def by_label(samples, name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: value for labels, value in samples.get(name, {}).items() if value}


def total(samples, name: str) -> float:
    return sum(samples.get(name, {}).values())


def test_metrics_from_a_real_worker_match_the_journal(worker_process, daphne, metrics_dir):
    scenario = make_scenario("down", script=DOWN)
    room = make_classroom("Ops class", join_code="OPSCLAS1")
    room.scenarios.add(scenario)
    student = make_student("olga", room)
    session = lab.session_open(user=student, classroom=room, scenario=scenario)
    worker_process()
    for _ in range(2):
        burst = bursts.burst_start(session=session, user=student, size=6)

        def done(burst=burst):
            burst.refresh_from_db()
            return burst.status not in Burst.ACTIVE_STATUSES

        wait_for(done, timeout=60, message="the burst to finish")
        assert burst.status == Burst.Status.DONE

    rows = JournalEvent.objects.filter(session=session)
    attempts = dict(
        rows.filter(kind="attempt").values_list("outcome").annotate(n=Count("id")).order_by()
    )
    calls = dict(
        rows.filter(kind="call_result").values_list("outcome").annotate(n=Count("id")).order_by()
    )
    transitions = Counter(rows.filter(kind="transition").values_list("state_from", "state_to"))
    # The scenario really exercised what is compared below.
    assert attempts.get("error", 0) >= 3
    assert calls.get("rejected_open", 0) >= 1
    assert transitions[("closed", "open")] == 1

    samples = scrape(daphne.url)
    assert by_label(samples, "failurelab_attempts_total", "outcome") == attempts
    assert by_label(samples, "failurelab_calls_total", "outcome") == calls
    assert total(samples, "failurelab_retries_total") == rows.filter(kind="sleep").count()
    assert by_label(samples, "failurelab_fast_fails_total", "outcome") == {
        outcome: n for outcome, n in calls.items() if outcome.startswith("rejected_")
    }
    assert {
        (dict(labels)["from_state"], dict(labels)["to_state"]): value
        for labels, value in samples.get("failurelab_breaker_transitions_total", {}).items()
    } == dict(transitions)
    assert total(samples, "failurelab_burst_duration_seconds_count") == 2
    assert total(samples, "failurelab_journal_batch_lag_seconds_count") >= 1
    assert total(samples, "failurelab_push_latency_seconds_count") >= 1
    # The breaker snapshot per class, read at scrape time.
    states = samples["failurelab_breaker_sessions"]
    assert states[(("classroom", str(room.pk)), ("state", "open"))] == 1
    # The counts came from the worker's journal-writer process, through the shared directory.
    assert list(metrics_dir.glob("counter_*.db"))


def test_open_websockets_are_counted_and_a_stopped_daphne_leaves_no_live_gauge(daphne, metrics_dir):
    scenario = make_scenario("ws", script=tour_script())
    room = make_classroom("Socket class", join_code="SOCKET01")
    room.scenarios.add(scenario)
    student = make_student("sam", room)
    session = lab.session_open(user=student, classroom=room, scenario=scenario)
    browser = Client()
    browser.force_login(student)
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    ws_url = f"ws://127.0.0.1:{daphne.port}/ws/sessions/{session.pk}/"

    def open_sockets() -> float:
        return total(scrape(daphne.url), "failurelab_websockets_open")

    assert open_sockets() == 0
    with connect(ws_url, additional_headers={"Cookie": cookie, "Origin": daphne.url}) as ws:
        assert json.loads(ws.recv(timeout=30))  # the consumer accepted and sent its first message
        wait_for(lambda: open_sockets() == 1, message="the open socket to be counted")
    wait_for(lambda: open_sockets() == 0, message="the closed socket to be uncounted")

    assert list(metrics_dir.glob("gauge_livesum_*.db")), "daphne kept its socket gauge in a file"
    daphne.stop()
    live_gauges = list(metrics_dir.glob("gauge_livesum_*.db"))
    assert live_gauges == [], "a cleanly stopped daphne marks its live gauges dead"


def test_healthz_is_200_with_every_part_up(worker_process, daphne):
    worker_process()

    def healthy():
        status, body = _get(f"{daphne.url}/healthz")
        return (status, json.loads(body)) if status == 200 else None

    _, report = wait_for(healthy, timeout=30, interval=0.5, message="/healthz to be 200")
    assert report["status"] == "ok"
    assert set(report["checks"]) == {"database", "redis", "broker", "worker", "writer"}
    assert all(check["status"] == "ok" for check in report["checks"].values())
    assert report["checks"]["worker"]["workers"] == 1
    assert 0 <= report["checks"]["writer"]["lag_s"] <= health.WRITER_MAX_LAG_SECONDS


def test_healthz_is_503_naming_redis_when_redis_is_down(own_redis, settings, transactional_db):
    url = own_redis.url.removesuffix("/0")
    settings.LAB_ENGINE_REDIS_URL = f"{url}/2"
    settings.CELERY_BROKER_URL = f"{url}/0"
    beat.beat()  # a worker's heartbeat, as a live worker records it
    client = Client()

    up = client.get("/healthz")
    assert up.status_code == 200, up.json()
    assert up.json()["status"] == "ok"

    own_redis.kill()
    down = client.get("/healthz")
    assert down.status_code == 503
    report = down.json()
    assert report["status"] == "fail"
    assert report["checks"]["redis"]["status"] == "fail"
    assert report["checks"]["broker"]["status"] == "fail"
    assert report["checks"]["database"]["status"] == "ok"
    assert url.split("//")[1] not in down.content.decode(), "no address in the answer"
