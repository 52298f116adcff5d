"""Persisted state of the lab (docs/architecture.md).

Only data, choices, constraints and read-side QuerySet methods live here; every change to lab
state goes through ``labs.services``. Invariants that matter under concurrency (one membership
per user and class, one active burst per session, unique journal sequence numbers) are database
constraints, so two processes racing each other get an IntegrityError rather than bad data.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from labs.engine.breaker import STATE_LABELS
from labs.engine.chain import MAX_TIERS
from labs.journal import kinds

JOIN_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read off a projector
JOIN_CODE_LENGTH = 8
JOIN_CODE_REGEX = r"^[A-Z0-9]{8}$"


def generate_join_code() -> str:
    """A random 8-character class join code (uppercase letters and digits)."""
    return "".join(secrets.choice(JOIN_CODE_ALPHABET) for _ in range(JOIN_CODE_LENGTH))


# The engine owns the breaker's states and their labels: CLOSED = "closed", "CLOSED", ...
BreakerState = models.TextChoices(
    "BreakerState", [(value.upper(), (value, label)) for value, label in STATE_LABELS.items()]
)


# --- Classroom ----------------------------------------------------------------------------


class ClassroomQuerySet(models.QuerySet):
    def for_instructor(self, user) -> ClassroomQuerySet:
        """Classes ``user`` teaches; a superuser teaches (sees) every class."""
        if not user.is_authenticated:
            return self.none()
        if user.is_superuser:
            return self.all()
        return self.filter(
            memberships__user=user, memberships__role=Membership.Role.INSTRUCTOR
        ).distinct()

    def for_student(self, user) -> ClassroomQuerySet:
        """Classes ``user`` is enrolled in as a student."""
        if not user.is_authenticated:
            return self.none()
        return self.filter(
            memberships__user=user, memberships__role=Membership.Role.STUDENT
        ).distinct()


class Classroom(models.Model):
    name = models.CharField(max_length=120)
    join_code = models.CharField(
        max_length=JOIN_CODE_LENGTH,
        unique=True,
        default=generate_join_code,
        help_text="8 uppercase letters or digits; students type it when they sign up.",
    )
    join_code_expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Leave empty for a code that never expires."
    )
    scenarios = models.ManyToManyField(
        "Scenario", blank=True, related_name="classrooms", help_text="Scenarios assigned."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ClassroomQuerySet.as_manager()

    class Meta:
        ordering = ["name", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(join_code__regex=JOIN_CODE_REGEX), name="classroom_join_code_format"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        # Normalise, so a code typed in lower case in the admin still matches the constraint.
        self.join_code = (self.join_code or "").strip().upper()
        super().save(*args, **kwargs)

    def join_code_is_expired(self, now=None) -> bool:
        if self.join_code_expires_at is None:
            return False
        return (now or timezone.now()) >= self.join_code_expires_at

    def instructors(self):
        """This class's instructor memberships."""
        return self.memberships.filter(role=Membership.Role.INSTRUCTOR).select_related("user")

    def get_admin_url(self) -> str:
        return reverse("admin:labs_classroom_change", args=[self.pk])


class MembershipQuerySet(models.QuerySet):
    def people(self) -> MembershipQuerySet:
        """Memberships of real people: simulated students (bots) left out."""
        return self.filter(simulated=False)

    def simulated(self) -> MembershipQuerySet:
        return self.filter(simulated=True)


def _simulated_owner(owner_path: str, classroom_path: str) -> models.Exists:
    """Whether the row's owner is a simulated member of the row's class (a bot)."""
    return models.Exists(
        Membership.objects.filter(
            user=models.OuterRef(owner_path),
            classroom=models.OuterRef(classroom_path),
            simulated=True,
        )
    )


