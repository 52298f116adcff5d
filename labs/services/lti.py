"""LTI 1.3 launches from an LMS (docs/lti.md): the checks of a launch, then who is who.

A launch is checked whole before anything is written: the state against the one the browser
was given at login, the id_token's signature against the platform's key set, its issuer and
client id against a registered platform, its audience, deployment, expiry, and a nonce that
this tool issued and that is used once. pylti1p3 (through django-lti) does most checks; this
module adds what it leaves out (the nonce used once, the audience list, a deployment that must
be registered and active) and names each refusal in words (:class:`LaunchRefused`).

Only then :func:`lti_launch_sign_in` writes, in one transaction: django-lti's records of the
platform's user, course, membership and resource link, then the Failure Lab user linked to
(issuer, ``sub``), the class linked to the course, and the membership the roles give.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify
from lti_tool.lti_core.utils import normalize_role
from lti_tool.models import (
    Key,
    LtiContext,
    LtiDeployment,
    LtiLaunch,
    LtiMembership,
    LtiRegistration,
    LtiUser,
)
from lti_tool.utils import DjangoToolConfig, sync_data_from_launch
from pylti1p3.assignments_grades import AssignmentsGradesService
from pylti1p3.contrib.django import DjangoCacheDataStorage, DjangoMessageLaunch, DjangoOIDCLogin
from pylti1p3.deep_link_resource import DeepLinkResource
from pylti1p3.deployment import Deployment
from pylti1p3.exception import LtiException, LtiServiceException, OIDCException
from pylti1p3.grade import Grade
from pylti1p3.lineitem import LineItem
from pylti1p3.names_roles import NamesRolesProvisioningService
from pylti1p3.service_connector import ServiceConnector

from labs.live import enqueue
from labs.models import (
    Classroom,
    LabSession,
    LtiCourseLink,
    LtiGradePost,
    LtiLessonLink,
    Membership,
    Prediction,
    Scenario,
    StepProgress,
)
from labs.selectors.predictions import session_attempt
from labs.services.accounts import instructor_enrol
from labs.services.lab import session_open

logger = logging.getLogger(__name__)

#: Roles that teach the class (LIS context roles, the short and the long forms).
TEACHING_ROLES = {"Instructor", "TeachingAssistant", "ContentDeveloper"}
LEARNER_ROLES = {"Learner"}
ROLE_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/roles"
CUSTOM_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/custom"
DEPLOYMENT_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/deployment_id"
DEEP_LINKING_SETTINGS_CLAIM = "https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"
#: A lesson's line item is out of 100: each score posted says its own maximum (predictions
#: asked), which the platform scales to this.
LINE_ITEM_MAXIMUM = 100
#: The value the lesson picker posts for the class's storm panel (not a lesson: no grade).
STORM_PANEL = "storm-panel"
STORM_PANEL_TITLE = "Storm panel (the class's shared dependency)"
#: How long a used nonce is remembered: longer than any id_token this tool accepts lives.
NONCE_MEMORY_S = 24 * 3600


#: Seconds any call to a platform (its key set, token, roster and grade endpoints) may take:
#: the libraries set no timeout, and a hung LMS would otherwise hold a web or worker thread.
PLATFORM_TIMEOUT_S = 10.0


class PlatformSession(requests.Session):
    """requests' session with :data:`PLATFORM_TIMEOUT_S` on every call that sets none."""

    def request(self, *args, **kwargs):
        kwargs.setdefault("timeout", PLATFORM_TIMEOUT_S)
        return super().request(*args, **kwargs)


def _connector(registration: LtiRegistration) -> ServiceConnector:
    return ServiceConnector(registration.to_registration(), requests_session=PlatformSession())


