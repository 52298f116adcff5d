"""Lab session services: open a session, change its dependency or policy, force its breaker,
reset it. Bursts are :mod:`labs.services.bursts`'; class-wide actions
:mod:`labs.services.classroom`'. Every change is journaled in the same transaction.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction

from labs.models import Burst, Classroom, LabSession, Membership, Scenario, Traffic
from labs.presenters.text import actor_name


def _initial_settings(scenario: Scenario) -> tuple[dict, dict, int]:
    """Canonical dependency and policy dicts and the seed, from the scenario's script."""
    from labs.engine import parse_dependency, parse_policy

    script = scenario.script if isinstance(scenario.script, dict) else {}
    dependency = parse_dependency(script.get("dependency") or {}).to_dict()
    policy = parse_policy(script.get("policy") or {}).to_dict()
    seed = script.get("seed", 0)
    return dependency, policy, seed if isinstance(seed, int) else 0


def session_open(*, user, classroom: Classroom, scenario: Scenario) -> LabSession:
    """The student's lab session for ``scenario`` in ``classroom``, created on first open.

    Idempotent: a second call returns the same session, unchanged. Raises PermissionDenied
    unless ``user`` is a student member of ``classroom`` and ``scenario`` is assigned to it
    (and active). A concurrent first open by the same student (double click) is settled by the
    unique constraint: the loser reads the winner's row.
    """
    is_student = Membership.objects.filter(
        user=user, classroom=classroom, role=Membership.Role.STUDENT
    ).exists()
    if not is_student:
        raise PermissionDenied("You are not a student in this class.")
    if not classroom.scenarios.filter(pk=scenario.pk, is_active=True).exists():
        raise PermissionDenied("This scenario is not assigned to your class.")

    existing = LabSession.objects.filter(owner=user, classroom=classroom, scenario=scenario).first()
    if existing is not None:
        return existing
    dependency, policy, seed = _initial_settings(scenario)
    try:
        with transaction.atomic():
            return LabSession.objects.create(
                owner=user,
                classroom=classroom,
                scenario=scenario,
                dependency=dependency,
                policy=policy,
                seed=seed,
            )
    except IntegrityError:
        return LabSession.objects.get(owner=user, classroom=classroom, scenario=scenario)


# --- Settings, faults, breaker actions -------------------------------------------------------
#
# Every function below validates first and changes nothing when validation fails; it writes the
# new settings, journals the change (naming who made it) in the same transaction, and touches
# Redis only after the commit, so a rollback leaves Redis as it was.


class SettingsInvalid(ValueError):
    """Settings refused by the engine's validator; ``problems`` name each field and range."""

    def __init__(self, problems) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = list(problems)


def _describe_dependency(dep: dict) -> str:
    mode = dep.get("mode", "healthy")
    if mode == "server":
        return _describe_server(dep.get("server") or {})
    error = dep.get("error", "503")
    latency = dep.get("latency_ms", 5)
    detail = {
        "flaky": f"flaky: fails the next {dep.get('fail_count')} attempt(s) with {error}",
        "down": f"down: every attempt fails with {error}",
        "healthy": "healthy",
        "slow": "slow",
        "error_rate": f"error rate {dep.get('rate')}: attempts fail with {error} at random",
        "outage": f"outage: down for {dep.get('down_for_ms')} ms, then healthy",
        "rate_limited": (
            f"rate limited: 429s for {dep.get('retry_after_ms')} ms from the next call"
        ),
        "script": f"script: {', '.join(dep.get('outcomes') or [])}, then healthy",
        "shared": "shared: the class's shared dependency",
    }.get(mode, mode)
    return f"{detail} ({latency} ms per attempt)"


def _describe_server(server: dict) -> str:
    """A student's own server with a queue in words: its capacity, its longest wait and the
    defences that are on."""
    from labs.engine import SharedConfig
    from labs.presenters.server import describe_config

    return f"your own server with a queue: {describe_config(SharedConfig(**server))}"


