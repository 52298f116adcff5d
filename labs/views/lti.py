"""The LTI 1.3 endpoints a platform calls (docs/lti.md): the OIDC login initiation, the launch
and the tool's key set.

The login and the launch are cross-site requests from the platform, so they are exempt from
Django's CSRF check; the launch is protected instead by the state (a cookie set at login that
the launch must bring back), the nonce used once and the id_token's signature
(:mod:`labs.services.lti`). Every other view keeps CSRF on. A refusal is a page in words
(status 403) and a log line, and nothing is written.
"""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from lti_tool.models import Key

from lab_project.csp import LTI_FRAME_ORIGINS_KEY
from labs.models import Classroom
from labs.selectors.replay import comparable_scenarios
from labs.services import lti as lti_services
from labs.services.launch_token import PARAM, launch_token_issue

REFUSED_TEMPLATE = "labs/lti_refused.html"
#: The deep-linking launch the signed-in instructor is choosing a lesson for.
DEEP_LINK_SESSION_KEY = "lti_deep_link_launch"


def refused(request: HttpRequest, error: lti_services.LaunchRefused) -> HttpResponse:
    return render(request, REFUSED_TEMPLATE, {"message": error.message}, status=403)


@require_GET
def jwks(request: HttpRequest) -> JsonResponse:
    """The tool's public keys (the active ones), which platforms check its signatures with."""
    return JsonResponse(Key.objects.as_jwks())


@csrf_exempt
@require_http_methods(["GET", "POST"])
def oidc_login(request: HttpRequest, registration_uuid=None) -> HttpResponse:
    """Third-party login initiation: redirect to the platform's authorization endpoint.
    A platform's own login URL carries its registration's uuid (for platforms that leave the
    optional ``client_id`` out)."""
    launch_url = request.build_absolute_uri(reverse("labs:lti_launch"))
    try:
        return lti_services.lti_login_redirect(
            request, launch_url=launch_url, registration_uuid=registration_uuid
        )
    except lti_services.LaunchRefused as error:
        return refused(request, error)


@csrf_exempt
@require_POST
def launch(request: HttpRequest) -> HttpResponse:
    """A launch from the platform: checked whole, then the user signed in and placed."""
    try:
        lti_launch = lti_services.lti_launch_validate(request)
    except lti_services.LaunchRefused as error:
        return refused(request, error)
    result = lti_services.lti_launch_sign_in(lti_launch=lti_launch)
    login(request, result.user, backend="django.contrib.auth.backends.ModelBackend")
    # The pages this launch leads to may be framed by the launching LMS, and only by it.
    request.session[LTI_FRAME_ORIGINS_KEY] = lti_services.frame_origins(lti_launch)
    words = lti_services.presentation_words(lti_launch)
    if result.session is not None and not lti_launch.is_deep_link_launch:
        # The lab page carries a launch-scoped token: inside an iframe the browser may keep
        # no cookie of ours (labs/services/launch_token.py). Its words come with it.
        token = launch_token_issue(
            user=result.user,
            session_id=result.session.pk,
            frame_origins=request.session[LTI_FRAME_ORIGINS_KEY],
            notice=words,
        )
        return redirect(f"{result.session.get_absolute_url()}?{urlencode({PARAM: token})}")
    messages.info(request, words)
    if lti_launch.is_deep_link_launch:
        request.session[DEEP_LINK_SESSION_KEY] = lti_launch.get_launch_id()
        return redirect("labs:lti_deep_link")
    if result.panel == lti_services.STORM_PANEL and result.role == "instructor":
        return redirect("labs:storm_panel", result.classroom.pk)
    if result.role == "instructor":
        # The roster comes with the instructor (NRPS); a course that cannot be read is logged.
        lti_services.lti_roster_sync(classroom=result.classroom, user=result.user)
        return redirect("labs:class_dashboard", result.classroom.pk)
    return redirect("labs:home")


@login_required
@require_http_methods(["GET", "POST"])
def deep_link(request: HttpRequest) -> HttpResponse:
    """The instructor picks a lesson to add to their course (GET: the list; POST: the
    choice, CSRF-checked), then returns to the LMS with the signed resource link."""
    launch_id = request.session.get(DEEP_LINK_SESSION_KEY)
    if not launch_id:
        error = lti_services.refuse("deep_link_expired")
        return refused(request, error)
    lessons = comparable_scenarios()
    if request.method == "GET":
        context = {"lessons": lessons, "storm_panel": lti_services.STORM_PANEL}
        return render(request, "labs/lti_deep_link.html", context)
    try:
        answer = lti_services.lti_deep_link_answer(
            request=request,
            launch_id=launch_id,
            user=request.user,
            lesson=request.POST.get("lesson", ""),
            launch_url=request.build_absolute_uri(reverse("labs:lti_launch")),
        )
    except lti_services.LaunchRefused as error:
        return refused(request, error)
    request.session.pop(DEEP_LINK_SESSION_KEY, None)
    response = render(request, "labs/lti_deep_link_return.html", {"answer": answer})
    # The form posts to the platform that signed the launch: its origin, and only it.
    target = urlsplit(answer.return_url)
    response._csp_update = {"form-action": [f"{target.scheme}://{target.netloc}"]}
    return response


@login_required
@require_POST
def roster_sync(request: HttpRequest, pk: int) -> HttpResponse:
    """The dashboard's button: sync the class's roster from its LMS course now."""
    classroom = get_object_or_404(Classroom, pk=pk)
    result = lti_services.lti_roster_sync(classroom=classroom, user=request.user)
    if result.problems:
        messages.error(request, result.describe())
    else:
        messages.success(request, result.describe())
    return redirect("labs:class_dashboard", classroom.pk)
