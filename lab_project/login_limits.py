"""The login limits a classroom can live with, on django-axes' database handler.

Wrong passwords count per username and address together (so a class behind one address is
never locked out together), and per username per hour from anywhere (so guessing stays
bounded however many addresses a guesser has); refused tries check no password. Both apply
only to browsers the name has not logged in on: a trusted browser's device cookie
(``LoginDevice``) is limited by its own failures alone, claimed with a conditional UPDATE.
Settings and the rules in full: docs/operations.md, "Login limits".
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt, AccessFailureLog
from django.conf import settings
from django.core import signing
from django.db.models import F
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac

from labs.models import LoginDevice

HOUR = timedelta(hours=1)
#: The signing salt of device cookies (the key is SECRET_KEY).
DEVICE_SALT = "lab_project.login_limits.device"
#: Where a request keeps the browser it was trusted as: (username, LoginDevice or None).
_TRUSTED = "lab_login_device"


def name_failures(username: str | None, now: datetime | None = None):
    """The failure-log rows of ``username`` within the last hour (any address)."""
    since = (now or timezone.now()) - HOUR
    return AccessFailureLog.objects.filter(username=username, attempt_time__gte=since)


# --- Device cookies --------------------------------------------------------------------------


def device_lifetime() -> timedelta:
    return timedelta(days=settings.LAB_LOGIN_DEVICE_COOKIE_DAYS)


def token_hash(token: str) -> str:
    """What the database keeps of a device token (the cookie alone holds the token)."""
    return hashlib.sha256(token.encode()).hexdigest()


def password_check(user) -> str:
    """A keyed hash of ``user``'s password hash: it changes whenever the password does."""
    return salted_hmac(DEVICE_SALT, user.password, algorithm="sha256").hexdigest()


def device_tokens(cookie: str | None) -> list[str]:
    """The tokens a device cookie carries; none when it is missing, not signed by this site
    with the device salt, malformed, or older than the cookie's lifetime."""
    if not cookie:
        return []
    try:
        tokens = signing.loads(cookie, salt=DEVICE_SALT, max_age=device_lifetime())
    except (signing.BadSignature, ValueError):
        return []
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        return []
    return tokens[: settings.LAB_LOGIN_DEVICE_NAMES]


def device_cookie_value(tokens: list[str]) -> str:
    """The signed (not encrypted) cookie value carrying ``tokens``."""
    return signing.dumps(tokens, salt=DEVICE_SALT, compress=False)


def trusted_device(request, username: str | None) -> LoginDevice | None:
    """The browser of ``request`` when it is trusted for ``username``, with one of its tries
    claimed for this login; None when it is not (no valid cookie for that name, the name's
    password changed since, or its tries are used up).

    Decided once per request: the claim is a conditional UPDATE (``failures`` below the
    limit), so however many tries run at once, at most the limit of them are trusted.
    """
    cached = getattr(request, _TRUSTED, None)
    if cached is not None and cached[0] == username:
        return cached[1]
    device = None
    hashes = [token_hash(t) for t in device_tokens(_device_cookie(request))]
    if username and hashes:
        candidate = (
            LoginDevice.objects.select_related("user")
            .filter(
                token_hash__in=hashes,
                user__username=username,
                created_at__gte=timezone.now() - device_lifetime(),
            )
            .first()
        )
        if candidate is not None and constant_time_compare(
            candidate.password_check, password_check(candidate.user)
        ):
            claimed = LoginDevice.objects.filter(
                pk=candidate.pk, failures__lt=settings.LAB_LOGIN_DEVICE_FAILURE_LIMIT
            ).update(failures=F("failures") + 1)
            device = candidate if claimed else None
    setattr(request, _TRUSTED, (username, device))
    return device


def _device_cookie(request) -> str | None:
    cookies = getattr(request, "COOKIES", None) or {}
    return cookies.get(settings.LAB_LOGIN_DEVICE_COOKIE_NAME)


class LoginLimitHandler(AxesDatabaseHandler):
    """axes' database handler with the hourly bound per username on top of its per name and
    place lockout (AXES_HANDLER), both skipped for a browser trusted for the name."""

    def is_locked(self, request, credentials: dict | None = None) -> bool:
        username = get_client_username(request, credentials)
        if trusted_device(request, username) is not None:
            return False
        if super().is_locked(request, credentials):
            return True
        if not username:
            return False
        return name_failures(username).count() >= settings.LAB_LOGIN_NAME_HOURLY_LIMIT

    def user_login_failed(self, sender, credentials: dict, request=None, **kwargs):
        """A wrong password from a trusted browser counts on that browser only (its claimed
        try stays used; at the limit the browser is forgotten); any other is axes'."""
        if request is not None:
            username = get_client_username(request, credentials)
            device = trusted_device(request, username) if username else None
            if device is not None:
                LoginDevice.objects.filter(
                    pk=device.pk, failures__gte=settings.LAB_LOGIN_DEVICE_FAILURE_LIMIT
                ).delete()
                return
        super().user_login_failed(sender, credentials, request, **kwargs)

    def user_logged_in(self, sender, request, user, **kwargs):
        """A right password from a trusted browser gives its tries back."""
        cached = getattr(request, _TRUSTED, None)
        if cached is not None and cached[1] is not None and cached[0] == user.get_username():
            LoginDevice.objects.filter(pk=cached[1].pk).update(failures=0)
        super().user_logged_in(sender, request, user, **kwargs)

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
