"""Settings for Failure Lab, read from the environment.

Every value has a safe development default; production is ``DJANGO_DEBUG=false`` plus a real
``DJANGO_SECRET_KEY``. The helpers in ``lab_project.env`` refuse malformed values at start,
naming the variable (see README and .env.example for the full list).
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from lab_project.env import (
    env_bool,
    env_database_url,
    env_int,
    env_list,
    env_redis_url,
    env_str,
    redis_db_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DJANGO_DEBUG", True)

_DEV_SECRET_KEY = "django-insecure-failure-lab-development-only-never-in-production"  # noqa: S105
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is false")
    SECRET_KEY = _DEV_SECRET_KEY

ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
for _origin in CSRF_TRUSTED_ORIGINS:
    if not _origin.startswith(("http://", "https://")):
        raise ImproperlyConfigured(
            f"DJANGO_CSRF_TRUSTED_ORIGINS items must start with http:// or https://, got {_origin!r}"
        )

INSTALLED_APPS = [
    # daphne first: its runserver replaces Django's and serves websockets too.
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "template_partials",
    "labs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "lab_project.urls"
ASGI_APPLICATION = "lab_project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------------------
# Unset DATABASE_URL: an embedded SQLite file, tuned for several processes (daphne, the Celery
# worker) writing at once: WAL lets readers run beside the writer, the busy timeout makes a
# writer wait for the lock instead of failing, and IMMEDIATE transactions take the write lock
# at BEGIN, so two transactions cannot both read and then deadlock upgrading to write.
LAB_DATA_DIR = Path(env_str("LAB_DATA_DIR", str(BASE_DIR / "db")))
_DATABASE_URL = env_database_url("DATABASE_URL")
if _DATABASE_URL:
    # PostgreSQL: a connection pool per process (psycopg_pool), not persistent connections.
    # Under ASGI every request runs in a thread of its own, so a persistent connection is
    # never reused and stays open until its thread is collected: a hundred students pressing
    # Run burst at once exhausted max_connections (100). The pool also bounds a worker whose
    # hundred burst threads claim their bursts at the same moment: they wait their turn.
    DATABASES = {"default": dj_database_url.parse(_DATABASE_URL, conn_max_age=0)}
    _pool_size = env_int("DATABASE_POOL_SIZE", 10, min_value=0, max_value=200)
    if _pool_size:
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": _pool_size,
            "timeout": 30,
        }
else:
    LAB_DATA_DIR.mkdir(parents=True, exist_ok=True)
    _test_db_name = Path(env_str("LAB_TEST_DB_NAME", str(BASE_DIR / "db" / "test_db.sqlite3")))
    _test_db_name.parent.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            # LAB_SQLITE_PATH: tests point the worker and daphne they start at the test database.
            "NAME": Path(env_str("LAB_SQLITE_PATH", str(LAB_DATA_DIR / "db.sqlite3"))),
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": (
                    "PRAGMA journal_mode=WAL;"
                    "PRAGMA synchronous=NORMAL;"
                    "PRAGMA busy_timeout=20000;"
                    "PRAGMA foreign_keys=ON;"
                ),
            },
            # A file, not :memory:, so a Celery worker and daphne started by the tests can
            # open the same test database.
            "TEST": {"NAME": str(_test_db_name)},
            # Keep a long-lived thread's connection: Django's default (0) reopened the file and
            # re-ran the PRAGMAs above for every read a websocket consumer makes (a sixth of
            # daphne's CPU at 100 pages), and for every batch of a worker thread. A request's
            # thread ends with the request, and its connection with it.
            "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 60, min_value=0, max_value=3600),
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: one server, separate database numbers per use ----------------------------------
REDIS_URL = env_redis_url("REDIS_URL", "redis://127.0.0.1:6379")
REDIS_DB_BASE = env_int("REDIS_DB_BASE", 0, min_value=0, max_value=12)
CELERY_BROKER_URL = redis_db_url(REDIS_URL, REDIS_DB_BASE + 0)
CHANNEL_LAYER_REDIS_URL = redis_db_url(REDIS_URL, REDIS_DB_BASE + 1)
LAB_ENGINE_REDIS_URL = redis_db_url(REDIS_URL, REDIS_DB_BASE + 2)
CACHE_REDIS_URL = redis_db_url(REDIS_URL, REDIS_DB_BASE + 3)

# Short-lived things that must not reach the database (a roster's one-time passwords between
# the import page and its one download) live in this cache, with a TTL.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": CACHE_REDIS_URL,
        "KEY_PREFIX": "fl",
        # Run burst's rate limit reads it on every click: a Redis that stops answering must
        # fail the request (503, reconnecting) within seconds, not hang it.
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 2},
    }
}

CHANNEL_LAYERS = {
    "default": {
        # channels-redis's pub/sub layer with a pipelined send for the journal writer's
        # batches: labs/live/channel_layer.py says why not the core layer.
        "BACKEND": "labs.live.channel_layer.LabChannelLayer",
        "CONFIG": {"hosts": [{"address": CHANNEL_LAYER_REDIS_URL}]},
    }
}

# --- Celery (read by lab_project/celery.py with namespace CELERY) --------------------------
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Bursts sleep on purpose (that is the lesson), so the worker uses a thread pool sized for
# many concurrent sleep-bound bursts rather than one process per CPU.
CELERY_WORKER_POOL = "threads"
LAB_WORKER_CONCURRENCY = env_int("LAB_WORKER_CONCURRENCY", 128, min_value=1, max_value=1024)
# HTTP requests in Django at once per web process (each runs in a thread of its own, beside
# the event loop that forwards live pushes): lab_project/http_limit.py says why 2.
LAB_HTTP_CONCURRENCY = env_int("LAB_HTTP_CONCURRENCY", 2, min_value=1, max_value=256)
CELERY_WORKER_CONCURRENCY = LAB_WORKER_CONCURRENCY
CELERY_WORKER_PREFETCH_MULTIPLIER = 1

# --- Bursts --------------------------------------------------------------------------------
# A half-open probe's lease: a probe whose worker died frees its slot after this long.
LAB_PROBE_LEASE_MS = env_int("LAB_PROBE_LEASE_MS", 10_000, min_value=100, max_value=600_000)
# A running burst's worker touches its heartbeat this often; a burst whose heartbeat is older
# than LAB_BURST_STALE_SECONDS belonged to a dead worker and is marked interrupted.
LAB_BURST_HEARTBEAT_SECONDS = env_int("LAB_BURST_HEARTBEAT_SECONDS", 1, min_value=1, max_value=60)
LAB_BURST_STALE_SECONDS = env_int("LAB_BURST_STALE_SECONDS", 5, min_value=2, max_value=600)
# A queued burst no worker claimed within this long is marked failed (is a worker running?).
LAB_BURST_QUEUE_TIMEOUT_SECONDS = env_int(
    "LAB_BURST_QUEUE_TIMEOUT_SECONDS", 120, min_value=5, max_value=3600
)
# Where a worker's journal writer runs: "process" (its own process, so journaling never holds
# the interpreter lock that waking bursts need) or "thread".
LAB_JOURNAL_WRITER = env_str("LAB_JOURNAL_WRITER", "process")
if LAB_JOURNAL_WRITER not in ("process", "thread"):
    raise ImproperlyConfigured(
        f"LAB_JOURNAL_WRITER must be 'process' or 'thread', got {LAB_JOURNAL_WRITER!r}"
    )

# --- Auth ----------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "labs:home"
LOGOUT_REDIRECT_URL = "login"

# --- I18N ----------------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("DJANGO_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# --- Static files --------------------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}
# In development WhiteNoise serves straight from the finders, so no collectstatic is needed.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

# --- Security (production: DJANGO_DEBUG=false) ---------------------------------------------
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
if not DEBUG:
    _secure_cookies = env_bool("DJANGO_SECURE_COOKIES", True)
    SESSION_COOKIE_SECURE = _secure_cookies
    CSRF_COOKIE_SECURE = _secure_cookies
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31536000, min_value=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", True)
    if env_bool("DJANGO_BEHIND_TLS_PROXY", False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- Logging -------------------------------------------------------------------------------
_LOG_LEVELS = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
LAB_LOG_LEVEL = env_str("LAB_LOG_LEVEL", "INFO").upper()
if LAB_LOG_LEVEL not in _LOG_LEVELS:
    raise ImproperlyConfigured(
        f"LAB_LOG_LEVEL must be one of {', '.join(sorted(_LOG_LEVELS))}, got {LAB_LOG_LEVEL!r}"
    )
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "labs": {"handlers": ["console"], "level": LAB_LOG_LEVEL, "propagate": False},
        "django": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}

# --- Lab -----------------------------------------------------------------------------------
LAB_SCENARIOS_DIR = BASE_DIR / "scenarios"
