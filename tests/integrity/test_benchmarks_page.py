"""docs/benchmarks.md is a reference written partly by ``bench --write-docs``: the run rewrites
the default run's section and nothing else, and every figure it lists says what it times."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.devtools.bench import report

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "benchmarks.md"


def _results() -> dict:
    return {
        "machine": {"cores": 2, "cpu": "test", "ram_gb": 1, "python": "3.x", "load_1m": 0.1},
        "step_overhead_ratio": 1.2,
        "parked_series": [],
    }


def test_write_docs_rewrites_the_default_run_and_keeps_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report, "chart", lambda results, path: False)
    before = PAGE.read_text()
    (tmp_path / "benchmarks.md").write_text(before)
    report.write(_results(), tmp_path, "python manage.py bench --quick --write-docs")
    after = (tmp_path / "benchmarks.md").read_text()

    head = before[: before.index(report.DEFAULT_RUN)]
    kept = before[before.index(report.KEPT_FROM) :]
    assert after.startswith(head) and after.endswith(kept)
    written = after[len(head) : len(after) - len(kept)]
    assert "`python manage.py bench --quick --write-docs`" in written
    assert "| `step_overhead_ratio` |" in written and "| 1.2 | ≤ 1.5: met |" in written


def test_every_figure_with_a_target_is_on_the_page() -> None:
    listed = {key for _, keys, _ in report.FIGURES for key in keys}
    assert {key for key, _, _ in report.TARGETS} <= listed
    page = PAGE.read_text()
    for label, _, text in report.FIGURES:
        assert text and f"| `{label}` |" in page