class Membership(models.Model):
    class Role(models.TextChoices):
        INSTRUCTOR = "instructor", "instructor"
        STUDENT = "student", "student"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    classroom = models.ForeignKey(Classroom, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.STUDENT)
    simulated = models.BooleanField(
        default=False,
        help_text="A bot student of a simulated class: left out of grades, predictions and "
        "student counts; removed when the simulation is cleaned up.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        ordering = ["classroom", "role", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "classroom"], name="one_membership_per_user_and_class"
            ),
            models.CheckConstraint(
                condition=Q(role__in=["instructor", "student"]), name="membership_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.classroom} ({self.role})"


# --- Scenario -----------------------------------------------------------------------------


def validate_scenario_script(value) -> None:
    """Field validator: the script must pass the lesson validator, the engine's checks and
    its questions' (``labs.grading.validate_lesson``, docs/engine.md).

    A field validator (not ``Model.clean``) so a form that edits the script through its own
    fields (the admin's, which maps each problem to the field it names) can exclude it.
    """
    if not isinstance(value, dict):
        raise ValidationError("The scenario script must be a JSON object.", code="invalid")
    from labs.grading import validate_lesson

    problems = validate_lesson(value)
    if problems:
        raise ValidationError([ValidationError(str(p), code="invalid_script") for p in problems])


class ScenarioQuerySet(models.QuerySet):
    def active(self) -> ScenarioQuerySet:
        return self.filter(is_active=True)


class Scenario(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    title = models.CharField(max_length=160)
    description = models.CharField(max_length=300, blank=True)
    instructions = models.TextField(blank=True, help_text="Markdown, shown beside the lab.")
    script = models.JSONField(
        default=dict,
        validators=[validate_scenario_script],
        help_text="The scenario script: seed, dependency, policy and steps (docs/engine.md).",
    )
    is_active = models.BooleanField(default=True)
    position = models.PositiveIntegerField(default=0, help_text="Lower comes first.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ScenarioQuerySet.as_manager()

    class Meta:
        ordering = ["position", "title", "pk"]

    def __str__(self) -> str:
        return self.title

    @property
    def seed(self) -> int:
        seed = self.script.get("seed", 0) if isinstance(self.script, dict) else 0
        return seed if isinstance(seed, int) else 0


# --- LabSession ---------------------------------------------------------------------------


class LabSessionQuerySet(models.QuerySet):
    def visible_to(self, user) -> LabSessionQuerySet:
        """Sessions ``user`` may look at: their own, their classes' (as instructor), or all
        for a superuser."""
        if not user.is_authenticated:
            return self.none()
        if user.is_superuser:
            return self.all()
        return self.filter(
            Q(owner=user)
            | Q(
                classroom__memberships__user=user,
                classroom__memberships__role=Membership.Role.INSTRUCTOR,
            )
        ).distinct()

    def for_instructor(self, user) -> LabSessionQuerySet:
        """Sessions in the classes ``user`` teaches (every session for a superuser)."""
        return self.filter(classroom__in=Classroom.objects.for_instructor(user))

    def people(self) -> LabSessionQuerySet:
        """Sessions of real students: those of simulated members (bots) left out."""
        return self.exclude(_simulated_owner("owner", "classroom"))

    def simulated(self) -> LabSessionQuerySet:
        """Sessions of simulated members of their class (bots)."""
        return self.filter(_simulated_owner("owner", "classroom"))


class LabSession(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="lab_sessions"
    )
    classroom = models.ForeignKey(Classroom, on_delete=models.CASCADE, related_name="lab_sessions")
    scenario = models.ForeignKey(Scenario, on_delete=models.PROTECT, related_name="lab_sessions")
    dependency = models.JSONField(default=dict, help_text="Canonical dependency settings.")
    policy = models.JSONField(default=dict, help_text="Canonical client policy.")
    seed = models.BigIntegerField(default=0)
    breaker_snapshot = models.JSONField(default=dict, blank=True)
    next_call_no = models.PositiveIntegerField(default=1)
    next_seq = models.PositiveBigIntegerField(
        default=1, help_text="The next journal sequence number."
    )
    burst_count = models.PositiveIntegerField(default=0)
    tier = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="Its tier in the class's chain of students (1 is the front); empty: no chain.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = LabSessionQuerySet.as_manager()

    class Meta:
        ordering = ["classroom", "owner__username", "scenario__position", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "classroom", "scenario"], name="one_session_per_student_scenario"
            ),
            models.CheckConstraint(
                condition=Q(next_call_no__gte=1), name="session_next_call_no_gte_1"
            ),
            models.CheckConstraint(condition=Q(next_seq__gte=1), name="session_next_seq_gte_1"),
            models.CheckConstraint(
                condition=Q(tier__isnull=True) | Q(tier__gte=1, tier__lte=MAX_TIERS),
                name="session_tier_1_to_6",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.owner} / {self.scenario} ({self.classroom})"

    def get_absolute_url(self) -> str:
        return reverse("labs:session_detail", args=[self.pk])

    @property
    def breaker_state(self) -> str:
        state = (self.breaker_snapshot or {}).get("state", BreakerState.CLOSED)
        return state if state in BreakerState.values else BreakerState.CLOSED


# --- Runs: bursts, traffic, any kind of run a worker claims --------------------------------


class RunQuerySet(models.QuerySet):
    def stale(self, *, session_id: int | None = None):
        """(running, queued): RUNNING rows whose heartbeat is older than
        ``LAB_BURST_STALE_SECONDS`` (their worker died), QUEUED ones no worker claimed within
        ``LAB_BURST_QUEUE_TIMEOUT_SECONDS``; one session's, or every one."""
        from datetime import timedelta

        now = timezone.now()
        running = self.filter(
            status=Run.Status.RUNNING,
            heartbeat_at__lt=now - timedelta(seconds=settings.LAB_BURST_STALE_SECONDS),
        )
        queued = self.filter(
            status=Run.Status.QUEUED,
            created_at__lt=now - timedelta(seconds=settings.LAB_BURST_QUEUE_TIMEOUT_SECONDS),
        )
        if session_id is not None:
            running = running.filter(session_id=session_id)
            queued = queued.filter(session_id=session_id)
        return running.select_related("session"), queued.select_related("session")


class Run(models.Model):
    """What every kind of run a worker claims has: a status moved QUEUED -> RUNNING -> a final
    one by conditional UPDATEs, the worker that claimed it, its heartbeat, its summary or
    error. Abstract: each kind has its own table (``labs.services.runs`` moves them)."""

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        DONE = "done", "done"
        INTERRUPTED = "interrupted", "interrupted"
        FAILED = "failed", "failed"

    ACTIVE_STATUSES = (Status.QUEUED, Status.RUNNING)

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        abstract = True
        # At most one queued-or-running run of a kind per session: a second concurrent start
        # loses at the database even if two requests pass the service's check together.
        # Each kind's Meta extends this list; the name takes the kind's name.
        constraints = [
            models.UniqueConstraint(
                fields=["session"],
                condition=Q(status__in=["queued", "running"]),
                name="one_active_%(class)s_per_session",
            ),
        ]

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE_STATUSES


# --- Burst --------------------------------------------------------------------------------


class Burst(Run):
    session = models.ForeignKey(LabSession, on_delete=models.CASCADE, related_name="bursts")
    number = models.PositiveIntegerField(help_text="Per session, from 1.")
    size = models.PositiveSmallIntegerField()
    concurrency = models.PositiveSmallIntegerField(default=1)
    first_call_no = models.PositiveIntegerField(null=True, blank=True)
    start_state = models.JSONField(
        default=dict,
        blank=True,
        help_text="What the engine read when the burst began (labs.engine.replay), so it can "
        "be replayed; empty until a worker claims the burst.",
    )

    class Meta(Run.Meta):
        ordering = ["session", "-number"]
        constraints = [
            *Run.Meta.constraints,
            models.UniqueConstraint(
                fields=["session", "number"], name="burst_number_unique_per_session"
            ),
            models.CheckConstraint(
                condition=Q(size__gte=1, size__lte=20), name="burst_size_1_to_20"
            ),
            models.CheckConstraint(
                condition=Q(concurrency__gte=1, concurrency__lte=10),
                name="burst_concurrency_1_to_10",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["queued", "running", "done", "interrupted", "failed"]),
                name="burst_status_valid",
            ),
            models.CheckConstraint(condition=Q(number__gte=1), name="burst_number_gte_1"),
        ]

    def __str__(self) -> str:
        return f"burst {self.number} of session {self.session_id} ({self.status})"


# --- JournalEvent -------------------------------------------------------------------------


class JournalEventQuerySet(models.QuerySet):
    def after(self, seq: int) -> JournalEventQuerySet:
        """Events after sequence number ``seq``, oldest first (a reconnecting page's replay)."""
        return self.filter(seq__gt=seq).order_by("seq")

    def newest(self, limit: int) -> JournalEventQuerySet:
        return self.order_by("-seq")[:limit]


class JournalEvent(models.Model):
    session = models.ForeignKey(LabSession, on_delete=models.CASCADE, related_name="journal")
    seq = models.PositiveBigIntegerField()
    burst = models.ForeignKey(
        Burst, on_delete=models.SET_NULL, null=True, blank=True, related_name="events"
    )
    kind = models.CharField(max_length=32, choices=kinds.CHOICES)
    created_at = models.DateTimeField(default=timezone.now)
    t_ms = models.FloatField(default=0.0, help_text="Engine clock time of the event, in ms.")
    call_no = models.PositiveIntegerField(null=True, blank=True)
    attempt_no = models.PositiveIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=32, blank=True)
    error = models.CharField(max_length=32, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    backoff_ms = models.FloatField(null=True, blank=True)
    state_from = models.CharField(max_length=16, blank=True)
    state_to = models.CharField(max_length=16, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    message = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)

    objects = JournalEventQuerySet.as_manager()

    class Meta:
        ordering = ["-seq"]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "seq"], name="journal_seq_unique_per_session"
            ),
            models.CheckConstraint(condition=Q(seq__gte=1), name="journal_seq_gte_1"),
        ]
        indexes = [
            models.Index(fields=["session", "-seq"], name="journal_session_seq_desc"),
            # The class dashboard counts calls, attempts and fast-fails per session: with this
            # index each count is a range scan of index entries, no table row is read
            # (measured: 100 sessions x 1,000 rows, ~3x faster on SQLite).
            models.Index(
                fields=["session", "kind", "outcome"], name="journal_session_kind_outcome"
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} (session {self.session_id})"


# --- ClassFault ---------------------------------------------------------------------------


class ClassFault(models.Model):
    """A class-wide dependency fault with a duration, and what to put back when it ends.

    Written by ``labs.services.classroom.classroom_set_dependency``; the restore is a Celery
    task scheduled with a countdown, but the task only carries this row's id: what to restore
    (each session's previous dependency) lives here, so a worker restart loses nothing and a
    second injection can take over (``SUPERSEDED``) what the first one had saved.
    """

    class Status(models.TextChoices):
        ACTIVE = "active", "active"
        RESTORED = "restored", "restored"
        SUPERSEDED = "superseded", "superseded"

    classroom = models.ForeignKey(Classroom, on_delete=models.CASCADE, related_name="faults")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    changes = models.JSONField(default=dict, help_text="The dependency change applied.")
    duration_s = models.PositiveIntegerField(help_text="Seconds the fault lasts (1 to 3600).")
    created_at = models.DateTimeField(auto_now_add=True)
    restore_at = models.DateTimeField(help_text="When every session's previous mode comes back.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    finished_at = models.DateTimeField(null=True, blank=True)
    sessions = models.JSONField(
        default=dict,
        blank=True,
        help_text='Per session id: {"previous": dependency to restore, "applied": fault\'s}.',
    )
    result = models.JSONField(default=dict, blank=True, help_text="What the restore did.")

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            # A second injection supersedes the first in the same transaction; two racing
            # injections cannot both leave an active fault behind.
            models.UniqueConstraint(
                fields=["classroom"],
                condition=Q(status="active"),
                name="one_active_fault_per_class",
            ),
            models.CheckConstraint(
                condition=Q(duration_s__gte=1, duration_s__lte=3600),
                name="class_fault_duration_1_to_3600",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["active", "restored", "superseded"]),
                name="class_fault_status_valid",
            ),
        ]

    def __str__(self) -> str:
        mode = (self.changes or {}).get("mode", "?")
        return f"{mode} for {self.duration_s} s in {self.classroom} ({self.status})"