def _arm_dependency(session_id: int, dependency: dict, seed: int, *, was_server: bool) -> None:
    import random

    from labs.engine import FakeDependency, parse_dependency
    from labs.engine.routes import arm_routes
    from labs.live import runtime

    config = parse_dependency(dependency)
    store = runtime.session_store(session_id)
    if config.mode == "server" or was_server:
        _arm_server(session_id, config)
    # Scopes of hosts and a B that are no longer configured are cleared (the badge shows the
    # breakers of the scopes that exist).
    for name in [f"h{i}" for i in range(len(config.hosts) if len(config.hosts) > 1 else 0, 8)]:
        store.scoped(name).clear()
    if config.b is None:
        store.scoped("b").clear()
    if config.mode == "server":
        pass  # its state is the server model's, armed above
    elif config.hosts or config.b is not None:  # every host's and B's own state
        arm_routes(config, store=store, clock=runtime.CLOCK)
    else:
        FakeDependency(config, store=store, clock=runtime.CLOCK, rng=random.Random(seed)).arm()
    runtime.publish_dependency(session_id, dependency)


def _arm_server(session_id: int, config) -> None:
    """A student's own server starts fresh when (re)set: idle, its queue empty, its counters
    gone; leaving the mode deletes its keys."""
    from labs.engine import SharedConfig
    from labs.live import runtime

    model = runtime.private_model(session_id)
    model.clear()
    if config.mode == "server":
        model.configure(SharedConfig(**config.server))


def session_set_dependency(
    *, session: LabSession, user, changes: dict, kind: str = "dependency_set", note: str = ""
) -> LabSession:
    """Change the fake dependency of ``session`` (``changes`` merged into the current settings).

    The new mode starts fresh (a flaky counter of N, an outage starting now). Raises
    SettingsInvalid naming every bad field and its allowed range; nothing is changed then.
    """
    from labs.engine import merge_settings, parse_dependency, validate_settings
    from labs.engine.validate import validate_dependency
    from labs.journal import store as journal

    if not isinstance(changes, dict):
        raise SettingsInvalid([_problem("dependency", "must be an object")])
    merged = merge_settings(session.dependency or {}, changes)
    was_server = (session.dependency or {}).get("mode") == "server"
    problems = validate_dependency(merged) or validate_settings(merged, session.policy or {})
    if problems:
        raise SettingsInvalid(problems)
    canonical = parse_dependency(merged).to_dict()
    with transaction.atomic():
        locked = LabSession.objects.select_for_update().get(pk=session.pk)
        locked.dependency = canonical
        locked.save(update_fields=["dependency", "updated_at"])
        verb = {"fault_injected": "fault injected", "fault_restored": "fault ended"}.get(
            kind, "dependency set"
        )
        journal.record(
            [
                journal.entry(
                    locked,
                    kind,
                    user=user,
                    message=f"{verb} by {actor_name(user)}: {_describe_dependency(canonical)}"
                    + (f" ({note})" if note else ""),
                    data={"mode": canonical["mode"], "dependency": canonical},
                )
            ]
        )
        transaction.on_commit(
            lambda: _arm_dependency(locked.pk, canonical, locked.seed, was_server=was_server)
        )
    session.dependency = canonical
    return session


def session_set_policy(*, session: LabSession, user, changes: dict) -> LabSession:
    """Change the guarded client's policy (merged into the current one).

    A running burst or traffic run keeps the policy it started with; the change applies from
    the next one, and the journal says so. Raises SettingsInvalid; nothing is changed then.
    """
    from labs.engine import merge_settings, parse_policy, validate_settings
    from labs.engine.validate import validate_policy
    from labs.journal import store as journal

    if not isinstance(changes, dict):
        raise SettingsInvalid([_problem("policy", "must be an object")])
    merged = merge_settings(session.policy or {}, changes)
    problems = validate_policy(merged) or validate_settings(session.dependency or {}, merged)
    if problems:
        raise SettingsInvalid(problems)
    canonical = parse_policy(merged).to_dict()
    changed = sorted(k for k in canonical if canonical[k] != (session.policy or {}).get(k))
    with transaction.atomic():
        locked = LabSession.objects.select_for_update().get(pk=session.pk)
        locked.policy = canonical
        locked.save(update_fields=["policy", "updated_at"])
        running = locked.bursts.filter(status__in=Burst.ACTIVE_STATUSES).exists()
        flowing = locked.traffic.filter(status__in=Traffic.ACTIVE_STATUSES).exists()
        journal.record(
            [
                journal.entry(
                    locked,
                    "policy_set",
                    user=user,
                    message=(
                        f"policy changed by {actor_name(user)}: "
                        + (", ".join(changed) if changed else "no field changed")
                        + ("; applies from the next burst" if running else "")
                        + ("; the traffic running keeps its policy: restart it" if flowing else "")
                    ),
                    data={"policy": canonical, "changed": changed},
                )
            ]
        )
    session.policy = canonical
    return session


