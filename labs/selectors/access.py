"""Who may see what: visible and owned sessions and bursts, a socket's session, a
teacher's class.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import Q
from django.shortcuts import get_object_or_404

from labs.models import (
    Burst,
    Classroom,
    LabSession,
    Membership,
)

# --- one session -----------------------------------------------------------------------------


def visible_burst(user, burst_id: int) -> Burst:
    """The burst ``burst_id`` if ``user`` may see its session, else Http404."""
    return get_object_or_404(
        Burst.objects.select_related("session__scenario", "session__classroom", "session__owner"),
        pk=burst_id,
        session__in=LabSession.objects.visible_to(user),
    )


def visible_session(user, pk: int) -> LabSession:
    """The session ``pk`` if ``user`` may see it, else Http404 (never 403: ids do not leak)."""
    return get_object_or_404(
        LabSession.objects.visible_to(user).select_related("scenario", "classroom", "owner"),
        pk=pk,
    )


def owned_session(user, pk: int, *, related: bool = True) -> LabSession | None:
    """The session ``pk`` if ``user`` owns it, else None: a write view's lookup. One plain
    query by key and owner, where :func:`visible_session` joins the class's memberships and
    de-duplicates (that query, compiled in Python, was a fifth of a Run burst request).
    ``related=False`` leaves the scenario (its whole script), class and owner unread for a
    view that does not show them."""
    if not getattr(user, "is_authenticated", False):
        return None
    sessions = LabSession.objects.filter(owner=user)
    if related:
        sessions = sessions.select_related("scenario", "classroom", "owner")
    try:
        return sessions.get(pk=pk)
    except LabSession.DoesNotExist:
        return None


def owned_session_keys(user, pk: int) -> LabSession | None:
    """The session ``pk`` if ``user`` owns it, else None, with only its keys read: id, owner
    and class. A socket click's check (:func:`labs.clicks.socket_run_burst`), which needs
    no more than those to queue a burst and journal it. One raw query: the ORM's compiling of
    :func:`owned_session`'s was a tenth of a click's CPU. The other fields are deferred (each
    one read costs a query), so this is for code that reads the keys only."""
    if not getattr(user, "is_authenticated", False):
        return None
    table = connection.ops.quote_name(LabSession._meta.db_table)
    found = LabSession.objects.raw(
        f"SELECT id, owner_id, classroom_id FROM {table} WHERE id = %s AND owner_id = %s",  # noqa: S608
        [pk, user.pk],
    )
    return next(iter(found), None)


def signed_in(session_key: str | None, user_id: int | None) -> bool:
    """Whether the Django session ``session_key`` is still unexpired and still signs in
    ``user_id``, an active user: False after a logout (the row is deleted), an expiry, a
    login as someone else in the same browser or the user's deactivation."""
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import SESSION_KEY, get_user_model

    if not session_key or user_id is None:
        return False
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    data = store.load()  # {} when the row is gone or expired
    if str(data.get(SESSION_KEY)) != str(user_id):
        return False
    return get_user_model().objects.filter(pk=user_id, is_active=True).exists()


def socket_session(user, session_id: int) -> tuple[int, int, dict[str, Any]] | None:
    """(session id, last seq, policy) if ``user`` may watch the session live, else None:
    its owner while still a member of its class, an instructor of the class, a superuser.
    (A student removed from the class loses the live page's socket.)"""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    sessions = LabSession.objects.filter(pk=session_id)
    if not user.is_superuser:
        # One join of the user's own membership in the session's class: as its owner (any
        # role) or as an instructor.
        sessions = sessions.filter(
            Q(owner=user) | Q(classroom__memberships__role=Membership.Role.INSTRUCTOR),
            classroom__memberships__user=user,
        )
    row = sessions.values_list("pk", "next_seq", "policy").first()
    return (row[0], row[1] - 1, row[2]) if row else None


def session_policy(session_id: int) -> dict[str, Any] | None:
    """The session's policy, or None if the session is gone."""
    return LabSession.objects.filter(pk=session_id).values_list("policy", flat=True).first()


def teaches(user, classroom_id: int) -> bool:
    """Whether ``user`` teaches the class (staff teach every class)."""
    return Classroom.objects.for_instructor(user).filter(pk=classroom_id).exists()