class LaunchRefused(Exception):
    """A launch or login this tool refuses: ``code`` for the log, ``message`` for the person."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


#: What a person reads for each refusal (the code goes to the log).
REFUSALS = {
    "state": "This launch did not start in this browser (its state is missing or does not "
    "match). Open the link from your course again.",
    "format": "The launch did not carry a readable sign-in token from your course.",
    "nonce": "This launch's sign-in token was not issued for this browser's sign-in.",
    "nonce_reused": "This launch's sign-in token was already used. Open the link from your "
    "course again.",
    "platform": "Failure Lab does not know this learning platform or its client id. Ask your "
    "LMS administrator to register Failure Lab.",
    "signature": "The sign-in token's signature does not match the learning platform's keys.",
    "expired": "The sign-in token has expired. Open the link from your course again.",
    "audience": "The sign-in token was issued for another tool.",
    "deployment": "This deployment of Failure Lab is not registered or not active. Ask your "
    "LMS administrator to add its deployment id.",
    "message": "The launch message is incomplete or of a kind Failure Lab does not accept.",
    "context": "This link belongs to a class of another course: you can only reach a class "
    "from its own course.",
    "lesson": "The lesson this link points to does not exist any more.",
    "deep_link_role": "Only a teacher of the course can add a Failure Lab lesson to it.",
    "deep_link_expired": "This choice of a lesson is no longer open (it lasts an hour). Add "
    "the tool to your course again.",
}


def refuse(code: str) -> LaunchRefused:
    return LaunchRefused(code, REFUSALS[code])


class ToolConfig(DjangoToolConfig):
    """django-lti's registration lookup, except that a deployment must already be registered
    and active: django-lti's own creates an unknown deployment on the fly (a write from an
    unverified launch), this one refuses it."""

    def find_registration_by_params(self, iss, client_id, *args, **kwargs):
        """By issuer and client id; a login without a client id (optional in the OIDC
        initiation) is found by the registration's own login URL (its uuid)."""
        if client_id is None and self.registration_uuid is not None:
            self.registration = (
                LtiRegistration.objects.active()
                .filter(uuid=self.registration_uuid, issuer=iss)
                .first()
            )
            return self.registration.to_registration() if self.registration else None
        return super().find_registration_by_params(iss, client_id, *args, **kwargs)

    def _deployment(self, lookups: dict):
        deployment = LtiDeployment.objects.filter(is_active=True, **lookups).first()
        if deployment is None:
            return None
        self.deployment = deployment
        return Deployment().set_deployment_id(deployment.deployment_id)

    def find_deployment(self, iss, deployment_id):
        return self._deployment(
            {
                "registration__issuer": iss,
                "registration__is_active": True,
                "deployment_id": deployment_id,
            }
        )

    def find_deployment_by_params(self, iss, deployment_id, client_id, *args, **kwargs):
        return self._deployment(
            {
                "registration__issuer": iss,
                "registration__client_id": client_id,
                "registration__is_active": True,
                "deployment_id": deployment_id,
            }
        )


def tool_key_ensure() -> Key:
    """The tool's newest active key pair, generated when there is none (the tool signs its
    deep-linking answers and token requests with it; ``manage.py rotate_keys`` rotates)."""
    key = Key.objects.active().order_by("-datetime_created").first()
    return key if key is not None else Key.objects.generate()


def lti_login_redirect(request, *, launch_url: str, registration_uuid=None):
    """Answer a platform's OIDC login initiation: a redirect to the platform's authorization
    URL with a fresh state (also set as a cookie) and nonce. Raises LaunchRefused for an
    unknown issuer or client id."""
    tool_key_ensure()
    login = DjangoOIDCLogin(
        request, ToolConfig(registration_uuid), launch_data_storage=DjangoCacheDataStorage()
    )
    try:
        return login.disable_check_cookies().redirect(launch_url)
    except OIDCException as error:
        logger.warning("LTI login refused (platform): %s", error)
        raise refuse("platform") from error


def _signature_code(error: LtiException) -> str:
    text = str(error)
    if "expired" in text.lower():
        return "expired"
    return "signature"


