"""A small LMS for the LTI tests: an LTI 1.3 platform served on loopback by a threaded
``http.server``, with its own RSA signing key and key set.

- ``GET /jwks``: the platform's public key set (the tool fetches it to check signatures).
- ``GET /auth``: the OIDC authorization endpoint: it answers the tool's login redirect with
  the auto-submitting form a platform posts to the tool (``id_token`` and ``state``), the
  id_token signed for the user ``login_hint`` names and the launch ``lti_message_hint`` names.
- ``POST /token``: client credentials with a JWT assertion, checked against the tool's key set.

What a test wants to go wrong (a foreign signing key, an expired token, another deployment)
it sets on :class:`Launch`.
"""

from __future__ import annotations

import html
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.error import HTTPError
from urllib.parse import parse_qs, urlencode, urlparse
from urllib.request import Request, urlopen

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

LTI = "https://purl.imsglobal.org/spec/lti/claim/"
ROLE = "http://purl.imsglobal.org/vocab/lis/v2/membership#"
AGS = "https://purl.imsglobal.org/spec/lti-ags/scope/"
NRPS_SCOPE = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"


def new_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class Person:
    sub: str
    given_name: str
    family_name: str
    roles: list[str]

    @property
    def name(self) -> str:
        return f"{self.given_name} {self.family_name}"


@dataclass
class Launch:
    """What the platform puts in the next id_token (and how it signs it)."""

    context_id: str = "course-101"
    context_title: str = "Distributed Systems 101"
    resource_link_id: str = "link-1"
    custom: dict = field(default_factory=dict)
    deployment_id: str | None = None
    client_id: str | None = None
    issuer: str | None = None
    expires_in: int = 300
    signing_key: object | None = None
    kid: str | None = None
    deep_linking: bool = False
    return_url: str | None = None
    #: launch_presentation's document_target: "iframe", or "window" (a new tab).
    document_target: str = "iframe"


