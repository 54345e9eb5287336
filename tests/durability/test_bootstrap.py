"""The bootstrap never lets DBOS keep its state anywhere but the Django database."""

from __future__ import annotations

import pytest

from deskhand.dbos_setup import DBOSSetupError, check_system_database, config, database_url


def test_dbos_system_database_is_the_django_database(db):
    cfg = config("any-executor")
    assert cfg["system_database_url"] == database_url()
    assert cfg["application_version"]  # pinned, so a restarted worker recovers its runs
    assert cfg["serializer"].name() == "portable_json"


@pytest.mark.parametrize(
    "url",
    ["sqlite:///deskhand.sqlite", "postgresql+psycopg://postgres@127.0.0.1:5432/some_other_db"],
)
def test_a_system_database_other_than_djangos_is_refused(db, url):
    with pytest.raises(DBOSSetupError):
        check_system_database(url)
