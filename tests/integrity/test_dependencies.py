"""The architecture's import rules hold: the contracts in pyproject.toml, run by ``lint-imports``.

One home for the rules (``[tool.importlinter]``): apps are layers that never import
upwards (so no two apps import each other), only four modules import ``dbos``, the
DBOS client imports no app, and the product never imports ``tests``. This test runs
them in ``make test`` — and so in CI — as well as in ``make check``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_hold():
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports, "lint-imports is missing: install the dev extras (make venv)"
    result = subprocess.run(
        [lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout
    for contract in ("layers", "dbos", "dbos-client", "no-tests"):
        assert f'id = "{contract}"' in (ROOT / "pyproject.toml").read_text()
