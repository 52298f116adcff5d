"""The launch-scoped token on websockets (labs/services/launch_token.py, docs/lti.md): a
socket whose URL carries ``?launch=<token>`` is the token's user, on the launched session's
socket only. A token that is expired, tampered with or for another session makes the socket
anonymous, which the consumer refuses (4403) as it refuses anyone it does not know."""

from __future__ import annotations

from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.contrib.auth.models import AnonymousUser

from labs.services import launch_token as tokens


class LaunchTokenAuthMiddleware:
    """Inside channels' AuthMiddlewareStack: replaces the cookie's user when a token came."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        token = (query.get(tokens.PARAM) or [""])[0]
        if token:
            scope = dict(scope)
            try:
                grant = await database_sync_to_async(tokens.launch_token_for_path)(
                    token, scope.get("path", "")
                )
            except tokens.TokenRefused:
                scope["user"] = AnonymousUser()
            else:
                scope["user"] = grant.user
                scope["launch_grant"] = grant
        return await self.inner(scope, receive, send)
