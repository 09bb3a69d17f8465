"""The code each dvc.yaml stage runs, read from the import graph with `ast` (nothing is imported or
executed, so every stage costs ~1 s together): the files of this project that the stage's command
can load. tests/test_dvc.py checks each stage's code deps equal it exactly, and `python -m flows
new` writes a new method's stage from it.

Every import statement counts, those inside functions too: a task that imports its method's
pipeline inside the task body still runs that code. The one exception is the command-line
dispatcher (`flows/__main__.py`), whose function-level imports choose a subcommand: a stage runs
only the `run` path, named in `stage_modules`."""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import yaml

ROOT = Path(__file__).resolve().parent.parent
OURS = ("paperline", "tasks", "flows", "tests")
CODE = ("paperline/", "tasks/", "flows/")  # a dvc.yaml dep under these is code, checked exactly
DISPATCHERS = ("flows.__main__",)  # function-level imports not followed (one per subcommand)

# Code a stage runs that no import statement names, so the graph cannot see it. Each entry: why.
NOT_IMPORTED: dict[str, str] = {}
# Function-level imports no stage's command reaches, (importing module, imported module) -> why;
# not followed, so editing the imported code re-runs no stage. A test keeps each one an import.
NOT_RUN_IN_A_STAGE: dict[tuple[str, str], str] = {}


def module_file(module: str, root: Path | None = None) -> Path | None:
    """The source file of one of our modules (a package's __init__.py), None for any other."""
    if module.split(".")[0] not in OURS:
        return None
    base = (root or ROOT).joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _with_parents(module: str) -> list[str]:
    """`a.b.c` loads `a`, `a.b` and `a.b.c`."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _statements(tree: ast.AST, in_functions: bool) -> Iterator[ast.AST]:
    """The statements of a module; without `in_functions`, only those that run when it is imported."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node) if in_functions
                     or not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


@lru_cache(maxsize=None)
def direct_imports(module: str, root: Path | None = None, every: bool = False) -> frozenset[str]:
    """Our modules (with their parent packages) that the import statements of `module` name (those
    of NOT_RUN_IN_A_STAGE left out unless `every`)."""
    path = module_file(module, root)
    if path is None:
        return frozenset()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    named: set[str] = set()
    for node in _statements(ast.parse(path.read_text(), str(path)), module not in DISPATCHERS):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package, `level - 1` packages up
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            named.add(base)
            # `from package import name`: name may be a submodule
            named.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    skipped = {imported for importer, imported in NOT_RUN_IN_A_STAGE if importer == module and not every}
    return frozenset(m for name in named for m in _with_parents(name)
                     if module_file(m, root) is not None and m not in skipped)


def files_loaded_by(modules: list[str], root: Path | None = None) -> list[str]:
    """Every file of ours that running `modules` can load, as paths relative to the checkout."""
    root = root or ROOT
    seen: dict[str, Path] = {}
    stack = [m for module in modules for m in _with_parents(module)]
    while stack:
        module = stack.pop()
        path = module_file(module, root)
        if module in seen or path is None:
            continue
        seen[module] = path
        stack.extend(direct_imports(module, root))
    return sorted(path.relative_to(root).as_posix() for path in seen.values())


# What `python -m flows <command>` imports inside main() (flows/__main__.py): for every command,
# then for a stage's own path (`run` of a method or prep stage, `report` without --docs).
DISPATCH = ["flows.__main__", "flows", "paperline.config", "paperline.io"]
RUN_PATH = {"methods": ["flows.launch"], "prep_stages": ["flows.prep"], "report": ["paperline.report", "tasks.paths", "tasks.track"]}
REPORT = "report"


def stage_modules(flow: str, config: str, prep: bool) -> list[str]:
    """The modules `python -m flows run <stage>` starts from: the dispatcher, its `run` path, the
    stage's config model and flow (registry "module:attribute" strings, imported by name)."""
    return [*DISPATCH, *RUN_PATH["prep_stages" if prep else "methods"], config.split(":")[0], flow.split(":")[0]]


