"""The back office.

Superusers see everything. Instructors are staff users in the "Instructors" group: the group
grants model permissions, and every admin here that holds class data narrows its queryset to
the instructor's own classes and refuses objects outside it (404), whatever URL is typed.
"""

from __future__ import annotations

import json
import secrets

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.autocomplete import AutocompleteJsonView
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, URLField
from django.forms.models import BaseInlineFormSet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import slugify
from lti_tool.admin import LtiDeploymentInline, LtiRegistrationAdmin
from lti_tool.models import LtiRegistration

from labs.forms.back_office import RosterImportForm, ScenarioAdminForm
from labs.forms.shared import SharedDependencyAdminForm
from labs.models import (
    Burst,
    ClassFault,
    Classroom,
    JournalEvent,
    LabSession,
    Membership,
    Scenario,
    SharedDependencyConfig,
)
from labs.presenters.lessons import step_sentence
from labs.selectors.lessons import scenario_run_virtual
from labs.services.accounts import (
    RosterError,
    classroom_regenerate_join_code,
    instructor_enrol,
    roster_accounts_csv,
    roster_import,
)
from labs.services.chain import classroom_set_chain
from labs.services.lti import tool_key_ensure
from labs.services.shared import classroom_set_shared

ROSTER_PASSWORDS_TTL_S = 15 * 60
ROSTER_SESSION_KEY = "labs.roster_download"
JOURNAL_INLINE_LIMIT = 100
BURST_INLINE_LIMIT = 20


class InstructorScopedAdmin(admin.ModelAdmin):
    """An admin whose rows belong to a classroom, reached through ``classroom_path``.

    Non-superusers see and change only rows of the classes they teach. An object outside that
    scope answers 404 on its change, delete and history pages, the same as a missing one, so
    the ids of other classes' rows are not even confirmed to exist.
    """

    classroom_path = "classroom"

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        if request.user.is_superuser:
            return qs
        classrooms = Classroom.objects.for_instructor(request.user)
        if not self.classroom_path:
            return qs.filter(pk__in=classrooms.values("pk"))
        return qs.filter(**{f"{self.classroom_path}__in": classrooms.values("pk")})

    def in_scope(self, request, obj) -> bool:
        if obj is None or request.user.is_superuser:
            return True
        return self.get_queryset(request).filter(pk=obj.pk).exists()

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) and self.in_scope(request, obj)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and self.in_scope(request, obj)

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and self.in_scope(request, obj)

    def get_scoped_object_or_404(self, request, object_id):
        obj = self.get_object(request, unquote(str(object_id)))
        if obj is None:
            raise Http404(f"No {self.opts.verbose_name} with id {object_id!r} in your classes.")
        return obj

    def change_view(self, request, object_id, form_url="", extra_context=None):
        self.get_scoped_object_or_404(request, object_id)
        return super().change_view(request, object_id, form_url, extra_context)

    def delete_view(self, request, object_id, extra_context=None):
        self.get_scoped_object_or_404(request, object_id)
        return super().delete_view(request, object_id, extra_context)

    def history_view(self, request, object_id, extra_context=None):
        self.get_scoped_object_or_404(request, object_id)
        return super().history_view(request, object_id, extra_context)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        # An instructor may only point rows at their own classes.
        if db_field.related_model is Classroom and not request.user.is_superuser:
            kwargs["queryset"] = Classroom.objects.for_instructor(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class ReadOnlyMixin:
    """Rows are only shown: no add, change or delete, whatever the permissions (the services
    write them)."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInlineMixin(ReadOnlyMixin):
    """An inline that only shows rows."""

    can_delete = False
    extra = 0
    max_num = 0
    show_change_link = False

    def get_readonly_fields(self, request, obj=None):
        return self.fields


def limited_formset(limit: int) -> type[BaseInlineFormSet]:
    """An inline formset showing only the first ``limit`` rows of its (ordered) queryset."""

    class LimitedFormSet(BaseInlineFormSet):
        def get_queryset(self):
            if not hasattr(self, "_limited_queryset"):
                self._limited_queryset = super().get_queryset()[:limit]
            return self._limited_queryset

    return LimitedFormSet


# --- Scenario -----------------------------------------------------------------------------


def _script_part(scenario: Scenario, key: str, default):
    """One part of a scenario's script (``dependency``, ``policy``, ``steps``), or ``default``."""
    script = scenario.script if isinstance(scenario.script, dict) else {}
    return script.get(key, default)


@admin.register(Scenario)
class ScenarioAdmin(admin.ModelAdmin):
    form = ScenarioAdminForm
    list_display = ["title", "slug", "is_active", "position", "class_count", "updated_at"]
    list_editable = ["is_active", "position"]
    list_filter = ["is_active"]
    search_fields = ["title", "slug", "description"]
    prepopulated_fields = {"slug": ["title"]}
    readonly_fields = ["created_at", "updated_at"]
    actions = ["run_in_virtual_time"]
    fieldsets = [
        (None, {"fields": ["title", "slug", "description", "is_active", "position"]}),
        ("Instructions (Markdown)", {"fields": ["instructions"]}),
        (
            "Script",
            {
                "fields": ["seed", "dependency", "policy", "steps"],
                "description": "Checked when you save: each problem is shown "
                "beside the part of the script it names.",
            },
        ),
        ("History", {"fields": ["created_at", "updated_at"], "classes": ["collapse"]}),
    ]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_class_count=Count("classrooms"))

    @admin.display(description="classes", ordering="_class_count")
    def class_count(self, obj) -> int:
        return obj._class_count

    # The script's parts as a read-only view shows them (an instructor may view, not change):
    # the editable form has a field for each; these name the same parts for the read-only page.

    @admin.display(description="dependency")
    def dependency(self, obj) -> str:
        return format_html(
            "<pre>{}</pre>", json.dumps(_script_part(obj, "dependency", {}), indent=2)
        )

    @admin.display(description="policy")
    def policy(self, obj) -> str:
        return format_html("<pre>{}</pre>", json.dumps(_script_part(obj, "policy", {}), indent=2))

    @admin.display(description="steps")
    def steps(self, obj) -> str:
        return format_html(
            "<ol>{}</ol>",
            format_html_join(
                "",
                "<li>{}<pre>{}</pre></li>",
                (
                    (step_sentence(step), json.dumps(step, indent=2))
                    for step in _script_part(obj, "steps", [])
                ),
            ),
        )

    def get_urls(self):
        urls = [
            path(
                "<path:object_id>/run/",
                self.admin_site.admin_view(self.run_view),
                name="labs_scenario_run",
            )
        ]
        return urls + super().get_urls()

    @admin.action(description="Run in virtual time", permissions=["view"])
    def run_in_virtual_time(self, request, queryset):
        runs = [scenario_run_virtual(scenario=s) for s in queryset.order_by("position", "pk")[:10]]
        return self._render_runs(request, runs)

    def run_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        scenario = self.get_object(request, unquote(object_id))
        if scenario is None:
            raise Http404("No such scenario.")
        return self._render_runs(request, [scenario_run_virtual(scenario=scenario)])

    def _render_runs(self, request, runs) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Run in virtual time",
            "runs": runs,
        }
        return TemplateResponse(request, "admin/labs/scenario/run_results.html", context)


