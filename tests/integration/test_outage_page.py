"""A page load while Redis or the database is away: a 503 page in words with Retry-After,
no bare 500 and no internal address; the next load after the server is back answers 200.

Redis: the engine's Redis moved to a redis-server of the test's own, killed under the real
view. The database: a PostgreSQL of the test's own (tests/integration/private_stack.py)
stopped under a real daphne.
"""

from __future__ import annotations

import pytest
from django.test import Client

from labs.live import runtime
from labs.services import lab
from tests.conftest import make_classroom, make_scenario, make_student, tour_script
from tests.integration.private_stack import PgStack, http_get

pytestmark = [pytest.mark.integration]


@pytest.fixture
def engine_on_own_redis(own_redis, settings):
    """The engine's Redis (the breaker badge a page shows is read there) on ``own_redis``."""
    settings.LAB_ENGINE_REDIS_URL = own_redis.url
    runtime._client = None
    yield own_redis
    runtime._client = None


@pytest.mark.django_db(transaction=True)
def test_a_page_load_while_redis_is_away_is_a_503_page_in_words(engine_on_own_redis):
    scenario = make_scenario("outage-page", script=tour_script())
    room = make_classroom("Outage page", join_code="OUTPAGE1")
    room.scenarios.add(scenario)
    student = make_student("oona", room)
    session = lab.session_open(user=student, classroom=room, scenario=scenario)
    client = Client(raise_request_exception=False)
    client.force_login(student)
    page = f"/sessions/{session.pk}/"
    assert client.get(page).status_code == 200

    engine_on_own_redis.kill()
    response = client.get(page)
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    html = response.content.decode()
    assert "The lab is reconnecting" in html
    assert "lost its connection to its live store (Redis)" in html
    assert "127.0.0.1" not in html and str(engine_on_own_redis.port) not in html

    engine_on_own_redis.start()
    assert client.get(page).status_code == 200


def test_a_page_load_while_the_database_is_away_is_a_503_page_in_words(tmp_path):
    stack = PgStack(tmp_path)
    try:
        ids = stack.seed(tour_script())
        web = stack.web()
        cookie = ids["cookies"]["student"]
        page = f"/sessions/{ids['session']}/"
        assert http_get(web.url, page, cookie)[0] == 200
        stack.pg.stop_server()
        status, html = http_get(web.url, page, cookie)
        assert status == 503, html[-1500:]
        assert "lost its connection to its database" in html
        assert "127.0.0.1" not in html and str(stack.pg.port) not in html
        stack.pg.restart()
        assert http_get(web.url, page, cookie)[0] == 200
    finally:
        stack.close()
