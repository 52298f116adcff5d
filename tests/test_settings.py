"""Settings: strict environment parsing, database and Redis wiring, production checks."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from lab_project.env import env_bool, env_database_url, env_int, env_list, env_redis_url

ROOT = Path(__file__).resolve().parent.parent
SETTINGS_FILE = ROOT / "lab_project" / "settings.py"

PRODUCTION_ENV = {
    "DJANGO_DEBUG": "false",
    "DJANGO_SECRET_KEY": "x7#kq!2vLp9@wR4zN8&mT3^yB6*cF1hJ5sD0gA-eU+oI=lZ_rQ",
    "DJANGO_ALLOWED_HOSTS": "lab.example.org",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://lab.example.org",
}


def load_settings(monkeypatch, tmp_path, **env) -> dict:
    """Execute settings.py afresh under ``env`` (on top of a clean lab environment)."""
    for name in list(os.environ):
        if name.startswith(("DJANGO_", "LAB_", "REDIS_", "DATABASE_")):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("LAB_TEST_DB_NAME", str(tmp_path / "test.sqlite3"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE))


# --- env helpers --------------------------------------------------------------------------


@pytest.mark.parametrize("raw,expected", [("1", True), ("TRUE", True), ("yes", True),
                                          ("on", True), ("0", False), ("false", False),
                                          ("No", False), ("off", False)])  # fmt: skip
def test_env_bool_accepts_the_usual_spellings(raw, expected):
    assert env_bool("X", not expected, environ={"X": raw}) is expected


def test_env_bool_uses_the_default_when_unset_or_empty():
    assert env_bool("X", True, environ={}) is True
    assert env_bool("X", False, environ={"X": ""}) is False


def test_env_bool_refuses_a_malformed_value_naming_the_variable():
    with pytest.raises(ImproperlyConfigured, match=r"DJANGO_DEBUG must be a boolean.*'maybe'"):
        env_bool("DJANGO_DEBUG", True, environ={"DJANGO_DEBUG": "maybe"})


def test_env_int_refuses_non_integers():
    with pytest.raises(ImproperlyConfigured, match="REDIS_DB_BASE must be an integer"):
        env_int("REDIS_DB_BASE", 0, environ={"REDIS_DB_BASE": "eight"})


def test_env_int_refuses_values_out_of_range():
    with pytest.raises(ImproperlyConfigured, match="REDIS_DB_BASE must be between 0 and 12"):
        env_int("REDIS_DB_BASE", 0, min_value=0, max_value=12, environ={"REDIS_DB_BASE": "13"})


def test_env_list_splits_and_strips():
    assert env_list("H", [], environ={"H": "a.example, b.example"}) == ["a.example", "b.example"]


def test_env_list_refuses_empty_items():
    with pytest.raises(ImproperlyConfigured, match="H must be a comma-separated list"):
        env_list("H", [], environ={"H": "a,,b"})


@pytest.mark.parametrize("url", ["http://localhost:6379", "redis://", "redis://host:port",
                                 "redis://localhost:6379/3"])  # fmt: skip
def test_env_redis_url_refuses_malformed_urls(url):
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL"):
        env_redis_url("REDIS_URL", "redis://127.0.0.1:6379", environ={"REDIS_URL": url})


def test_env_database_url_refuses_non_postgres_urls():
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL must be a postgres://"):
        env_database_url("DATABASE_URL", environ={"DATABASE_URL": "mysql://u@h/db"})


# --- the settings module ------------------------------------------------------------------


def test_daphne_is_the_first_installed_app(monkeypatch, tmp_path):
    s = load_settings(monkeypatch, tmp_path)
    assert s["INSTALLED_APPS"][0] == "daphne"
    assert {"channels", "django_htmx", "template_partials", "labs"} <= set(s["INSTALLED_APPS"])
    assert "whitenoise.middleware.WhiteNoiseMiddleware" in s["MIDDLEWARE"]
    assert "django_htmx.middleware.HtmxMiddleware" in s["MIDDLEWARE"]
    assert s["ASGI_APPLICATION"] == "lab_project.asgi.application"


def test_default_database_is_sqlite_in_wal_mode_with_immediate_transactions(monkeypatch, tmp_path):
    s = load_settings(monkeypatch, tmp_path)
    db = s["DATABASES"]["default"]
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert Path(db["NAME"]) == tmp_path / "data" / "db.sqlite3"
    assert db["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert "journal_mode=WAL" in db["OPTIONS"]["init_command"]
    assert db["OPTIONS"]["timeout"] >= 5
    assert db["TEST"]["NAME"] == str(tmp_path / "test.sqlite3")


def test_sqlite_connections_are_kept_like_postgresql_ones(monkeypatch, tmp_path):
    # Django's SQLite default (0) reopened the file for every request and consumer read.
    assert load_settings(monkeypatch, tmp_path)["DATABASES"]["default"]["CONN_MAX_AGE"] == 60
    s = load_settings(monkeypatch, tmp_path, DATABASE_CONN_MAX_AGE="0")
    assert s["DATABASES"]["default"]["CONN_MAX_AGE"] == 0


def test_sqlite_connection_really_is_in_wal_mode(db):
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("SQLite only")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0].lower() == "wal"


def test_database_url_switches_to_postgresql(monkeypatch, tmp_path):
    s = load_settings(monkeypatch, tmp_path, DATABASE_URL="postgres://lab:pw@db.internal:5432/lab")
    db = s["DATABASES"]["default"]
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["HOST"], db["NAME"], db["USER"]) == ("db.internal", "lab", "lab")


def test_postgresql_uses_a_pool_per_process_not_persistent_connections(monkeypatch, tmp_path):
    # Django: under ASGI, disable persistent connections and pool instead. A request's thread
    # never reuses its connection, which stayed open until the thread was collected.
    url = "postgres://lab:pw@db.internal:5432/lab"
    db = load_settings(monkeypatch, tmp_path, DATABASE_URL=url)["DATABASES"]["default"]
    assert db["CONN_MAX_AGE"] == 0
    assert db["OPTIONS"]["pool"] == {"min_size": 1, "max_size": 10, "timeout": 30}
    s = load_settings(monkeypatch, tmp_path, DATABASE_URL=url, DATABASE_POOL_SIZE="0")
    assert "pool" not in s["DATABASES"]["default"].get("OPTIONS", {})
    with pytest.raises(ImproperlyConfigured, match="DATABASE_POOL_SIZE"):
        load_settings(monkeypatch, tmp_path, DATABASE_URL=url, DATABASE_POOL_SIZE="-1")


def test_redis_uses_separate_databases_from_the_base(monkeypatch, tmp_path):
    s = load_settings(monkeypatch, tmp_path, REDIS_URL="redis://cache.internal:6380",
                      REDIS_DB_BASE="4")  # fmt: skip
    assert s["CELERY_BROKER_URL"] == "redis://cache.internal:6380/4"
    assert s["CHANNEL_LAYERS"]["default"]["CONFIG"]["hosts"] == [
        {"address": "redis://cache.internal:6380/5"}
    ]
    assert s["CHANNEL_LAYERS"]["default"]["BACKEND"] == "labs.live.channel_layer.LabChannelLayer"
    assert s["LAB_ENGINE_REDIS_URL"] == "redis://cache.internal:6380/6"
    assert s["CACHES"]["default"]["LOCATION"] == "redis://cache.internal:6380/7"


def test_tests_use_redis_databases_from_eight(settings):
    base = int(os.environ.get("LAB_TEST_REDIS_DB_BASE", "8"))
    assert base >= 8
    assert base == settings.REDIS_DB_BASE
    assert os.environ["REDIS_DB_BASE"] == str(base)  # inherited by test subprocesses
    assert settings.CELERY_BROKER_URL.endswith(f"/{base}")
    assert settings.LAB_ENGINE_REDIS_URL.endswith(f"/{base + 2}")


def test_celery_worker_pool_is_threads_sized_for_sleeping_bursts(monkeypatch, tmp_path):
    s = load_settings(monkeypatch, tmp_path)
    assert s["CELERY_WORKER_POOL"] == "threads"
    assert s["CELERY_WORKER_CONCURRENCY"] == 128
    assert s["CELERY_TASK_IGNORE_RESULT"] is True


def test_secret_key_is_required_in_production(monkeypatch, tmp_path):
    with pytest.raises(ImproperlyConfigured, match="DJANGO_SECRET_KEY must be set"):
        load_settings(monkeypatch, tmp_path, DJANGO_DEBUG="false")


def test_production_turns_on_https_protections(monkeypatch, tmp_path):
    s = load_settings(monkeypatch, tmp_path, **PRODUCTION_ENV)
    assert s["DEBUG"] is False
    assert s["SECURE_SSL_REDIRECT"] and s["SESSION_COOKIE_SECURE"] and s["CSRF_COOKIE_SECURE"]
    assert s["SECURE_HSTS_SECONDS"] >= 31536000


@pytest.mark.parametrize("name,value", [("DJANGO_DEBUG", "maybe"), ("REDIS_DB_BASE", "99"),
                                        ("LAB_WORKER_CONCURRENCY", "lots"),
                                        ("DJANGO_CSRF_TRUSTED_ORIGINS", "lab.example.org"),
                                        ("LAB_LOG_LEVEL", "LOUD")])  # fmt: skip
def test_malformed_variable_is_an_error_at_start(monkeypatch, tmp_path, name, value):
    with pytest.raises(ImproperlyConfigured, match=name):
        load_settings(monkeypatch, tmp_path, **{name: value})


def _manage(args: list[str], env: dict[str, str], tmp_path) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DJANGO_", "LAB_", "DATABASE_"))}  # fmt: skip
    clean.update(
        env, LAB_DATA_DIR=str(tmp_path / "data"), DJANGO_SETTINGS_MODULE="lab_project.settings"
    )
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=clean,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_manage_py_refuses_to_start_with_a_malformed_variable(tmp_path):
    result = _manage(["check"], {"DJANGO_DEBUG": "maybe"}, tmp_path)
    assert result.returncode != 0
    assert "DJANGO_DEBUG must be a boolean" in result.stderr


def test_check_deploy_is_clean_under_production_settings(tmp_path):
    result = _manage(["check", "--deploy", "--fail-level", "WARNING"], PRODUCTION_ENV, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_asgi_routes_websockets_behind_origin_validation_and_auth():
    from channels.auth import AuthMiddlewareStack
    from channels.security.websocket import OriginValidator

    from lab_project.asgi import application, django_asgi_app

    assert application.application_mapping["http"].app is django_asgi_app  # behind the limit
    websocket = application.application_mapping["websocket"]
    assert isinstance(websocket, OriginValidator)
    assert type(websocket.application) is type(AuthMiddlewareStack(None))
