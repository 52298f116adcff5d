"""The LTI 1.3 endpoints a platform calls (docs/lti.md): the OIDC login initiation, the launch
and the tool's key set.

The login and the launch are cross-site requests from the platform, so they are exempt from
Django's CSRF check; the launch is protected instead by the state (a cookie set at login that
the launch must bring back), the nonce used once and the id_token's signature
(:mod:`labs.services.lti`). Every other view keeps CSRF on. A refusal is a page in words
(status 403) and a log line, and nothing is written.
"""

from __future__ import annotations

from django.contrib.auth import login
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from lti_tool.models import Key

from labs.services import lti as lti_services

REFUSED_TEMPLATE = "labs/lti_refused.html"


def refused(request: HttpRequest, error: lti_services.LaunchRefused) -> HttpResponse:
    return render(request, REFUSED_TEMPLATE, {"message": error.message}, status=403)


@require_GET
def jwks(request: HttpRequest) -> JsonResponse:
    """The tool's public keys (the active ones), which platforms check its signatures with."""
    return JsonResponse(Key.objects.as_jwks())


@csrf_exempt
@require_http_methods(["GET", "POST"])
def oidc_login(request: HttpRequest, registration_uuid=None) -> HttpResponse:
    """Third-party login initiation: redirect to the platform's authorization endpoint.
    A platform's own login URL carries its registration's uuid (for platforms that leave the
    optional ``client_id`` out)."""
    launch_url = request.build_absolute_uri(reverse("labs:lti_launch"))
    try:
        return lti_services.lti_login_redirect(
            request, launch_url=launch_url, registration_uuid=registration_uuid
        )
    except lti_services.LaunchRefused as error:
        return refused(request, error)


@csrf_exempt
@require_POST
def launch(request: HttpRequest) -> HttpResponse:
    """A launch from the platform: checked whole, then the user signed in and placed."""
    try:
        lti_launch = lti_services.lti_launch_validate(request)
    except lti_services.LaunchRefused as error:
        return refused(request, error)
    result = lti_services.lti_launch_sign_in(lti_launch=lti_launch)
    login(request, result.user, backend="django.contrib.auth.backends.ModelBackend")
    if result.session is not None:
        return redirect(result.session)
    if result.role == "instructor":
        return redirect("labs:class_dashboard", result.classroom.pk)
    return redirect("labs:home")