class Platform:
    """The test LMS: start() serves it on 127.0.0.1 on a free port; stop() ends it."""

    def __init__(self, *, client_id: str = "failure-lab", deployment_id: str = "deploy-1"):
        self.client_id = client_id
        self.deployment_id = deployment_id
        self.key = new_key()
        self.kid = uuid.uuid4().hex
        self.people: dict[str, Person] = {}
        self.launches: dict[str, Launch] = {}
        self.tool_jwks: callable | None = None
        self.tokens_issued: dict[str, str] = {}
        #: Course id -> the subs of its members (the NRPS roster); a course not here lists
        #: everyone the platform knows.
        self.rosters: dict[str, list[str]] = {}
        #: Course id -> subs the roster lists with status Inactive.
        self.inactive: dict[str, list[str]] = {}
        #: AGS: the line items and the scores received; failures to answer with first.
        self.lineitems: list[dict] = []
        self.scores: list[dict] = []
        self.fail_scores = 0
        self.nrps_delay_s = 0.0
        self.fail_lineitems = 0
        #: Content items the tool sent back from deep linking, as the platform keeps them.
        self.links: list[dict] = []
        self.server: ThreadingHTTPServer | None = None
        #: What the course page (``/course``) frames: the tool's login URL, for a browser.
        self.course_iframe_src = "about:blank"
        #: When set, the course page links to it in a new tab instead of framing the tool.
        self.course_window_href = ""

    # --- the server ------------------------------------------------------------------
    def start(self, host: str = "127.0.0.1") -> Platform:
        platform = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                url = urlparse(self.path)
                if url.path == "/jwks":
                    body = json.dumps(platform.jwks()).encode()
                    return self._send(200, body, "application/json")
                if url.path.startswith("/ags/") and url.path.endswith("/lineitems"):
                    if not platform.authorized(self.headers, AGS + "lineitem"):
                        return self._send(401, b"{}", "application/json")
                    body = json.dumps(platform.lineitems).encode()
                    return self._send(
                        200, body, "application/vnd.ims.lis.v2.lineitemcontainer+json"
                    )
                if url.path.startswith("/nrps/"):
                    status, answer = platform.nrps(url.path.removeprefix("/nrps/"), self.headers)
                    return self._send(
                        status,
                        json.dumps(answer).encode(),
                        "application/vnd.ims.lti-nrps.v2.membershipcontainer+json",
                    )
                if url.path == "/course":
                    page = (
                        '<!doctype html><meta name="viewport" content="width=device-width">'
                        "<title>Course</title><h1>Course page of the test LMS</h1>"
                        f'<iframe id="tool" src="{html.escape(platform.course_iframe_src)}" '
                        'style="width:100%;height:85vh;border:1px solid #888"></iframe>'
                    )
                    if platform.course_window_href:
                        page = (
                            '<!doctype html><meta name="viewport" content="width=device-width">'
                            "<title>Course</title><h1>Course page of the test LMS</h1>"
                            f'<a id="tool-link" target="_blank" '
                            f'href="{html.escape(platform.course_window_href)}">'
                            "Open the lesson</a>"
                        )
                    return self._send(200, page.encode(), "text/html; charset=utf-8")
                if url.path == "/auth":
                    params = {k: v[0] for k, v in parse_qs(url.query).items()}
                    status, page = platform.authorize(params)
                    return self._send(status, page.encode(), "text/html; charset=utf-8")
                return self._send(404, b"not found", "text/plain")

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                form = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
                if urlparse(self.path).path == "/deep-link-return":
                    status, answer = platform.deep_link_return(form)
                    return self._send(status, json.dumps(answer).encode(), "application/json")
                if urlparse(self.path).path.startswith("/ags/"):
                    body = json.loads(raw or b"{}")
                    status, answer = platform._ags_post(
                        urlparse(self.path).path, self.headers, body
                    )
                    return self._send(status, json.dumps(answer).encode(), "application/json")
                if urlparse(self.path).path == "/token":
                    status, answer = platform.token(form)
                    return self._send(status, json.dumps(answer).encode(), "application/json")
                return self._send(404, b"not found", "text/plain")

        self.server = ThreadingHTTPServer((host, 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def _ags_post(self, path: str, headers, body: dict) -> tuple[int, dict]:
        """AGS: create a line item (``/ags/<course>/lineitems``) or take a score
        (``.../lineitems/<n>/scores``)."""
        parts = path.strip("/").split("/")  # ags, course, lineitems[, n, scores]
        if len(parts) == 3:
            if not self.authorized(headers, AGS + "lineitem"):
                return 401, {"error": "lineitem scope required"}
            if self.fail_lineitems:
                self.fail_lineitems -= 1
                return 503, {"error": "the gradebook is busy"}
            item = {**body, "id": self.url(f"{path}/{len(self.lineitems) + 1}")}
            self.lineitems.append(item)
            return 201, item
        if len(parts) == 5 and parts[4] == "scores":
            if not self.authorized(headers, AGS + "score"):
                return 401, {"error": "score scope required"}
            if self.fail_scores:
                self.fail_scores -= 1
                return 503, {"error": "the gradebook is busy"}
            self.scores.append({"lineitem": self.url("/" + "/".join(parts[:4])), **body})
            return 200, {}
        return 404, {"error": "no such AGS resource"}

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def url(self, path: str) -> str:
        return self.issuer + path

    # --- what it serves --------------------------------------------------------------
    def jwks(self) -> dict:
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        jwk.update(kid=self.kid, alg="RS256", use="sig")
        return {"keys": [jwk]}

    def add_person(self, sub: str, given: str, family: str, *roles: str) -> Person:
        person = Person(sub, given, family, [ROLE + r if "://" not in r else r for r in roles])
        self.people[sub] = person
        return person

    def plan(self, hint: str, launch: Launch) -> str:
        self.launches[hint] = launch
        return hint

    def id_token(self, person: Person, launch: Launch, *, nonce: str) -> str:
        now = int(time.time())
        claims = {
            "iss": launch.issuer or self.issuer,
            "aud": launch.client_id or self.client_id,
            "sub": person.sub,
            "iat": now - 5,
            "exp": now + launch.expires_in,
            "nonce": nonce,
            "given_name": person.given_name,
            "family_name": person.family_name,
            "name": person.name,
            LTI + "message_type": "LtiResourceLinkRequest",
            LTI + "version": "1.3.0",
            LTI + "deployment_id": launch.deployment_id or self.deployment_id,
            LTI + "target_link_uri": "http://testserver/lti/launch/",
            LTI + "roles": person.roles,
            LTI + "resource_link": {"id": launch.resource_link_id, "title": "Failure Lab"},
            LTI + "context": {
                "id": launch.context_id,
                "title": launch.context_title,
                "type": ["http://purl.imsglobal.org/vocab/lis/v2/course#CourseOffering"],
            },
        }
        if launch.custom:
            claims[LTI + "custom"] = launch.custom
        if launch.return_url:
            claims[LTI + "launch_presentation"] = {
                "document_target": launch.document_target,
                "return_url": launch.return_url,
            }
        claims["https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"] = {
            "scope": [AGS + "lineitem", AGS + "score", AGS + "result.readonly"],
            "lineitems": self.url(f"/ags/{launch.context_id}/lineitems"),
        }
        claims["https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"] = {
            "context_memberships_url": self.url(f"/nrps/{launch.context_id}"),
            "service_versions": ["2.0"],
        }
        if launch.deep_linking:
            claims[LTI + "message_type"] = "LtiDeepLinkingRequest"
            del claims[LTI + "resource_link"]
            claims["https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"] = {
                "deep_link_return_url": self.url("/deep-link-return"),
                "accept_types": ["ltiResourceLink"],
                "accept_presentation_document_targets": ["iframe", "window"],
                "accept_multiple": False,
                "data": "opaque-platform-data",
            }
        key = launch.signing_key or self.key
        return jwt.encode(
            claims, _pem(key), algorithm="RS256", headers={"kid": launch.kid or self.kid}
        )

    def authorize(self, params: dict) -> tuple[int, str]:
        """The OIDC authorization endpoint: the form post to the tool's redirect_uri."""
        for name in (
            "scope",
            "response_type",
            "client_id",
            "redirect_uri",
            "login_hint",
            "state",
            "nonce",
            "response_mode",
            "prompt",
        ):
            if not params.get(name):
                return 400, f"missing {name}"
        if params["client_id"] != self.client_id or params["response_mode"] != "form_post":
            return 400, "bad client id or response mode"
        person = self.people[params["login_hint"]]
        launch = self.launches.get(params.get("lti_message_hint", ""), Launch())
        token = self.id_token(person, launch, nonce=params["nonce"])
        page = (
            f'<form method="post" action="{html.escape(params["redirect_uri"])}">'
            f'<input type="hidden" name="id_token" value="{token}">'
            f'<input type="hidden" name="state" value="{html.escape(params["state"])}">'
            "</form><script>document.forms[0].submit()</script>"
        )
        return 200, page

    def _tool_claims(self, token: str, audience: str) -> dict:
        """A JWT the tool signed, checked against the tool's key set (by ``kid``)."""
        header = jwt.get_unverified_header(token)
        keys = {k["kid"]: k for k in self.tool_jwks()["keys"]}
        if header.get("kid") not in keys:
            raise jwt.InvalidTokenError(f"unknown kid {header.get('kid')}")
        return jwt.decode(
            token,
            RSAAlgorithm.from_jwk(json.dumps(keys[header["kid"]])),
            algorithms=["RS256"],
            audience=audience,
        )

    def deep_link_return(self, form: dict) -> tuple[int, dict]:
        """The deep-linking return URL: the tool's signed LtiDeepLinkingResponse."""
        try:
            claims = self._tool_claims(form.get("JWT", ""), self.issuer)
        except jwt.InvalidTokenError as error:
            return 401, {"error": str(error)}
        if claims.get("iss") != self.client_id or (
            claims.get(LTI + "message_type") != "LtiDeepLinkingResponse"
        ):
            return 400, {"error": "not a deep-linking response from the tool"}
        items = claims.get("https://purl.imsglobal.org/spec/lti-dl/claim/content_items", [])
        self.links.extend(items)
        return 200, {"received": len(items)}

    def authorized(self, headers, scope: str) -> bool:
        """A bearer token this platform issued for ``scope``."""
        token = (headers.get("Authorization") or "").removeprefix("Bearer ")
        return scope in self.tokens_issued.get(token, "")

    def nrps(self, context_id: str, headers) -> tuple[int, dict]:
        """Names and Role Provisioning Services 2.0: the course's membership container
        (after ``nrps_delay_s``, for a test of a slow LMS)."""
        time.sleep(self.nrps_delay_s)
        if not self.authorized(headers, NRPS_SCOPE):
            return 401, {"error": "a token with the contextmembership scope is required"}
        subs = self.rosters.get(context_id, list(self.people))
        inactive = set(self.inactive.get(context_id, []))
        members = [
            {
                "status": "Inactive" if sub in inactive else "Active",
                "user_id": sub,
                "roles": self.people[sub].roles,
                "name": self.people[sub].name,
                "given_name": self.people[sub].given_name,
                "family_name": self.people[sub].family_name,
            }
            for sub in subs
        ]
        return 200, {
            "id": self.url(f"/nrps/{context_id}"),
            "context": {"id": context_id},
            "members": members,
        }

    def token(self, form: dict) -> tuple[int, dict]:
        """Client credentials with a JWT assertion signed by the tool (RFC 7523)."""
        assertion = form.get("client_assertion", "")
        if form.get("grant_type") != "client_credentials" or self.tool_jwks is None:
            return 400, {"error": "invalid_request"}
        try:
            self._tool_claims(assertion, self.url("/token"))
        except jwt.InvalidTokenError:
            return 401, {"error": "invalid_client"}
        access = uuid.uuid4().hex
        self.tokens_issued[access] = form.get("scope", "")
        return 200, {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": 3600,
            "scope": form.get("scope", ""),
        }


def _pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


FORM_FIELD = re.compile(r'name="(id_token|state)" value="([^"]*)"')
FORM_ACTION = re.compile(r'action="([^"]*)"')


def parse_form_post(page: str) -> tuple[str, dict]:
    """The action and fields of the platform's auto-submitting form."""
    action = html.unescape(FORM_ACTION.search(page).group(1))
    return action, {name: html.unescape(value) for name, value in FORM_FIELD.findall(page)}


def post_form(url: str, fields: dict) -> dict:
    """POST a form to the platform (as the browser would) and read its JSON answer; an
    error's body is read too, so a refusal says why."""
    request = Request(url, data=urlencode(fields).encode(), method="POST")  # noqa: S310
    try:
        with urlopen(request, timeout=10) as answer:  # noqa: S310 (the loopback platform)
            return json.loads(answer.read())
    except HTTPError as error:
        return {"status": error.code, **json.loads(error.read() or b"{}")}


def register(platform: Platform):
    """Register ``platform`` with the tool as an LMS administrator would (an active
    deployment, the tool's first key) and give it a teacher, a learner and an observer; the
    platform keeps the tool's key set (its thread cannot read the test database)."""
    from lti_tool.models import Key, LtiDeployment, LtiRegistration

    Key.objects.generate()
    registration = LtiRegistration.objects.create(
        name="Test LMS",
        issuer=platform.issuer,
        client_id=platform.client_id,
        auth_url=platform.url("/auth"),
        token_url=platform.url("/token"),
        keyset_url=platform.url("/jwks"),
    )
    LtiDeployment.objects.create(
        registration=registration, deployment_id=platform.deployment_id, is_active=True
    )
    tool_jwks = Key.objects.as_jwks()
    platform.tool_jwks = lambda: tool_jwks
    platform.add_person("teacher-1", "Ada", "Lovelace", "Instructor")
    platform.add_person("student-1", "Grace", "Hopper", "Learner")
    platform.add_person("observer-1", "Otto", "Observer", "Mentor")
    return registration
