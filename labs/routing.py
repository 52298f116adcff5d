"""Websocket routes, served by lab_project/asgi.py behind origin validation and auth."""

from django.urls import path

from labs.consumers.dashboard import ClassDashboardConsumer
from labs.consumers.lab import LabSessionConsumer
from labs.consumers.storm import StormPanelConsumer

websocket_urlpatterns: list = [
    path("ws/sessions/<int:session_id>/", LabSessionConsumer.as_asgi()),
    path("ws/classes/<int:classroom_id>/", ClassDashboardConsumer.as_asgi()),
    path("ws/classes/<int:classroom_id>/storm/", StormPanelConsumer.as_asgi()),
]
