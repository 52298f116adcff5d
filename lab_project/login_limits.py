"""The login limits a classroom can live with, on django-axes' database handler.

Two rules, both in settings (``LAB_LOGIN_*``, docs/operations.md):

- **A name from one place.** Wrong passwords are counted per username and address together
  (``AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]``): after
  ``LAB_LOGIN_FAILURE_LIMIT`` of them that pair waits ``LAB_LOGIN_COOLOFF_SECONDS`` from the
  last one. Tries during the wait check no password and do not lengthen it. So a class
  behind one address is never locked out together (every other name from there logs in), and
  a classmate typing a student's name keeps that student out for one wait at most.
- **A name from everywhere, per hour.** A username whose passwords were wrong
  ``LAB_LOGIN_NAME_HOURLY_LIMIT`` times within the last hour (any address: axes' failure log)
  checks no further password until the oldest of them is an hour old. Guessing stays
  infeasible however many addresses a guesser has; an administrator can clear it in the admin
  (Axes: access failures and attempts).

Tries that are refused check no password, and are not counted as guesses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt, AccessFailureLog
from django.conf import settings
from django.utils import timezone

HOUR = timedelta(hours=1)


def name_failures(username: str | None, now: datetime | None = None):
    """The failure-log rows of ``username`` within the last hour (any address)."""
    since = (now or timezone.now()) - HOUR
    return AccessFailureLog.objects.filter(username=username, attempt_time__gte=since)


class LoginLimitHandler(AxesDatabaseHandler):
    """axes' database handler with the hourly bound per username on top of its per name and
    place lockout (AXES_HANDLER)."""

    def is_locked(self, request, credentials: dict | None = None) -> bool:
        if super().is_locked(request, credentials):
            return True
        username = get_client_username(request, credentials)
        if not username:
            return False
        return name_failures(username).count() >= settings.LAB_LOGIN_NAME_HOURLY_LIMIT

    def reset_attempts(
        self,
        *,
        ip_address: str | None = None,
        username: str | None = None,
        ip_or_username: bool = False,
    ) -> int:
        """axes' reset (``manage.py axes_reset_username NAME``, ``axes.utils.reset``), which
        also lifts a name's hourly pause: its failures of the last hour are forgotten."""
        count = super().reset_attempts(
            ip_address=ip_address, username=username, ip_or_username=ip_or_username
        )
        if username:
            name_failures(username).delete()
        return count


@dataclass(frozen=True)
class Refusal:
    """Why a login was refused and how many seconds until it can be tried again."""

    #: "place": this name from this address waits; "hour": this name had too many guesses.
    rule: str
    retry_after_s: int


def refusal(username: str | None, address: str | None) -> Refusal:
    """Which rule refused a login of ``username`` from ``address``, and for how long."""
    now = timezone.now()
    failures = name_failures(username, now)
    if username and failures.count() >= settings.LAB_LOGIN_NAME_HOURLY_LIMIT:
        # The hour frees a guess when the oldest failure that still counts turns an hour old.
        excess = failures.count() - settings.LAB_LOGIN_NAME_HOURLY_LIMIT
        oldest = failures.order_by("attempt_time").values_list("attempt_time", flat=True)
        until = oldest[excess] + HOUR
        return Refusal("hour", max(1, math.ceil((until - now).total_seconds())))
    cool_off = settings.AXES_COOLOFF_TIME
    last = (
        AccessAttempt.objects.filter(username=username, ip_address=address)
        .order_by("-attempt_time")
        .values_list("attempt_time", flat=True)
        .first()
    )
    wait = cool_off if last is None else min(cool_off, last + cool_off - now)
    return Refusal("place", max(1, math.ceil(wait.total_seconds())))


def duration(seconds: float) -> str:
    """``seconds`` in words: "a minute", "30 seconds", "2 minutes", "an hour"."""
    seconds = int(seconds)
    if seconds == 3600:
        return "an hour"
    if seconds == 60:
        return "a minute"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds // 60} minutes"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def login_rules() -> dict[str, object]:
    """The limits as the login and refusal pages state them."""
    return {
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "cooloff": duration(settings.AXES_COOLOFF_TIME.total_seconds()),
        "hourly_limit": settings.LAB_LOGIN_NAME_HOURLY_LIMIT,
    }
