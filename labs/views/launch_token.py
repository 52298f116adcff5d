"""The launch-scoped token on HTTP requests (labs/services/launch_token.py, docs/lti.md).

A request carrying a token (``?launch=`` or the ``X-Lab-Launch`` header htmx sends) is the
token's user on the launched session's pages, cookies or not; any other page, or a token
expired or tampered with, is refused with a page in words (403). CSRF protection stays on:
the grant's own CSRF secret stands in for the CSRF cookie, so a POST must still bring a
token masked from it (the page's ``csrf_token``) and pass Django's origin checks.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from labs.services import launch_token as tokens

REFUSED_TEMPLATE = "labs/launch_token_refused.html"


class LaunchTokenMiddleware:
    """After authentication and messages, before any view (and CSRF's view check)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = request.GET.get(tokens.PARAM) or request.META.get(tokens.HEADER)
        if not token:
            return self.get_response(request)
        try:
            grant = tokens.launch_token_for_path(token, request.path)
        except tokens.TokenRefused as refusal:
            return render(request, REFUSED_TEMPLATE, {"message": refusal.message}, status=403)
        request.user = grant.user

        async def auser():
            return grant.user

        request.auser = auser
        request.launch_grant = grant
        request.launch_token = token
        request.lti_frame_origins = list(grant.frame_origins)
        # The grant's secret stands in for the CSRF cookie the frame may not have.
        request.COOKIES[settings.CSRF_COOKIE_NAME] = grant.csrf_secret
        request.META["CSRF_COOKIE"] = grant.csrf_secret
        if request.method == "GET":
            notice = tokens.launch_token_notice(grant)
            if notice:
                messages.info(request, notice)
        response = self.get_response(request)
        # Never hand the grant's secret out as a cookie.
        request.META["CSRF_COOKIE_NEEDS_UPDATE"] = False
        return response
