"""Burst history, replay and compare."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404

from labs.engine import Problem, ValidationError, merge_settings, parse_policy
from labs.engine.replay import (
    Replay,
    compare_scenario,
    parse_start,
    policy_of,
    replay,
    step_policies,
)
from labs.engine.validate import validate_policy
from labs.experiments import metastable
from labs.journal.store import event_payload
from labs.models import (
    Burst,
    LabSession,
    Scenario,
)
from labs.presenters.lessons import step_sentence
from labs.presenters.replay import PRESET_LABELS

# --- burst history, replay and compare -------------------------------------------------------

#: Bursts per page of the session page's history.
HISTORY_PAGE = 10


def burst_history(session: LabSession, page: int = 1) -> tuple[list[dict[str, Any]], int, int]:
    """One page of the session's bursts, newest first: (rows, page, pages). Each row is the
    burst's facts, its summary, whether it can be replayed (a finished burst with a
    recorded start state) and whether its start state was recorded at all. A page past the end is the last page."""
    bursts = Burst.objects.filter(session=session).order_by("-number")
    count = bursts.count()
    pages = max(1, -(-count // HISTORY_PAGE))
    page = min(max(1, page), pages)
    rows = []
    for burst in bursts[(page - 1) * HISTORY_PAGE : page * HISTORY_PAGE]:
        rows.append(
            {
                "id": burst.pk,
                "number": burst.number,
                "status": burst.status,
                "size": burst.size,
                "concurrency": burst.concurrency,
                "summary": burst.summary or {},
                "replayable": burst.status == Burst.Status.DONE and bool(burst.start_state),
                "recorded": bool(burst.start_state),
            }
        )
    return rows, page, pages


def session_burst(session: LabSession, number: int) -> Burst:
    """Burst ``number`` of a session the caller may already see; Http404 if there is none."""
    return get_object_or_404(Burst, session=session, number=number)


def burst_events(burst: Burst) -> list[dict[str, Any]]:
    """The journal rows of one burst, oldest first, as payloads."""
    return [event_payload(r) for r in burst.events.order_by("seq")]


def burst_replay(burst: Burst, policy_changes: dict[str, Any] | None) -> Replay:
    """Replay a finished burst in virtual time with its own policy and ``policy_changes``
    merged over it. Reads only: no journal row, no Redis, the session's breaker untouched.

    Raises ValidationError (fields named ``policy.…`` with their ranges) for a bad policy,
    nothing run; ValueError when the burst has no usable start state.
    """
    if burst.status != Burst.Status.DONE or not burst.start_state:
        raise ValueError(f"burst {burst.number} has no recorded start state to replay")
    start = parse_start(burst.start_state)
    merged = merge_settings(start.policy, policy_changes or {})
    problems = validate_policy(merged)
    if problems:
        raise ValidationError(problems)
    return replay(start, policy=merged)


def comparable_scenarios() -> list[Scenario]:
    """The scenarios a comparison may run (the active ones)."""
    return list(Scenario.objects.filter(is_active=True).order_by("position", "slug"))


def policy_comparison(
    *, scenario_slug: str, seed: int | None, policy_a: dict[str, Any], policy_b: dict[str, Any]
) -> dict[str, Any]:
    """Run an active scenario's script (with ``seed`` if given) under two policies in virtual
    time (:func:`labs.engine.replay.compare_scenario`); reads only.

    A scenario on the class's shared dependency is not a script one session can run alone
    (its storm is the class's load): it is compared on the shared model instead
    (:func:`shared_comparison`), and the result says so (``shared``).

    Raises ValidationError naming ``scenario``, ``seed``, ``a.…`` or ``b.…`` with what is
    allowed.
    """
    scenario = Scenario.objects.filter(slug=scenario_slug, is_active=True).first()
    if scenario is None:
        raise ValidationError([Problem("scenario", f"no active scenario {scenario_slug!r}")])
    script = dict(scenario.script) if isinstance(scenario.script, dict) else {}
    if (script.get("dependency") or {}).get("mode") == "shared":
        return shared_comparison(scenario=scenario, seed=seed, policy_a=policy_a, policy_b=policy_b)
    if seed is not None:
        script["seed"] = seed
    result = compare_scenario(script, policy_b, policy_a=policy_a, names=("a", "b"))
    result["name"] = scenario.title
    return result


#: The class a comparison on the shared dependency simulates: the storm lesson's (30
#: students calling at 5 calls/s each, seeded Poisson arrivals, 60 s, an 8 s down trigger at
#: 10 s) on the default shared dependency (8 servers x 40 ms, a 2 s queue).
SHARED_COMPARE = metastable.MetastableParams(clients=30, rate=5, arrivals="poisson", duration_s=60)


def shared_comparison(
    *, scenario: Scenario, seed: int | None, policy_a: dict[str, Any], policy_b: dict[str, Any]
) -> dict[str, Any]:
    """Two policies on the shared dependency's model in virtual time
    (:func:`labs.experiments.metastable.figures_for`, the experiments' model): every one of
    :data:`SHARED_COMPARE`'s students with the policy (merged over the scenario's own), the
    same arrivals and trigger for both. Raises ValidationError naming ``seed``, ``a.…`` or
    ``b.…``."""
    script = scenario.script if isinstance(scenario.script, dict) else {}
    base = script.get("policy") if isinstance(script.get("policy"), dict) else {}
    params = metastable.MetastableParams(
        **{**SHARED_COMPARE.__dict__, "seed": script.get("seed", 0) if seed is None else seed}
    )
    problems = [
        Problem("seed", f"must be a whole number between 0 and "
                        f"{int(metastable.LIMITS['seed'].max or 0)} on the shared dependency's model")
        for p in metastable.validate(params) if p.field == "seed"
    ]  # fmt: skip
    merged = {}
    for name, changes in (("a", policy_a), ("b", policy_b)):
        merged[name] = merge_settings(base, changes)
        problems += [
            Problem(name + p.field.removeprefix("policy"), p.message)
            for p in validate_policy(merged[name])
        ]
    if problems:
        raise ValidationError(problems)
    return {
        "shared": True,
        "name": scenario.title,
        "seed": params.seed,
        "params": params,
        "a": metastable.figures_for(params, parse_policy(merged["a"])),
        "b": metastable.figures_for(params, parse_policy(merged["b"])),
    }


def compare_policy(user, token: str, field: str) -> dict[str, Any]:
    """A comparison's policy from the value picked for it: a preset name, ``mine:<session>``
    (that session's policy now), ``burst:<burst>`` (the policy that burst ran with),
    ``step:<scenario>:<n>`` (the policy in force after a lesson's step n) or a JSON object of
    changes. A session or burst ``user`` may not see is refused like one that does not
    exist. Raises ValidationError naming ``field``."""
    token = token.strip()
    kind, _, rest = token.partition(":")
    visible = LabSession.objects.visible_to(user)
    if kind == "mine" and rest.isdigit():
        session = visible.filter(pk=int(rest)).first()
        if session is None:
            raise ValidationError([Problem(field, "is the policy of a session you cannot "
                                                  "see (or that no longer exists): pick another")])  # fmt: skip
        return dict(session.policy or {})
    if kind == "burst" and rest.isdigit():
        burst = Burst.objects.filter(pk=int(rest), session__in=visible).first()
        if burst is None:
            raise ValidationError([Problem(field, "is the policy of a burst you cannot see "
                                                  "(or that no longer exists): pick another")])  # fmt: skip
        policy = (burst.start_state or {}).get("policy")
        if not isinstance(policy, dict):
            raise ValidationError([Problem(field, f"burst {burst.number} was run before the "
                                                  "lab kept a burst's policy: pick another")])  # fmt: skip
        return dict(policy)
    if kind == "step":
        slug, _, number = rest.rpartition(":")
        scenario = Scenario.objects.filter(slug=slug, is_active=True).first()
        script = scenario.script if scenario and isinstance(scenario.script, dict) else {}
        for n, policy in step_policies(script):
            if str(n) == number:
                return policy
        raise ValidationError([Problem(field, "is not a lesson step that changes the policy: "
                                              "pick another")])  # fmt: skip
    return policy_of(token, field)


def compare_shown_policy(scenario_slug: str, changes: dict[str, Any]) -> dict[str, Any] | None:
    """The whole policy a comparison runs with ``changes`` on the lesson ``scenario_slug``
    (merged over the lesson's own policy, defaults applied; over the defaults for a dependency
    of one's own, ``scenario_slug`` empty): what the form editing it field by field shows.
    None when the merged policy is not valid (the comparison names the problem)."""
    scenario = (
        Scenario.objects.filter(slug=scenario_slug, is_active=True).first()
        if scenario_slug else None
    )  # fmt: skip
    script = scenario.script if scenario and isinstance(scenario.script, dict) else {}
    base = script.get("policy") if isinstance(script.get("policy"), dict) else {}
    try:
        return parse_policy(merge_settings(base, changes)).to_dict()
    except ValidationError:
        return None


def compare_choices(user, *, also: tuple[str, ...] = ()) -> dict[str, Any]:
    """What a comparison's two policy pickers offer ``user``: the presets (in words), the
    current policy of each of the user's sessions (and of a session or burst named in
    ``also``, ``mine:<id>`` / ``burst:<id>``, that the user may see: a lab page's link), and
    the policy after each lesson step that changes it, per active scenario."""
    visible = LabSession.objects.visible_to(user)
    sessions = list(
        LabSession.objects.filter(owner=user).select_related("scenario").order_by("pk")
    ) if user.is_authenticated else []  # fmt: skip
    mine = [(f"mine:{s.pk}", f"My current policy ({s.scenario.title})") for s in sessions]
    own = {token for token, _ in mine}
    bursts = []
    for token in also:
        kind, _, rest = token.partition(":")
        if not rest.isdigit() or token in own:
            continue
        if kind == "mine":
            other = visible.filter(pk=int(rest)).select_related("scenario", "owner").first()
            if other is not None:
                mine.append((token, f"{other.owner.get_username()}'s current policy "
                                    f"({other.scenario.title})"))  # fmt: skip
        elif kind == "burst":
            burst = Burst.objects.filter(pk=int(rest), session__in=visible).first()
            if burst is not None:
                bursts.append((token, f"The policy burst {burst.number} ran with"))
    steps = []
    for scenario in comparable_scenarios():
        script = scenario.script if isinstance(scenario.script, dict) else {}
        raw = script.get("steps") or []
        options = [
            (f"step:{scenario.slug}:{n}",
             f"After step {n}: {step_sentence(raw[n - 1])}")
            for n, _ in step_policies(script)
        ]  # fmt: skip
        if options:
            steps.append((scenario.title, options))
    return {
        "presets": list(PRESET_LABELS.items()),
        "mine": mine,
        "bursts": bursts,
        "steps": steps,
    }


def dependency_comparison(
    *,
    dependency: dict[str, Any],
    calls: int,
    seed: int | None,
    policy_a: dict[str, Any],
    policy_b: dict[str, Any],
) -> dict[str, Any]:
    """:func:`policy_comparison` for a dependency script instead of a scenario: one burst of
    ``calls`` calls against ``dependency`` (any mode; ``script`` plays its outcomes in order).
    Raises ValidationError naming ``dependency.…``, ``steps[0].burst``, ``a.…`` or ``b.…``."""
    script = {
        "name": "dependency-script",
        "seed": seed or 0,
        "dependency": dependency,
        "steps": [{"burst": calls}],
    }
    result = compare_scenario(script, policy_b, policy_a=policy_a, names=("a", "b"))
    result["name"] = "A dependency of your own"
    return result
