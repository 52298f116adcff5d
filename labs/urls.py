"""The lab's URLs (namespace ``labs``), included at the site root."""

from django.urls import path

from labs.views import accounts, instructor, lab

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
    path("classes/<int:pk>/dashboard/", instructor.class_dashboard, name="class_dashboard"),
    path(
        "classes/<int:pk>/dashboard/dependency/",
        instructor.class_set_dependency,
        name="class_set_dependency",
    ),
    path("classes/<int:pk>/dashboard/reset/", instructor.class_reset, name="class_reset"),
    path(
        "classes/<int:pk>/dashboard/scenario/",
        instructor.class_assign_scenario,
        name="class_assign_scenario",
    ),
    path(
        "classes/<int:pk>/export/journal.<str:fmt>",
        instructor.class_export_journal,
        name="class_export_journal",
    ),
    path(
        "classes/<int:pk>/export/summary.csv",
        instructor.class_export_summary,
        name="class_export_summary",
    ),
]
