"""Root URLs: the admin, Django's auth views with our templates, and the lab."""

from django.contrib import admin
from django.urls import include, path

admin.site.site_header = "Failure Lab back office"
admin.site.site_title = "Failure Lab admin"
admin.site.index_title = "Scenarios, classes and sessions"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("experiments/", include("labs.experiments.urls")),
    path("", include("labs.urls")),
]
