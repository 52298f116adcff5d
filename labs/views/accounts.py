"""Account pages: log in (throttled), the home page, student sign-up with a class join code,
and joining one more class from the home page.

Logout (POST) and password change are Django's auth views with our templates
(templates/registration/). Failed logins are throttled by django-axes (settings: AXES_*): the
login page states the rule, and ``locked_out`` is the page a locked-out login gets.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from labs.forms.back_office import JoinClassForm, LoginForm, SignupForm
from labs.selectors import instructor_classes, student_classes
from labs.services.accounts import JoinCodeError, student_join_class, student_signup
from labs.views import HtmxHttpRequest


def _duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds >= 60 and seconds % 60 == 0:
        minutes = seconds // 60
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def login_throttle() -> dict[str, object]:
    """The failed-login rule, as the login and lockout pages state it."""
    return {
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "cooloff": _duration(settings.AXES_COOLOFF_TIME),
    }


class LoginView(auth_views.LoginView):
    """Django's login view with bounded inputs and the failed-login rule on the page."""

    form_class = LoginForm

    def get_context_data(self, **kwargs):
        return super().get_context_data(**kwargs, throttle=login_throttle())


def locked_out(request: HttpRequest, original_response=None, credentials=None) -> HttpResponse:
    """django-axes' lockout answer (AXES_LOCKOUT_CALLABLE): 429 with the rule and when to try
    again. The password was not checked."""
    response = render(
        request, "registration/locked_out.html", {"throttle": login_throttle()}, status=429
    )
    response["Retry-After"] = str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
    return response


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
    """Create a student account enrolled in the class whose join code is given, and log in."""
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
            return redirect("labs:home")
    return render(request, "accounts/signup.html", {"form": form})
