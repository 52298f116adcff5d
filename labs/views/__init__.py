"""Views: thin, they read through :mod:`labs.selectors`, write through :mod:`labs.services`
and render through :mod:`labs.presenters` and the templates."""

from __future__ import annotations

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A request that went through django-htmx's middleware (django-htmx's typing tip)."""

    htmx: HtmxDetails