# --- The class's shared dependency ------------------------------------------------------------


class SharedDependencyConfig(models.Model):
    """A class's shared dependency: ``servers`` serving one attempt at a time, ``service_ms``
    per attempt, the longest queue wait accepted (``max_queue_ms``) and the server's
    defences (a rate limit, a queue limit, a concurrency limit, CoDel; each off by default),
    as :class:`labs.engine.shared.SharedConfig` describes. Every session of the class whose
    dependency is in ``shared`` mode calls the one model in Redis (``class:<classroom id>``).

    The defaults are the engine's (``LIMITS``); the services validate with the engine's
    validator, and the check constraints repeat its ranges for whatever writes past them.
    """

    classroom = models.OneToOneField(
        Classroom, on_delete=models.CASCADE, related_name="shared_dependency"
    )
    servers = models.PositiveSmallIntegerField("servers", default=8, help_text="1 to 64 servers.")
    service_ms = models.PositiveIntegerField(
        "service time (ms)", default=40, help_text="Service time of one attempt, 1 to 2000 ms."
    )
    max_queue_ms = models.PositiveIntegerField(
        "longest queue wait (ms)",
        default=2000,
        help_text="A longer queue wait is shed at once, 0 to 10000 ms.",
    )
    # the server's defences, decided at each attempt's arrival; null: off
    rate_per_s = models.FloatField(
        "rate limit (attempts/s)",
        null=True,
        blank=True,
        help_text="Faster is answered 429 with a Retry-After; 0.1 to 100000 attempts/s, "
        "blank for none.",
    )
    rate_burst = models.PositiveIntegerField(
        "rate limit's burst (attempts)",
        default=10,
        help_text="Attempts the rate limit lets through at once, 1 to 10000.",
    )
    queue_limit = models.PositiveIntegerField(
        "queue limit (attempts waiting)",
        null=True,
        blank=True,
        help_text="An attempt that would wait while this many wait is shed; 1 to 100000, "
        "blank for none.",
    )
    concurrency_limit = models.PositiveIntegerField(
        "concurrency limit (attempts in the server)",
        null=True,
        blank=True,
        help_text="An attempt arriving while this many wait or are served is shed; 1 to 1000, "
        "blank for none.",
    )
    concurrency = models.CharField(
        "concurrency limit moves",
        max_length=16,
        default="fixed",
        choices=[
            ("fixed", "fixed"),
            ("aimd", "AIMD: cut by slow answers, + 1 while half is used"),
            ("gradient", "gradient: with latency against the fastest"),
        ],
        help_text="An adaptive limit starts at the concurrency limit.",
    )
    concurrency_max = models.PositiveIntegerField(
        "adaptive limit's highest (attempts)", default=200, help_text="1 to 1000."
    )
    limit_latency_ms = models.PositiveIntegerField(
        "AIMD: slow answer (ms)",
        default=500,
        help_text="A slower answer, or a failure, cuts the limit to 0.9x; 1 to 10000 ms.",
    )
    codel_target_ms = models.PositiveIntegerField(
        "CoDel target wait (ms)",
        null=True,
        blank=True,
        help_text="Once every wait has been longer for an interval, a longer wait is shed; "
        "1 to 5000 ms, blank for none.",
    )
    codel_interval_ms = models.PositiveIntegerField(
        "CoDel interval (ms)", default=100, help_text="10 to 10000 ms."
    )
    # which waiting attempt a freed server takes (any but FIFO: decided as servers free)
    discipline = models.CharField(
        "queue order",
        max_length=16,
        default="fifo",
        choices=[
            ("fifo", "first come, first served (FIFO)"),
            ("lifo", "newest first (LIFO)"),
            ("adaptive_lifo", "adaptive LIFO: newest first once the oldest waits too long"),
        ],
        help_text="Which waiting attempt a freed server takes.",
    )
    lifo_after_ms = models.PositiveIntegerField(
        "adaptive LIFO: newest first past (ms)",
        default=100,
        help_text="Newest first while the oldest attempt has waited longer; 1 to 10000 ms.",
    )
    updated_at = models.DateTimeField("last changed", auto_now=True)

    class Meta:
        verbose_name = "shared dependency"
        verbose_name_plural = "shared dependencies"
        constraints = [
            models.CheckConstraint(
                condition=Q(servers__gte=1, servers__lte=64), name="shared_servers_1_to_64"
            ),
            models.CheckConstraint(
                condition=Q(service_ms__gte=1, service_ms__lte=2000),
                name="shared_service_ms_1_to_2000",
            ),
            models.CheckConstraint(
                condition=Q(max_queue_ms__gte=0, max_queue_ms__lte=10000),
                name="shared_max_queue_ms_0_to_10000",
            ),
            models.CheckConstraint(
                condition=Q(rate_per_s__isnull=True)
                | Q(rate_per_s__gte=0.1, rate_per_s__lte=100000),
                name="shared_rate_per_s_off_or_0_1_to_100000",
            ),
            models.CheckConstraint(
                condition=Q(rate_burst__gte=1, rate_burst__lte=10000),
                name="shared_rate_burst_1_to_10000",
            ),
            models.CheckConstraint(
                condition=Q(queue_limit__isnull=True)
                | Q(queue_limit__gte=1, queue_limit__lte=100000),
                name="shared_queue_limit_off_or_1_to_100000",
            ),
            models.CheckConstraint(
                condition=Q(concurrency_limit__isnull=True)
                | Q(concurrency_limit__gte=1, concurrency_limit__lte=1000),
                name="shared_concurrency_limit_off_or_1_to_1000",
            ),
            models.CheckConstraint(
                condition=Q(codel_target_ms__isnull=True)
                | Q(codel_target_ms__gte=1, codel_target_ms__lte=5000),
                name="shared_codel_target_ms_off_or_1_to_5000",
            ),
            models.CheckConstraint(
                condition=Q(codel_interval_ms__gte=10, codel_interval_ms__lte=10000),
                name="shared_codel_interval_ms_10_to_10000",
            ),
            models.CheckConstraint(
                condition=Q(concurrency__in=("fixed", "aimd", "gradient")),
                name="shared_concurrency_fixed_aimd_gradient",
            ),
            models.CheckConstraint(
                condition=Q(concurrency_max__gte=1, concurrency_max__lte=1000),
                name="shared_concurrency_max_1_to_1000",
            ),
            models.CheckConstraint(
                condition=Q(limit_latency_ms__gte=1, limit_latency_ms__lte=10000),
                name="shared_limit_latency_ms_1_to_10000",
            ),
            models.CheckConstraint(
                condition=Q(discipline__in=("fifo", "lifo", "adaptive_lifo")),
                name="shared_discipline_fifo_lifo_adaptive_lifo",
            ),
            models.CheckConstraint(
                condition=Q(lifo_after_ms__gte=1, lifo_after_ms__lte=10000),
                name="shared_lifo_after_ms_1_to_10000",
            ),
        ]

    def __str__(self) -> str:
        return (
            f"{self.servers} server(s) x {self.service_ms} ms, queue {self.max_queue_ms} ms "
            f"({self.classroom})"
        )

    @property
    def capacity_per_s(self) -> float:
        """Attempts per second the servers complete when always busy (servers / service
        time), as the engine's ``SharedConfig.capacity_per_s`` counts it."""
        return self.servers * 1000 / self.service_ms if self.service_ms else 0.0

    def to_dict(self) -> dict:
        """The engine's form (``labs.engine.parse_shared`` reads it)."""
        return {
            "servers": self.servers,
            "service_ms": self.service_ms,
            "max_queue_ms": self.max_queue_ms,
            "rate_per_s": self.rate_per_s,
            "rate_burst": self.rate_burst,
            "queue_limit": self.queue_limit,
            "concurrency_limit": self.concurrency_limit,
            "concurrency": self.concurrency,
            "concurrency_max": self.concurrency_max,
            "limit_latency_ms": self.limit_latency_ms,
            "codel_target_ms": self.codel_target_ms,
            "codel_interval_ms": self.codel_interval_ms,
            "discipline": self.discipline,
            "lifo_after_ms": self.lifo_after_ms,
        }


