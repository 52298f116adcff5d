"""Who may see what: visible and owned sessions and bursts, a socket's session, a
teacher's class.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def signed_in_many(logins: Sequence[tuple[str | None, int | None]]) -> list[bool]:
    """For each (session key, user id) of ``logins``, whether the Django session is still
    unexpired and still signs in that user, an active one: False after a logout (the row is
    deleted), an expiry, a login as someone else in the same browser or the user's
    deactivation. With the database session engine (or a cached one over it) that is one
    query for the sessions and one for the users however many logins there are: every open
    socket of a process is re-checked together (``labs.consumers.base.RightCheck``)."""
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore as DatabaseStore
    from django.utils import timezone

    keys = {key for key, user_id in logins if key and user_id is not None}
    store = import_module(settings.SESSION_ENGINE).SessionStore
    signed: dict[str, str] = {}
    if keys and issubclass(store, DatabaseStore):
        decoder = store()
        rows = store.get_model_class().objects.filter(
            session_key__in=keys, expire_date__gt=timezone.now()
        )
        for key, data in rows.values_list("session_key", "session_data"):
            signed[key] = str(decoder.decode(data).get(SESSION_KEY))
    else:
        for key in keys:
            signed[key] = str(store(key).load().get(SESSION_KEY))  # {} when gone or expired
    claimed = {user_id for key, user_id in logins if key in signed and signed[key] == str(user_id)}
    active = set(
        get_user_model().objects.filter(pk__in=claimed, is_active=True).values_list("pk", flat=True)
    ) if claimed else set()  # fmt: skip
    return [user_id in active and signed.get(key) == str(user_id) for key, user_id in logins]


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


def watchable_sessions(watchers: Sequence[tuple[Any, int]]) -> list[bool]:
    """For each (user, session id) of ``watchers``, whether :func:`socket_session` still lets
    the user watch the session live, in two queries however many there are: the periodic
    re-check of every lab page's socket of a process (``labs.consumers.base.RightCheck``)."""
    ids = {session_id for _, session_id in watchers}
    sessions = {
        pk: (owner_id, classroom_id)
        for pk, owner_id, classroom_id in LabSession.objects.filter(pk__in=ids).values_list(
            "pk", "owner_id", "classroom_id"
        )
    }
    users = {user.pk for user, _ in watchers if getattr(user, "is_authenticated", False)}
    roles = {
        (classroom_id, user_id): role
        for classroom_id, user_id, role in Membership.objects.filter(
            classroom_id__in={room for _, room in sessions.values()}, user_id__in=users
        ).values_list("classroom_id", "user_id", "role")
    } if sessions and users else {}  # fmt: skip

    def allowed(user, session_id: int) -> bool:
        if not getattr(user, "is_authenticated", False) or session_id not in sessions:
            return False
        if user.is_superuser:
            return True
        owner_id, room = sessions[session_id]
        role = roles.get((room, user.pk))
        return role is not None and (owner_id == user.pk or role == Membership.Role.INSTRUCTOR)

    return [allowed(user, session_id) for user, session_id in watchers]


def teaching(teachers: Sequence[tuple[Any, int]]) -> list[bool]:
    """:func:`teaches` for each (user, classroom id) of ``teachers`` (an instructor's few
    sockets: one query each)."""
    return [teaches(user, classroom_id) for user, classroom_id in teachers]


def session_policy(session_id: int) -> dict[str, Any] | None:
    """The session's policy, or None if the session is gone."""
    return LabSession.objects.filter(pk=session_id).values_list("policy", flat=True).first()


def teaches(user, classroom_id: int) -> bool:
    """Whether ``user`` teaches the class (staff teach every class)."""
    return Classroom.objects.for_instructor(user).filter(pk=classroom_id).exists()
