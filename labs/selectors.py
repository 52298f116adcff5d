"""Every read the views and consumers do (selectors read, services write).

A selector returns data, never a response: the views decide between 404 and 403, the
consumers between a close code and a message. Formatting is :mod:`labs.presenters`'.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.shortcuts import get_object_or_404

from labs import presenters
from labs.engine import (
    FAST_FAIL_OUTCOMES,
    Problem,
    ValidationError,
    merge_settings,
    parse_policy,
    validate_policy,
)
from labs.engine.replay import (
    Replay,
    compare_scenario,
    parse_start,
    policy_of,
    replay,
    step_policies,
)
from labs.engine.shared import SECOND_FIELDS, WAIT_BOUNDS_MS, Second, seconds_from_fields
from labs.engine.validate import traffic_defaults
from labs.experiments import metastable
from labs.live.journal import event_payload
from labs.live.runtime import shared_config, shared_model
from labs.models import (
    Burst,
    Classroom,
    JournalEvent,
    LabSession,
    LtiCourseLink,
    LtiGradePost,
    Membership,
    Prediction,
    Scenario,
    SharedDependencyConfig,
    StepProgress,
    Traffic,
)

#: Journal rows per page of the lab page's journal.
JOURNAL_PAGE = 100
#: Bursts the timeline chart shows (older ones scroll out).
CHART_BURSTS = 4
CHART_MAX_EVENTS = 3000


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


def rows_after(session_id: int, after: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` journal payloads after ``after``, oldest first (marked as
    :func:`mark_unreplayable` says)."""
    rows = JournalEvent.objects.filter(session_id=session_id).after(after)[:limit]
    return mark_unreplayable([event_payload(row) for row in rows])


