"""The session store (lab_project/sessions.py): Django's database sessions with a raw read,
the same rows as Django's own store, so either reads what the other wrote."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.sessions.backends import db as django_db_store
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from lab_project import sessions
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def test_the_lab_uses_its_store():
    assert settings.SESSION_ENGINE == "lab_project.sessions"


def test_a_saved_session_loads_with_its_data_and_key():
    saved = sessions.SessionStore()
    saved["answer"] = 42
    saved.save()
    loaded = sessions.SessionStore(saved.session_key)
    assert loaded["answer"] == 42
    assert loaded.session_key == saved.session_key


@pytest.mark.parametrize("writer, reader", [
    (django_db_store.SessionStore, sessions.SessionStore),
    (sessions.SessionStore, django_db_store.SessionStore),
])  # fmt: skip
def test_sessions_of_djangos_store_and_the_labs_are_the_same_rows(writer, reader):
    saved = writer()
    saved["who"] = "alice"
    saved.save()
    assert reader(saved.session_key)["who"] == "alice"


def test_an_expired_session_loads_empty_and_its_key_is_forgotten():
    saved = sessions.SessionStore()
    saved["answer"] = 42
    saved.save()
    Session.objects.filter(session_key=saved.session_key).update(
        expire_date=timezone.now() - timedelta(seconds=1)
    )
    loaded = sessions.SessionStore(saved.session_key)
    assert loaded.get("answer") is None
    assert loaded.session_key is None


@pytest.mark.parametrize("key", ["nosuchsessionkey00000000000000000", None])
def test_an_unknown_or_missing_key_loads_empty(key):
    loaded = sessions.SessionStore(key)
    assert dict(loaded.items()) == {}
    assert loaded.session_key is None


def test_signing_in_and_out_goes_through_the_store():
    user = make_user("alice")
    client = Client()
    client.force_login(user)
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    assert sessions.SessionStore(key).get("_auth_user_id") == str(user.pk)
    client.logout()
    assert not Session.objects.filter(session_key=key).exists()
    assert sessions.SessionStore(key).get("_auth_user_id") is None