def lti_launch_validate(request) -> LtiLaunch:
    """Check a launch POST without writing anything; the launch, or LaunchRefused.

    The steps of pylti1p3's ``validate`` run one by one so each refusal has its own words;
    the nonce is then marked used (an atomic add in the cache: of two posts of one token,
    one wins), last, so a launch refused for another reason leaves it unused.
    """
    launch = DjangoMessageLaunch(
        request,
        ToolConfig(),
        launch_data_storage=DjangoCacheDataStorage(),
        requests_session=PlatformSession(),
    )
    launch.set_auto_validation(enable=False)
    steps = [
        ("state", launch.validate_state),
        ("format", launch.validate_jwt_format),
        ("nonce", launch.validate_nonce),
        ("platform", launch.validate_registration),
        (None, launch.validate_jwt_signature),
        ("deployment", launch.validate_deployment),
        ("message", launch.validate_message),
    ]
    for code, step in steps:
        try:
            step()
        except LtiException as error:
            code = code or _signature_code(error)
            logger.warning("LTI launch refused (%s): %s", code, error)
            raise refuse(code) from error
    body = launch.get_launch_data()
    _check_audience(body)
    nonce = body.get("nonce")
    if not cache.add(f"lti-nonce-used:{nonce}", 1, NONCE_MEMORY_S):
        logger.warning("LTI launch refused (nonce_reused): nonce %s was used before", nonce)
        raise refuse("nonce_reused")
    launch._validated = True  # every step of pylti1p3's validate passed, one by one
    launch.save_launch_data()
    lti_launch = LtiLaunch(launch)
    _check_context(lti_launch)
    if lti_launch.is_deep_link_launch:
        role, _ = role_of(lti_launch.roles_claim or [])
        if role != Membership.Role.INSTRUCTOR:
            logger.warning("LTI launch refused (deep_link_role): roles %s", lti_launch.roles_claim)
            raise refuse("deep_link_role")
    return lti_launch


def _check_audience(body: dict) -> None:
    """The client id is in ``aud``; with several audiences ``azp`` names it (LTI core 5.1.3)."""
    aud = body.get("aud")
    audiences = aud if isinstance(aud, list) else [aud]
    registration_ok = LtiRegistration.objects.filter(
        issuer=body.get("iss"), client_id__in=[a for a in audiences if a], is_active=True
    ).exists()
    if not registration_ok or (len(audiences) > 1 and body.get("azp") not in audiences):
        logger.warning("LTI launch refused (audience): aud=%r azp=%r", aud, body.get("azp"))
        raise refuse("audience")


def _custom(lti_launch: LtiLaunch) -> dict:
    custom = lti_launch.get_claim(CUSTOM_CLAIM) or {}
    return custom if isinstance(custom, dict) else {}


def _check_context(lti_launch: LtiLaunch) -> None:
    """A link that names a class (custom ``classroom``) only reaches it from the course that
    class is linked to; a lesson it names must exist."""
    custom = _custom(lti_launch)
    classroom_id = str(custom.get("classroom", "")).strip()
    if classroom_id:
        context = (lti_launch.context_claim or {}).get("id", "")
        linked = LtiCourseLink.objects.filter(
            classroom_id=classroom_id if classroom_id.isdigit() else -1,
            context__id_on_platform=context,
            context__deployment__registration__issuer=lti_launch.get_claim("iss"),
        ).exists()
        if not linked:
            logger.warning(
                "LTI launch refused (context): class %s is not linked to course %r of %s",
                classroom_id,
                context,
                lti_launch.get_claim("iss"),
            )
            raise refuse("context")
    lesson = str(custom.get("lesson", "")).strip()
    if lesson and not Scenario.objects.filter(slug=lesson, is_active=True).exists():
        logger.warning("LTI launch refused (lesson): no active scenario %r", lesson)
        raise refuse("lesson")


