"""Account pages: the home page and student sign-up with a class join code.

Login, logout (POST) and password change are Django's auth views with our templates
(templates/registration/).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from labs.forms.back_office import SignupForm
from labs.selectors import instructor_classes, student_classes
from labs.services.accounts import JoinCodeError, student_signup
from labs.views import HtmxHttpRequest


@login_required
def home(request: HtmxHttpRequest) -> HttpResponse:
    """A student's classes with their scenarios (to open a lab session); an instructor's
    classes (to manage them)."""
    context = {
        "teaching": instructor_classes(user=request.user),
        "learning": student_classes(user=request.user),
    }
    return render(request, "labs/home.html", context)


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
