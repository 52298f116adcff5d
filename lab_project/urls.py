"""Root URLs: the admin, Django's auth views with our templates (the login view is the
lab's), the lab, and the operations endpoints (``/metrics``, ``/healthz``: labs/views/ops.py)."""

from django.contrib import admin
from django.urls import include, path

from labs.admin import member_autocomplete
from labs.views import ops
from labs.views.accounts import LoginView, PasswordChangeView, choose_password

#: A request that fails because Redis or the database is away gets a 503 page in words.
handler500 = "labs.views.ops.server_error"

admin.site.site_header = "Failure Lab back office"
admin.site.site_title = "Failure Lab admin"
admin.site.index_title = "Scenarios, classes and sessions"

urlpatterns = [
    # The admin's autocomplete with members chosen by name (before the admin's own URL).
    path("admin/autocomplete/", member_autocomplete, name="member_autocomplete"),
    path("admin/", admin.site.urls),
    # Django's login with bounded inputs and the failed-login rule; the rest of its auth URLs.
    path("accounts/login/", LoginView.as_view(), name="login"),
    # After a roster's one-time password: the student's own password, before anything else.
    path("accounts/choose-password/", choose_password, name="choose_password"),
    # Django's, plus a fresh device cookie for the browser that changed the password.
    path("accounts/password_change/", PasswordChangeView.as_view(), name="password_change"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("experiments/", include("labs.experiments.urls")),
    path("metrics", ops.metrics_view, name="metrics"),
    path("healthz", ops.healthz, name="healthz"),
    path("", include("labs.urls")),
]
