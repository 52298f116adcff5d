"""The lab's URLs (namespace ``labs``), included at the site root."""

from django.urls import path

from labs.views import accounts, instructor, lab, lti, predictions, replay, storm

app_name = "labs"

urlpatterns = [
    path("", accounts.home, name="home"),
    # LTI 1.3: what an LMS administrator pastes (docs/lti.md).
    path("lti/login/", lti.oidc_login, name="lti_login"),
    path("lti/login/<uuid:registration_uuid>/", lti.oidc_login, name="lti_platform_login"),
    path("lti/launch/", lti.launch, name="lti_launch"),
    path("lti/jwks/", lti.jwks, name="lti_jwks"),
    path("lti/deep-link/", lti.deep_link, name="lti_deep_link"),
    path("classes/<int:pk>/lti/roster/", lti.roster_sync, name="lti_roster_sync"),
    path("accounts/signup/", accounts.signup, name="signup"),
    path("classes/join/", accounts.join_class, name="join_class"),
    path(
        "classes/<int:classroom_id>/scenarios/<int:scenario_id>/open/",
        lab.session_open,
        name="session_open",
    ),
    path("sessions/<int:pk>/", lab.session_detail, name="session_detail"),
    path("sessions/<int:pk>/dependency/", lab.session_dependency, name="session_dependency"),
    path("sessions/<int:pk>/policy/", lab.session_policy, name="session_policy"),
    path("sessions/<int:pk>/bursts/", lab.session_burst, name="session_burst"),
    path("sessions/<int:pk>/traffic/", lab.session_traffic, name="session_traffic"),
    path(
        "sessions/<int:pk>/steps/<int:step>/prediction/",
        predictions.step_prediction,
        name="session_step_prediction",
    ),
    path(
        "sessions/<int:pk>/steps/<int:step>/done/", predictions.step_done, name="session_step_done"
    ),
    path("sessions/<int:pk>/reset/", lab.session_reset, name="session_reset"),
    path("sessions/<int:pk>/breaker/", lab.session_breaker, name="session_breaker"),
    path("sessions/<int:pk>/journal/", lab.session_journal, name="session_journal"),
    path("sessions/<int:pk>/seconds/<int:second>/", lab.session_second, name="session_second"),
    path("compare/", replay.compare, name="compare"),
    path("sessions/<int:pk>/history/", replay.burst_history, name="burst_history"),
    path("sessions/<int:pk>/bursts/<int:number>/replay/", replay.burst_replay, name="burst_replay"),
    path("bursts/<int:burst_id>/whatif/", replay.burst_whatif, name="burst_whatif"),
    path("sessions/<int:pk>/export.<str:fmt>", lab.session_export, name="session_export"),
    path("classes/<int:pk>/dashboard/", instructor.class_dashboard, name="class_dashboard"),
    path("classes/<int:pk>/predictions/", predictions.class_predictions, name="class_predictions"),
    path(
        "classes/<int:pk>/predictions.csv",
        predictions.class_predictions_csv,
        name="class_predictions_csv",
    ),
    path(
        "classes/<int:pk>/dashboard/dependency/",
        instructor.class_set_dependency,
        name="class_set_dependency",
    ),
    path("classes/<int:pk>/dashboard/reset/", instructor.class_reset, name="class_reset"),
    path("classes/<int:pk>/shared/", instructor.class_set_shared, name="class_set_shared"),
    path("classes/<int:pk>/chain/", instructor.class_set_chain, name="class_set_chain"),
    path("classes/<int:pk>/storm/", storm.storm_panel, name="storm_panel"),
    path("classes/<int:pk>/storm/traffic/", storm.storm_traffic, name="storm_traffic"),
    path(
        "classes/<int:pk>/storm/seconds.csv",
        storm.storm_export_seconds,
        name="storm_export_seconds",
    ),
    path(
        "classes/<int:pk>/storm/students.csv",
        storm.storm_export_students,
        name="storm_export_students",
    ),
    path(
        "classes/<int:pk>/shared/trigger/",
        instructor.class_fire_trigger,
        name="class_fire_trigger",
    ),
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
