"""The crash points are one list (``deskhand.infra.crashpoints.Point``): every call site names a
point on it, an unknown name fails fast, and every point on it is where some crash-sweep
schedule or test kills."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from deskhand.infra import crashpoints
from deskhand.infra.crashpoints import Point

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("deskhand", "agent", "approvals")


def _product_files() -> list[Path]:
    return [p for top in PRODUCT for p in (ROOT / top).rglob("*.py") if "migrations" not in p.parts]


def _hook_calls() -> list[tuple[str, ast.Call]]:
    """Every ``crashpoints.at(...)`` / ``faults.at(...)`` in the product."""
    calls = []
    for path in _product_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "at"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in {"crashpoints", "faults"}
            ):
                calls.append((f"{path.relative_to(ROOT)}:{node.lineno}", node))
    return calls


def test_an_unknown_crash_point_fails_fast() -> None:
    for call in (
        lambda: crashpoints.at("after_stpe", "model"),  # type: ignore[arg-type]
        lambda: crashpoints.install("after_stpe", "model", lambda: None),
        lambda: crashpoints.kill_at("before_model", "model"),  # retired: no sweep used it
    ):
        with pytest.raises(ValueError, match="unknown crash point"):
            call()
    assert not crashpoints.installed()


def test_every_call_site_names_a_registered_point() -> None:
    calls = _hook_calls()
    assert len(calls) >= len(Point)
    for where, call in calls:
        first = call.args[0]
        assert (
            isinstance(first, ast.Attribute)
            and isinstance(first.value, ast.Name)
            and first.value.id == "Point"
            and first.attr in Point.__members__
        ), f"{where}: a crash point is named by its Point member, not by text"


def test_every_point_has_a_call_site_a_docstring_and_a_schedule_or_test_that_kills_there() -> None:
    named = {
        call.args[0].attr for _, call in _hook_calls() if isinstance(call.args[0], ast.Attribute)
    }
    assert named == set(Point.__members__)
    source = (ROOT / "deskhand" / "infra" / "crashpoints.py").read_text()
    for point in Point:
        assert re.search(rf'{point.name} = "{point.value}"\n    """', source), (
            f"{point.name} needs a docstring: the boundary it marks, the schedules that use it"
        )
    tests = "\n".join(
        p.read_text() for p in (ROOT / "tests").rglob("*.py") if p.name != Path(__file__).name
    )
    for point in Point:
        assert re.search(rf"[\"'/]{point.value}:", tests) or (f'"{point.value}", ' in tests), (
            f"no crash-sweep schedule or test kills at {point.value}: remove it"
        )
