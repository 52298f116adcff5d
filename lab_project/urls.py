"""Root URLs: the admin, Django's auth views with our templates, the lab, and the operations
endpoints (``/metrics``, ``/healthz``: labs/views/ops.py)."""

from django.contrib import admin
from django.urls import include, path

from labs.views import ops

admin.site.site_header = "Failure Lab back office"
admin.site.site_title = "Failure Lab admin"
admin.site.index_title = "Scenarios, classes and sessions"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("experiments/", include("labs.experiments.urls")),
    path("metrics", ops.metrics_view, name="metrics"),
    path("healthz", ops.healthz, name="healthz"),
    path("", include("labs.urls")),
]
