"""Steady traffic reaches its pages a second at a time, through the real stack: a real worker
process runs the traffic and its journal writer, a real daphne serves the sockets, the channel
layer is the test run's Redis. The session's socket gets seconds, never steady traffic's rows,
and each second's counts equal the journal's rows of that second; the class's dashboard gets
deltas that add up to the journal's counts; a second's rows are there for whoever may see the
page and a 404 for anyone else."""

from __future__ import annotations

import contextlib
import json
import threading
from collections import defaultdict

import pytest
from django.conf import settings
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from labs.journal import kinds
from labs.journal.seconds import attempt_answer
from labs.models import JournalEvent, Traffic
from labs.services import lab
from labs.services.traffic import traffic_start
from tests.conftest import make_classroom, make_instructor, make_scenario, make_student
from tests.integration.conftest import wait_for, wait_run_ended

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def cookie_for(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


class Listener:
    """Every text frame a websocket gets, on a thread of its own, until it is stopped."""

    def __init__(self, web, path: str, user) -> None:
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(connect(
            f"ws://127.0.0.1:{web.port}{path}",
            origin=web.base,
            additional_headers={"Cookie": cookie_for(user)},
            max_size=None,
            open_timeout=10,
        ))  # fmt: skip
        self.messages: list[dict] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while True:
                self.messages.append(json.loads(self.ws.recv()))
        except (ConnectionClosed, OSError):
            return

    def of_type(self, kind: str) -> list[dict]:
        return [m for m in list(self.messages) if m.get("type") == kind]

    def close(self) -> None:
        self._stack.close()
        self._thread.join(10)


def journal_seconds(session) -> dict[int, dict]:
    """Per second of the rows' wall time: the traffic's attempts by answer and its call counts,
    counted here from the journal rows with the registry's rules."""
    out: dict[int, dict] = defaultdict(lambda: {"attempts": {}, "counts": kinds.zero(), "n": 0})
    for row in JournalEvent.objects.filter(session=session, burst__isnull=True).order_by("seq"):
        if not kinds.per_second(row.kind, row.burst_id):
            continue
        second = out[int(row.t_ms // 1000)]
        second["n"] += 1
        for name, n in kinds.delta(row.kind, row.outcome).items():
            second["counts"][name] += n
        if row.kind == "attempt":
            answer = attempt_answer(row.outcome, row.error, row.data)
            second["attempts"][answer] = second["attempts"].get(answer, 0) + 1
    return dict(out)


@pytest.fixture
def world(db):
    scenario = make_scenario("seconds", title="Seconds")
    room = make_classroom("Seconds class", join_code="SECONDS1")
    room.scenarios.add(scenario)
    erin = make_student("erin", room)
    session = lab.session_open(user=erin, classroom=room, scenario=scenario)
    lab.session_set_dependency(
        session=session, user=erin, changes={"mode": "error_rate", "rate": 0.3, "latency_ms": 5}
    )
    return {
        "session": session,
        "room": room,
        "erin": erin,
        "teacher": make_instructor("teacher", room),
        "other": make_student("frank", make_classroom("Other class", join_code="OTHER001")),
    }


def test_steady_traffic_reaches_the_page_as_seconds_that_count_the_journal_rows(
    worker_process, daphne_process, world
):
    session, erin = world["session"], world["erin"]
    worker_process()
    web = daphne_process()
    before = JournalEvent.objects.filter(session=session).order_by("-seq").first().seq
    page = Listener(web, f"/ws/sessions/{session.pk}/?after={before}", erin)
    dashboard = Listener(web, f"/ws/classes/{world['room'].pk}/", world["teacher"])
    try:
        wait_for(lambda: page.of_type("state") and dashboard.of_type("snapshot"), 20,
                 message="both sockets to be open")  # fmt: skip
        traffic = traffic_start(session=session, user=erin, rate=10, duration_s=4, arrivals="even")

        wait_run_ended(traffic, 90)
        assert traffic.status == Traffic.Status.DONE, traffic.error
        newest = JournalEvent.objects.filter(session=session).order_by("-seq").first()
        assert newest.kind == "traffic_end"

        def page_has_everything():
            covered = [m["through"] for m in page.of_type("seconds")]
            covered += [e["seq"] for m in page.of_type("events") for e in m["events"]]
            return max(covered, default=0) >= newest.seq

        wait_for(page_has_everything, 30, message="the page to have every row")
        expected = journal_seconds(session)
        assert sum(s["counts"]["calls"] for s in expected.values()) == 40
        assert len(expected) >= 4

        # No row of the traffic was pushed on its own: its rows came counted by the second.
        pushed_rows = [e for m in page.of_type("events") for e in m["events"]]
        assert [e["kind"] for e in pushed_rows] == ["traffic_start", "traffic_end"]

        # Each second as the page has it last (the copy counting most rows) equals the journal.
        shown: dict[int, dict] = {}
        for message in page.of_type("seconds"):
            for second in message["seconds"]:
                if second["t"] not in shown or second["n"] >= shown[second["t"]]["n"]:
                    shown[second["t"]] = second
        assert set(shown) == set(expected)
        for t, second in expected.items():
            got = shown[t]
            assert (got["n"], got["counts"], got["attempts"]) == (
                second["n"], second["counts"], second["attempts"]
            ), t
            assert f"sec-{t}" in got["html"] and got["text"] in got["html"]

        # Once a second: far fewer messages than rows (40 calls, every attempt and result).
        rows = sum(s["n"] for s in expected.values())
        assert len(page.of_type("seconds")) <= len(expected) + 3 < rows

        # The class's dashboards: deltas that add up to the journal's counts.
        def dashboard_counted():
            updates = [m for m in dashboard.of_type("session") if m["session"] == session.pk]
            return sum(u.get("calls", 0) for u in updates) >= 40 and updates

        updates = wait_for(dashboard_counted, 20, message="the dashboard's updates")
        totals = {name: sum(u.get(name, 0) for u in updates) for name in kinds.CALL_COUNTS}
        journal_totals = kinds.zero()
        for second in expected.values():
            for name, n in second["counts"].items():
                journal_totals[name] += n
        assert totals == journal_totals
    finally:
        page.close()
        dashboard.close()


def test_a_page_that_reconnects_after_traffic_gets_its_seconds_from_the_journal(
    worker_process, daphne_process, world
):
    session, erin = world["session"], world["erin"]
    worker_process()
    web = daphne_process()
    traffic = traffic_start(session=session, user=erin, rate=10, duration_s=2, arrivals="even")

    wait_run_ended(traffic, 90)
    first = JournalEvent.objects.filter(session=session, kind="traffic_start").get().seq
    page = Listener(web, f"/ws/sessions/{session.pk}/?after={first}", erin)
    try:
        newest = JournalEvent.objects.filter(session=session).order_by("-seq").first().seq
        wait_for(lambda: page.of_type("state"), 20, message="the replay")
        replayed = page.of_type("seconds")
        assert max(m["through"] for m in replayed) < newest  # the traffic_end row comes as a row
        assert [e["kind"] for m in page.of_type("events") for e in m["events"]] == ["traffic_end"]
        expected = journal_seconds(session)
        shown = {s["t"]: s for m in replayed for s in m["seconds"]}
        assert {t: (s["n"], s["counts"]) for t, s in shown.items()} == {
            t: (s["n"], s["counts"]) for t, s in expected.items()
        }
    finally:
        page.close()


def test_a_seconds_rows_are_for_whoever_may_see_the_page(worker_process, world):
    session, erin = world["session"], world["erin"]
    worker_process()
    traffic = traffic_start(session=session, user=erin, rate=10, duration_s=2, arrivals="even")

    wait_run_ended(traffic, 90)
    second, expected = sorted(journal_seconds(session).items())[0]
    url = f"/sessions/{session.pk}/seconds/{second}/"
    for who in ("erin", "teacher"):
        client = Client()
        client.force_login(world[who])
        answer = client.get(url, headers={"HX-Request": "true"})
        assert answer.status_code == 200, who
        html = answer.content.decode()
        assert html.count('<li id="ev-') == expected["n"], who
        # the rows' own words, as the journal wrote them
        first_row = JournalEvent.objects.filter(
            session=session, t_ms__gte=second * 1000, t_ms__lt=(second + 1) * 1000
        ).order_by("seq").first()
        assert f'id="ev-{first_row.seq}"' in html and first_row.message.split()[0] in html
    whole = Client()
    whole.force_login(erin)
    assert "Back to the live page" in whole.get(url).content.decode()  # without JavaScript
    stranger = Client()
    stranger.force_login(world["other"])
    assert stranger.get(url).status_code == 404
    assert Client().get(url).status_code == 302  # signed out: to the login page
