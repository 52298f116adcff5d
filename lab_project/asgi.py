"""ASGI entry point: HTTP through Django, websockets through Channels.

The Django ASGI application is built before anything imports models (consumers do), so the app
registry is ready; at most LAB_HTTP_CONCURRENCY requests run in Django at once
(lab_project/http_limit.py says why); websockets are refused from origins not in ALLOWED_HOSTS
and carry the session's user (or a course launch's token's: labs/consumers/launch_token.py).
The lab page's template is parsed here, at boot, not on the first page's connect.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab_project.settings")

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import reverse  # noqa: E402

from lab_project.http_limit import ConcurrencyLimit  # noqa: E402
from labs.consumers.launch_token import LaunchTokenAuthMiddleware  # noqa: E402
from labs.presenters.lab_page import load_templates  # noqa: E402
from labs.routing import websocket_urlpatterns  # noqa: E402

load_templates()

application = ProtocolTypeRouter(
    {
        "http": ConcurrencyLimit(
            django_asgi_app,
            settings.LAB_HTTP_CONCURRENCY,
            hashing_paths=[
                reverse(name) for name in ("login", "admin:login", "labs:signup", "password_change")
            ],
            timing=settings.LAB_REQUEST_TIMING,
        ),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(LaunchTokenAuthMiddleware(URLRouter(websocket_urlpatterns)))
        ),
    }
)
