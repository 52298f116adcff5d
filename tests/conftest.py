"""Shared test setup and fixtures.

Tests use Redis databases 8..11 (REDIS_DB_BASE=8), never a development instance's 0..3.
pytest-django loads the settings before any conftest runs, so the environment variable is set
here (for the worker and daphne subprocesses that integration tests start) and the settings
module is re-read once so the in-process Redis URLs follow it too.
"""

from __future__ import annotations

import copy
import importlib
import os
import signal
import threading

import pytest
from django.conf import settings

from tests import servers

# LAB_TEST_REDIS_DB_BASE (8..12) lets two test runs on one machine keep apart; never below 8.
_test_base = os.environ.get("LAB_TEST_REDIS_DB_BASE", "8")
if not _test_base.isdigit() or not 8 <= int(_test_base) <= 12:
    raise RuntimeError(f"LAB_TEST_REDIS_DB_BASE must be 8..12, got {_test_base!r}")
os.environ["REDIS_DB_BASE"] = _test_base

_REDIS_SETTINGS = (
    "REDIS_URL",
    "REDIS_DB_BASE",
    "CELERY_BROKER_URL",
    "CHANNEL_LAYER_REDIS_URL",
    "CHANNEL_LAYERS",
    "LAB_ENGINE_REDIS_URL",
    "CACHE_REDIS_URL",
    "CACHES",
)


def _apply_test_redis_settings() -> None:
    module = importlib.import_module(os.environ["DJANGO_SETTINGS_MODULE"])
    if getattr(module, "REDIS_DB_BASE", None) == int(os.environ["REDIS_DB_BASE"]):
        return
    fresh = importlib.reload(module)
    for name in _REDIS_SETTINGS:
        if hasattr(fresh, name):
            setattr(settings, name, getattr(fresh, name))


_apply_test_redis_settings()


def pytest_configure(config):
    """SIGTERM (``timeout``, ``kill``) and SIGHUP (a closed terminal) stop the run the way
    Ctrl-C does: a KeyboardInterrupt, after which pytest tears every fixture down, so the
    servers they started stop (tests/servers.py). Once: a second signal while stopping is
    ignored."""
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum, frame):
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, interrupt)


def pytest_unconfigure(config):
    """Whatever server a fixture did not stop (an error in its teardown) stops here."""
    servers.stop_all()

DEFAULT_PASSWORD = "correct-horse-battery-staple"

TOUR_SCRIPT = {
    "name": "tour",
    "seed": 7,
    "dependency": {"mode": "flaky", "fail_count": 3, "latency_ms": 5},
    "policy": {
        "max_attempts": 4,
        "backoff_base_ms": 25,
        "backoff_cap_ms": 500,
        "jitter": "none",
        "nesting": "breaker_outside",
        "breaker": {
            "kind": "consecutive",
            "failure_threshold": 3,
            "cooldown_ms": 2000,
            "half_open_max_probes": 1,
            "success_threshold": 1,
        },
    },
    "steps": [
        {"burst": 6},
        {"set_dependency": {"mode": "down"}},
        {"burst": 6},
        {"set_dependency": {"mode": "healthy"}},
        {"wait_ms": 2000},
        {"burst": 1, "concurrency": 1},
    ],
}


def flush_test_redis() -> None:
    """Empty the test run's Redis databases (``REDIS_DB_BASE`` and the three after it): a
    test that reads a session's breaker must not see one a test before it left under the
    same session id."""
    import redis

    base = settings.REDIS_DB_BASE
    assert base >= 8, "tests must never flush a development Redis database"
    for db in range(base, base + 4):
        redis.Redis.from_url(settings.REDIS_URL, db=db).flushdb()


@pytest.fixture
def clean_shared_model(classroom):
    """The class's shared-dependency model in Redis emptied before and after the test (a
    model left by an earlier test under the same class id would count its seconds)."""
    from labs.live import runtime

    runtime.shared_model(classroom.pk).clear()
    yield
    runtime.shared_model(classroom.pk).clear()


def tour_script(**overrides) -> dict:
    """A deep copy of the tour scenario (scenarios/tour.json), with top-level keys replaced."""
    script = copy.deepcopy(TOUR_SCRIPT)
    script.update(overrides)
    return script


# --- factory functions (plain functions; fixtures below use them) ---------------------------


def make_user(username: str, *, password: str = DEFAULT_PASSWORD, **fields):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(username=username, password=password, **fields)


def make_classroom(name: str = "Class A", **fields):
    from labs.models import Classroom

    return Classroom.objects.create(name=name, **fields)


def make_scenario(
    slug: str = "tour", *, title: str | None = None, script: dict | None = None, **fields
):
    from labs.models import Scenario

    script = tour_script(name=slug) if script is None else script
    return Scenario.objects.create(
        slug=slug, title=title or slug.replace("-", " ").title(), script=script, **fields
    )


def make_instructor(username: str, classroom=None):
    from labs.services.accounts import instructor_enrol

    user = make_user(username)
    if classroom is None:
        from django.contrib.auth.models import Group

        user.is_staff = True
        user.save()
        user.groups.add(Group.objects.get(name="Instructors"))
    else:
        instructor_enrol(user=user, classroom=classroom)
    return user


def make_student(username: str, classroom=None):
    from labs.models import Membership

    user = make_user(username)
    if classroom is not None:
        Membership.objects.create(user=user, classroom=classroom, role=Membership.Role.STUDENT)
    return user


def make_session(owner, classroom, scenario, **fields):
    from labs.models import LabSession

    return LabSession.objects.create(owner=owner, classroom=classroom, scenario=scenario, **fields)


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def scenario(db):
    return make_scenario("tour", title="The tour")


@pytest.fixture
def classroom(db, scenario):
    room = make_classroom("Resilience A", join_code="CLASSA01")
    room.scenarios.add(scenario)
    return room


@pytest.fixture
def other_classroom(db, scenario):
    room = make_classroom("Resilience B", join_code="CLASSB02")
    room.scenarios.add(scenario)
    return room


@pytest.fixture
def instructor(db, classroom):
    return make_instructor("teacher_a", classroom)


@pytest.fixture
def other_instructor(db, other_classroom):
    return make_instructor("teacher_b", other_classroom)


@pytest.fixture
def student(db, classroom):
    return make_student("alice", classroom)


@pytest.fixture
def other_student(db, other_classroom):
    return make_student("bob", other_classroom)


@pytest.fixture
def superuser(db):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_superuser("root", "root@example.com", DEFAULT_PASSWORD)


class Factories:
    """The factory functions above, for tests (``factory.user("x")``)."""

    user = staticmethod(make_user)
    classroom = staticmethod(make_classroom)
    scenario = staticmethod(make_scenario)
    instructor = staticmethod(make_instructor)
    student = staticmethod(make_student)
    session = staticmethod(make_session)
    tour_script = staticmethod(tour_script)
    password = DEFAULT_PASSWORD


@pytest.fixture
def factory(db) -> type[Factories]:
    return Factories