def _empty(path: Path) -> bool:
    """An empty file (a bare package `__init__.py`): no dep, since DVC warns `'<file>' is empty.` for
    each at every stage and its contents cannot change what runs; once filled, it is a dep again."""
    return path.stat().st_size == 0


def code_deps(modules: list[str], root: Path | None = None) -> list[str]:
    """A stage's code deps: the files its modules load (tests and empty files excluded)."""
    root = root or ROOT
    return sorted(f for f in files_loaded_by(modules, root) if f.startswith(CODE) and not _empty(root / f))


def listed_code(deps: list[str], root: Path | None = None) -> list[str]:
    """The code files a stage's deps list names (a listed folder: every non-empty .py file in it)."""
    root = root or ROOT
    files: set[str] = set()
    for dep in deps:
        path = root / dep
        if dep.startswith(CODE) and path.is_dir():
            files.update(p.relative_to(root).as_posix() for p in path.rglob("*.py") if not _empty(p))
        elif dep.startswith(CODE) and dep.endswith(".py"):
            files.add(dep)
    return sorted(files)


def deps_edit(deps: list[str], modules: list[str], root: Path | None = None) -> tuple[list[str], list[str]]:
    """(files to add, deps to remove) that make a stage's code deps exact: a listed folder stays
    only when the stage loads every .py file in it."""
    wanted = set(code_deps(modules, root)) | {f for f in NOT_IMPORTED if f in deps}
    remove = [d for d in deps if listed_code([d], root) and not set(listed_code([d], root)) <= wanted]
    kept = [d for d in deps if d not in remove]
    return sorted(wanted - set(listed_code(kept, root))), remove


def deps_diff(stage: str, deps: list[str], modules: list[str], root: Path | None = None) -> str:
    """The edit to apply to a stage's deps list, as lines to add and remove ('' when exact)."""
    add, remove = deps_edit(deps, modules, root)
    lines = [f"  + {f}" for f in add] + [f"  - {d}" for d in remove]
    return f"dvc.yaml stage {stage}, its deps:\n" + "\n".join(lines) if lines else ""


def registered_stages(root: Path | None = None) -> dict[str, list[str]]:
    """Every stage of dvc.yaml (the methods and prep stages of flows/registry.yaml, and the
    report) -> the modules its command starts from."""
    registry = yaml.safe_load(((root or ROOT) / "flows" / "registry.yaml").read_text())
    return {name: stage_modules(entry["flow"], entry["config"], prep=kind == "prep_stages")
            for kind in ("methods", "prep_stages") for name, entry in registry[kind].items()
            } | {REPORT: [*DISPATCH, *RUN_PATH[REPORT]]}


def fix_deps(root: Path | None = None) -> list[str]:
    """Apply every stage's deps edit to dvc.yaml in place, line by line (its comments, order and
    every other key untouched): removed deps go, added files follow the stage's last code dep.
    Returns the stages edited."""
    path = (root or ROOT) / "dvc.yaml"
    text = path.read_text()
    stages, lines, edited = yaml.safe_load(text)["stages"], text.splitlines(keepends=True), []
    for name, modules in registered_stages(root).items():
        add, remove = deps_edit(stages[name]["deps"], modules, root)
        if not add and not remove:
            continue
        first = lines.index("    deps:\n", lines.index(f"  {name}:\n")) + 1
        end = first
        while lines[end].startswith("      - "):
            end += 1
        block = [line for line in lines[first:end] if _item(line) not in remove]
        last_code = max((i for i, line in enumerate(block) if _item(line).startswith(CODE)), default=-1)
        block[last_code + 1:last_code + 1] = [f"      - {f}\n" for f in add]
        lines[first:end] = block
        edited.append(name)
    if edited:
        tmp = path.with_suffix(".yaml.tmp")
        tmp.write_text("".join(lines))
        tmp.replace(path)
    return edited


def _item(line: str) -> str:
    """The path of a `      - path  # comment` line."""
    return line.strip().removeprefix("- ").split("#")[0].strip()


if __name__ == "__main__":  # `python -m flows.dvc_stages`: make every stage's code deps exact
    print("\n".join(f"dvc.yaml: {name}'s deps edited" for name in fix_deps()) or "dvc.yaml: every stage's deps exact")
