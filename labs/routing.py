"""Websocket routes, served by lab_project/asgi.py behind origin validation and auth."""

from django.urls import path

from labs.consumers import LabSessionConsumer

websocket_urlpatterns: list = [
    path("ws/sessions/<int:session_id>/", LabSessionConsumer.as_asgi()),
]