def _problem(field: str, message: str):
    from labs.engine import Problem

    return Problem(field, message)


def session_ensure_state(*, session: LabSession) -> bool:
    """Restore the breaker from the database snapshot if Redis lost it; journal that it did."""
    from labs.journal import store as journal
    from labs.live import runtime
    from labs.services.bursts import restored_entry

    if not runtime.restore_if_lost(session):
        return False
    journal.record([restored_entry(session, None)])
    return True


def session_force_breaker(*, session: LabSession, user, action: str) -> str:
    """Force the breaker ``open`` or ``closed`` (or ``reset`` it to a fresh closed state).

    The transition is journaled with the user's name as its reason. Returns the new state.
    Raises SettingsInvalid for an unknown action.
    """
    from labs.engine import EventList
    from labs.journal import store as journal
    from labs.live import runtime

    if action not in ("open", "closed", "reset"):
        raise SettingsInvalid([_problem("action", "must be one of open, closed, reset")])
    session_ensure_state(session=session)
    events = EventList()
    engine = runtime.build_engine(session, sink=events)
    reason = f"forced by {actor_name(user)}"
    if action == "open":
        engine.breaker.force_open(reason)
    elif action == "closed":
        engine.breaker.force_closed(reason)
    else:
        engine.breaker.reset(reason)
    entries = [
        journal.entry_from_event(
            e, session_id=session.pk, classroom_id=session.classroom_id, burst_id=None
        )
        for e in events
    ]
    for entry in entries:
        entry.actor_id = getattr(user, "pk", None)
    if not entries:
        entries = [
            journal.entry(
                session,
                "breaker_forced",
                user=user,
                message=f"breaker already {engine.breaker.state().upper()}; {reason}, nothing changed",
            )
        ]
    with transaction.atomic():
        journal.record(entries)
        runtime.save_snapshot(session.pk)
    return engine.breaker.state()


def session_reset(*, session: LabSession, user) -> LabSession:
    """Start the session over: settings from the scenario, breaker closed, counters fresh.

    The journal is kept (it is the history of what happened) and call numbers keep counting,
    so old rows stay unambiguous. Refused while a burst is active.
    """
    from labs.journal import store as journal
    from labs.live import runtime
    from labs.services.bursts import BurstAlreadyRunning

    dependency, policy, _seed = _initial_settings(session.scenario)
    with transaction.atomic():
        locked = LabSession.objects.select_for_update().get(pk=session.pk)
        was_server = (locked.dependency or {}).get("mode") == "server"
        if locked.bursts.filter(status__in=Burst.ACTIVE_STATUSES).exists():
            raise BurstAlreadyRunning("A burst is running; reset the session after it ends.")
        locked.dependency = dependency
        locked.policy = policy
        locked.breaker_snapshot = {}
        locked.save(update_fields=["dependency", "policy", "breaker_snapshot", "updated_at"])
        journal.record(
            [
                journal.entry(
                    locked,
                    "session_reset",
                    user=user,
                    state_to="closed",
                    message=(
                        f"session reset by {actor_name(user)}: scenario settings back, "
                        "breaker CLOSED, dependency fresh"
                    ),
                    data={"mode": dependency["mode"]},
                )
            ]
        )

        def fresh_state() -> None:
            runtime.session_store(locked.pk).clear()
            runtime.engine_redis().delete(runtime.dependency_config_key(locked.pk))
            _arm_dependency(locked.pk, dependency, locked.seed, was_server=was_server)

        transaction.on_commit(fresh_state)
    return locked