def _origin(url: str) -> str | None:
    parts = urlsplit(url or "")
    if parts.scheme in ("http", "https") and parts.netloc:
        return f"{parts.scheme}://{parts.netloc}"
    return None


def frame_origins(lti_launch: LtiLaunch) -> list[str]:
    """The origins that may frame the pages a launch leads to: the registered platform's
    issuer and authorization URL, and the return URL its signed launch names (an LMS's pages
    may live on a host of their own, e.g. a school's domain beside the issuer)."""
    registration = lti_launch.registration
    presentation = lti_launch.launch_presentation_claim or {}
    candidates = [registration.issuer, registration.auth_url, presentation.get("return_url")]
    return sorted({o for o in map(_origin, candidates) if o})


def presentation_words(lti_launch: LtiLaunch) -> str:
    """Where the launch opened, as the platform asked (``launch_presentation``'s
    ``document_target``): inside the course's page, or in a window of its own."""
    target = (lti_launch.launch_presentation_claim or {}).get("document_target", "")
    if target in ("iframe", "embed"):
        return "Opened from your course, inside its page."
    return (
        "Opened in a new tab because your course asks for this lesson to open in a window "
        "of its own: your course stays in its tab."
    )


def role_of(roles: list[str]) -> tuple[str, list[str]]:
    """The class role the LTI roles give, and the roles the tool does not know.

    Instructor, TeachingAssistant and ContentDeveloper teach; Learner learns; anything else
    alone is treated as a student (the caller logs it)."""
    short = {normalize_role(role).rsplit("#", 1)[-1].rsplit("/", 1)[-1] for role in roles}
    if short & TEACHING_ROLES:
        return Membership.Role.INSTRUCTOR, []
    if short & LEARNER_ROLES:
        return Membership.Role.STUDENT, []
    return Membership.Role.STUDENT, sorted(roles)


@dataclass
class LaunchResult:
    user: object
    classroom: Classroom
    role: str
    session: object | None = None
    panel: str = ""


def _username_for(issuer: str, sub: str, name: str) -> str:
    """A readable, stable username for the platform's user: their name and a short hash of
    (issuer, sub), e.g. ``grace-hopper-3f2a9c`` (the hash keeps two Grace Hoppers apart)."""
    digest = hashlib.sha256(f"{issuer}\n{sub}".encode()).hexdigest()[:6]
    return f"{slugify(name)[:40] or 'lms-user'}-{digest}"


def _user_for(lti_launch: LtiLaunch):
    """The Failure Lab user linked to the launch's (issuer, sub)."""
    return _linked_user(lti_launch.get_claim("iss"), lti_launch.user)[0]


def _linked_user(issuer: str, lti_user: LtiUser):
    """The Failure Lab user linked to the platform's user, created with the platform's name
    (and no password: they sign in through the LMS) when there is none; and whether it was
    created."""
    if lti_user.auth_user_id is not None:
        return lti_user.auth_user, False
    User = get_user_model()
    user, created = User.objects.get_or_create(
        username=_username_for(
            issuer,
            lti_user.sub,
            lti_user.name or f"{lti_user.given_name} {lti_user.family_name}".strip(),
        ),
        defaults={
            "first_name": (lti_user.given_name or lti_user.name or "")[:150],
            "last_name": (lti_user.family_name or "")[:150],
            "email": lti_user.email or "",
        },
    )
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    lti_user.auth_user = user
    lti_user.save(update_fields=["auth_user"])
    return user, created


def _classroom_for(lti_launch: LtiLaunch) -> Classroom:
    context = lti_launch.context
    link = LtiCourseLink.objects.select_related("classroom").filter(context=context).first()
    if link is not None:
        return link.classroom
    name = (context.title or context.label or "Course from the LMS")[:120]
    classroom = Classroom.objects.create(name=name)
    LtiCourseLink.objects.create(context=context, classroom=classroom)
    return classroom


