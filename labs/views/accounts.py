"""Account pages: the home page and student sign-up with a class join code."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


@login_required
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "labs/home.html", {})


def signup(request: HttpRequest) -> HttpResponse:
    return render(request, "accounts/signup.html", {})
