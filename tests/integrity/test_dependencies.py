"""The architecture's import rules hold: the contracts in pyproject.toml, and no import circle.

One home for the rules (``[tool.importlinter]``, docs/architecture.md): the product's
packages are layers that never import upwards, only ``deskhand.infra.dbos`` imports ``dbos``,
the DBOS client imports no app, the loop never reaches the engine, and the product never
imports ``tests``. ``lint-imports`` runs them in ``make check``; this file runs them in
``make test`` too, and adds what they cannot see:

* every module of the product sits in a layer of the "layers" contract — a module in no
  layer is one whose upward imports nobody checks (how a circle through the worker's
  bootstrap once hid);
* no import circle anywhere in the product, *counting imports inside functions and under
  ``if TYPE_CHECKING``* — a function-level import is how a circle is usually hidden, and a
    type-only import is a circle the type checker still has to untangle. ``DEFERRED``
  lists the imports allowed to close a circle, each with why it waits;
* no two sub-packages import each other, at any depth (``agent.ledger`` and ``agent.run``,
  ``deskhand.web.api`` and ``deskhand.web.console``), counted the same way: a module's
  folder names its layer only if the folders themselves never go round in a circle.
  ``SIBLINGS_EXEMPT`` would name a pair allowed to, with why; it is empty.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("agent", "approvals", "deskhand")

# (importer, imported): imports allowed to close an import circle because they wait, on
# purpose, until the function runs. Each entry says why; an entry that no longer closes a
# circle fails the test below, so this list stays short and true.
DEFERRED: dict[tuple[str, str], str] = {}


def test_the_import_contracts_hold():
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports, "lint-imports is missing: install the dev extras (make venv)"
    result = subprocess.run(
        [lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout
    for contract in ("layers", "dbos", "dbos-client", "no-tests", "loop-engine-free"):
        assert f'id = "{contract}"' in (ROOT / "pyproject.toml").read_text()


def product_modules() -> dict[str, Path]:
    """Every module of the product by dotted name (migrations included: they import too)."""
    out = {}
    for top in PRODUCT:
        for path in (ROOT / top).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _layer_entries() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers"]
    return [m.strip() for entry in layers["layers"] for m in entry.replace(":", "|").split("|")]


def _holds_code(path: Path) -> bool:
    """Whether a module does anything beyond its docstring (a package's ``__init__`` often not)."""
    body = ast.parse(path.read_text()).body
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in body)


def test_every_module_of_the_product_sits_in_a_layer():
    entries = _layer_entries()
    outside = sorted(
        name
        for name, path in product_modules().items()
        if _holds_code(path) and not any(name == e or name.startswith(e + ".") for e in entries)
    )
    # ``agent`` and ``approvals`` are whole layers; every module of ``deskhand`` that holds
    # code must be named by one (a new module there needs its place in the order).
    assert outside == [], f"modules in no layer of [tool.importlinter] 'layers': {outside}"


def import_graph() -> dict[str, dict[str, tuple[int, bool]]]:
    """importer -> {imported: (line, inside a function)}, for product modules only, every
    import counted: at the top, inside a function, or under ``if TYPE_CHECKING``."""
    modules = product_modules()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, tuple[int, bool]]] = defaultdict(dict)
    for name, path in modules.items():

        def visit(node: ast.AST, in_function: bool, importer: str = name) -> None:
            for child in ast.iter_child_nodes(node):
                targets: list[str] = []
                if isinstance(child, ast.Import):
                    targets = [a.name for a in child.names]
                elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                    targets = [
                        f"{child.module}.{a.name}"
                        if f"{child.module}.{a.name}" in modules
                        else child.module
                        for a in child.names
                    ]
                for target in targets:
                    found = resolve(target)
                    if found and found != importer:
                        graph[importer].setdefault(found, (child.lineno, in_function))
                visit(
                    child,
                    in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef),
                )

        visit(ast.parse(path.read_text()), False)
    return graph