def lti_launch_sign_in(*, lti_launch: LtiLaunch) -> LaunchResult:
    """Record a checked launch and place its user: the linked user (created on first launch),
    the course's class (created on the course's first launch), the membership its roles give
    (an unknown role is a student, logged), and, for a learner's link to a lesson, the
    student's session of that lesson."""
    role, unknown = role_of(lti_launch.roles_claim or [])
    with transaction.atomic():
        sync_data_from_launch(lti_launch)
        user = _user_for(lti_launch)
        classroom = _classroom_for(lti_launch)
        if unknown:
            logger.warning(
                "LTI launch: roles %s unknown, %s joins class %s as a student",
                unknown,
                user.username,
                classroom.pk,
            )
        if role == Membership.Role.INSTRUCTOR:
            instructor_enrol(user=user, classroom=classroom)
        else:
            Membership.objects.get_or_create(
                user=user, classroom=classroom, defaults={"role": Membership.Role.STUDENT}
            )
        result = LaunchResult(
            user=user,
            classroom=classroom,
            role=role,
            panel=str(_custom(lti_launch).get("panel", "")),
        )
        lesson = str(_custom(lti_launch).get("lesson", "")).strip()
        if lesson:
            scenario = Scenario.objects.get(slug=lesson, is_active=True)
            classroom.scenarios.add(scenario)
            is_student = Membership.objects.filter(
                user=user, classroom=classroom, role=Membership.Role.STUDENT
            ).exists()
            if is_student:
                result.session = session_open(user=user, classroom=classroom, scenario=scenario)
                if lti_launch.is_resource_launch and lti_launch.ags_claim:
                    LtiLessonLink.objects.update_or_create(
                        session=result.session,
                        defaults={
                            "lti_user": lti_launch.user,
                            "resource_link": lti_launch.resource_link,
                            "ags": lti_launch.ags_claim,
                        },
                    )
    logger.info(
        "LTI launch: %s in class %s as %s (issuer %s)",
        user.username,
        classroom.pk,
        role,
        lti_launch.get_claim("iss"),
    )
    return result


# --- deep linking: an instructor picks a lesson, the platform gets a resource link ----------


@dataclass
class DeepLinkAnswer:
    """The signed LtiDeepLinkingResponse and where the browser posts it (field ``JWT``)."""

    return_url: str
    jwt: str
    title: str


def lti_deep_link_answer(
    *, request, launch_id: str, user, lesson: str, launch_url: str
) -> DeepLinkAnswer:
    """The resource link to ``lesson`` for the course of the deep-linking launch
    ``launch_id`` (kept in the cache since the launch): a link to the launch URL whose
    custom parameters name the lesson and the course's class, with a line item for its
    grade. Assigns the lesson to the class. Raises LaunchRefused when the launch is gone, is
    not a deep-linking one, ``user`` does not teach the class, or the lesson is unknown."""
    try:
        message_launch = DjangoMessageLaunch.from_cache(
            launch_id, request, ToolConfig(), launch_data_storage=DjangoCacheDataStorage()
        )
    except LtiException as error:
        logger.warning("LTI deep link refused (deep_link_expired): %s", error)
        raise refuse("deep_link_expired") from error
    lti_launch = LtiLaunch(message_launch)
    link = LtiCourseLink.objects.filter(context__in=_contexts_of(lti_launch)).first()
    if (
        not lti_launch.is_deep_link_launch
        or link is None
        or not Classroom.objects.for_instructor(user).filter(pk=link.classroom_id).exists()
    ):
        logger.warning("LTI deep link refused (deep_link_role): user %s", user.pk)
        raise refuse("deep_link_role")
    deep_link = message_launch.get_deep_link()
    settings = lti_launch.get_claim(DEEP_LINKING_SETTINGS_CLAIM) or {}
    if lesson == STORM_PANEL:
        # The class's storm panel: the instructor's screen, no grade.
        resource = (
            DeepLinkResource()
            .set_url(launch_url)
            .set_title(STORM_PANEL_TITLE)
            .set_custom_params({"panel": STORM_PANEL, "classroom": str(link.classroom_id)})
        )
        logger.info("LTI deep link: storm panel of class %s", link.classroom_id)
        return DeepLinkAnswer(
            return_url=settings["deep_link_return_url"],
            jwt=deep_link.get_response_jwt([resource]),
            title=STORM_PANEL_TITLE,
        )
    scenario = Scenario.objects.active().filter(slug=lesson).first()
    if scenario is None:
        logger.warning("LTI deep link refused (lesson): no active scenario %r", lesson)
        raise refuse("lesson")
    link.classroom.scenarios.add(scenario)
    resource = (
        DeepLinkResource()
        .set_url(launch_url)
        .set_title(scenario.title)
        .set_custom_params({"lesson": scenario.slug, "classroom": str(link.classroom_id)})
        .set_lineitem(
            LineItem()
            .set_label(scenario.title)
            .set_score_maximum(LINE_ITEM_MAXIMUM)
            .set_resource_id(scenario.slug)
        )
    )
    logger.info("LTI deep link: lesson %s for class %s", scenario.slug, link.classroom_id)
    return DeepLinkAnswer(
        return_url=settings["deep_link_return_url"],
        jwt=deep_link.get_response_jwt([resource]),
        title=scenario.title,
    )


