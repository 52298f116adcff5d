"""URLs of the Experiments area (namespace ``experiments``), included at ``/experiments/``."""

from django.urls import path

from labs.views import experiments

app_name = "experiments"

urlpatterns = [
    path("", experiments.index, name="index"),
    path("<slug:name>/", experiments.detail, name="detail"),
]
