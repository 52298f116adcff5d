"""A Run burst click, whichever way it comes: the form's POST (``labs.views.lab``) or the lab
page's websocket (``labs.consumers.lab``, a ``run_burst`` message).

:func:`start_burst_for` is what both do once they know who clicked and in which session: the
per-student limit, the burst queued (``labs.services.bursts``), the step's prediction
attached. :func:`socket_run_burst` is the websocket's whole click: it has no HTTP request to
lean on, so it reads the user from the socket's Django session itself, as a request would,
checks ownership and the numbers, and answers with the form's message line rendered.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib import auth
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest
from django.template.loader import render_to_string
from django_ratelimit.core import get_usage
from redis.exceptions import RedisError

from labs.forms.lab import BurstForm
from labs.models import LabSession
from labs.selectors.access import owned_session_keys
from labs.services import bursts as burst_services
from labs.services import predictions as prediction_services
from labs.services.launch_token import launch_token_still_valid

#: The lab page's template; its ``burst-message`` partial is the form's message line.
TEMPLATE = "labs/session.html"
#: Run burst clicks a student may make in a minute (refused ones count too), whatever session
#: and whichever way they come.
RUN_BURST_LIMIT_PER_MINUTE = 30
RECONNECTING = "The lab is reconnecting to Redis; nothing was queued. Try again in a moment."


@dataclass(frozen=True, slots=True)
class BurstAnswer:
    """What became of a Run burst click, whichever way it came (the form's POST or the
    page's websocket, :func:`socket_run_burst`): ``status`` as HTTP would say it (200
    queued, 400 bad numbers with ``problems``, 409 one running, 429 over the limit with
    ``retry_after``, 503 Redis unreachable) and the message line's text."""

    status: int
    message: str = ""
    burst: Any = None
    problems: tuple = ()
    retry_after: int | None = None


def start_burst_for(
    request: HttpRequest, session: LabSession, size: Any, concurrency: Any, step: Any
) -> BurstAnswer:
    """Count the click against the student's limit, queue the burst and attach the step's
    prediction: the part of Run burst that does not depend on how the click came."""
    try:
        usage = get_usage(
            request, group="labs.run_burst", key="user",
            rate=f"{RUN_BURST_LIMIT_PER_MINUTE}/m", increment=True,
        )  # fmt: skip
    except RedisError:
        # The counter lives in Redis: if it cannot be read, a burst could not be queued either.
        return BurstAnswer(503, RECONNECTING)
    if usage and usage["should_limit"]:
        return BurstAnswer(
            429,
            f"Too many Run burst clicks: at most {RUN_BURST_LIMIT_PER_MINUTE} a minute for "
            f"each student. Try again in {usage['time_left']} s.",
            retry_after=max(1, usage["time_left"]),
        )
    try:
        burst = burst_services.burst_start(
            session=session, user=request.user, size=size, concurrency=concurrency
        )
    except burst_services.BurstInvalid as exc:
        return BurstAnswer(400, problems=tuple(exc.problems))
    except burst_services.BurstAlreadyRunning as exc:
        return BurstAnswer(409, str(exc))
    except burst_services.BurstNotQueued as exc:
        return BurstAnswer(503, str(exc))
    prediction_services.prediction_attach(session=session, step=step, burst=burst)
    return BurstAnswer(
        200,
        f"Burst {burst.number} queued: {burst.size} call{'s' if burst.size != 1 else ''}.",
        burst,
    )


SOCKET_SIGNED_OUT = "You are signed out: reload the page and sign in again."
SOCKET_NOT_OWNER = "This session belongs to someone else: you can only watch it."


def socket_run_burst(
    session_key: str | None, session_id: int, data: dict[str, Any], *, grant=None
) -> dict:
    """A Run burst click sent over the lab page's websocket (``{"type": "run_burst"}``,
    :mod:`labs.consumers.lab`): the same checks and the same answer as the form's POST,
    without an HTTP request around it.

    The user is read again from the socket's Django session, as a request would read it
    (signed out, deactivated or a changed password: refused), or, for a socket a course
    launch's token let in (``grant``), from that grant while it holds and names this
    session; and must own the session.
    The socket itself was opened from an allowed origin (the websocket's CSRF protection,
    ``AllowedHostsOriginValidator``). Returns the reply: ``status``, and ``html``, the
    form's message line; ``fallback`` instead for numbers the form must show beside their
    fields (the page then posts the form, which answers with them)."""
    request = HttpRequest()
    request.method = "POST"
    request.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    request.user = auth.get_user(request)
    if grant is not None:  # no Django session behind the socket: the launch token's user
        granted = grant.session_id == session_id and launch_token_still_valid(grant)
        request.user = grant.user if granted else AnonymousUser()
    if not request.user.is_authenticated:
        return _socket_reply(403, SOCKET_SIGNED_OUT)
    session = owned_session_keys(request.user, session_id)
    if session is None:
        return _socket_reply(403, SOCKET_NOT_OWNER)
    form = BurstForm({k: str(data.get(k, "")) for k in ("size", "concurrency")})
    form.is_valid()
    if form.too_long or form.errors:
        return {"status": 400, "fallback": True}
    size, concurrency = form.values()
    # Checked before the limit counts the click: the page then posts the form, and that
    # POST is the one click counted.
    if burst_services.validate_burst(size, concurrency):
        return {"status": 400, "fallback": True}
    answer = start_burst_for(request, session, size, concurrency, data.get("step"))
    if answer.status == 400:
        return {"status": 400, "fallback": True}
    reply = _socket_reply(answer.status, answer.message)
    if answer.retry_after is not None:
        reply["retry_after"] = answer.retry_after
    return reply


def _socket_reply(status: int, message: str) -> dict[str, Any]:
    context = {"burst_error": "", "saved": message} if status == 200 else {"burst_error": message}
    context["burst_refusal"] = "running" if status == 409 else ""
    return {
        "status": status,
        "html": render_to_string(f"{TEMPLATE}#burst-message", context).strip(),
    }
