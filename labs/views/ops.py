"""Operations endpoints: ``/metrics`` for Prometheus and ``/healthz`` for probes; and the
page a request gets when the database or Redis is away (:func:`server_error`).

``/metrics`` (:mod:`labs.live.metrics`) answers a scraper whose address is in
``LAB_METRICS_ALLOWED_IPS`` (loopback by default) and staff users; anyone else gets a 404, so
the endpoint does not show it exists. The address is the connection's own (``REMOTE_ADDR``),
never a forwarded header a client could write.

``/healthz`` (:mod:`labs.live.health`) needs no login and says only which checks pass: 200
when all do, 503 naming each failing one. Neither endpoint is cached.
"""

from __future__ import annotations

import ipaddress
import logging
import sys

import redis
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.views import defaults
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from labs.live import health, metrics

logger = logging.getLogger(__name__)


def scrape_allowed(request: HttpRequest) -> bool:
    """Whether ``request`` may read the metrics: an allowed address, or a staff user."""
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        address = None
    if address is not None:
        if address.version == 6 and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in network for network in settings.LAB_METRICS_ALLOWED_IPS):
            return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_active and user.is_staff)


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Every lab process's metrics, in Prometheus's text format."""
    if not scrape_allowed(request):
        raise Http404("Not found")
    return HttpResponse(metrics.exposition(), content_type=metrics.CONTENT_TYPE_LATEST)


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Each check's status as JSON; 200 when every check passes, else 503."""
    report = health.run_checks()
    return JsonResponse(report, status=200 if report["status"] == "ok" else 503)


#: Seconds a page asks the browser (and a person) to wait during an outage.
OUTAGE_RETRY_AFTER_S = 5


def outage_of(exc: BaseException | None) -> str | None:
    """What is away when ``exc`` (or an exception it came from) is a lost connection, in the
    page's words: "its live store (Redis)", "its database"; None for any other error."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
            return "its live store (Redis)"
        if isinstance(exc, (OperationalError, InterfaceError)):
            return "its database"
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def outage_page(what: str) -> HttpResponse:
    """The 503 page saying the lab is reconnecting to ``what`` (see :func:`outage_of`),
    with ``Retry-After``; rendered without the request, which would need both."""
    html = render_to_string("503.html", {"what": what, "retry_after": OUTAGE_RETRY_AFTER_S})
    response = HttpResponse(html, status=503)
    response["Retry-After"] = str(OUTAGE_RETRY_AFTER_S)
    response["Cache-Control"] = "no-store"
    return response


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500`` (DEBUG off): a request that failed because Redis or the database is
    away, anywhere in its handling, gets :func:`outage_page`; any other error Django's 500."""
    what = outage_of(sys.exc_info()[1])
    return defaults.server_error(request) if what is None else outage_page(what)


class OutageMiddleware:
    """A view that fails because Redis or the database is away (a restart, an outage)
    answers :func:`outage_page` instead of a 500, DEBUG or not; the error is logged as a
    warning with its traceback. Synchronous, as every middleware of the chain is
    (``lab_project.http_limit.SynchronousChain``)."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        what = outage_of(exception)
        if what is None:
            return None
        request.database_away = True  # the response's middleware reads no session again
        logger.warning("%s %s: %s is away (%r); answered 503", request.method,
                       request.path, what, exception, exc_info=exception)  # fmt: skip
        return outage_page(what)
