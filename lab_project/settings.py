"""Settings for Failure Lab, read from the environment.

Every value has a safe development default; production is ``DJANGO_DEBUG=false`` plus a real
``DJANGO_SECRET_KEY``. The helpers in ``lab_project.env`` refuse malformed values at start,
naming the variable (see README and .env.example for the full list).
"""

from __future__ import annotations

import ipaddress
import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF
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

_BEHIND_TLS_PROXY = env_bool("DJANGO_BEHIND_TLS_PROXY", False)

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
    "csp",
    "labs",
    "lti_tool",  # LTI 1.3 platforms, deployments and the tool's keys (docs/lti.md)
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy (CONTENT_SECURITY_POLICY below) and Permissions-Policy headers.
    "lab_project.csp.LabCSPMiddleware",
    "django_permissions_policy.PermissionsPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "labs.views.launch_token.LaunchTokenMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: turns a refused login of a locked-out client into the 429 page.
    "axes.middleware.AxesMiddleware",
    # A view failing because Redis or the database is away answers a 503 page in words.
    "labs.views.ops.OutageMiddleware",
    # A login with a roster's one-time password sees only the page choosing a new one.
    "labs.views.accounts.ChoosePasswordFirst",
    "lab_project.http_limit.SynchronousChain",  # last: one thread hop per request, not 17
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
    #
    # CONN_HEALTH_CHECKS: every connection is checked before use, so the first request after
    # a PostgreSQL restart gets a live one, not one the restart cut (a 500). With the pool,
    # Django hands it the pool's own check (ConnectionPool.check_connection: one empty round
    # trip as a connection leaves the pool; a dead one is discarded and replaced).
    DATABASES = {
        "default": dj_database_url.parse(_DATABASE_URL, conn_max_age=0, conn_health_checks=True)
    }
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
        # Django's RedisCache with one redis client per process (lab_project/redis_pool.py)
        "BACKEND": "lab_project.redis_pool.SharedRedisCache",
        "LOCATION": CACHE_REDIS_URL,
        "KEY_PREFIX": "fl",
        # Run burst's rate limit reads it on every click: a Redis that stops answering must
        # fail the request (503, reconnecting) within seconds, not hang it.
        "OPTIONS": {
            "socket_connect_timeout": 1,
            "socket_timeout": 2,
            # one pool per process, not one per request (lab_project/redis_pool.py)
            "pool_class": "lab_project.redis_pool.SharedConnectionPool",
        },
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
# One log line per HTTP request saying where its time went (lab_project/http_limit.py).
LAB_REQUEST_TIMING = env_bool("LAB_REQUEST_TIMING", False)
CELERY_WORKER_CONCURRENCY = LAB_WORKER_CONCURRENCY
# Bytes that may wait in the web process for one websocket client that does not read; past
# it the socket is closed with 4008 and the page catches up when it reconnects
# (labs/consumers/base.py, SocketLimits).
LAB_WS_SEND_BUFFER_MAX_BYTES = env_int(
    "LAB_WS_SEND_BUFFER_MAX_BYTES", 4 * 1024 * 1024, min_value=64 * 1024, max_value=1024**3
)
# Milliseconds between two looks of an open websocket at the right that let it in (the Django
# session still signed in, the class still taught or the session still visible): a logout or
# a lost class closes it with 4403 within this long (labs/consumers/base.py, RightCheck).
LAB_WS_RECHECK_MS = env_int("LAB_WS_RECHECK_MS", 2000, min_value=200, max_value=60_000)
# Seconds a launch-scoped token (an LMS launch's lab page without cookies, docs/lti.md) lasts:
# a lesson's sitting; after that the learner opens the lesson again from the course.
LTI_LAUNCH_TOKEN_MAX_AGE_S = env_int(
    "LTI_LAUNCH_TOKEN_MAX_AGE_S", 2 * 3600, min_value=60, max_value=24 * 3600
)
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

# Failed logins are limited by django-axes with two rules (lab_project/login_limits.py,
# docs/operations.md). Per username and address together: after LAB_LOGIN_FAILURE_LIMIT wrong
# passwords that name waits LAB_LOGIN_COOLOFF_SECONDS from there (tries meanwhile check no
# password and do not lengthen the wait), so a class behind one address is never locked out
# together and a classmate's wrong passwords keep a student out for one wait at most. Per
# username from everywhere: LAB_LOGIN_NAME_HOURLY_LIMIT wrong passwords within an hour, then
# no more guesses for that name until the oldest is an hour old. A refused login never reaches
# the password hasher. The failures are rows in the database (the admin lists and clears them).
# Both rules are for browsers the name has not logged in on: a login on this site leaves a
# signed device cookie for that name (LAB_LOGIN_DEVICE_*), and a login for that name from that
# browser is limited only by the cookie's own failure limit, so a student can log in on their
# own computer even while others' wrong passwords pause their name everywhere else.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    # Permissions only: an instructor's admin rights come from teaching a class.
    "labs.services.accounts.TeachingBackend",
]
if env_str("LAB_LOGIN_COOLOFF_MINUTES", ""):
    raise ImproperlyConfigured(
        "LAB_LOGIN_COOLOFF_MINUTES is replaced by LAB_LOGIN_COOLOFF_SECONDS (default 60)"
    )