# --- Classroom ----------------------------------------------------------------------------


def member_label(user) -> str:
    """A member as the admin names them: "Ann Lee (ann)", or the username alone."""
    name = user.get_full_name()
    return f"{name} ({user.get_username()})" if name else user.get_username()


class MemberByNameMixin:
    """The member's select shows names ("Ann Lee (ann)"), as its search results do."""

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if db_field.name == "user" and field is not None:
            field.label_from_instance = member_label
        return field


class MembershipInline(MemberByNameMixin, admin.TabularInline):
    model = Membership
    extra = 0
    fields = ["user", "role", "simulated", "created_at"]
    readonly_fields = ["simulated", "created_at"]
    # Chosen by name: typing part of a username, a name or an email searches the accounts
    # (MemberAutocomplete below).
    autocomplete_fields = ["user"]


@admin.register(Classroom)
class ClassroomAdmin(InstructorScopedAdmin):
    classroom_path = ""
    inlines = [MembershipInline]
    list_display = [
        "name",
        "join_code",
        "join_code_expires_at",
        "student_count",
        "instructor_names",
        "created_at",
    ]
    search_fields = ["name", "join_code"]
    filter_horizontal = ["scenarios"]
    readonly_fields = ["created_at"]
    fields = ["name", "join_code", "join_code_expires_at", "scenarios", "created_at"]
    actions = ["regenerate_join_codes"]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                _students=Count(
                    "memberships",
                    filter=Q(memberships__role="student", memberships__simulated=False),
                )
            )
        )

    @admin.display(description="students", ordering="_students")
    def student_count(self, obj) -> int:
        return obj._students

    @admin.display(description="instructors")
    def instructor_names(self, obj) -> str:
        return ", ".join(m.user.get_username() for m in obj.instructors()) or "—"

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if not change and not request.user.is_superuser:
            # An instructor who creates a class teaches it (and so keeps seeing it).
            instructor_enrol(user=request.user, classroom=obj)

    @admin.action(description="Give the selected classes new join codes", permissions=["change"])
    def regenerate_join_codes(self, request, queryset):
        for classroom in queryset:
            code = classroom_regenerate_join_code(classroom=classroom)
            self.message_user(request, f"{classroom}: new join code {code}.", messages.SUCCESS)

    def get_urls(self):
        urls = [
            path(
                "<path:object_id>/roster/",
                self.admin_site.admin_view(self.roster_import_view),
                name="labs_classroom_roster",
            ),
            path(
                "<path:object_id>/roster/passwords.csv",
                self.admin_site.admin_view(self.roster_download_view),
                name="labs_classroom_roster_download",
            ),
        ]
        return urls + super().get_urls()

    def _roster_classroom(self, request, object_id) -> Classroom:
        classroom = self.get_scoped_object_or_404(request, object_id)
        if not request.user.has_perm("labs.add_membership"):
            raise PermissionDenied
        return classroom

    def roster_import_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Import a roster CSV; show the created accounts' one-time passwords once.

        The passwords are never stored: they are put in the cache (Redis, 15 minutes) under a
        random token kept in this user's session, for exactly one CSV download.
        """
        classroom = self._roster_classroom(request, object_id)
        accounts = None
        if request.method == "POST":
            form = RosterImportForm(request.POST, request.FILES)
            if form.is_valid():
                try:
                    accounts = roster_import(classroom=classroom, text=form.cleaned_data["text"])
                except RosterError as exc:
                    for message in exc.errors:
                        form.add_error(None, message)
            if accounts is not None:
                token = secrets.token_urlsafe(24)
                cache.set(
                    f"roster-passwords:{token}",
                    {
                        "classroom": classroom.pk,
                        "user": request.user.pk,
                        "accounts": [a.__dict__ for a in accounts],
                    },
                    timeout=ROSTER_PASSWORDS_TTL_S,
                )
                request.session[ROSTER_SESSION_KEY] = token
                self.log_change(
                    request, classroom, f"Imported a roster of {len(accounts)} students."
                )
        else:
            form = RosterImportForm()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": classroom,
            "classroom": classroom,
            "title": f"Import roster: {classroom}",
            "form": form,
            "accounts": accounts,
            "ttl_minutes": ROSTER_PASSWORDS_TTL_S // 60,
        }
        return TemplateResponse(request, "admin/labs/classroom/roster_import.html", context)

    def roster_download_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The one download of the last imported roster's passwords (POST: it consumes them)."""
        classroom = self._roster_classroom(request, object_id)
        change_url = reverse("admin:labs_classroom_change", args=[classroom.pk])
        if request.method != "POST":
            return redirect(change_url)
        token = request.session.pop(ROSTER_SESSION_KEY, None)
        key = f"roster-passwords:{token}"
        payload = cache.get(key) if token else None
        # delete() tells who removed the key, so two racing downloads cannot both get it.
        if (
            not payload
            or payload["classroom"] != classroom.pk
            or payload["user"] != request.user.pk
            or not cache.delete(key)
        ):
            self.message_user(
                request,
                "Those passwords are gone: they can be downloaded once, within "
                f"{ROSTER_PASSWORDS_TTL_S // 60} minutes of the import. Set a new password "
                "for a student from their account if needed.",
                messages.WARNING,
            )
            return redirect(change_url)
        response = HttpResponse(
            roster_accounts_csv(payload["accounts"]), content_type="text/csv; charset=utf-8"
        )
        filename = f"{slugify(classroom.name) or 'class'}-passwords.csv"
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        response["Cache-Control"] = "no-store"
        return response