def _contexts_of(lti_launch: LtiLaunch):
    return LtiContext.objects.filter(
        deployment__registration__issuer=lti_launch.get_claim("iss"),
        deployment__deployment_id=lti_launch.get_claim(DEPLOYMENT_CLAIM),
        id_on_platform=(lti_launch.context_claim or {}).get("id", ""),
    )


# --- roster: Names and Role Provisioning Services -------------------------------------------


@dataclass
class RosterSync:
    """What a roster sync did, for the instructor and the log."""

    added: int = 0
    present: int = 0
    left: int = 0
    problems: list[str] | None = None

    def describe(self) -> str:
        if self.problems:
            return "The roster could not be read from the course: " + "; ".join(self.problems)
        return (
            f"Roster synced from the course: {self.present} member"
            f"{'s' if self.present != 1 else ''} ({self.added} new), {self.left} who left "
            "marked inactive."
        )


def _user_for_member(registration: LtiRegistration, member: dict):
    """The platform's user and the Failure Lab user of a roster member."""
    names = {
        "given_name": member.get("given_name"),
        "family_name": member.get("family_name"),
        "name": member.get("name"),
        "email": member.get("email"),
    }
    lti_user, _ = LtiUser.objects.update_or_create(
        registration=registration,
        sub=member["user_id"],
        defaults={k: v for k, v in names.items() if v is not None},
    )
    user, created = _linked_user(registration.issuer, lti_user)
    return lti_user, user, created


