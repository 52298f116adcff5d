"""Strict readers for settings taken from the environment.

Each helper either returns a well-formed value or raises ImproperlyConfigured naming the
variable and what is allowed: a typo in a deployment's environment stops the process at start
instead of surfacing later as a puzzling behaviour (the habit of healthchecks' settings).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    env = os.environ if environ is None else environ
    value = env.get(name)
    if value is None:
        return None
    return value.strip()


def env_str(name: str, default: str, *, environ: Mapping[str, str] | None = None) -> str:
    """The variable's value, or ``default`` when it is unset or empty."""
    value = _raw(name, environ)
    return value if value else default


def env_bool(name: str, default: bool, *, environ: Mapping[str, str] | None = None) -> bool:
    """A boolean: 1/0, true/false, yes/no, on/off (any case). Anything else is an error."""
    value = _raw(name, environ)
    if value is None or value == "":
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name} must be a boolean (true/false, 1/0, yes/no, on/off), got {value!r}"
    )


def env_int(
    name: str,
    default: int,
    *,
    min_value: int | None = None,
    max_value: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """An integer, optionally within [min_value, max_value]."""
    value = _raw(name, environ)
    if value is None or value == "":
        result = default
    else:
        try:
            result = int(value, 10)
        except ValueError:
            raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
    if (min_value is not None and result < min_value) or (
        max_value is not None and result > max_value
    ):
        raise ImproperlyConfigured(
            f"{name} must be between {min_value} and {max_value}, got {result}"
        )
    return result


def env_list(
    name: str, default: list[str], *, environ: Mapping[str, str] | None = None
) -> list[str]:
    """A comma-separated list; blank items are an error (``a,,b`` is almost always a typo)."""
    value = _raw(name, environ)
    if value is None or value == "":
        return list(default)
    items = [item.strip() for item in value.split(",")]
    if any(not item for item in items):
        raise ImproperlyConfigured(
            f"{name} must be a comma-separated list without empty items, got {value!r}"
        )
    return items


def env_redis_url(name: str, default: str, *, environ: Mapping[str, str] | None = None) -> str:
    """A redis:// , rediss:// or unix:// URL without a database number (we choose those)."""
    value = env_str(name, default, environ=environ)
    parts = urlsplit(value)
    if parts.scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(
            f"{name} must be a redis://, rediss:// or unix:// URL, got {value!r}"
        )
    if parts.scheme != "unix" and not parts.hostname:
        raise ImproperlyConfigured(f"{name} must name a host, got {value!r}")
    if parts.scheme != "unix" and parts.path not in {"", "/"}:
        raise ImproperlyConfigured(
            f"{name} must not carry a database number (REDIS_DB_BASE chooses them), got {value!r}"
        )
    try:
        parts.port  # noqa: B018  (raises ValueError on a malformed port)
    except ValueError:
        raise ImproperlyConfigured(f"{name} has a malformed port, got {value!r}") from None
    return value


def redis_db_url(url: str, db: int) -> str:
    """``url`` pointed at database number ``db``."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = "&".join(q for q in parts.query.split("&") if q and not q.startswith("db="))
        query = f"{query}&db={db}" if query else f"db={db}"
        return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, ""))


def env_database_url(name: str, *, environ: Mapping[str, str] | None = None) -> str | None:
    """A PostgreSQL URL, or None when unset (the embedded SQLite default)."""
    value = _raw(name, environ)
    if not value:
        return None
    scheme = urlsplit(value).scheme
    if scheme not in {"postgres", "postgresql", "pgsql", "postgis"}:
        raise ImproperlyConfigured(
            f"{name} must be a postgres:// URL (leave it unset for the embedded SQLite), "
            f"got scheme {scheme!r}"
        )
    return value


#: The overrides of a library's private parts that ``LAB_PLAIN`` can switch off, each by name.
OVERRIDES = frozenset({"dispatch", "layer", "kombu", "hub-redis"})


def plain(name: str, *, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``LAB_PLAIN`` (comma-separated names of :data:`OVERRIDES`) asks for the plain
    library instead of the override ``name``: the benchmarks' ``--plain`` measures each
    override beside the library it replaces (docs/scaling.md)."""
    names = {part.strip() for part in (_raw("LAB_PLAIN", environ) or "").split(",")} - {""}
    unknown = names - OVERRIDES
    if unknown:
        raise ImproperlyConfigured(
            f"LAB_PLAIN names unknown overrides {sorted(unknown)}; known: {sorted(OVERRIDES)}"
        )
    return name in names