@admin.register(Membership)
class MembershipAdmin(MemberByNameMixin, InstructorScopedAdmin):
    list_display = ["user", "full_name", "classroom", "role", "simulated", "created_at"]
    list_filter = ["role", "simulated", ("classroom", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["user__username", "user__first_name", "user__last_name", "user__email"]
    autocomplete_fields = ["user"]
    readonly_fields = ["simulated"]
    list_select_related = ["user", "classroom"]

    @admin.display(description="name")
    def full_name(self, obj) -> str:
        return obj.user.get_full_name()


# --- Lab sessions -------------------------------------------------------------------------


class JournalEventInline(ReadOnlyInlineMixin, admin.TabularInline):
    model = JournalEvent
    verbose_name = "journal event"
    verbose_name_plural = f"journal (newest first, at most {JOURNAL_INLINE_LIMIT})"
    fields = [
        "seq",
        "created_at",
        "kind",
        "call_no",
        "attempt_no",
        "outcome",
        "error",
        "latency_ms",
        "backoff_ms",
        "state_from",
        "state_to",
        "message",
    ]
    ordering = ["-seq"]
    formset = limited_formset(JOURNAL_INLINE_LIMIT)


class BurstInline(ReadOnlyInlineMixin, admin.TabularInline):
    model = Burst
    verbose_name_plural = f"bursts (newest first, at most {BURST_INLINE_LIMIT})"
    fields = [
        "number",
        "status",
        "size",
        "concurrency",
        "first_call_no",
        "created_at",
        "started_at",
        "finished_at",
        "summary",
        "error",
    ]
    ordering = ["-number"]
    formset = limited_formset(BURST_INLINE_LIMIT)


@admin.register(LabSession)
class LabSessionAdmin(InstructorScopedAdmin):
    list_display = [
        "owner",
        "classroom",
        "scenario",
        "breaker_badge",
        "burst_count",
        "next_call_no",
        "updated_at",
    ]
    list_filter = [("classroom", admin.RelatedOnlyFieldListFilter), "scenario"]
    search_fields = ["owner__username", "owner__first_name", "owner__last_name"]
    list_select_related = ["owner", "classroom", "scenario"]
    inlines = [BurstInline, JournalEventInline]
    # Lab state changes only through labs.services (bursts, resets, faults), never by hand.
    readonly_fields = [
        "owner",
        "classroom",
        "scenario",
        "dependency",
        "policy",
        "seed",
        "breaker_snapshot",
        "tier",
        "next_call_no",
        "next_seq",
        "burst_count",
        "created_at",
        "updated_at",
    ]
    fields = readonly_fields

    def has_add_permission(self, request):
        return False

    @admin.display(description="breaker")
    def breaker_badge(self, obj) -> str:
        state = obj.breaker_state
        return format_html(
            '<span class="breaker breaker-{}">{}</span>', state, state.replace("_", "-")
        )


@admin.register(JournalEvent)
class JournalEventAdmin(ReadOnlyMixin, InstructorScopedAdmin):
    classroom_path = "session__classroom"
    list_display = [
        "seq",
        "session",
        "kind",
        "call_no",
        "attempt_no",
        "outcome",
        "state_from",
        "state_to",
        "created_at",
    ]
    list_filter = ["kind", ("session__classroom", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["session__owner", "session__scenario", "session__classroom"]
    search_fields = ["session__owner__username", "message"]
    ordering = ["session", "-seq"]


@admin.register(ClassFault)
class ClassFaultAdmin(ReadOnlyMixin, InstructorScopedAdmin):
    """Class-wide timed faults, read-only: the dashboard creates them, the restore task ends them."""

    list_display = ["classroom", "mode", "duration_s", "status", "created_by", "restore_at"]
    list_filter = ["status", ("classroom", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["classroom", "created_by"]
    readonly_fields = [f.name for f in ClassFault._meta.fields]

    @admin.display(description="mode")
    def mode(self, obj) -> str:
        return (obj.changes or {}).get("mode", "")


def capacity_words(capacity_per_s: float) -> str:
    """A capacity as people read it: "200 attempts/s", "12.5 attempts/s"."""
    return f"{capacity_per_s:,.1f}".rstrip("0").rstrip(".") + " attempts/s"


@admin.register(SharedDependencyConfig)
class SharedDependencyConfigAdmin(InstructorScopedAdmin):
    """A class's shared dependency; saved through the service, so the change is journaled in
    every session of the class and reaches the Redis model. Instructors (the Instructors
    group's permissions) view, add and change their own classes' only, as on the dashboard;
    the capacity the storm panel draws is shown beside the settings and in the list."""

    form = SharedDependencyAdminForm
    list_display = ["classroom", "servers", "service_ms", "max_queue_ms", "capacity", "updated_at"]
    list_select_related = ["classroom"]
    fieldsets = [
        (None, {"fields": ["classroom", "servers", "service_ms", "max_queue_ms", "capacity"]}),
        (
            "The server's defences (blank: off)",
            {
                "fields": [
                    "rate_per_s",
                    "rate_burst",
                    "queue_limit",
                    "concurrency_limit",
                    "concurrency",
                    "concurrency_max",
                    "limit_latency_ms",
                    "codel_target_ms",
                    "codel_interval_ms",
                    "discipline",
                    "lifo_after_ms",
                ],
                "description": "Each is decided when an attempt arrives, by every worker alike; "
                "the queue order, as servers free.",
            },
        ),
        ("Chain of students", {"fields": ["chain_tiers", "chain_order"]}),
    ]

    def get_readonly_fields(self, request, obj=None):
        # A row belongs to its class for good: one row per class, changed in place.
        return ["classroom", "capacity"] if obj is not None else ["capacity"]

    @admin.display(description="capacity (servers / service time)")
    def capacity(self, obj) -> str:
        if obj is None or obj.pk is None:
            return "shown once saved: servers / service time"
        return capacity_words(obj.capacity_per_s)

    def save_model(self, request, obj, form, change):
        row = classroom_set_shared(classroom=obj.classroom, user=request.user, values=obj.to_dict())
        obj.pk = row.pk
        if form.chain_changed:
            classroom_set_chain(
                classroom=obj.classroom,
                user=request.user,
                values={"tiers": form.cleaned_data["chain_tiers"],
                        "order": form.cleaned_data["chain_order"] or "even"},
            )  # fmt: skip


# --- choosing a class's members by name ----------------------------------------------------


class MemberAutocomplete(AutocompleteJsonView):
    """The admin's autocomplete (``/admin/autocomplete/``) with the member's name in the
    results ("Ann Lee (ann)"), and open to an instructor choosing a class's members: they
    search the student accounts (not staff) by username, name or email, though the user
    admin itself stays closed to them. Every other autocomplete is Django's own."""

    def serialize_result(self, obj, to_field_name):
        result = super().serialize_result(obj, to_field_name)
        if isinstance(obj, get_user_model()):
            result["text"] = member_label(obj)
        return result

    def _choosing_members(self) -> bool:
        field = getattr(self, "source_field", None)
        return (
            field is not None
            and field.model is Membership
            and field.name == "user"
            and self.request.user.has_perm("labs.add_membership")
        )

    def has_perm(self, request, obj=None):
        return super().has_perm(request, obj) or self._choosing_members()

    def get_queryset(self):
        qs = super().get_queryset()
        if not self.request.user.is_superuser and self._choosing_members():
            qs = qs.filter(is_staff=False, is_active=True)
        return qs


member_autocomplete = admin.site.admin_view(MemberAutocomplete.as_view(admin_site=admin.site))


admin.site.unregister(LtiRegistration)  # django-lti's, replaced below


# --- LTI platforms --------------------------------------------------------------------------


class LtiDeploymentAdminInline(LtiDeploymentInline):
    """The platform's deployment ids; a launch names one, which must be here and active."""

    fields = ["deployment_id", "is_active"]


@admin.register(LtiRegistration)
class LtiPlatformAdmin(LtiRegistrationAdmin):
    """django-lti's platform registration (issuer, client id, the platform's auth, token and
    key-set URLs, its deployment ids inline), plus the values the LMS administrator pastes on
    their side, shown on the platform's page (docs/lti.md)."""

    change_form_template = "admin/lti_tool/ltiregistration/change_form.html"
    formfield_overrides = {URLField: {"assume_scheme": "https"}}
    inlines = [LtiDeploymentAdminInline]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        tool_key_ensure()

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        context["lti_paste"] = lti_paste_values(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)


def lti_paste_values(request: HttpRequest, registration) -> list[tuple[str, str]]:
    """What an LMS administrator pastes into the LMS to register Failure Lab."""
    url = request.build_absolute_uri
    login = (
        url(reverse("labs:lti_platform_login", args=[registration.uuid]))
        if registration is not None
        else url(reverse("labs:lti_login"))
    )
    launch = url(reverse("labs:lti_launch"))
    return [
        ("Login URL (OIDC login initiation)", login),
        ("Launch URL (redirect URI and target link URI)", launch),
        ("Key-set URL (public JWK set)", url(reverse("labs:lti_jwks"))),
        ("Deep-linking URL", launch),
    ]
