from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

from tests.console.conftest import PASSWORD

FAST_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def fast_passwords(settings) -> None:
    """A cheap hasher for the demo password: a wrong guess costs microseconds, not 600 ms.

    (The slow hasher pads every wrong guess to its full cost, so lowering its iterations
    would not help; the throttle under test does not care which hasher checks.)
    """
    settings.PASSWORD_HASHERS = FAST_HASHERS
    get_user_model().objects.update(password=make_password(PASSWORD))
