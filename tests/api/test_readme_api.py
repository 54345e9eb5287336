"""The README's JSON API example, pasted in order into a shell on a fresh demo.

Issue 40: the example started NW-1, which the README's earlier examples had already
resolved, so there was nothing left to decide, and its ``<id>`` placeholder, pasted as it
was, ran a shell redirection. Here the block runs as it stands (only the port changes)
against a real web process and a real worker, and its decision must land.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from approvals.models import Approval
from tests.api.test_real_server_api import server  # noqa: F401  (the fixture)
from tests.fixtures.dbos import test_database_url
from tests.support.waiting import PATIENCE_S

ROOT = Path(__file__).resolve().parents[2]


def readme_api_block() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- api-demo -->\n```sh\n(.+?)\n```", text, re.S)
    assert found, "README.md has no api-demo block"
    return found.group(1)


def test_the_readmes_api_example_has_no_placeholder_a_shell_reads_as_a_redirection():
    block = readme_api_block()
    assert not re.search(r"<[\w-]+>", block), block


def test_the_readmes_api_example_runs_in_order_and_its_decision_lands(
    server,  # noqa: F811
    tseeded,
    worker_process,
):
    worker_process("readme-api").start()
    script = readme_api_block().replace("localhost:8000", f"127.0.0.1:{server.port}")
    done = subprocess.run(
        ["bash", "-eu", "-o", "pipefail", "-c", script],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": test_database_url()},
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"status": "approved"' in done.stdout, done.stdout
    [refund] = Approval.objects.filter(run__ticket__reference="LU-2", tool="issue_refund")
    assert refund.status == "approved" and refund.decided_by_name == "owner@lumen.test"
