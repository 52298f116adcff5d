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

from csp.middleware import CSPMiddleware, PolicyParts
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponseBase


def websocket_origin(request: HttpRequest) -> str | None:
    """``ws://host`` or ``wss://host`` (host with its port) for this request, if allowed."""
    try:
        host = request.get_host()
    except DisallowedHost:
        return None
    return f"{'wss' if request.is_secure() else 'ws'}://{host}"


class LabCSPMiddleware(CSPMiddleware):
    """django-csp's middleware, adding the request's own websocket origin to connect-src."""

    def get_policy_parts(
        self, request: HttpRequest, response: HttpResponseBase, report_only: bool = False
    ) -> PolicyParts:
        parts = super().get_policy_parts(request, response, report_only)
        origin = websocket_origin(request)
        if origin and not report_only:
            update = dict(parts.update or {})
            update["connect-src"] = [*update.get("connect-src", []), origin]
            parts.update = update
        return parts
