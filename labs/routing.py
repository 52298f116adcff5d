"""Websocket routes, served by lab_project/asgi.py behind origin validation and auth.

Placeholder from the platform: the lab engineer owns this file and adds the lab session and
class dashboard consumers here.
"""

websocket_urlpatterns: list = []
