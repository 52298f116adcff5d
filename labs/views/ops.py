"""Operations endpoints: ``/metrics`` for Prometheus and ``/healthz`` for probes.

``/metrics`` (:mod:`labs.live.metrics`) answers a scraper whose address is in
``LAB_METRICS_ALLOWED_IPS`` (loopback by default) and staff users; anyone else gets a 404, so
the endpoint does not show it exists. The address is the connection's own (``REMOTE_ADDR``),
never a forwarded header a client could write.

``/healthz`` (:mod:`labs.live.health`) needs no login and says only which checks pass: 200
when all do, 503 naming each failing one. Neither endpoint is cached.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from labs.live import health, metrics


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