def circles(graph: dict[str, dict[str, tuple[int, bool]]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in list(graph):
        if root in index:
            continue
        work = [(root, iter(graph.get(root, {})))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, {}))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_the_product_has_no_import_circle_even_through_imports_inside_functions():
    graph = import_graph()
    for importer, imported in DEFERRED:
        graph[importer].pop(imported, None)
    described = []
    for group in circles(graph):
        edges = [
            f"{a} -> {b} (line {line}{', inside a function' if inside else ''})"
            for a in group
            for b, (line, inside) in sorted(graph[a].items())
            if b in group
        ]
        described.append("\n    ".join(edges))
    assert not described, "import circles in the product:\n  " + "\n  ".join(described)


def test_every_deferred_import_still_closes_a_circle():
    graph = import_graph()
    stale = [edge for edge in DEFERRED if edge[1] not in graph.get(edge[0], {})]
    assert not stale, f"DEFERRED names imports that no longer exist: {stale}"
    for importer, imported in DEFERRED:
        assert any(importer in g and imported in g for g in circles(graph)), (
            f"{importer} -> {imported} closes no circle any more: drop it from DEFERRED"
        )


# (package, package): sub-packages allowed to import each other, each with why. Empty: no two
# sub-packages of the product import each other, at any depth (docs/architecture.md).
SIBLINGS_EXEMPT: dict[tuple[str, str], str] = {}


def sibling_graph(
    graph: dict[str, dict[str, tuple[int, bool]]],
) -> dict[str, dict[str, tuple[str, str, int, bool]]]:
    """Each import as one between the two children of the innermost package holding both
    ends: ``agent.ledger.effect -> agent.record.steplog`` counts as ``agent.ledger ->
    agent.record``, ``deskhand.web.api.core -> deskhand.web.console.selectors`` as
    ``deskhand.web.api -> deskhand.web.console``. A package importing its own modules (or a
    module its own package) is inside one room; imports between ``agent``, ``approvals`` and
    ``deskhand`` are the layers contract's to judge."""
    out: dict[str, dict[str, tuple[str, str, int, bool]]] = defaultdict(dict)
    for a, targets in graph.items():
        for b, (line, inside) in targets.items():
            pa, pb = a.split("."), b.split(".")
            i = 0
            while i < min(len(pa), len(pb)) and pa[i] == pb[i]:
                i += 1
            if i == 0 or i >= len(pa) or i >= len(pb):
                continue
            out[".".join(pa[: i + 1])].setdefault(".".join(pb[: i + 1]), (a, b, line, inside))
    return out


def test_no_two_sub_packages_import_each_other_even_through_imports_inside_functions():
    siblings = sibling_graph(import_graph())
    for importer, imported in SIBLINGS_EXEMPT:
        siblings[importer].pop(imported, None)
    described = []
    for group in circles(siblings):  # type: ignore[arg-type]
        edges = []
        for a in group:
            for b, (src, dst, line, inside) in sorted(siblings[a].items()):
                if b in group:
                    where = ", inside a function" if inside else ""
                    edges.append(f"{a} -> {b} (first: {src} -> {dst}, line {line}{where})")
        described.append("\n    ".join(edges))
    assert not described, "sub-packages that import each other:\n  " + "\n  ".join(described)


def test_every_exempt_pair_of_sub_packages_still_imports_each_other():
    siblings = sibling_graph(import_graph())
    stale = [pair for pair in SIBLINGS_EXEMPT if pair[1] not in siblings.get(pair[0], {})]
    assert not stale, f"SIBLINGS_EXEMPT names pairs that no longer import: {stale}"


def test_the_circle_finder_sees_a_circle_closed_inside_a_function():
    """The finder itself: a circle hidden by a function-level import is still one."""
    graph = {
        "agent.a": {"agent.b": (1, False)},
        "agent.b": {"agent.c": (1, False)},
        "agent.c": {"agent.a": (9, True)},
        "agent.d": {"agent.a": (1, False)},
    }
    assert circles(graph) == [["agent.a", "agent.b", "agent.c"]]
