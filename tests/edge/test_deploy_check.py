"""Production configuration, as the docs give it: ``check --deploy`` clean, every variable named.

``docs/operations.md`` (section "Production") holds the settings a deployment uses; this
runs ``manage.py check --deploy --fail-level WARNING`` in a subprocess with exactly that
block (placeholders filled, the database pointed at the test database, which the checks
open), and nothing else of Deskhand's from the calling environment. The README's
configuration table must name every environment variable the product reads.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

from tests.fixtures.dbos import test_database_url

ROOT = Path(__file__).resolve().parents[2]
OURS = re.compile(r"^(DESKHAND_|DJANGO_DEBUG$|SECRET_KEY$|ALLOWED_HOSTS$|DATABASE_URL$)")


def production_settings() -> dict[str, str]:
    """The ``# production settings`` block of docs/operations.md, as variables."""
    text = (ROOT / "docs" / "operations.md").read_text()
    block = re.search(r"```sh\n# production settings\n(.*?)```", text, re.S)
    assert block, "docs/operations.md has no '# production settings' block"
    found = {}
    for line in block[1].splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            found[name.strip()] = value.strip()
    return found


def test_check_deploy_is_clean_with_the_documented_production_settings(db):
    documented = production_settings()
    assert documented.get("DESKHAND_HTTPS") == "1", documented
    env = {k: v for k, v in os.environ.items() if not OURS.match(k)}
    for name, value in documented.items():
        # A placeholder (<50 or more random characters>) gets a value of its kind.
        env[name] = secrets.token_urlsafe(48) if value.startswith("<") else value
    env["DATABASE_URL"] = test_database_url()
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "System check identified no issues" in out, out


def _read_by_the_product() -> set[str]:
    """Every environment variable's name quoted in the product's code."""
    names: set[str] = set()
    quoted = re.compile(
        r"[\"']((?:DESKHAND|OTEL|DBOS|ANTHROPIC)_[A-Z0-9_]+|DJANGO_DEBUG|SECRET_KEY"
        r"|ALLOWED_HOSTS|DATABASE_URL)[\"'_]"
    )
    for package in ("deskhand", "agent", "approvals"):
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            names.update(quoted.findall(path.read_text()))
    # Settings names, not variables: Deskhand's own settings module defines them.
    return names - {"ANTHROPIC_RETRY", "DESKHAND_QUEUE"}


def test_the_readme_configuration_table_names_every_variable_the_product_reads():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Configuration") :]
    table = table[: table.index("\n## ", 1)]
    read = _read_by_the_product()
    assert {"DESKHAND_EMAIL_BACKEND", "DESKHAND_TRUSTED_PROXIES", "DESKHAND_HTTPS"} <= read
    missing = sorted(n for n in read if f"`{n}" not in table)
    assert not missing, f"the README's configuration table does not name {missing}"
