"""A simulated class: bot students whose sessions call the class's shared dependency with a
chosen retry policy and run steady traffic through the real services, so one person can demo
the retry storm and tests and benchmarks can drive it.

Everything goes through the ordinary services (``session_open``, ``session_set_dependency``,
``session_set_policy``, ``session_force_breaker``, ``traffic_start``), so each bot's journal
reads like a student's. The policies are those of the virtual-time storm
(``labs.experiments.metastable``): ``naive`` retries at once, without jitter, with an attempt
timeout below the queue wait a trigger builds, no budget and its breaker forced closed (no
breaker); ``jitter`` adds full-jitter backoff; ``budget`` a retry budget; ``breaker`` keeps
the breaker; ``resilient`` all three; ``mixed`` gives the bots these five in turn.

The bots are marked simulated members of their class (``Membership.simulated``): grades,
prediction pages and student counts leave them out, the dashboard counts them apart, and
:func:`classroom_simulation_cleanup` removes them with their sessions and journals.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import transaction

from labs.engine import Problem
from labs.experiments.metastable import (
    BACKOFF_BASE_MS,
    BACKOFF_CAP_MS,
    BREAKER,
    BUDGET,
    POLICIES,
)
from labs.models import Burst, Classroom, LabSession, Membership, Traffic
from labs.services.lab import (
    SettingsInvalid,
    session_force_breaker,
    session_open,
    session_set_dependency,
    session_set_policy,
)
from labs.services.traffic import (
    ARRIVALS,
    DURATION_RANGE,
    RATE_RANGE,
    TrafficAlreadyRunning,
    traffic_reap_stale,
    traffic_start,
    traffic_stop,
)

POLICY_CHOICES = (*POLICIES, "mixed")
STUDENTS_RANGE = (1, 200)
#: The attempt timeout and attempts of every bot (the storm experiment's defaults).
TIMEOUT_MS = 500
MAX_ATTEMPTS = 4


def bot_policy(name: str) -> tuple[dict, bool]:
    """A session policy dict for a named policy, and whether it keeps its breaker."""
    jitter = name in ("jitter", "resilient")
    budget = name in ("budget", "resilient")
    breaker = name in ("breaker", "resilient")
    policy = {
        "max_attempts": MAX_ATTEMPTS,
        "backoff_base_ms": BACKOFF_BASE_MS if jitter else 0,
        "backoff_cap_ms": BACKOFF_CAP_MS if jitter else 0,
        "jitter": "full" if jitter else "none",
        "attempt_timeout_ms": TIMEOUT_MS,
        "deadline_ms": None,
        "breaker": {
            "kind": BREAKER.kind,
            "failure_threshold": BREAKER.failure_threshold,
            "cooldown_ms": BREAKER.cooldown_ms,
        },
        "retry_budget": (
            {"token_ratio": BUDGET.token_ratio, "max_tokens": BUDGET.max_tokens} if budget else None
        ),
    }
    return policy, breaker


def validate_simulation(
    students: object, policy: object, rate: object, duration_s: object, arrivals: object
) -> list[Problem]:
    """Problems with a simulation's settings, each naming the option and its range."""
    problems = []
    for name, value, (low, high) in (
        ("students", students, STUDENTS_RANGE),
        ("rate", rate, RATE_RANGE),
        ("for", duration_s, DURATION_RANGE),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            problems.append(Problem(name, f"must be between {low} and {high} (got {value!r})"))
    if policy not in POLICY_CHOICES:
        problems.append(
            Problem("policy", f"must be one of {', '.join(POLICY_CHOICES)} (got {policy!r})")
        )
    if arrivals not in ARRIVALS:
        problems.append(
            Problem("arrivals", f"must be one of {', '.join(ARRIVALS)} (got {arrivals!r})")
        )
    return problems


@dataclass
class Simulation:
    """What :func:`classroom_simulate` started: the bots' sessions and traffic runs."""

    sessions: list[LabSession] = field(default_factory=list)
    traffic: list[Traffic] = field(default_factory=list)
    policies: dict[int, str] = field(default_factory=dict)


def _bot(classroom: Classroom, i: int):
    users = get_user_model()
    username = f"bot-c{classroom.pk}-{i:03d}"
    with transaction.atomic():
        user, created = users.objects.get_or_create(username=username)
        if created:
            user.set_unusable_password()  # a bot never logs in
            user.save(update_fields=["password"])
        membership, _ = Membership.objects.get_or_create(
            user=user,
            classroom=classroom,
            defaults={"role": Membership.Role.STUDENT, "simulated": True},
        )
        if not membership.simulated:  # a bot made before bots were marked
            Membership.objects.filter(pk=membership.pk).update(simulated=True)
    return user


def classroom_simulate(
    *,
    classroom: Classroom,
    students: int,
    policy: str,
    rate: int,
    duration_s: int,
    arrivals: str = "poisson",
) -> Simulation:
    """Create (or reuse) ``students`` bot students in ``classroom``, put each one's session
    on the class's shared dependency with its policy, and start their traffic (``rate``
    calls/s for ``duration_s`` s). A bot's traffic still running is stopped first.

    Raises SettingsInvalid naming each bad option and its range (nothing created then), and
    SettingsInvalid when the class has no scenario to open sessions on.
    """
    problems = validate_simulation(students, policy, rate, duration_s, arrivals)
    scenario = classroom.scenarios.order_by("position", "pk").first()
    if scenario is None:
        problems.append(Problem("class", "has no scenario assigned; assign one first"))
    if problems:
        raise SettingsInvalid(problems)
    result = Simulation()
    for i in range(students):
        user = _bot(classroom, i)
        session = session_open(user=user, classroom=classroom, scenario=scenario)
        name = POLICIES[i % len(POLICIES)] if policy == "mixed" else policy
        policy_dict, keeps_breaker = bot_policy(name)
        session_set_dependency(session=session, user=user, changes={"mode": "shared"})
        session_set_policy(session=session, user=user, changes=policy_dict)
        session = LabSession.objects.get(pk=session.pk)
        session_force_breaker(
            session=session, user=user, action="reset" if keeps_breaker else "closed"
        )
        traffic_reap_stale(session_id=session.pk)
        traffic_stop(session=session, user=user)
        result.sessions.append(session)
        result.policies[session.pk] = name
    # Start every bot's traffic last, close together, so the load arrives at once; in a
    # chain of students, the front tier's only (the others answer its calls).
    for session in result.sessions:
        if session.tier and session.tier > 1:
            continue
        result.traffic.append(
            _start_when_free(session, rate=rate, duration_s=duration_s, arrivals=arrivals)
        )
    return result


def _start_when_free(session: LabSession, **values) -> Traffic:
    """Start the bot's traffic; a run of its own still finishing its calls in flight after a
    stop is waited for (a few seconds at most: calls are never cut in half)."""
    for _ in range(600):
        try:
            return traffic_start(session=session, user=session.owner, **values)
        except TrafficAlreadyRunning:
            time.sleep(0.1)
    return traffic_start(session=session, user=session.owner, **values)


@dataclass
class Cleanup:
    """What :func:`classroom_simulation_cleanup` removed (or, ``still_running``, could not)."""

    accounts: int = 0
    sessions: int = 0
    journal_rows: int = 0
    still_running: list[str] = field(default_factory=list)


def classroom_simulation_cleanup(*, classroom: Classroom, wait_s: float = 30.0) -> Cleanup:
    """Remove the class's simulated students (bots), their sessions and their journals.

    Their traffic is stopped first and waited for (up to ``wait_s`` s: a running call is never
    cut in half, so a run ends when its calls in flight have finished); a bot whose traffic
    or burst is still running then is left as it is and named in ``still_running``, so no
    worker writes rows for a session that is gone. A bot account that is a member of no other
    class is deleted; its sessions, bursts, traffic runs, predictions and journal rows go with
    it (and its engine state in Redis). Real students are never touched.
    """
    from labs.live import runtime

    memberships = list(
        Membership.objects.filter(classroom=classroom, simulated=True).select_related("user")
    )
    users = [m.user for m in memberships]
    sessions = list(LabSession.objects.filter(classroom=classroom, owner__in=users))
    for session in sessions:
        traffic_reap_stale(session_id=session.pk)
        traffic_stop(session=session, user=session.owner)

    def busy() -> set[int]:
        ids = [s.pk for s in sessions]
        running = set(
            Traffic.objects.filter(session__in=ids, status__in=Traffic.ACTIVE_STATUSES).values_list(
                "session_id", flat=True
            )
        )
        return running | set(
            Burst.objects.filter(session__in=ids, status__in=Burst.ACTIVE_STATUSES).values_list(
                "session_id", flat=True
            )
        )

    deadline = time.monotonic() + wait_s
    running = busy()
    while running and time.monotonic() < deadline:
        time.sleep(0.2)
        for session_id in running:
            traffic_reap_stale(session_id=session_id)
        running = busy()

    result = Cleanup()
    kept = {s.owner_id for s in sessions if s.pk in running}
    result.still_running = sorted(u.get_username() for u in users if u.pk in kept)
    gone = [s for s in sessions if s.owner_id not in kept]
    with transaction.atomic():
        result.journal_rows = sum(s.journal.count() for s in gone)
        result.sessions = len(gone)
        LabSession.objects.filter(pk__in=[s.pk for s in gone]).delete()
        for membership in memberships:
            if membership.user_id in kept:
                continue
            membership.delete()
            user = membership.user
            if not user.memberships.exists() and not user.has_usable_password():
                user.delete()
            result.accounts += 1

    def forget_engine_state() -> None:
        for session in gone:
            runtime.session_store(session.pk).clear()
            runtime.engine_redis().delete(runtime.dependency_config_key(session.pk))

    transaction.on_commit(forget_engine_state)
    return result
