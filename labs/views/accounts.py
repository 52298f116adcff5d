"""Account pages: log in (limited), choosing one's own password after a roster's one-time
password, the home page, student sign-up with a class join code, and joining one more class
from the home page.

Logout (POST) and password change are Django's auth views with our templates
(templates/registration/). Failed logins are limited by django-axes with the rules of
``lab_project.login_limits``: the login page states them, and ``locked_out`` is the page a
refused login gets. A login, a sign-up, and a password chosen or changed while logged in
leave the browser a device cookie that lets the name log in there even while it is paused.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login, update_session_auth_hash
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from lab_project.login_limits import duration, login_rules, refusal
from labs.forms.back_office import ChoosePasswordForm, JoinClassForm, LoginForm, SignupForm
from labs.selectors.lessons import instructor_classes, student_classes
from labs.services.accounts import (
    JoinCodeError,
    LoginRefused,
    account_login,
    account_set_password,
    account_trust_browser,
    student_join_class,
    student_signup,
)
from labs.views import HtmxHttpRequest
from labs.views.ops import outage_of, outage_page

#: Set in the session of a login that used up a one-time password, until a password is chosen.
MUST_CHOOSE_PASSWORD = "labs.must_choose_password"  # noqa: S105 (a session key)


def remember_browser(request: HttpRequest, response: HttpResponse, user) -> HttpResponse:
    """Give the browser of ``request`` its device cookie for ``user`` (who just proved their
    password on it): signed, HttpOnly, SameSite=Lax, Secure over HTTPS, sent to the login page
    only, for ``LAB_LOGIN_DEVICE_COOKIE_DAYS``."""
    name = settings.LAB_LOGIN_DEVICE_COOKIE_NAME
    value = account_trust_browser(user=user, cookie=request.COOKIES.get(name))
    response.set_cookie(
        name,
        value,
        max_age=settings.LAB_LOGIN_DEVICE_COOKIE_DAYS * 24 * 3600,
        path=reverse("login"),
        secure=request.is_secure() or settings.SESSION_COOKIE_SECURE,
        httponly=True,
        samesite="Lax",
    )
    return response


class LoginView(auth_views.LoginView):
    """Django's login view with bounded inputs and the login limits on the page. A roster's
    one-time password logs in once (``account_login`` uses it up) and leads to the page that
    asks for a password of the student's own; any other login leaves the browser trusted for
    the name (``remember_browser``)."""

    form_class = LoginForm

    def get_context_data(self, **kwargs):
        return super().get_context_data(**kwargs, throttle=login_rules())

    def form_valid(self, form):
        user = form.get_user()
        try:
            one_time = account_login(user=user)
        except LoginRefused:
            form.add_error(None, form.get_invalid_login_error())
            return self.form_invalid(form)
        login(self.request, user)
        if one_time:
            # The browser is trusted once the student's own password is chosen on it.
            self.request.session[MUST_CHOOSE_PASSWORD] = True
            return redirect("choose_password")
        return remember_browser(self.request, redirect(self.get_success_url()), user)


class PasswordChangeView(auth_views.PasswordChangeView):
    """Django's password change. The new password leaves every browser untrusted for the
    name (``lab_project.login_limits``) but this one, which gets a fresh device cookie."""

    def form_valid(self, form):
        response = super().form_valid(form)
        return remember_browser(self.request, response, self.request.user)


def locked_out(request: HttpRequest, original_response=None, credentials=None) -> HttpResponse:
    """django-axes' refusal (AXES_LOCKOUT_CALLABLE): 429 with the rule that refused, and when
    to try again (also as Retry-After). The password was not checked."""
    username = (credentials or {}).get("username") or request.POST.get("username")
    why = refusal(username, getattr(request, "axes_ip_address", None))
    context = {"throttle": login_rules(), "rule": why.rule, "wait": duration(why.retry_after_s)}
    response = render(request, "registration/locked_out.html", context, status=429)
    response["Retry-After"] = str(why.retry_after_s)
    return response


@require_http_methods(["GET", "POST"])
@login_required
def choose_password(request: HttpRequest) -> HttpResponse:
    """Choose one's own password: asked after a login with a roster's one-time password (which
    that login used up), before any other page. Only then: any other change of password asks
    for the current one (Django's password change, where this sends everyone else)."""
    if not request.session.get(MUST_CHOOSE_PASSWORD):
        return redirect("password_change")
    form = ChoosePasswordForm(request.user, request.POST or None)
    if request.method == "POST" and form.is_valid():
        account_set_password(user=request.user, password=form.cleaned_data["new_password1"])
        update_session_auth_hash(request, request.user)
        request.session.pop(MUST_CHOOSE_PASSWORD, None)
        messages.success(request, "Your password is set: use it from now on.")
        return remember_browser(request, redirect("labs:home"), request.user)
    return render(request, "registration/choose_password.html", {"form": form})


class ChoosePasswordFirst:
    """Middleware: a session that logged in with a one-time password sees only the page that
    asks for a new one (and may log out) until a password is chosen. htmx requests are sent
    there with ``HX-Redirect``."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        session = getattr(request, "session", None)
        try:
            must_choose = session is not None and session.get(MUST_CHOOSE_PASSWORD)
        except DatabaseError as exc:
            # The database is away: the outage page now, once; the flag tells the response's
            # middleware (the CSP's) not to wait for the session again.
            request.database_away = True
            return outage_page(outage_of(exc) or "its database")
        if must_choose:
            target = reverse("choose_password")
            if request.path not in (target, reverse("logout")):
                if request.headers.get("HX-Request"):
                    return HttpResponse(status=204, headers={"HX-Redirect": target})
                return redirect(target)
        return self.get_response(request)


def _home_context(user, join_form: JoinClassForm | None = None) -> dict:
    return {
        "teaching": instructor_classes(user=user),
        "learning": student_classes(user=user),
        # Instructors are enrolled by an administrator, so only students get the form.
        "join_form": None if user.is_staff else (join_form or JoinClassForm()),
    }


@login_required
def home(request: HtmxHttpRequest) -> HttpResponse:
    """A student's classes with their scenarios (to open a lab session) and a form to join one
    more class; an instructor's classes (to manage them)."""
    return render(request, "labs/home.html", _home_context(request.user))


@require_POST
@login_required
def join_class(request: HtmxHttpRequest) -> HttpResponse:
    """Join one more class with its join code; the home page with the error (400) if refused."""
    form = JoinClassForm(request.POST)
    if form.is_valid():
        try:
            result = student_join_class(user=request.user, join_code=form.cleaned_data["join_code"])
        except JoinCodeError as exc:
            form.add_error("join_code", str(exc))
        else:
            if result.joined:
                messages.success(request, f"You joined {result.classroom.name}.")
            else:
                messages.info(request, f"You are already in {result.classroom.name}.")
            return redirect("labs:home")
    context = _home_context(request.user, form)
    context["join_form"] = form  # the refusal is shown whoever posted it
    return render(request, "labs/home.html", context, status=400)


@require_http_methods(["GET", "POST"])
def signup(request: HtmxHttpRequest) -> HttpResponse:
    """Create a student account enrolled in the class whose join code is given, and log in
    (the browser is then trusted for the new name, as after any login)."""
    if request.user.is_authenticated:
        return redirect("labs:home")
    form = SignupForm(request.POST or None, initial={"join_code": request.GET.get("code", "")})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            user = student_signup(
                username=data["username"],
                password=data["password1"],
                join_code=data["join_code"],
                first_name=data.get("first_name", ""),
                last_name=data.get("last_name", ""),
                email=data.get("email", ""),
            )
        except JoinCodeError as exc:  # the code expired between the form check and now
            form.add_error("join_code", str(exc))
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            messages.success(request, f"Welcome! You joined {form.classroom.name}.")
            return remember_browser(request, redirect("labs:home"), user)
    return render(request, "accounts/signup.html", {"form": form})