def mark_unreplayable(payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set ``"whatif": False`` on the payloads of bursts that can never be replayed: finished
    without a recorded start state (run before replay existed), interrupted or failed. One
    query for the whole list, none when no row belongs to a burst; the journal row and the
    timeline then offer no what-if for them (:func:`labs.live.rows.journal_row`)."""
    ids = {p["burst"] for p in payloads if p.get("burst")}
    if not ids:
        return payloads
    never = set(
        Burst.objects.filter(pk__in=ids)
        .filter(
            Q(status__in=(Burst.Status.INTERRUPTED, Burst.Status.FAILED))
            | Q(status=Burst.Status.DONE, start_state={})
        )
        .values_list("pk", flat=True)
    )
    if never:
        for payload in payloads:
            if payload.get("burst") in never:
                payload["whatif"] = False
    return payloads


def newest_seq(session_id: int) -> int:
    """The session's newest journal sequence number (0: none yet).

    Plain SQL: every page watching a session asks it a second after its pushes stop, and
    the ORM's query building (``.first()`` and its ordering) cost several times the query."""
    table = connection.ops.quote_name(LabSession._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT next_seq FROM {table} WHERE id = %s", [session_id])  # noqa: S608
        row = cursor.fetchone()
    return (row[0] if row else 1) - 1


def count_after(session_id: int, after: int) -> int:
    return JournalEvent.objects.filter(session_id=session_id, seq__gt=after).count()


def journal_page(session: LabSession, before: int | None = None) -> tuple[list[dict], int | None]:
    """One page of the journal, newest first, and the seq to page on from (None: no older)."""
    rows = JournalEvent.objects.filter(session=session)
    if before is not None:
        rows = rows.filter(seq__lt=before)
    page = list(rows.order_by("-seq")[: JOURNAL_PAGE + 1])
    older = page[JOURNAL_PAGE - 1].seq if len(page) > JOURNAL_PAGE else None
    return mark_unreplayable([event_payload(r) for r in page[:JOURNAL_PAGE]]), older


def chart_events(session: LabSession) -> list[dict[str, Any]]:
    """The journal rows the timeline draws: everything since the start of the last few bursts
    (oldest first, at most ``CHART_MAX_EVENTS``)."""
    oldest = (
        Burst.objects.filter(session=session).order_by("-number").values_list("pk", flat=True)
    )[:CHART_BURSTS]
    ids = list(oldest)
    if not ids:
        return []
    first_seq = (
        JournalEvent.objects.filter(session=session, burst_id__in=ids)
        .order_by("seq")
        .values_list("seq", flat=True)
        .first()
    )
    if first_seq is None:
        return []
    rows = JournalEvent.objects.filter(session=session, seq__gte=first_seq).order_by("-seq")[
        :CHART_MAX_EVENTS
    ]
    payloads = [
        presenters.chart_payload(p) for p in mark_unreplayable([event_payload(r) for r in rows])
    ]
    payloads.reverse()
    return payloads


def burst_summary(burst: Burst | None) -> dict[str, Any] | None:
    """What the summary panel shows for ``burst`` (None: no burst yet): a finished burst's
    stored summary, a running one's counts from its rows so far."""
    if burst is None:
        return None
    facts = presenters.burst_facts(burst)
    if burst.status == Burst.Status.DONE and burst.summary:
        return presenters.summary_panel(facts, burst.summary)
    rows = (event_payload(r) for r in burst.events.order_by("seq"))
    return presenters.summary_panel(facts, presenters.counts_from_events(rows))


def latest_burst(session: LabSession) -> Burst | None:
    return Burst.objects.filter(session=session).order_by("-number").first()


def burst_facts_by_id(burst_ids: list[int]) -> dict[int, dict[str, Any]]:
    """What the summary panel's heading needs of each burst, by burst id, and whether its
    start state is recorded."""
    rows = (
        Burst.objects.filter(pk__in=burst_ids)
        .annotate(recorded=ExpressionWrapper(~Q(start_state={}), output_field=BooleanField()))
        .values("pk", "recorded", *presenters.BURST_FACTS[1:])
    )
    return {row["pk"]: presenters.burst_facts({"id": row["pk"], **row}) for row in rows}


# --- scenarios -------------------------------------------------------------------------------


@dataclass
class ScenarioRun:
    """A scenario run in virtual time: the engine's result, or the problems that stopped it."""

    scenario: Scenario
    result: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def calls(self) -> list[dict]:
        return self.result.get("calls", [])

    @property
    def bursts(self) -> list[dict]:
        return self.result.get("bursts", [])

    @property
    def transitions(self) -> list[dict]:
        return self.result.get("transitions", [])

    @property
    def checks(self) -> list[dict]:
        return presenters.check_rows(self.result.get("checks", []))

    @property
    def checks_failed(self) -> int:
        return sum(1 for c in self.checks if not c["ok"])


def scenario_run_virtual(*, scenario: Scenario) -> ScenarioRun:
    """Run ``scenario``'s script with the engine in virtual time (no Redis, no sleeps).

    Never raises for a bad script: the engine's problems are returned for display.
    """
    from labs.engine import ValidationError as ScriptError
    from labs.engine import parse_scenario, run_scenario

    try:
        result = run_scenario(parse_scenario(scenario.script))
    except ScriptError as exc:
        return ScenarioRun(scenario=scenario, problems=[str(p) for p in exc.problems])
    return ScenarioRun(scenario=scenario, result=result)


@dataclass
class StudentScenario:
    scenario: Scenario
    session: LabSession | None
    #: Steps ticked in the session's current attempt, and the scenario's number of steps.
    steps_done: int = 0
    steps_total: int = 0

    @property
    def description(self) -> str:
        return presenters.lesson_description(self.scenario)

    @property
    def progress(self) -> str:
        return presenters.step_progress_text(
            self.steps_done, self.steps_total, self.session is not None
        )


@dataclass
class StudentClass:
    classroom: Classroom
    scenarios: list[StudentScenario]

    @property
    def groups(self) -> list[dict]:
        """The scenarios in the home page's groups (:data:`labs.presenters.LESSON_GROUPS`), in
        order, empty groups left out."""
        groups = []
        for key, heading, blurb in presenters.LESSON_GROUPS:
            items = [s for s in self.scenarios if presenters.lesson_group(s.scenario) == key]
            if items:
                groups.append({"key": key, "heading": heading, "blurb": blurb, "items": items})
        return groups


def _steps_done(sessions: list[LabSession]) -> dict[int, int]:
    """Steps ticked per session in its current attempt (1 + its resets), in two queries."""
    from django.db.models import Count

    resets = dict(
        JournalEvent.objects.filter(session__in=sessions, kind="session_reset")
        .values_list("session")
        .annotate(n=Count("pk"))
    )
    done: dict[int, int] = {}
    rows = StepProgress.objects.filter(session__in=sessions).values_list("session", "attempt")
    for session_id, attempt in rows:
        if attempt == 1 + resets.get(session_id, 0):
            done[session_id] = done.get(session_id, 0) + 1
    return done


def student_classes(*, user) -> list[StudentClass]:
    """The classes ``user`` studies in, each with its active assigned scenarios and the
    user's lab session for each (None until opened)."""
    classrooms = list(
        Classroom.objects.for_student(user).prefetch_related("scenarios").order_by("name", "pk")
    )
    sessions = {
        (s.classroom_id, s.scenario_id): s
        for s in LabSession.objects.filter(owner=user, classroom__in=classrooms)
    }
    done = _steps_done(list(sessions.values()))
    result = []
    for classroom in classrooms:
        scenarios = sorted(
            (s for s in classroom.scenarios.all() if s.is_active),
            key=lambda s: (s.position, s.title, s.pk),
        )
        items = []
        for s in scenarios:
            session = sessions.get((classroom.pk, s.pk))
            steps = (s.script or {}).get("steps") if isinstance(s.script, dict) else None
            items.append(
                StudentScenario(
                    scenario=s,
                    session=session,
                    steps_done=done.get(session.pk, 0) if session else 0,
                    steps_total=sum(1 for step in steps or [] if isinstance(step, dict)),
                )
            )
        result.append(StudentClass(classroom=classroom, scenarios=items))
    return result


def instructor_classes(*, user) -> list[Classroom]:
    """The classes ``user`` teaches (every class for a superuser), with their counts of real
    students (``student_count``) and of simulated ones (``simulated_count``, bots)."""
    from django.db.models import Count, Q

    student = Q(memberships__role=Membership.Role.STUDENT)
    # pk__in, not a join: a join on memberships here would also narrow the Count below.
    return list(
        Classroom.objects.filter(pk__in=Classroom.objects.for_instructor(user).values("pk"))
        .annotate(
            student_count=Count(
                "memberships", filter=student & Q(memberships__simulated=False), distinct=True
            ),
            simulated_count=Count(
                "memberships", filter=student & Q(memberships__simulated=True), distinct=True
            ),
        )
        .prefetch_related("scenarios")
        .order_by("name", "pk")
    )


# --- Class dashboard (instructor view) --------------------------------------------------------


@dataclass
class DashboardRow:
    """One student session as the class dashboard shows it (the JSON form is :meth:`as_dict`)."""

    session_id: int
    student: str
    username: str
    scenario: str
    scenario_id: int
    mode: str
    state: str
    bursting: bool
    calls: int
    attempts: int
    fast_fails: int
    successes: int
    last_seq: int
    last_summary: dict | None
    #: :func:`progress_fields` of the session (steps done, questions answered and right).
    progress: dict = field(default_factory=dict)

    @property
    def activity(self) -> str:
        return "bursting" if self.bursting else "idle"

    def as_dict(self) -> dict:
        return {
            "session": self.session_id,
            "student": self.student,
            "username": self.username,
            "scenario": self.scenario,
            "scenario_id": self.scenario_id,
            "mode": self.mode,
            "state": self.state,
            "activity": self.activity,
            "calls": self.calls,
            "attempts": self.attempts,
            "fast_fails": self.fast_fails,
            "successes": self.successes,
            "last_seq": self.last_seq,
            "burst_summary": self.last_summary,
            "progress": self.progress,
            "progress_text": presenters.progress_text(self.progress),
            **presenters.dashboard_labels(
                {"state": self.state, "mode": self.mode, "burst_summary": self.last_summary}
            ),
        }


def _dashboard_queryset(classroom_id: int):
    from django.db.models import Count, Exists, IntegerField, Max, OuterRef, Subquery
    from django.db.models.fields.json import KT, JSONField
    from django.db.models.functions import Coalesce

    def journal_total(aggregate, **conditions):
        # A correlated subquery per total, not a JOIN + GROUP BY: each one is a range count on
        # the (session, kind, outcome) index, so no journal row is read, only index entries.
        rows = (
            JournalEvent.objects.filter(session=OuterRef("pk"), **conditions)
            .order_by()
            .values("session")
            .annotate(total=aggregate)
            .values("total")
        )
        return Subquery(rows, output_field=IntegerField())

    def attempt_total(model, **conditions):
        # Rows of the session's current attempt (steps done, predictions): the attempt is the
        # outer row's annotation, one more than its resets.
        rows = (
            model.objects.filter(session=OuterRef("pk"), attempt=OuterRef("attempt"), **conditions)
            .order_by()
            .values("session")
            .annotate(total=Count("*"))
            .values("total")
        )
        return Subquery(rows, output_field=IntegerField())

    active = Burst.objects.filter(session=OuterRef("pk"), status__in=Burst.ACTIVE_STATUSES)
    last_done = (
        Burst.objects.filter(session=OuterRef("pk"), status=Burst.Status.DONE)
        .order_by("-number")
        .values("summary")[:1]
    )
    return (
        LabSession.objects.filter(classroom_id=classroom_id)
        .people()  # simulated students are counted apart (simulated_count)
        .values(
            "pk",
            "owner__username",
            "owner__first_name",
            "owner__last_name",
            "scenario_id",
            "scenario__title",
            "scenario__script",
        )
        .annotate(
            attempt=Coalesce(journal_total(Count("*"), kind="session_reset"), 0) + 1,
        )
        .annotate(
            done=attempt_total(StepProgress),
            answered=attempt_total(Prediction),
            right=attempt_total(Prediction, correct=True),
            mode=KT("dependency__mode"),
            state=KT("breaker_snapshot__state"),
            bursting=Exists(active),
            last_summary=Subquery(last_done, output_field=JSONField()),
            calls=journal_total(Count("*"), kind="call_result"),
            attempts=journal_total(Count("*"), kind="attempt"),
            fast_fails=journal_total(
                Count("*"), kind="call_result", outcome__in=FAST_FAIL_OUTCOMES
            ),
            successes=journal_total(Count("*"), kind="call_result", outcome="success"),
            last_seq=journal_total(Max("seq")),
        )
        .order_by("owner__username", "scenario__position", "pk")
    )


def class_dashboard_rows(*, classroom_id: int) -> list[DashboardRow]:
    """Every lab session of a class with its live-ish state and journal totals, one query.

    Totals (calls, attempts, fast-fails, successes) are counted from the journal, the source
    of truth, so they agree with the exports. ``last_seq`` is the newest journal row the totals
    include: the page applies a pushed delta only if it is newer, which makes the render and
    the live updates add up exactly. The breaker state is the database snapshot (written with
    every transition), not a Redis round trip per session.
    """
    import json

    rows = []
    steps_of: dict[int, tuple[int, int]] = {}
    for r in _dashboard_queryset(classroom_id):
        summary = r["last_summary"]
        if isinstance(summary, str):  # some backends hand a JSON subquery back as text
            summary = json.loads(summary)
        full_name = f"{r['owner__first_name']} {r['owner__last_name']}".strip()
        if r["scenario_id"] not in steps_of:
            steps_of[r["scenario_id"]] = script_step_counts(r["scenario__script"])
        steps = steps_of[r["scenario_id"]]
        state = r["state"] if r["state"] in ("closed", "open", "half_open") else "closed"
        rows.append(
            DashboardRow(
                session_id=r["pk"],
                student=full_name or r["owner__username"],
                username=r["owner__username"],
                scenario=r["scenario__title"],
                scenario_id=r["scenario_id"],
                mode=r["mode"] or "healthy",
                state=state,
                bursting=bool(r["bursting"]),
                calls=r["calls"] or 0,
                attempts=r["attempts"] or 0,
                fast_fails=r["fast_fails"] or 0,
                successes=r["successes"] or 0,
                last_seq=r["last_seq"] or 0,
                last_summary=summary or None,
                progress={
                    "attempt": r["attempt"],
                    "done": r["done"] or 0,
                    "steps": steps[0],
                    "questions": steps[1],
                    "answered": r["answered"] or 0,
                    "right": r["right"] or 0,
                },
            )
        )
    return rows


def simulated_count(classroom_id: int) -> int:
    """How many simulated students (bots of ``simulate_class``) the class has: the dashboard
    names them apart instead of listing them."""
    return Membership.objects.filter(classroom_id=classroom_id).simulated().count()


def simulated_session_ids(classroom_id: int) -> set[int]:
    """The class's sessions of simulated students, which the dashboard leaves out."""
    return set(
        LabSession.objects.filter(classroom_id=classroom_id)
        .simulated()
        .values_list("pk", flat=True)
    )


def state_counts(rows: list[DashboardRow]) -> dict[str, int]:
    """How many sessions are in each breaker state (every state present, zeros included)."""
    counts = {"closed": 0, "open": 0, "half_open": 0}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    return counts


def teaches(user, classroom_id: int) -> bool:
    """Whether ``user`` teaches the class (staff teach every class)."""
    return Classroom.objects.for_instructor(user).filter(pk=classroom_id).exists()


def class_dashboard_snapshot(classroom_id: int) -> list[dict[str, Any]]:
    """The dashboard's rows in their JSON form, each with its HTML (the websocket's snapshot:
    the page inserts a row it lacks as the server renders it)."""
    return [
        row.as_dict() | {"html": presenters.dashboard_row_html(row)}
        for row in class_dashboard_rows(classroom_id=classroom_id)
    ]


def shared_settings(*, classroom: Classroom) -> dict[str, Any]:
    """The class's shared-dependency settings (the engine's defaults when none are saved)."""
    return shared_config(classroom.pk).to_dict()


def latest_traffic(session: LabSession) -> Traffic | None:
    """The session's active traffic run, else its latest one (None if it never ran any)."""
    return session.traffic.order_by("-pk").first()


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
        return shared_comparison(
            scenario=scenario, seed=seed, policy_a=policy_a, policy_b=policy_b
        )
    if seed is not None:
        script["seed"] = seed
    result = compare_scenario(script, policy_b, policy_a=policy_a, names=("a", "b"))
    result["name"] = scenario.title
    return result


#: The class a comparison on the shared dependency simulates: the storm lesson's (30
#: students calling at 5 calls/s each, seeded Poisson arrivals, 60 s, an 8 s down trigger at
#: 10 s) on the default shared dependency (8 servers x 40 ms, a 2 s queue).
SHARED_COMPARE = metastable.MetastableParams(
    clients=30, rate=5, arrivals="poisson", duration_s=60
)


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
             f"After step {n}: {presenters.step_sentence(raw[n - 1])}")
            for n, _ in step_policies(script)
        ]  # fmt: skip
        if options:
            steps.append((scenario.title, options))
    return {
        "presets": list(presenters.PRESET_LABELS.items()),
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


# --- predictions ---------------------------------------------------------------------------


def session_attempt(session: LabSession) -> int:
    """The session's attempt at its scenario: 1, and one more after each reset of the lab
    (counted from the journal's ``session_reset`` rows, the record of each reset)."""
    return 1 + JournalEvent.objects.filter(session=session, kind="session_reset").count()


def session_steps(session: LabSession) -> list[dict]:
    """The scenario's steps (:func:`labs.presenters.scenario_steps`) in the current attempt:
    each with ``done`` (stored on the server) and, for a question, the prediction (None until
    answered)."""
    steps = presenters.scenario_steps(session.scenario)
    attempt = session_attempt(session)
    done = set(
        StepProgress.objects.filter(session=session, attempt=attempt).values_list("step", flat=True)
    )
    by_step = {}
    if any("ask" in step for step in steps):
        by_step = {
            p.step: p
            for p in Prediction.objects.filter(session=session, attempt=attempt).select_related(
                "burst"
            )
        }
    for step in steps:
        step["done"] = step["index"] in done
        if "ask" in step:
            step["prediction"] = prediction = by_step.get(step["index"])
            graded = prediction is not None and prediction.correct is not None
            step["explaining"] = explaining_rows(prediction) if graded else []
    return steps


def session_prediction(session: LabSession, step: int) -> Prediction | None:
    """The session's prediction for step ``step`` in the current attempt, or None."""
    return (
        Prediction.objects.filter(session=session, attempt=session_attempt(session), step=step)
        .select_related("burst")
        .first()
    )


def class_predictions(classroom: Classroom):
    """Every prediction made in ``classroom`` by a real student (simulated ones left out):
    student, scenario, step, answer, observation."""
    return (
        Prediction.objects.filter(session__classroom=classroom)
        .people()
        .select_related("owner", "session__scenario")
        .order_by(
            "session__scenario__position",
            "session__scenario_id",
            "step",
            "owner__username",
            "attempt",
        )
    )


#: The journal rows that explain each measure's value in a graded step.
EXPLAINING_KINDS = {
    "breaker_after": ("transition",),
    "fast_failed": ("transition", "rejected", "call_result"),
    "backoff_ms_total": ("sleep",),
    "dependency_hits": ("attempt", "transition"),
    "attempts_total": ("call_result", "budget_exhausted", "deadline_exceeded", "transition"),
}
EXPLAINING_ROWS = 20


def explaining_rows(prediction: Prediction) -> list[dict]:
    """Up to 20 journal rows of the prediction's burst that show where its measure came from
    (for attempts: each call's result; for waiting time: the sleeps; ...), oldest first."""
    if prediction.burst_id is None:
        return []
    kinds = EXPLAINING_KINDS.get(prediction.measure, ("call_result", "transition"))
    rows = JournalEvent.objects.filter(burst_id=prediction.burst_id, kind__in=kinds)
    return [
        {"seq": r.seq, "kind": r.kind, "message": r.message}
        for r in rows.order_by("seq")[:EXPLAINING_ROWS]
    ]


def class_progress(classroom: Classroom) -> list[dict]:
    """Each student's session in ``classroom``: the current attempt, the steps done in it (of
    the scenario's), the questions answered and right in it, and the earlier attempts.
    Simulated students (bots) are left out: they answer nothing."""
    return _progress_rows(LabSession.objects.filter(classroom=classroom).people())


def session_progress(session_id: int) -> dict | None:
    """One session's :func:`class_progress` row (None when the session is gone): what a
    ``class.progress`` push makes the dashboards show."""
    rows = _progress_rows(LabSession.objects.filter(pk=session_id))
    return rows[0] if rows else None


def script_step_counts(script: Any) -> tuple[int, int]:
    """(steps, steps with a question) of a scenario script (stored JSON, maybe as text)."""
    import json

    if isinstance(script, str):
        script = json.loads(script)
    steps = (script.get("steps") or []) if isinstance(script, dict) else []
    return len(steps), sum(1 for st in steps if isinstance(st, dict) and "ask" in st)


def progress_fields(row: dict) -> dict[str, int]:
    """A :func:`class_progress` row's numbers only (what a push and a snapshot carry)."""
    return {k: row[k] for k in ("attempt", "done", "steps", "questions", "answered", "right")}


def _progress_rows(sessions_qs) -> list[dict]:
    from django.db.models import Count, Q

    sessions = list(
        sessions_qs.select_related("owner", "scenario")
        .annotate(resets=Count("journal", filter=Q(journal__kind="session_reset")))
        .order_by("owner__username", "scenario__position", "scenario_id")
    )
    done = Counter(
        (row["session_id"], row["attempt"])
        for row in StepProgress.objects.filter(session__in=sessions).values("session_id", "attempt")
    )
    answered: Counter = Counter()
    right: Counter = Counter()
    for p in Prediction.objects.filter(session__in=sessions).values(
        "session_id", "attempt", "correct"
    ):
        answered[(p["session_id"], p["attempt"])] += 1
        right[(p["session_id"], p["attempt"])] += int(bool(p["correct"]))
    rows = []
    for s in sessions:
        attempt = 1 + s.resets
        key = (s.pk, attempt)
        steps, questions = script_step_counts(s.scenario.script)
        rows.append(
            {
                "session": s,
                "student": presenters.actor_name(s.owner),
                "scenario": s.scenario.title,
                "attempt": attempt,
                "done": done[key],
                "steps": steps,
                "questions": questions,
                "answered": answered[key],
                "right": right[key],
            }
        )
    return rows


def class_predictions_page(classroom: Classroom) -> dict[str, Any]:
    """What the instructor's predictions page shows, for the page and for each websocket
    update alike: every prediction, the histograms per question, each student's progress."""
    rows = list(class_predictions(classroom).select_related("burst"))
    return {
        "classroom": classroom,
        "questions": presenters.prediction_histograms(rows),
        "progress": class_progress(classroom),
        "predictions": rows,
    }


# --- the storm panel -------------------------------------------------------------------------

#: Seconds of history the storm panel shows (and sends in a snapshot).
STORM_WINDOW_S = 300
#: Complete seconds over which the per-student table's rates are measured (the sessions'
#: own counters in Redis; the lab page's card uses the same window).
STORM_STUDENT_WINDOW_S = presenters.SESSION_WINDOW_S


def session_traffic_defaults(session: LabSession) -> dict[str, Any]:
    """The steady traffic a session's form starts with: its scenario's ``traffic`` (the
    lesson's rate, duration and arrivals), else the lab's defaults."""
    script = session.scenario.script if session.scenario_id else {}
    return traffic_defaults(script)


def storm_traffic_defaults(classroom_id: int) -> dict[str, Any]:
    """What the storm panel's Start traffic offers: the class's lesson's traffic (the first
    of its scenarios, by position, whose script names one; a shared-dependency lesson before
    any other), else the lab's defaults; with the number of sessions on the shared dependency
    and its capacity, so the form can say the load it will offer before it starts."""
    scenarios = sorted(
        Scenario.objects.filter(classrooms__pk=classroom_id).values("position", "slug", "script"),
        key=lambda r: (
            not isinstance(r["script"], dict) or "traffic" not in r["script"],
            ((r["script"] or {}).get("dependency") or {}).get("mode") != "shared",
            r["position"],
            r["slug"],
        ),
    )
    values = traffic_defaults(scenarios[0]["script"] if scenarios else {})
    sessions = LabSession.objects.filter(
        classroom_id=classroom_id, dependency__mode="shared"
    ).count()
    capacity = shared_config(classroom_id).capacity_per_s
    return {
        **values,
        "sessions": sessions,
        "capacity_per_s": capacity,
        "load": presenters.offered_load_text(sessions, values["rate"], capacity),
    }


def storm_configured(classroom_id: int) -> bool:
    """Whether the class has saved shared-dependency settings (the storm panel needs them)."""
    return SharedDependencyConfig.objects.filter(classroom_id=classroom_id).exists()


def _storm_fields(second: int) -> list[str]:
    names = [*SECOND_FIELDS, *(f"q{i}" for i in range(len(WAIT_BOUNDS_MS)))]
    return [f"{second}:{name}" for name in names]


def storm_now_s(classroom_id: int) -> int:
    """The current second on the clock that stamps the counters (Redis's ``TIME``)."""
    return int(shared_model(classroom_id).client.time()[0])


def storm_seconds(classroom_id: int, first: int, last: int) -> list[dict[str, Any]]:
    """The shared dependency's counters for every second from ``first`` to ``last``
    (inclusive), a zero row for a second nobody called in; one ``HMGET`` of exactly those
    fields, never the whole hash (which holds up to an hour of seconds)."""
    if last < first:
        return []
    model = shared_model(classroom_id)
    fields = [f for s in range(first, last + 1) for f in _storm_fields(s)]
    values = model.client.hmget(model.k_counters, fields)
    found = seconds_from_fields(
        {k: v for k, v in zip(fields, values, strict=True) if v is not None}
    )
    by_second = {row.second: row for row in found}
    return [(by_second.get(s) or Second(second=s)).to_dict() for s in range(first, last + 1)]


def storm_model_state(classroom_id: int) -> dict[str, Any]:
    """The class's shared dependency: settings, capacity and the latest trigger (with its
    span in seconds), from the Redis model (the database's settings when Redis has none)."""
    state = shared_model(classroom_id).state()
    config = shared_config(classroom_id)
    trigger = state["trigger"]
    if trigger is not None:
        trigger = {
            **trigger,
            "from_s": trigger["from_us"] / 1e6,
            "until_s": trigger["until_us"] / 1e6,
        }
    return {
        "config": config.to_dict(),
        "capacity_per_s": config.capacity_per_s,
        "trigger": trigger,
    }


def storm_recent(classroom_id: int, back_s: int) -> dict[str, Any]:
    """The shared dependency now: ``now_us`` (Redis's ``TIME``), the counters of the seconds
    ``now - back_s`` to ``now`` (:func:`storm_seconds`) and :func:`storm_model_state`."""
    model = shared_model(classroom_id)
    seconds, micros = model.client.time()
    now = int(seconds)
    return {
        "now": now,
        "now_us": now * 1_000_000 + int(micros),
        "seconds": storm_seconds(classroom_id, now - back_s, now),
        "model": storm_model_state(classroom_id),
    }


def session_shared_classroom(session_id: int) -> int | None:
    """The session's classroom id when its dependency is in ``shared`` mode, else None."""
    row = LabSession.objects.filter(pk=session_id).values_list("classroom_id", "dependency").first()
    if row is None or not isinstance(row[1], dict) or row[1].get("mode") != "shared":
        return None
    return row[0]


def storm_sessions(classroom_id: int) -> list[dict[str, Any]]:
    """The class's sessions as the panel's table names them (one query): id, the student's
    username, the scenario's title and the dependency mode, by student then id."""
    from django.db.models.fields.json import KT

    rows = (
        LabSession.objects.filter(classroom_id=classroom_id)
        .annotate(mode=KT("dependency__mode"))
        .values("pk", "owner__username", "scenario__title", "mode")
        .order_by("owner__username", "pk")
    )
    return [
        {
            "session": r["pk"],
            "student": r["owner__username"],
            "scenario": r["scenario__title"] or "",
            "mode": r["mode"] or "",
        }
        for r in rows
    ]


def _class_offered(model, first: int, last: int) -> int:
    """The class's offered attempts over seconds ``first`` to ``last`` (one ``HMGET``)."""
    fields = [f"{sec}:offered" for sec in range(first, last + 1)]
    return sum(int(v) for v in model.client.hmget(model.k_counters, fields) if v)


def storm_window(classroom_id: int, session_ids: list[int], now: int) -> dict[str, Any]:
    """The per-session figures of the ``STORM_STUDENT_WINDOW_S`` complete seconds before
    ``now`` (``presenters.session_window``), read from the per-session counters the shared
    model keeps beside its own (one pipelined round trip), with the class's offered
    attempts over the same seconds (one ``HMGET``): ``{"now", "first", "last",
    "class_offered", "sessions": {id: figures}}``."""
    first, last = now - STORM_STUDENT_WINDOW_S, now - 1
    model = shared_model(classroom_id)
    class_offered = _class_offered(model, first, last)
    own = model.session_seconds(session_ids, first, last)
    return {
        "now": now,
        "first": first,
        "last": last,
        "class_offered": class_offered,
        "sessions": {
            int(sid): presenters.session_window(rows, class_offered, STORM_STUDENT_WINDOW_S)
            for sid, rows in own.items()
        },
    }


def storm_students(
    classroom_id: int, now: int, sessions: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The panel's per-student table at ``now``: every session of the class
    (:func:`storm_sessions`, or ``sessions`` already read) with its figures over the last
    ``STORM_STUDENT_WINDOW_S`` complete seconds (:func:`storm_window`, Redis only). Rows
    carry ``now`` so a page can tell which second they describe."""
    if sessions is None:
        sessions = storm_sessions(classroom_id)
    window = storm_window(classroom_id, [s["session"] for s in sessions], now)
    out = []
    for s in sessions:
        figures = window["sessions"][s["session"]]
        out.append(
            {
                **s,
                "now": now,
                "attempts": figures["attempts"],
                "retries": figures["retries"],
                "attempts_per_s": figures["attempts_per_s"],
                "retry_ratio": figures["retry_ratio"] or 0.0,
                "state": figures["state"] or "idle",
                "fast": figures["fast"],
                "share": figures["share"] or 0.0,
            }
        )
    return out


def storm_session_recent(classroom_id: int, session_id: int, now: int, back_s: int) -> dict:
    """One session's own per-second counters from ``now - back_s`` to ``now - 1`` (its
    strip chart's share row) and its window figures at ``now`` (its card), Redis only."""
    model = shared_model(classroom_id)
    back_s = max(back_s, STORM_STUDENT_WINDOW_S)
    rows = model.session_seconds([session_id], now - back_s, now - 1)[str(session_id)]
    class_offered = _class_offered(model, now - STORM_STUDENT_WINDOW_S, now - 1)
    return {
        "now": now,
        "seconds": [
            {k: r[k] for k in ("second", "offered", "retries", "fast", "state")} for r in rows
        ],
        "window": presenters.session_window(
            rows[-STORM_STUDENT_WINDOW_S:], class_offered, STORM_STUDENT_WINDOW_S
        ),
    }


def stale_runs(model, *, session_id: int | None = None):
    """(running, queued) querysets of ``model``'s (``Burst`` or ``Traffic``) stale rows: a
    RUNNING one whose heartbeat is older than ``LAB_BURST_STALE_SECONDS``, a QUEUED one no
    worker claimed within ``LAB_BURST_QUEUE_TIMEOUT_SECONDS``; one session's, or every one."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    now = timezone.now()
    running = model.objects.filter(
        status=model.Status.RUNNING,
        heartbeat_at__lt=now - timedelta(seconds=settings.LAB_BURST_STALE_SECONDS),
    )
    queued = model.objects.filter(
        status=model.Status.QUEUED,
        created_at__lt=now - timedelta(seconds=settings.LAB_BURST_QUEUE_TIMEOUT_SECONDS),
    )
    if session_id is not None:
        running = running.filter(session_id=session_id)
        queued = queued.filter(session_id=session_id)
    return running.select_related("session"), queued.select_related("session")


def lti_class_status(classroom_id: int) -> dict[str, Any]:
    """For a class's dashboard: whether it is linked to an LMS course, and the scores not yet
    in the course's gradebook (how many, and the last error of one that failed)."""
    waiting = LtiGradePost.objects.filter(
        session__classroom_id=classroom_id, status=LtiGradePost.Status.PENDING
    )
    failed = waiting.filter(attempts__gt=0).order_by("-updated_at").first()
    return {
        "linked": LtiCourseLink.objects.filter(classroom_id=classroom_id).exists(),
        "waiting": waiting.count(),
        "failed": failed,
    }
