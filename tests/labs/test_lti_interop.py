"""Interoperability: a launch made by a second, independent implementation of the platform
side, the ``lti1p3platform`` package (PyPI, 0.1.8): its OIDC login initiation, its signed
id_token (its own keys, its own ``kid``), its claims. Only its key set is served here, on
loopback, since the package leaves serving to the web framework."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract
from lti1p3platform.message_launch import LTIAdvantageMessageLaunchAbstract
from lti1p3platform.oidc_login import OIDCLoginAbstract
from lti1p3platform.registration import Registration
from lti_tool.models import Key, LtiDeployment, LtiRegistration

from labs.models import LabSession, Membership

pytestmark = pytest.mark.django_db

ROLE = "http://purl.imsglobal.org/vocab/lis/v2/membership#"


def pem_pair() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


class PlatformConf(LTI1P3PlatformConfAbstract):
    def init_platform_config(self, **kwargs):
        self.registration = kwargs["registration"]

    def get_registration_by_params(self, **kwargs):
        return self.registration


class Login(OIDCLoginAbstract):
    def set_lti_message_hint(self, **kwargs):
        self._lti_message_hint = kwargs["hint"]

    def get_redirect(self, url):
        return url


class Launch(LTIAdvantageMessageLaunchAbstract):
    def render_launch_form(self, launch_data, **kwargs):
        return launch_data


@pytest.fixture
def key_set_server():
    """Serves whatever key set the test puts in ``holder["jwks"]`` at ``/jwks``."""
    holder: dict = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = json.dumps(holder["jwks"]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    holder["url"] = f"http://127.0.0.1:{server.server_address[1]}/jwks"
    yield holder
    server.shutdown()
    server.server_close()


def test_a_launch_from_lti1p3platform_signs_the_learner_into_the_lesson(
    client, key_set_server, scenario, monkeypatch
):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    private, public = pem_pair()
    issuer = "https://lms.interop.example"
    registration = (
        Registration()
        .set_iss(issuer)
        .set_client_id("interop-client")
        .set_deployment_id("interop-deployment")
        .set_oidc_login_url("http://testserver/lti/login/")
        .set_launch_url("http://testserver/lti/launch/")
        .set_platform_public_key(public)
        .set_platform_private_key(private)
    )
    conf = PlatformConf(registration=registration)
    conf.get_registration()
    key_set_server["jwks"] = conf.get_jwks()
    Key.objects.generate()
    tool_side = LtiRegistration.objects.create(
        name="Interop LMS",
        issuer=issuer,
        client_id="interop-client",
        auth_url="https://lms.interop.example/auth",
        token_url="https://lms.interop.example/token",
        keyset_url=key_set_server["url"],
    )
    LtiDeployment.objects.create(
        registration=tool_side, deployment_id="interop-deployment", is_active=True
    )

    # 1. The platform's login initiation, followed by the tool's redirect to its auth URL.
    login = Login(request=None, platform_config=conf)
    login.set_lti_message_hint(hint="resource-1")
    preflight = urlsplit(login.initiate_login("learner-42"))
    answer = client.get(preflight.path, dict(parse_qsl(preflight.query)))
    assert answer.status_code == 302
    auth = urlsplit(answer["Location"])
    assert f"{auth.scheme}://{auth.netloc}{auth.path}" == "https://lms.interop.example/auth"
    auth_params = dict(parse_qsl(auth.query))

    # 2. The platform's launch: its own id_token, built and signed by lti1p3platform.
    launch = Launch(
        request=SimpleNamespace(get_data=auth_params, form_data={}), platform_config=conf
    )
    launch.set_user_data("learner-42", [ROLE + "Learner"], full_name="Barbara Liskov")
    launch.set_resource_link_claim("resource-1", title="The tour")
    launch.set_launch_context_claim("course-9", context_title="Interop course")
    launch.set_custom_parameters_claim({"lesson": scenario.slug})
    form = launch.lti_launch()
    assert form["launch_url"] == "http://testserver/lti/launch/"

    done = client.post("/lti/launch/", {"id_token": form["id_token"], "state": form["state"]})
    session = LabSession.objects.get()
    assert done.status_code == 302 and done["Location"].startswith(session.get_absolute_url() + "?launch=")
    assert session.classroom.name == "Interop course"
    assert Membership.objects.get(user=session.owner).role == Membership.Role.STUDENT
    assert session.owner.first_name == "Barbara Liskov"  # the platform sent only ``name``
