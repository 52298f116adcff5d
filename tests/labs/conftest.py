"""Platform tests run in-process only, so a fast password hasher is safe here (integration
tests that log in through a real daphne keep the real hashers)."""

import pytest


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