# --- Traffic ------------------------------------------------------------------------------


class Traffic(Run):
    """Steady open-loop traffic in a session: ``calls`` calls at the instants of a seeded
    arrival schedule (``rate`` per second, Poisson or evenly spaced, for ``duration_s``), each
    through the session's whole policy, numbered from ``first_call_no``.

    Moves QUEUED -> RUNNING -> DONE | STOPPED | INTERRUPTED | FAILED by conditional UPDATEs,
    like a :class:`Burst`; ``stop_requested`` asks the runner to start no further call.
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        DONE = "done", "done"
        STOPPED = "stopped", "stopped"
        INTERRUPTED = "interrupted", "interrupted"
        FAILED = "failed", "failed"

    class Arrivals(models.TextChoices):
        POISSON = "poisson", "Poisson"
        EVEN = "even", "even spacing"

    ACTIVE_STATUSES = (Status.QUEUED, Status.RUNNING)

    session = models.ForeignKey(LabSession, on_delete=models.CASCADE, related_name="traffic")
    rate = models.PositiveSmallIntegerField(help_text="Calls per second, 1 to 20.")
    duration_s = models.PositiveSmallIntegerField(help_text="Seconds, 1 to 300.")
    arrivals = models.CharField(max_length=8, choices=Arrivals.choices, default=Arrivals.POISSON)
    seed = models.BigIntegerField(default=0)
    calls = models.PositiveIntegerField(default=0, help_text="Calls the schedule holds.")
    first_call_no = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    stop_requested = models.BooleanField(default=False)

    class Meta(Run.Meta):
        ordering = ["session", "-pk"]
        constraints = [
            *Run.Meta.constraints,
            models.CheckConstraint(
                condition=Q(rate__gte=1, rate__lte=20), name="traffic_rate_1_to_20"
            ),
            models.CheckConstraint(
                condition=Q(duration_s__gte=1, duration_s__lte=300),
                name="traffic_duration_1_to_300",
            ),
            models.CheckConstraint(
                condition=Q(
                    status__in=["queued", "running", "done", "stopped", "interrupted", "failed"]
                ),
                name="traffic_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"traffic {self.pk} of session {self.session_id} ({self.status})"


# --- Prediction ---------------------------------------------------------------------------


class PredictionQuerySet(models.QuerySet):
    def people(self) -> PredictionQuerySet:
        """Predictions of real students: those of simulated members (bots) left out."""
        return self.exclude(_simulated_owner("owner", "session__classroom"))


class Prediction(models.Model):
    """A student's answer to a scenario step's question (``ask``), given before the step ran.

    The right answer is not stored in the scenario: ``observed`` is what the step's burst
    did, read from the journal once the burst ended, and ``correct`` is the grade. Once the
    step ran (``ran_at``) the answer is fixed."""

    session = models.ForeignKey(LabSession, on_delete=models.CASCADE, related_name="predictions")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="predictions"
    )
    attempt = models.PositiveSmallIntegerField(
        default=1, help_text="The attempt at the scenario (a reset of the lab starts the next)."
    )
    step = models.PositiveSmallIntegerField(help_text="The step's number in the scenario, from 1.")
    measure = models.CharField(max_length=32)
    answer = models.CharField(max_length=32, help_text="A number, or a breaker state.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    burst = models.ForeignKey(
        Burst, on_delete=models.SET_NULL, null=True, blank=True, related_name="predictions"
    )
    ran_at = models.DateTimeField(null=True, blank=True, help_text="When the step's burst started.")
    observed = models.JSONField(null=True, blank=True, help_text="Every measure of the burst.")
    correct = models.BooleanField(null=True, blank=True)

    objects = PredictionQuerySet.as_manager()

    class Meta:
        ordering = ["session", "attempt", "step"]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "attempt", "step"], name="one_prediction_per_step"
            ),
            models.CheckConstraint(condition=Q(step__gte=1), name="prediction_step_gte_1"),
        ]

    def __str__(self) -> str:
        return f"step {self.step} of session {self.session_id}: {self.answer}"

    @property
    def observed_value(self):
        """The observed value of the question's measure (None until graded)."""
        return (self.observed or {}).get(self.measure)

    @property
    def missed(self) -> str:
        """Why the step's last run graded nothing (its situation did not happen: a rate
        limit already over, a cached answer already stale), or ""; the step may run again."""
        if self.correct is not None or self.ran_at is not None:
            return ""
        return str((self.observed or {}).get("missed") or "")


class StepProgress(models.Model):
    """A scenario step marked done in one attempt at a lab session (kept on the server, so it
    survives a reload, another browser and, as the record of an earlier attempt, a reset)."""

    session = models.ForeignKey(LabSession, on_delete=models.CASCADE, related_name="step_progress")
    attempt = models.PositiveSmallIntegerField(default=1)
    step = models.PositiveSmallIntegerField()
    done_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "attempt", "step"]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "attempt", "step"], name="one_progress_row_per_step"
            ),
        ]

    def __str__(self) -> str:
        return f"step {self.step} done in attempt {self.attempt} of session {self.session_id}"


# Defined apart (they name the models above by string), importable from here as before.
from labs.models.accounts import (  # noqa: E402, F401
    LoginDevice,
    LtiCourseLink,
    LtiGradePost,
    LtiLessonLink,
    OneTimePassword,
)