def lti_roster_sync(*, classroom: Classroom, user) -> RosterSync:
    """Read the class's roster from each linked course (NRPS 2.0, with the tool's client
    credentials) and bring the class in line: members added with the role their roles give,
    and a member the course no longer lists (or lists as Inactive) marked inactive
    (``LtiMembership.is_active``), never deleted: their sessions and journals stay.
    Raises PermissionDenied unless ``user`` teaches the class. A course that cannot be read
    changes nothing and is reported."""
    if not Classroom.objects.for_instructor(user).filter(pk=classroom.pk).exists():
        raise PermissionDenied("You do not teach this class.")
    result = RosterSync(problems=[])
    links = LtiCourseLink.objects.filter(classroom=classroom).select_related(
        "context__deployment__registration"
    )
    for link in links:
        context = link.context
        registration = context.deployment.registration
        if not context.memberships_url:
            continue
        try:
            connector = _connector(registration)
            members = NamesRolesProvisioningService(
                connector, {"context_memberships_url": context.memberships_url}
            ).get_members()
        except Exception as error:  # network, HTTP or token errors: reported, nothing changed
            logger.warning("LTI roster of class %s not read: %s", classroom.pk, error)
            result.problems.append(
                f"{context.title or context.id_on_platform}: {_error_words(error)}"
            )
            continue
        with transaction.atomic():
            seen = set()
            for member in members:
                if member.get("status", "Active") != "Active":
                    continue
                lti_user, member_user, created = _user_for_member(registration, member)
                seen.add(lti_user.pk)
                role, unknown = role_of(member.get("roles", []))
                if unknown:
                    logger.warning(
                        "LTI roster: roles %s unknown, %s is a student", unknown, lti_user.sub
                    )
                LtiMembership.objects.update_or_create(
                    user=lti_user, context=context, defaults={"is_active": True}
                )
                if role == Membership.Role.INSTRUCTOR:
                    instructor_enrol(user=member_user, classroom=classroom)
                else:
                    Membership.objects.get_or_create(
                        user=member_user,
                        classroom=classroom,
                        defaults={"role": Membership.Role.STUDENT},
                    )
                result.present += 1
                result.added += int(created)
            result.left += (
                LtiMembership.objects.filter(context=context, is_active=True)
                .exclude(user__in=seen)
                .update(is_active=False)
            )
    if not result.problems:
        result.problems = None
    logger.info("LTI roster of class %s: %s", classroom.pk, result.describe())
    return result


# --- grades: Assignment and Grade Services --------------------------------------------------

#: After a failed post, the next try waits this long times 2 ** (failures - 1), at most a day.
GRADE_RETRY_BASE_S = 30
GRADE_RETRY_MAX_S = 24 * 3600


def _score_of(session: LabSession) -> dict:
    """The session's score in its current attempt: predictions right out of asked (or, for a
    lesson that asks none, steps done out of steps), with the spec's progress values: the
    activity Completed once every step is done, the grading FullyGraded then unless an
    answer still waits for its burst's grade (Pending)."""
    script = session.scenario.script if isinstance(session.scenario.script, dict) else {}
    steps = [s for s in (script.get("steps") or []) if isinstance(s, dict)]
    asked = sum(1 for s in steps if isinstance(s.get("ask"), dict) and "burst" in s)
    attempt = session_attempt(session)
    right = Prediction.objects.filter(session=session, attempt=attempt, correct=True).count()
    # An answer whose burst has not been graded yet; a question left unanswered counts wrong.
    awaiting = Prediction.objects.filter(
        session=session, attempt=attempt, correct__isnull=True
    ).exists()
    done = StepProgress.objects.filter(session=session, attempt=attempt).count()
    finished = bool(steps) and done >= len(steps)
    if asked:
        given, maximum = right, asked
    else:
        given, maximum = done, max(len(steps), 1)
    return {
        "score_given": float(given),
        "score_maximum": float(maximum),
        "activity_progress": "Completed" if finished else ("InProgress" if done else "Started"),
        "grading_progress": "FullyGraded" if finished and not awaiting else "Pending",
        "comment": f"{right} of {asked} predictions right, {done} of {len(steps)} steps done"[:200],
    }


def lti_grade_queue(*, session: LabSession) -> LtiGradePost | None:
    """Put the session's current score in its outbox row (replacing an unsent one) and send
    it after commit, when the session was opened from an LMS link; otherwise nothing."""
    if not LtiLessonLink.objects.filter(session=session).exists():
        return None
    post, _ = LtiGradePost.objects.update_or_create(
        session=session,
        defaults={**_score_of(session), "status": LtiGradePost.Status.PENDING},
    )
    transaction.on_commit(lambda: _send_later(post.pk, countdown=0))
    return post


