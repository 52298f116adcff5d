"""The Content-Security-Policy: django-csp's middleware plus this site's websocket origin.

The policy itself is ``CONTENT_SECURITY_POLICY`` in settings.py: scripts, styles, images,
fonts and connections from this site only, no inline script or style, no eval, no plugins,
no <base> elsewhere, no framing. The live pages open a websocket to the host that served
them (``ws://`` or, behind TLS, ``wss://``); CSP Level 3 browsers count that as ``'self'``
already, older ones (Safari before 15.4) do not, so each response names it in
``connect-src``. The host comes from ``request.get_host()``, which Django has checked against
ALLOWED_HOSTS, so the header never names a host the site does not serve.
"""

from __future__ import annotations

from http.cookies import Morsel

from csp.middleware import CSPMiddleware, PolicyParts
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponseBase


def websocket_origin(request: HttpRequest) -> str | None:
    """``ws://host`` or ``wss://host`` (host with its port) for this request, if allowed."""
    try:
        host = request.get_host()
    except DisallowedHost:
        return None
    return f"{'wss' if request.is_secure() else 'ws'}://{host}"


#: The session key holding the origins of the LMS a user launched from (set by the launch,
#: labs/views/lti.py): only pages of :data:`LTI_FRAMEABLE_VIEWS` may be framed, and only there.
LTI_FRAME_ORIGINS_KEY = "lti_frame_origins"
#: The pages a launch leads to, which an LMS shows in an iframe (docs/lti.md).
LTI_FRAMEABLE_VIEWS = frozenset(
    {
        "labs:session_detail",
        "labs:class_dashboard",
        "labs:storm_panel",
        "labs:lti_deep_link",
        "labs:home",
    }
)


def _launch_origins(request: HttpRequest, session) -> list:
    """The session's launch origins; none when the database is away (the response is then
    the outage page, which must go out at once, unframed: ``request.database_away`` is set
    where the outage was met, so the session is not read, and waited for, again)."""
    if getattr(request, "database_away", False):
        return []
    try:
        return session.get(LTI_FRAME_ORIGINS_KEY) or []
    except DatabaseError:
        return []


def lti_frame_origins(request: HttpRequest) -> list[str]:
    """The origins that may frame this response: the launching platform's, for a page a
    launch leads to in a session (or under a launch token) that came from a launch;
    otherwise none."""
    match = getattr(request, "resolver_match", None)
    session = getattr(request, "session", None)
    if match is None or session is None or match.view_name not in LTI_FRAMEABLE_VIEWS:
        return []
    # A launch-scoped token's grant names its own (labs/views/launch_token.py): no cookie.
    granted = getattr(request, "lti_frame_origins", None)
    origins = granted if granted is not None else _launch_origins(request, session)
    return [o for o in origins if isinstance(o, str) and o.startswith(("https://", "http://"))]


# Python before 3.14 does not know the cookie attribute Partitioned (CHIPS): taught here, as
# pylti1p3 teaches it SameSite; tests/test_security_headers.py checks the header it writes.
if "partitioned" not in Morsel._reserved:  # pragma: no branch
    Morsel._reserved["partitioned"] = "Partitioned"
    Morsel._flags.add("partitioned")


#: django.contrib.messages' cookie (its CookieStorage's name).
MESSAGES_COOKIE = "messages"


def _may_partition(request: HttpRequest) -> bool:
    """Partitioned cookies must be Secure: over TLS, or on a loopback host (a secure context)."""
    if request.is_secure():
        return True
    try:
        host = request.get_host().rsplit(":", 1)[0]
    except DisallowedHost:
        return False
    return host in ("localhost", "127.0.0.1", "[::1]")


def partition_lti_cookies(request: HttpRequest, response: HttpResponseBase) -> None:
    """Inside an LMS's iframe the tool is a third party: its cookies travel only as
    partitioned cookies (CHIPS: ``SameSite=None; Secure; Partitioned``, kept per top-level
    site). The launch's state cookies always are; the session, CSRF and messages cookies are
    for a session that came from a launch. Every other cookie keeps its SameSite=Lax."""
    if not _may_partition(request):
        return
    session = getattr(request, "session", None)
    launched = bool(session is not None and _launch_origins(request, session))
    names = {settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME, MESSAGES_COOKIE}
    names = names if launched else set()
    for name, morsel in response.cookies.items():
        if name.startswith("lti1p3-") or name in names:
            morsel["samesite"] = "None"
            morsel["secure"] = True
            morsel["partitioned"] = True


class LabCSPMiddleware(CSPMiddleware):
    """django-csp's middleware, adding the request's own websocket origin to connect-src; on
    a page a launch leads to, ``frame-ancestors`` names the launching LMS's origins (and
    X-Frame-Options goes: it cannot name an origin), every other page refuses to be framed."""

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        response = super().process_response(request, response)
        if lti_frame_origins(request) and "X-Frame-Options" in response:
            del response["X-Frame-Options"]
        partition_lti_cookies(request, response)
        return response

    def get_policy_parts(
        self, request: HttpRequest, response: HttpResponseBase, report_only: bool = False
    ) -> PolicyParts:
        parts = super().get_policy_parts(request, response, report_only)
        origin = websocket_origin(request)
        if origin and not report_only:
            update = dict(parts.update or {})
            update["connect-src"] = [*update.get("connect-src", []), origin]
            parts.update = update
        frame_origins = lti_frame_origins(request)
        if frame_origins and not report_only:
            parts.replace = {**(parts.replace or {}), "frame-ancestors": frame_origins}
        return parts
