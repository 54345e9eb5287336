"""The product wheel holds the product: no test doubles, evals, crash worker, bench, load or
synthetic volume (all of them development code in tests/devtools)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Development code that must stay in the checkout (tests/devtools) and out of the wheel:
# its definitions, and any import of it from the product.
DEVELOPMENT_MARKERS = (
    "class ObedientProvider",
    "def scenario(",
    "from tests",
    "import tests",
    "faults.kill_at(",
    "def synthetic_generate(",
)


def test_the_wheel_ships_no_doubles_evals_or_crash_worker(tmp_path: Path) -> None:
    # Built from a copy: setuptools writes build/ and *.egg-info beside the sources.
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", ".deskhand", "build", "*.egg-info", "__pycache__"
        ),
    )
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, f"pip wheel failed:\n{built.stderr[-2000:]}"
    (wheel,) = tmp_path.glob("deskhand-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        sources = {n: zf.read(n).decode("utf-8", "replace") for n in names if n.endswith(".py")}
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"agent", "approvals", "deskhand"}, tops
    assert "agent/loop.py" in names and "agent/providers/policy.py" in names
    # Operator commands stay; the benchmark is development code (make bench, from a checkout).
    assert "deskhand/engine/management/commands/worker.py" in names
    assert "agent/management/commands/seed.py" in names
    assert not [
        n
        for n in names
        if "/bench/" in n or "/load/" in n or n.endswith(("synthetic.py", "commands/bench.py"))
    ]
    offenders = {
        name: marker
        for name, text in sources.items()
        for marker in DEVELOPMENT_MARKERS
        if marker in text
    }
    assert not offenders, f"development code in the wheel: {offenders}"
    assert not [n for n in names if "/evals/" in n or n.endswith("crash_sweep.py")]
