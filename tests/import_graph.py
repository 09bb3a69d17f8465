"""The files of this project that importing a module loads, read from the source with `ast`
instead of imported (tests/test_dvc.py): the import statements that run at import time (those at
module level, in `if`/`try` blocks and class bodies; not those inside functions, which run only
when called: `flows/__main__.py` imports each subcommand's code inside it). Nothing is executed,
so every stage costs ~1 s together, where an interpreter forked per stage after importing the
third-party libraries took 46-69 s for fifteen stages on 2 cores."""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OURS = ("paperline", "tasks", "flows", "tests")


def module_file(module: str) -> Path | None:
    """The source file of one of our modules (a package's __init__.py), None for any other."""
    if module.split(".")[0] not in OURS:
        return None
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _with_parents(module: str) -> list[str]:
    """`a.b.c` loads `a`, `a.b` and `a.b.c`."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _import_time_statements(tree: ast.AST):
    """The statements of a module that run when it is imported (function bodies skipped)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node)
                     if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


@lru_cache(maxsize=None)
def direct_imports(module: str) -> frozenset[str]:
    """Our modules (with their parent packages) that the import statements of `module` name."""
    path = module_file(module)
    if path is None:
        return frozenset()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    named: set[str] = set()
    for node in _import_time_statements(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package, `level - 1` packages up
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module
            named.add(base)
            # `from package import name`: name may be a submodule
            named.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return frozenset(m for name in named for m in _with_parents(name) if module_file(m) is not None)


def files_loaded_by(modules: list[str]) -> list[str]:
    """Every file of ours that importing `modules` can load, as paths relative to the checkout."""
    seen: set[str] = set()
    stack = [m for module in modules for m in _with_parents(module)]
    while stack:
        module = stack.pop()
        if module in seen or module_file(module) is None:
            continue
        seen.add(module)
        stack.extend(direct_imports(module))
    return sorted(module_file(m).relative_to(ROOT).as_posix() for m in seen)
