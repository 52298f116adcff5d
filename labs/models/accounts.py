"""Sign-in state (one-time passwords, trusted browsers) and the LTI links to an LMS."""

from __future__ import annotations

from django.conf import settings
from django.db import models

# --- Accounts -----------------------------------------------------------------------------


class OneTimePassword(models.Model):
    """Marks a user whose password is a roster's one-time password: the first login with it
    uses it up (``labs.services.accounts.account_login``) and asks for a password of the
    student's own. The password itself is only the user's hash, as any other."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="one_time_password"
    )
    issued_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "one-time password"

    def __str__(self) -> str:
        return f"one-time password of {self.user}"


class LoginDevice(models.Model):
    """A browser where ``user`` logged in: its device cookie carries a random token whose
    SHA-256 is ``token_hash``. A login for that user from that browser is limited by
    ``failures`` alone, not by the lockouts others' wrong passwords cause
    (``lab_project.login_limits``). The row goes when the failures reach the limit, at the
    next login from the browser (a fresh token replaces it), or when it is older than the
    cookie's lifetime; a change of the user's password makes it untrusted (``password_check``
    no longer matches)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="login_devices"
    )
    token_hash = models.CharField(max_length=64, unique=True)
    #: A keyed hash of the user's password hash when the cookie was given.
    password_check = models.CharField(max_length=64)
    created_at = models.DateTimeField(db_index=True)
    #: Logins for ``user`` from this browser that were not (yet) right; a login in progress
    #: counts as one until its password proves right.
    failures = models.PositiveSmallIntegerField(default=0)

    class Meta:
        verbose_name = "trusted browser"

    def __str__(self) -> str:
        return f"trusted browser of {self.user}"


# --- LTI --------------------------------------------------------------------------------


class LtiCourseLink(models.Model):
    """A course of an LTI platform (django-lti's ``LtiContext``: issuer, deployment, context id)
    linked to the class its launches land in. Created on the course's first launch, so one
    course is one class; a launch never reaches a class through another course's link."""

    context = models.OneToOneField(
        "lti_tool.LtiContext", on_delete=models.CASCADE, related_name="course_link"
    )
    classroom = models.ForeignKey(
        "labs.Classroom", on_delete=models.CASCADE, related_name="lti_links"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "LMS course link"

    def __str__(self) -> str:
        return f"{self.context} → {self.classroom}"


class LtiLessonLink(models.Model):
    """A student's lab session opened from a resource link of an LMS course: where its grade
    goes (the platform's user, the link, the course's grade service claim, the line item)."""

    session = models.OneToOneField(
        "labs.LabSession", on_delete=models.CASCADE, related_name="lti_link"
    )
    lti_user = models.ForeignKey("lti_tool.LtiUser", on_delete=models.CASCADE, related_name="+")
    resource_link = models.ForeignKey(
        "lti_tool.LtiResourceLink", on_delete=models.CASCADE, related_name="+"
    )
    ags = models.JSONField(default=dict, help_text="The launch's grade service claim.")
    lineitem_url = models.URLField(max_length=500, blank=True)

    class Meta:
        verbose_name = "LMS lesson link"

    def __str__(self) -> str:
        return f"session {self.session_id} from an LMS link"


class LtiGradePost(models.Model):
    """The score waiting to reach the LMS gradebook for one session (an outbox row): the
    newest score replaces an unsent one; a failed post stays here, retried, until it is sent."""

    class Status(models.TextChoices):
        PENDING = "pending", "waiting to be sent"
        SENT = "sent", "sent"

    session = models.OneToOneField(
        "labs.LabSession", on_delete=models.CASCADE, related_name="lti_grade_post"
    )
    score_given = models.FloatField()
    score_maximum = models.FloatField()
    activity_progress = models.CharField(max_length=16)
    grading_progress = models.CharField(max_length=16)
    comment = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "LMS grade post"

    def __str__(self) -> str:
        return f"grade of session {self.session_id}: {self.score_given:g}/{self.score_maximum:g}"
