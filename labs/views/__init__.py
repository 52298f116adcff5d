"""Views: thin, they read through :mod:`labs.selectors`, write through :mod:`labs.services`
and render through :mod:`labs.presenters` and the templates."""

from __future__ import annotations

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A request that went through django-htmx's middleware (django-htmx's typing tip)."""

    htmx: HtmxDetails


#: Posted by a form while it shows field errors (a hidden input): the answer to a submit that
#: succeeds is then the whole form, so the errors go (a form whose success answers only a
#: part of the page: Run burst, the what-if's replay).
ERRORS_SHOWN = "errors_shown"
