"""The lab's URLs (namespace ``labs``), included at the site root."""

from django.urls import path

from labs.views import accounts, lab

app_name = "labs"

urlpatterns = [
    path("", accounts.home, name="home"),
    path("accounts/signup/", accounts.signup, name="signup"),
    path(
        "classes/<int:classroom_id>/scenarios/<int:scenario_id>/open/",
        lab.session_open,
        name="session_open",
    ),
    path("sessions/<int:pk>/", lab.session_detail, name="session_detail"),
]