def _send_later(post_id: int, *, countdown: int) -> None:
    try:
        enqueue.send_grade_post(post_id, countdown=countdown)
    except enqueue.QueueUnavailable as error:  # the row stays pending: a later sweep sends it
        logger.warning("LTI grade post %s not queued: %s", post_id, error)


def lti_grade_send(*, post_id: int) -> bool:
    """Send the outbox row ``post_id`` to the platform's gradebook (AGS score, with the
    platform's line item for the link, found or created on the first post). On failure the
    row stays pending with the error, and a retry is queued with a growing delay: a score
    is never dropped. Returns whether it was sent now."""
    post = LtiGradePost.objects.select_related("session__scenario").filter(pk=post_id).first()
    if post is None or post.status == LtiGradePost.Status.SENT:
        return False
    link = LtiLessonLink.objects.select_related(
        "lti_user", "resource_link__context__deployment__registration"
    ).get(session_id=post.session_id)
    sent_score = (post.score_given, post.score_maximum, post.activity_progress)
    try:
        _post_score(link, post)
    except Exception as error:  # network, HTTP, token or scope errors: kept and retried
        attempts = post.attempts + 1
        LtiGradePost.objects.filter(pk=post.pk).update(
            attempts=attempts, last_error=_error_words(error)[:300]
        )
        delay = min(GRADE_RETRY_BASE_S * 2 ** (attempts - 1), GRADE_RETRY_MAX_S)
        logger.warning(
            "LTI grade post %s failed (%s), try %s again in %s s", post.pk, error, attempts, delay
        )
        _send_later(post.pk, countdown=delay)
        return False
    # Sent: unless a newer score replaced it meanwhile (that one is queued itself).
    LtiGradePost.objects.filter(
        pk=post.pk,
        score_given=sent_score[0],
        score_maximum=sent_score[1],
        activity_progress=sent_score[2],
    ).update(status=LtiGradePost.Status.SENT, sent_at=timezone.now(), last_error="")
    logger.info("LTI grade post %s sent for session %s", post.pk, post.session_id)
    return True


def _error_words(error: Exception) -> str:
    """A failed call to the platform, in words for the dashboard."""
    if isinstance(error, LtiServiceException):
        return f"the LMS answered with HTTP status {error.response.status_code}"
    if isinstance(error, requests.RequestException):
        return "the LMS could not be reached"
    return str(error)


def _post_score(link: LtiLessonLink, post: LtiGradePost) -> None:
    registration = link.resource_link.context.deployment.registration
    ags = AssignmentsGradesService(_connector(registration), link.ags)
    lineitem_url = link.lineitem_url or link.ags.get("lineitem", "")
    if not lineitem_url:
        scenario = post.session.scenario
        found = ags.find_or_create_lineitem(
            LineItem()
            .set_label(scenario.title[:255])
            .set_score_maximum(LINE_ITEM_MAXIMUM)
            .set_tag(f"failure-lab:{scenario.slug}")
            .set_resource_id(scenario.slug)
            .set_resource_link_id(link.resource_link.id_on_platform),
            find_by="tag",
        )
        lineitem_url = found.get_id()
        LtiLessonLink.objects.filter(pk=link.pk).update(lineitem_url=lineitem_url)
    grade = (
        Grade()
        .set_score_given(post.score_given)
        .set_score_maximum(post.score_maximum)
        .set_activity_progress(post.activity_progress)
        .set_grading_progress(post.grading_progress)
        .set_timestamp(timezone.now().isoformat())
        .set_user_id(link.lti_user.sub)
        .set_comment(post.comment)
    )
    ags.put_grade(grade, LineItem({"id": lineitem_url}))


def lti_grades_send_due() -> int:
    """Queue every unsent score (a sweep for rows whose queued retry was lost); returns how
    many."""
    ids = list(
        LtiGradePost.objects.filter(status=LtiGradePost.Status.PENDING).values_list("pk", flat=True)
    )
    for post_id in ids:
        _send_later(post_id, countdown=0)
    return len(ids)
