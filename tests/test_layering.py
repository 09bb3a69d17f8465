"""The layers import downward only (docs/architecture.md): flows → tasks → paperline.

Every import statement counts, those inside functions too (a function-level import hides an
arrow from the import-time graph, not from the design). The exceptions still in the tree are
listed in KNOWN with the reason; the test also fails when one of them is gone, so the list stays
exact and only shrinks."""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

from tests.conftest import CHECKOUT

ORCHESTRATION = ("prefect", "prefect_dask", "prefect_ray", "mlflow", "dvc", "tasks", "flows")

# (importing file, imported module) -> why it is still there
KNOWN: dict[tuple[str, str], str] = {}  # an exception named here with its reason; none today
# import cycles still in the tree (sorted module lists) -> why
KNOWN_CYCLES: dict[tuple[str, ...], str] = {}  # a cycle named here with its reason; none today


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(CHECKOUT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, members: bool = False) -> set[str]:
    """Every module an import statement in the file names (relative imports resolved); with
    `members`, also `module.name` for each `from module import name` (a name may be a module)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            if members:
                names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def _files(*roots: str) -> list[Path]:
    return sorted(p for root in roots for p in (CHECKOUT / root).rglob("*.py"))


def _violations() -> set[tuple[str, str]]:
    found = set()

    def check(roots, forbidden):
        for path in _files(*roots):
            for name in imports_of(path):
                if any(name == f or name.startswith(f + ".") for f in forbidden):
                    found.add((str(path.relative_to(CHECKOUT)), name))

    check(["paperline"], ORCHESTRATION)               # the library never imports the orchestration
    check(["tasks"], ["flows"])                       # tasks never import flows
    check(["flows"], ["paperline.methods"])           # flows compose tasks, never the methods' code
    check(["tests/methods"], ["tasks", "flows"])      # unit tests test the library
    return found


def test_imports_point_down_only():
    found = _violations()
    new = sorted(found - set(KNOWN))
    assert not new, f"imports against the layering (docs/architecture.md): {new}"
    gone = sorted(set(KNOWN) - found)
    assert not gone, f"no longer found, remove from KNOWN: {gone}"


def test_no_import_cycles_among_our_modules():
    """Function-level imports included: a cycle hidden in a function is still a cycle of design."""
    ours = {_module_name(p): p for p in _files("paperline", "tasks", "flows")}
    graph = nx.DiGraph()
    for module, path in ours.items():
        graph.add_node(module)
        for name in imports_of(path, members=True):
            target = name if name in ours else name.rpartition(".")[0]
            if target in ours and target != module and not module.startswith(target + "."):
                if not target.endswith("__init__") and ours[target].name != "__init__.py":
                    graph.add_edge(module, target)
    cycles = {tuple(sorted(c)) for c in nx.simple_cycles(graph)}
    assert not sorted(cycles - set(KNOWN_CYCLES)), f"import cycles: {sorted(cycles - set(KNOWN_CYCLES))}"
    assert not sorted(set(KNOWN_CYCLES) - cycles), f"gone, remove from KNOWN_CYCLES: {sorted(set(KNOWN_CYCLES) - cycles)}"
