"""Content-Security-Policy and Permissions-Policy headers (Django's test client), the same
policy under the production settings, and templates that the policy would break.

The browser side (no violation on the real pages, htmx still working) is
tests/e2e/test_csp.py; the absent ``Server`` header of daphne is checked there too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.urls import reverse

from tests.conftest import make_user
from tests.test_settings import PRODUCTION_ENV, load_settings

ROOT = Path(__file__).resolve().parent.parent

#: Every directive of the policy and its sources, except connect-src's websocket origin,
#: which is the request's own host.
EXPECTED_CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'"],
    "font-src": ["'self'"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}
DENIED_FEATURES = {"camera", "microphone", "geolocation", "payment", "usb", "accelerometer"}


def parse_csp(header: str) -> dict[str, list[str]]:
    directives = {}
    for part in header.split(";"):
        name, *sources = part.split()
        assert name not in directives, f"{name} twice in {header!r}"
        directives[name] = sources
    return directives


def parse_permissions_policy(header: str) -> dict[str, str]:
    return dict(item.strip().split("=", 1) for item in header.split(","))


def assert_lab_csp(response, websocket_origin: str) -> None:
    csp = parse_csp(response["Content-Security-Policy"])
    assert csp == {**EXPECTED_CSP, "connect-src": ["'self'", websocket_origin]}
    joined = response["Content-Security-Policy"]
    assert "unsafe-inline" not in joined and "unsafe-eval" not in joined


@pytest.mark.django_db
@pytest.mark.parametrize("url_name", ["login", "labs:signup", "admin:login"])
def test_anonymous_pages_carry_the_policies(client, url_name):
    response = client.get(reverse(url_name))
    assert response.status_code == 200
    assert_lab_csp(response, "ws://testserver")
    policy = parse_permissions_policy(response["Permissions-Policy"])
    assert all(policy[feature] == "()" for feature in DENIED_FEATURES), policy
    assert set(policy.values()) == {"()"}


@pytest.mark.django_db
def test_signed_in_pages_and_htmx_partials_carry_the_policy(client):
    client.force_login(make_user("erin"))
    for response in (
        client.get(reverse("labs:home")),
        client.get(reverse("experiments:index")),
        client.get(reverse("experiments:detail", args=["storm"])),
        client.post(
            reverse("experiments:detail", args=["storm"]),
            {"clients": "100"},
            HTTP_HX_REQUEST="true",
        ),
    ):
        assert response.status_code == 200
        assert_lab_csp(response, "ws://testserver")
        assert "Permissions-Policy" in response


@pytest.mark.django_db
def test_connect_src_names_the_requests_own_websocket_origin(client):
    assert_lab_csp(
        client.get("/accounts/login/", HTTP_HOST="localhost:8000"), "ws://localhost:8000"
    )
    # Behind TLS the live pages open wss://.
    assert_lab_csp(client.get("/accounts/login/", secure=True), "wss://testserver")


@pytest.mark.django_db
def test_a_disallowed_host_gets_no_websocket_origin(client):
    response = client.get("/accounts/login/", HTTP_HOST="evil.example.com")
    assert response.status_code == 400
    assert "evil.example.com" not in response.get("Content-Security-Policy", "")


def test_production_settings_have_the_same_policies(monkeypatch, tmp_path):
    dev = load_settings(monkeypatch, tmp_path)
    prod = load_settings(monkeypatch, tmp_path, **PRODUCTION_ENV)
    assert prod["DEBUG"] is False
    for s in (dev, prod):
        assert "lab_project.csp.LabCSPMiddleware" in s["MIDDLEWARE"]
        assert "django_permissions_policy.PermissionsPolicyMiddleware" in s["MIDDLEWARE"]
        assert s["CONTENT_SECURITY_POLICY"]["DIRECTIVES"] == EXPECTED_CSP
        assert set(s["PERMISSIONS_POLICY"]) >= DENIED_FEATURES
        assert all(origins == [] for origins in s["PERMISSIONS_POLICY"].values())


# --- templates the policy would break -----------------------------------------------------

TEMPLATES = sorted((ROOT / "templates").rglob("*.html"))
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
EVENT_HANDLER = re.compile(r"""\son[a-z]+\s*=\s*["']""", re.IGNORECASE)
STYLE_ATTRIBUTE = re.compile(r"""\sstyle\s*=""", re.IGNORECASE)
HX_ON = re.compile(r"""\shx-on(?:[:-][\w:.-]*)?\s*=""", re.IGNORECASE)
EVAL_VALUE = re.compile(r"""=\s*["']\s*(?:js|javascript):""", re.IGNORECASE)


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: str(p.relative_to(ROOT / "templates")))
def test_templates_have_nothing_inline_that_the_policy_refuses(path):
    text = path.read_text()
    assert not INLINE_SCRIPT.findall(text), "inline <script>: move it to static/js/"
    assert "<style" not in text.lower(), "<style> block: move it to static/css/"
    assert not EVENT_HANDLER.findall(text), "on...= handler: bind it in static/js/"
    assert not STYLE_ATTRIBUTE.findall(text), "style= attribute: use a class"
    assert not HX_ON.findall(text), "hx-on needs eval, which the policy refuses"
    assert not EVAL_VALUE.findall(text), "js:/javascript: values need eval or inline script"
