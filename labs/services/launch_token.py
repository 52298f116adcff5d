"""Launch-scoped tokens: the lab page a launch opened works without the tool's cookies.

Inside an LMS's iframe the browser may keep no cookie of the tool (third-party cookies
blocked). A launch that opens a learner's session therefore issues a token (docs/lti.md):
signed with Django's signing (``TimestampSigner``, so it expires), naming a grant kept in the
cache (the server-side state: the user, the lab session, a CSRF secret of its own, the words
the landing page shows once). The page's requests and its websocket carry it; it grants that
user that session's pages only, until it expires or its grant is gone.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.cache import cache
from django.middleware.csrf import CSRF_ALLOWED_CHARS, CSRF_SECRET_LENGTH

logger = logging.getLogger(__name__)

SALT = "labs.launch-token"
#: The query parameter (page URLs, the websocket URL) and header (htmx) carrying a token.
PARAM = "launch"
HEADER = "HTTP_X_LAB_LAUNCH"


def _key(grant_id: str) -> str:
    return f"lti-launch-grant:{grant_id}"


class TokenRefused(Exception):
    """A token that grants nothing here; ``message`` says why in words, ``code`` for the log."""

    MESSAGES = {
        "expired": "Your link from the course has expired. Open the lesson again from your course.",
        "invalid": "This page's link from your course is not valid. Open the lesson again "
        "from your course.",
        "scope": "Your link from the course opens only the lesson it launched. Open other "
        "pages from your course, or sign in to Failure Lab in a tab of its own.",
    }

    def __init__(self, code: str):
        super().__init__(code)
        self.code = code
        self.message = self.MESSAGES[code]


@dataclass(frozen=True)
class Grant:
    """What a valid token grants: ``user`` may use lab session ``session_id``'s pages."""

    grant_id: str
    user: object
    session_id: int
    csrf_secret: str
    #: The launching LMS's origins, which may frame the session's pages (lab_project/csp.py).
    frame_origins: tuple[str, ...] = ()

    @property
    def path_prefix(self) -> str:
        return f"/sessions/{self.session_id}/"

    @property
    def socket_path(self) -> str:
        return f"/ws/sessions/{self.session_id}/"


def launch_token_issue(*, user, session_id: int, frame_origins: list[str], notice: str = "") -> str:
    """A new token for ``user`` on lab session ``session_id``, valid for
    ``LTI_LAUNCH_TOKEN_MAX_AGE_S``; its pages may be framed by ``frame_origins``; ``notice``
    is shown once, on the page it lands on."""
    grant_id = secrets.token_urlsafe(18)
    csrf_secret = "".join(secrets.choice(CSRF_ALLOWED_CHARS) for _ in range(CSRF_SECRET_LENGTH))
    state = {
        "user": user.pk,
        "session": session_id,
        "csrf": csrf_secret,
        "frames": list(frame_origins),
    }
    timeout = settings.LTI_LAUNCH_TOKEN_MAX_AGE_S
    cache.set(_key(grant_id), state, timeout=timeout)
    if notice:
        cache.set(_key(grant_id) + ":notice", notice, timeout=timeout)
    payload = {"g": grant_id, "u": user.pk, "s": session_id}
    return signing.dumps(payload, salt=SALT, compress=False)


def launch_token_read(token: str) -> Grant:
    """The grant ``token`` names, or :class:`TokenRefused` (expired, tampered with, its grant
    gone, or its user no longer active), logged."""
    max_age = settings.LTI_LAUNCH_TOKEN_MAX_AGE_S
    try:
        payload = signing.loads(token, salt=SALT, max_age=max_age)
    except signing.SignatureExpired:
        logger.warning("launch token refused (expired)")
        raise TokenRefused("expired") from None
    except signing.BadSignature:
        logger.warning("launch token refused (invalid): bad signature")
        raise TokenRefused("invalid") from None
    state = cache.get(_key(str(payload.get("g"))))
    if not state or state["user"] != payload.get("u") or state["session"] != payload.get("s"):
        logger.warning("launch token refused (expired): no grant on the server")
        raise TokenRefused("expired")
    user = get_user_model().objects.filter(pk=state["user"], is_active=True).first()
    if user is None:
        logger.warning("launch token refused (invalid): user %s is not active", state["user"])
        raise TokenRefused("invalid")
    return Grant(payload["g"], user, state["session"], state["csrf"], tuple(state["frames"]))


def launch_token_for_path(token: str, path: str) -> Grant:
    """:func:`launch_token_read`, then the path must be one of the launched session's pages
    (or its websocket): anything else is refused (``scope``)."""
    grant = launch_token_read(token)
    if not (path.startswith(grant.path_prefix) or path.startswith(grant.socket_path)):
        logger.warning("launch token refused (scope): %s for session %s", path, grant.session_id)
        raise TokenRefused("scope")
    return grant


def launch_token_notice(grant: Grant) -> str:
    """The words the launch left for its landing page, once (then they are gone)."""
    key = _key(grant.grant_id) + ":notice"
    notice = cache.get(key) or ""
    if notice and not cache.delete(key):
        return ""  # another request of the same page took them first
    return notice


def launch_token_still_valid(grant: Grant) -> bool:
    """For a websocket's periodic re-check: the grant is still on the server, its user
    active."""
    return launch_tokens_still_valid([grant])[0]


def launch_tokens_still_valid(grants: Sequence[Grant]) -> list[bool]:
    """:func:`launch_token_still_valid` for each of ``grants``, in one cache read and one
    query however many there are (every token socket of a process, re-checked together)."""
    if not grants:
        return []
    present = cache.get_many([_key(grant.grant_id) for grant in grants])
    users = {grant.user.pk for grant in grants if present.get(_key(grant.grant_id))}
    active = set(
        get_user_model().objects.filter(pk__in=users, is_active=True).values_list("pk", flat=True)
    ) if users else set()  # fmt: skip
    return [
        bool(present.get(_key(grant.grant_id))) and grant.user.pk in active for grant in grants
    ]
