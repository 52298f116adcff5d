"""The class as a chain of students: the instructor arranges the sessions on the class's
shared dependency in tiers; a service in tier k answers each call by calling a service of
tier k+1 through its own policy, and the back tier calls the shared dependency.

A layout is ``LabSession.tier`` on each session in it (1 is the front). It changes only
while no run of the class is going (a chain rebuilt under running calls would send them to
services that are no longer there), is checked by the engine's ``validate_chain`` and is
journaled in every session of the class. The worker builds the chain at the start of each
front-tier run (``labs.worker.chain``); docs/engine.md, "Chains of services".
"""

from __future__ import annotations

import logging
import random
from typing import Any

from django.db import transaction
from django.utils import timezone

from labs.engine import Problem
from labs.engine.chain import MAX_TIERS, MIN_TIERS, validate_chain
from labs.journal import store as journal
from labs.live import runtime
from labs.models import Burst, Classroom, LabSession, Traffic
from labs.presenters.text import actor_name, chain_place
from labs.services.lab import SettingsInvalid
from labs.services.shared import _check_teaches
from labs.services.storm import shared_sessions

logger = logging.getLogger(__name__)

#: How the sessions are put in tiers: in the order they joined, or shuffled.
ORDERS = {"even": "in the order they joined", "random": "at random"}


class ChainBusy(Exception):
    """The class has runs going: the tiers cannot change under them (409)."""

    status = 409


def validate_chain_settings(tiers: object, order: object, available: int) -> list[Problem]:
    """Problems with a layout asked for (``tiers`` None: no chain), each naming the field in
    the form's words and its range."""
    problems = []
    if tiers is not None:
        most = min(MAX_TIERS, available)
        ok = isinstance(tiers, int) and not isinstance(tiers, bool)
        if not ok or not MIN_TIERS <= tiers <= most:  # type: ignore[operator]
            why = (
                f"must be blank (no chain) or between {MIN_TIERS} and {most} tiers"
                if most >= MIN_TIERS
                else f"needs at least {MIN_TIERS} sessions on the shared dependency "
                f"(the class has {available})"
            )
            problems.append(Problem("tiers", f"{why} (got {tiers})", label="Tiers"))
    if order not in ORDERS:
        words = " or ".join(f"{name} ({said})" for name, said in ORDERS.items())
        problems.append(Problem("order", f"must be {words} (got {order})", label="Order"))
    return problems


def layout_for(sessions: list[LabSession], tiers: int, order: str) -> list[list[LabSession]]:
    """``sessions`` in ``tiers`` tiers as equal as can be (the front takes the extra ones),
    in the order they joined or shuffled."""
    ordered = list(sessions)
    if order == "random":
        random.SystemRandom().shuffle(ordered)
    size, extra = divmod(len(ordered), tiers)
    layout, start = [], 0
    for number in range(tiers):
        end = start + size + (1 if number < extra else 0)
        layout.append(ordered[start:end])
        start = end
    return layout


def busy_sessions(classroom: Classroom) -> int:
    """How many of the class's sessions have a run going."""
    traffic = Traffic.objects.filter(
        session__classroom=classroom, status__in=Traffic.ACTIVE_STATUSES
    ).values_list("session_id", flat=True)
    bursts = Burst.objects.filter(
        session__classroom=classroom, status__in=Burst.ACTIVE_STATUSES
    ).values_list("session_id", flat=True)
    return len(set(traffic) | set(bursts))


def busy_message(busy: int) -> str:
    """Why the tiers cannot change now, in the instructor's words."""
    return (
        f"{busy} session(s) of the class are running traffic or a burst: stop them "
        "(Stop traffic on the storm panel) before changing the tiers"
    )


def classroom_set_chain(*, classroom: Classroom, user, values: dict[str, Any]) -> list[list[int]]:
    """Arrange the class's sessions on the shared dependency in ``values["tiers"]`` tiers
    (None: no chain), ``values["order"]`` ``even`` or ``random``; returns the layout (session
    ids, front tier first).

    Raises PermissionDenied unless ``user`` teaches the class, SettingsInvalid naming each
    field and its range, ChainBusy while any session of the class has a run going; nothing
    changes then.
    """
    _check_teaches(user=user, classroom=classroom)
    tiers, order = values.get("tiers"), values.get("order", "even")
    sessions = shared_sessions(classroom)
    problems = validate_chain_settings(tiers, order, len(sessions))
    layout = [] if problems or tiers is None else layout_for(sessions, tiers, order)
    if layout:
        problems = validate_chain([[str(s.pk) for s in tier] for tier in layout])
    if problems:
        raise SettingsInvalid(problems)
    with transaction.atomic():
        locked = list(LabSession.objects.select_for_update().filter(classroom=classroom))
        busy = busy_sessions(classroom)
        if busy:
            raise ChainBusy(busy_message(busy))
        _free_inbound_numbers([s for s in locked if s.tier and s.tier > 1])
        ids = [[s.pk for s in tier] for tier in layout]
        now = timezone.now()
        LabSession.objects.filter(classroom=classroom).update(tier=None, updated_at=now)
        for number, tier_ids in enumerate(ids, start=1):  # one UPDATE a tier
            LabSession.objects.filter(pk__in=tier_ids).update(tier=number, updated_at=now)
        tier_of = {pk: number for number, tier_ids in enumerate(ids, start=1) for pk in tier_ids}
        for session in locked:
            session.tier = tier_of.get(session.pk)
        journal.record([
            journal.entry(
                s, "chain_set", user=user,
                message=_describe(user, layout, order, s.tier),
                data={"tiers": ids, "tier": s.tier, "order": order if ids else None},
            )
            for s in locked
        ])  # fmt: skip
    return ids


def _describe(user, layout: list[list[LabSession]], order: str, tier: int | None) -> str:
    who = actor_name(user)
    if not layout:
        return f"the class's chain removed by {who}: every service calls its own dependency"
    depth = len(layout)
    sizes = ", ".join(str(len(t)) for t in layout)
    said = f"the class's chain set by {who}: {depth} tiers ({sizes} services, {ORDERS[order]})"
    if tier is None:
        return f"{said}; this session is not in it (it is not on the shared dependency)"
    return f"{said}; this service is {chain_place(tier, depth)}"


def _free_inbound_numbers(sessions: list[LabSession]) -> None:
    """A service past the front numbers the calls it answers from a counter in Redis; when
    it leaves its tier, its own next call number moves past them, so no two calls of one
    session share a number."""
    if not sessions:
        return
    try:
        counts = runtime.engine_redis().mget([runtime.inbound_key(s.pk) for s in sessions])
    except Exception:  # Redis away: the numbers may repeat, nothing else is at stake
        logger.warning("could not read the chain's call numbers; they may repeat")
        return
    for session, count in zip(sessions, counts, strict=True):
        if count is not None and int(count) >= session.next_call_no:
            session.next_call_no = int(count) + 1
            session.save(update_fields=["next_call_no", "updated_at"])