AXES_HANDLER = "lab_project.login_limits.LoginLimitHandler"
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = env_int("LAB_LOGIN_FAILURE_LIMIT", 5, min_value=3, max_value=100)
AXES_COOLOFF_TIME = timedelta(
    seconds=env_int("LAB_LOGIN_COOLOFF_SECONDS", 60, min_value=10, max_value=3600)
)
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# Every checked wrong password is kept (per username, the newest 1,000): the hourly bound
# counts them.
AXES_ENABLE_ACCESS_FAILURE_LOG = True
LAB_LOGIN_NAME_HOURLY_LIMIT = env_int(
    "LAB_LOGIN_NAME_HOURLY_LIMIT", 30, min_value=3, max_value=1000
)
if LAB_LOGIN_NAME_HOURLY_LIMIT < AXES_FAILURE_LIMIT:
    raise ImproperlyConfigured(
        f"LAB_LOGIN_NAME_HOURLY_LIMIT ({LAB_LOGIN_NAME_HOURLY_LIMIT}) must be at least "
        f"LAB_LOGIN_FAILURE_LIMIT ({AXES_FAILURE_LIMIT})"
    )
# A browser where a name logged in is trusted for that name for LAB_LOGIN_DEVICE_COOKIE_DAYS
# (renewed at every login there), until LAB_LOGIN_DEVICE_FAILURE_LIMIT wrong passwords for
# that name from it, or until the name's password changes. One browser remembers the latest
# LAB_LOGIN_DEVICE_NAMES names (a shared classroom computer).
LAB_LOGIN_DEVICE_COOKIE_NAME = "fl_device"
LAB_LOGIN_DEVICE_COOKIE_DAYS = env_int(
    "LAB_LOGIN_DEVICE_COOKIE_DAYS", 30, min_value=1, max_value=365
)
LAB_LOGIN_DEVICE_FAILURE_LIMIT = env_int(
    "LAB_LOGIN_DEVICE_FAILURE_LIMIT", 5, min_value=1, max_value=20
)
LAB_LOGIN_DEVICE_NAMES = env_int("LAB_LOGIN_DEVICE_NAMES", 10, min_value=1, max_value=30)
# 429 with the rule and when to try again (labs.views.accounts.locked_out).
AXES_LOCKOUT_CALLABLE = "labs.views.accounts.locked_out"
# Only failures are kept: successful logins are not logged with their address.
AXES_DISABLE_ACCESS_LOG = True


def _login_client_address(request) -> str | None:
    """The address failures are counted against. Behind the TLS proxy every connection comes
    from the proxy, so it is the last X-Forwarded-For entry, the one the proxy appended (the
    entries before it are whatever the client sent)."""
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if _BEHIND_TLS_PROXY and forwarded.strip():
        return forwarded.split(",")[-1].strip()
    return request.META.get("REMOTE_ADDR")


AXES_CLIENT_IP_CALLABLE = _login_client_address

# --- Request bodies -----------------------------------------------------------------------
# A form body (file uploads aside) larger than this is refused with 400 before any form reads
# it. The largest one a page sends is a pasted roster (ROSTER_MAX_PASTED characters, at most
# 900 kB percent-encoded); every field has a length limit of its own besides.
DATA_UPLOAD_MAX_MEMORY_SIZE = 1_000_000

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
            else "lab_project.static_storage.ModuleManifestStorage"
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
    if _BEHIND_TLS_PROXY:
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Content-Security-Policy, in development too (django-csp 4; lab_project/csp.py adds the
# page's own websocket origin, ws:// or wss://, to connect-src). Nothing inline: the
# templates load every script and stylesheet from static/ and htmx's indicator <style> is
# switched off (base.html's htmx-config). The Django admin (5.2) has no inline script or
# style either, so it needs no exception. django-csp leaves DEBUG's 404 and 500 pages alone.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
# Permissions-Policy: the lab needs no device, sensor or payment API, nor does any page it
# could be framed in (it cannot: frame-ancestors 'none'). Features Chromium knows only.
PERMISSIONS_POLICY: dict[str, list[str]] = {
    feature: []
    for feature in (
        "accelerometer",
        "autoplay",
        "camera",
        "display-capture",
        "encrypted-media",
        "geolocation",
        "gyroscope",
        "hid",
        "magnetometer",
        "microphone",
        "midi",
        "payment",
        "publickey-credentials-get",
        "screen-wake-lock",
        "serial",
        "usb",
        "xr-spatial-tracking",
    )
}

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
        # only the LAB_REQUEST_TIMING lines log here at INFO
        "lab_project.http_limit": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}

# --- Operations: /metrics and /healthz (docs/operations.md) -------------------------------
# prometheus_client's multiprocess mode: every lab process (daphne, the worker, its journal
# writer) keeps its metrics in files here, and /metrics adds them up. It reads the directory
# from the environment, so the setting is exported for this process and the ones it starts.
LAB_METRICS_DIR = Path(env_str("PROMETHEUS_MULTIPROC_DIR", str(LAB_DATA_DIR / "metrics")))
LAB_METRICS_DIR.mkdir(parents=True, exist_ok=True)
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(LAB_METRICS_DIR))
# Addresses (or networks) that may scrape /metrics without logging in; staff users may too.
LAB_METRICS_ALLOWED_IPS = []
for _item in env_list("LAB_METRICS_ALLOWED_IPS", ["127.0.0.1", "::1"]):
    try:
        LAB_METRICS_ALLOWED_IPS.append(ipaddress.ip_network(_item, strict=True))
    except ValueError:
        raise ImproperlyConfigured(
            "LAB_METRICS_ALLOWED_IPS items must be IP addresses or networks with no host bits "
            f"set (127.0.0.1, 10.0.0.0/8, ::1), got {_item!r}"
        ) from None
# A probe or a scraper inside the network speaks plain HTTP to the web process.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]

# --- Lab -----------------------------------------------------------------------------------
LAB_SCENARIOS_DIR = BASE_DIR / "scenarios"
