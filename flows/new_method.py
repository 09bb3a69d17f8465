"""`python -m flows new <method>`: the files of a new method, from the skeleton (docs/contributing.md,
"adding a method"): the library's config, placeholder experiment, claims, summary and plots, the
tasks, the flow, its params file params/<method>.yaml (tiny, smoke, paper), a registry entry, a docs page, a
test of its tiny-DAG outputs, and its dvc.yaml stage, whose code deps come from the import graph
(flows/dvc_stages.py) and whose other lines copy the dnc stage's. The placeholder experiment is
least squares by gradient descent, its one claim the trivial one (training beats the untrained
model), so the new stage runs end to end before the method's own code replaces it.

All or nothing: the name is checked, every file is written to memory first, and a failure while
writing restores every file touched."""
from __future__ import annotations

import json
import keyword
import re
from pathlib import Path
from string import Template

import yaml

from flows.dvc_stages import REPORT, code_deps, stage_modules
from paperline.config import PARAMS_DIR, ParamsError, read_params, section_file
from paperline.io import atomic_path

NAME = re.compile(r"^[a-z][a-z0-9_]*$")  # a module, a params section (and file), a claim-name prefix
TEMPLATE_STAGE = "dnc"  # the stage whose params, outs, metrics and plots lines a new stage copies

FILES: dict[str, str] = {
    "paperline/methods/$method/__init__.py": '''\
"""$title: the library side (plain torch/numpy; no prefect, mlflow or dvc)."""
''',
    "paperline/methods/$method/config.py": '''\
"""Parameters of $method: section `$method` in params/$method.yaml, one profile each of tiny, smoke and paper."""
from __future__ import annotations

from typing import Annotated

from pydantic import Field

from paperline.config import MethodConfig


class ${Class}Config(MethodConfig):
    # the scaffold's placeholder experiment (train.py): least squares by gradient descent
    features: Annotated[int, Field(ge=1)] = 8
    samples: Annotated[int, Field(ge=2)] = 64
    steps: Annotated[int, Field(ge=1)] = 100
    lr: float = Field(0.05, gt=0)
''',
    "paperline/methods/$method/train.py": '''\
"""The scaffold's placeholder unit of work, to be replaced by the method's own: least squares by
gradient descent on a problem drawn from the seed."""
from __future__ import annotations

import numpy as np

from paperline.methods.$method.config import ${Class}Config


def fit(cfg: ${Class}Config, seed: int) -> dict[str, float]:
    """The mean squared error of the zero model and after `cfg.steps` gradient steps, for one seed."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((cfg.samples, cfg.features))
    y = x @ rng.standard_normal(cfg.features) + 0.1 * rng.standard_normal(cfg.samples)
    y = (y - y.mean()) / y.std()  # the zero model's loss is 1 on every seed: seeds differ in the fit only
    w = np.zeros(cfg.features)
    initial = float(np.mean((x @ w - y) ** 2))
    for _ in range(cfg.steps):
        w -= cfg.lr * 2 * x.T @ (x @ w - y) / cfg.samples
    return {"initial_loss": initial, "final_loss": float(np.mean((x @ w - y) ** 2))}
''',
    "paperline/methods/$method/claims.py": '''\
"""The paper's claims, as this run measures them (paperline/claims.py). The scaffold's one claim is
the trivial baseline's: training lowers the loss below the untrained model's. Add the paper's."""
from __future__ import annotations

from paperline.claims import Claim, ClaimSpec

BELOW_INITIAL = ClaimSpec(name="${method}_trained_below_initial", claim="training lowers the loss",
                          metric="loss", method="trained", versus="initial", direction="lower", trivial=True)
SPECS: tuple[ClaimSpec, ...] = (BELOW_INITIAL,)


def evaluate(results: dict[int, dict[str, float]]) -> list[Claim]:
    """Every claim from the per-seed results ({seed: train.fit(...)}), paired by seed."""
    return [BELOW_INITIAL.paired({s: r["final_loss"] for s, r in results.items()},
                                 {s: r["initial_loss"] for s, r in results.items()})]
''',
    "paperline/methods/$method/summary.py": '''\
"""The metrics record of a $method run: a row per variant, the mean over seeds, and its claims."""
from __future__ import annotations

from paperline.methods.$method import claims
from paperline.methods.$method.config import ${Class}Config
from paperline.metrics import MethodMetrics
from paperline.seeds import mean_over_seeds


def method_metrics(cfg: ${Class}Config, results: dict[int, dict[str, float]], profile: str) -> MethodMetrics:
    """Rows `initial` (the untrained model, the baseline) and `trained`: the loss over the seeds."""
    rows = {variant: mean_over_seeds([{"loss": r[key]} for r in results.values()])
            for variant, key in (("initial", "initial_loss"), ("trained", "final_loss"))}
    return MethodMetrics(method="$method", profile=profile, headline={"${method}_trained_loss": rows["trained"]["loss"]},
                         baseline="initial", primary_metric="loss", rows=rows, claims=claims.evaluate(results))
''',
    "paperline/methods/$method/plots.py": '''\
"""The figures of a $method run: a CSV per seed of the losses, for `dvc plots show`."""
from __future__ import annotations

from pathlib import Path

from paperline.io import atomic_path


def write_all(results: dict[int, dict[str, float]], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "loss.csv"
    with atomic_path(path) as tmp:
        tmp.write_text("seed,initial,trained\\n" + "".join(
            f"{s},{r['initial_loss']},{r['final_loss']}\\n" for s, r in sorted(results.items())))
    return [path]
''',
    "tasks/$method.py": '''\
"""Tasks of the $method flow: one unit of work per seed (its own MLflow child run), then the report."""
from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.methods.$method import plots
from paperline.methods.$method.config import ${Class}Config
from paperline.methods.$method.summary import method_metrics
from paperline.methods.$method.train import fit
from tasks import track
from tasks.paths import plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import unit

METHOD = "$method"


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="$method-train", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_seed(cfg: ${Class}Config, seed: int, ctx: track.RunContext) -> dict[str, float]:
    with unit(ctx, f"seed{seed}", {"seed": seed}, threads=1) as u:
        result = fit(cfg, seed)
        if u.run is not None:
            u.run.log_metrics(result)
    return result


@task(name="$method-report", cache_policy=NO_CACHE)
def report(cfg: ${Class}Config, results: dict[int, dict[str, float]], ctx: track.RunContext) -> Report:
    return Report(method_metrics(cfg, results, ctx.profile), plots.write_all(results, plots_dir(METHOD)))
''',
    "flows/$method.py": '''\
"""$title: one unit per seed, then the comparison with the untrained model."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.$method import METHOD, report, train_seed
from tasks.runners import submit_gpu


@flow(name="$method", log_prints=True)
def ${method}_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # no data: each seed draws its problem
    with method_run(METHOD, profile, overrides) as run:
        futures = {seed: submit_gpu(train_seed, run.cfg, seed, run.context) for seed in run.cfg.run_seeds()}
        return run.publish(report.submit(run.cfg, {s: f.result() for s, f in futures.items()}, run.context))
''',
    "tests/test_${method}_flow.py": '''\
"""The $method flow's outputs in the tiny DAG: the record validates with its claims, one child run
per seed."""
from __future__ import annotations

import json

from paperline.methods.$method.claims import SPECS
from paperline.metrics import validate_metrics
from tests.conftest import finished_flow_runs


def test_tiny_dag_outputs(dag):
    path = dag / "results" / "$method.json"
    record = validate_metrics(json.loads(path.read_text()), str(path))
    assert sorted(record.rows) == ["initial", "trained"] and record.profile == "tiny"
    assert {c.name for c in record.claims} <= {s.name for s in SPECS} and any(c.trivial for c in record.claims)
    _, children = finished_flow_runs(dag, "$method")
    assert len(children) == record.claims[0].seeds and all(r.info.status == "FINISHED" for r in children)
''',
    "docs/methods/$method.md": '''\
# $title (`$method`)

[Back to the README](../../README.md) · stage `$method` in `dvc.yaml`, section `$method` in `params/$method.yaml`

Written by `python -m flows new $method`: a placeholder experiment (least squares by gradient
descent) and its trivial claim. Say here what the paper does, what this run measures, the
measured smoke table and the command that measured it.

## Claims
''',
}

PARAMS = '''\
$method:
  profile: smoke
  schedule: "$schedule"   # weekly (the Prefect deployment's cron), a minute no other schedule uses
  profiles:
    tiny:
      seeds: [0, 1, 2]
      steps: 20
    smoke:
      seeds: [0, 1, 2]
      steps: 200
    paper:
      seeds: [0, 1, 2, 3, 4]
      steps: 2000
'''

REGISTRY = '''\
  $method:
    title: $title_yaml
    paper: "the paper: authors, title (venue; arXiv id) -- the MLflow experiment's description names it"
    config: paperline.methods.$method.config:${Class}Config
    flow: flows.$method:${method}_flow
    status: pipeline
'''


def check_name(method: str, root: Path) -> None:
    """A lowercase identifier that names no registered method, prep stage, dvc.yaml stage or module."""
    if not NAME.match(method) or keyword.iskeyword(method):
        raise ParamsError(f"method name {method!r}: a lowercase Python identifier is expected "
                          "(letters, digits, underscores; starting with a letter)")
    registry = yaml.safe_load((root / "flows" / "registry.yaml").read_text())
    taken = {*registry["methods"], *registry["prep_stages"],
             *yaml.safe_load((root / "dvc.yaml").read_text())["stages"],
             *read_params(root / PARAMS_DIR)}
    existing = [p for p in _files(method, method) if (root / p).exists()]
    if method in taken or existing:
        raise ParamsError(f"method {method!r} exists already ({', '.join(existing) or 'a stage or params section'})")


def class_prefix(method: str) -> str:
    """`memory_decoder` -> `MemoryDecoder` (its config is `MemoryDecoderConfig`)."""
    return "".join(part.title() for part in method.split("_"))


def _files(method: str, title: str) -> dict[str, str]:
    names = {"method": method, "title": title, "Class": class_prefix(method)}
    return {Template(path).substitute(names): _sort_imports(Template(text).substitute(names))
            for path, text in FILES.items()}


def _sort_imports(text: str) -> str:
    """Each run of one-line `from x import y` statements sorted by module, as ruff's isort wants:
    where the method's modules fall among the others depends on its name."""
    lines, out = text.splitlines(keepends=True), []
    while lines:
        run = []
        while lines and lines[0].startswith("from ") and not lines[0].startswith("from __future__"):
            run.append(lines.pop(0))
        out += sorted(run, key=lambda line: line.split()[1].split(".")) if run else [lines.pop(0)]
    return "".join(out)


def free_schedule(params: dict) -> str:
    """A weekly cron at a minute no other schedule fires at (Sunday, from 12:00 by 5 minutes)."""
    taken = {section.get("schedule") for section in params.values() if isinstance(section, dict)}
    return next(cron for minute in range(12 * 60, 24 * 60, 5)
                if (cron := f"{minute % 60} {minute // 60} * * 0") not in taken)


def stage_text(method: str, dvc_text: str, deps: list[str]) -> str:
    """The new stage: the template stage's lines with the name replaced, its deps `deps`."""
    lines = dvc_text.splitlines(keepends=True)
    start = lines.index(f"  {TEMPLATE_STAGE}:\n")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i].startswith("   "))
    block = [re.sub(rf"\b{TEMPLATE_STAGE}\b", method, line) for line in lines[start:end]]
    first = block.index("    deps:\n") + 1
    last = next(i for i in range(first, len(block)) if not block[i].startswith("      - "))
    block[first:last] = [f"      - {d}\n" for d in deps]
    return "".join(block).rstrip("\n") + "\n\n"


def with_stage(method: str, dvc_text: str, deps: list[str]) -> str:
    """dvc.yaml with the method's stage before the report's, its record among the report's deps
    (a line like the template stage's) and its params file among the `vars` (in order), so that
    `${<method>.profile}` resolves."""
    lines = dvc_text.splitlines(keepends=True)
    start = lines.index("vars:\n") + 1
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("  - "))
    lines[start:end] = sorted([*lines[start:end], f"  - {section_file(method)}\n"])
    report = lines.index(f"  {REPORT}:\n")
    deps_at = lines.index("    deps:\n", report) + 1
    end = next(i for i in range(deps_at, len(lines)) if not lines[i].startswith("      - "))
    template = next(line for line in lines[deps_at:end] if re.search(rf"/{TEMPLATE_STAGE}\.json\b", line))
    last_record = max(i for i in range(deps_at, end) if re.search(r"/\w+\.json\b", lines[i]))
    lines.insert(last_record + 1, re.sub(rf"\b{TEMPLATE_STAGE}\b", method, template))
    lines.insert(report, stage_text(method, dvc_text, deps))
    return "".join(lines)


def new_method(method: str, root: Path, title: str | None = None) -> list[str]:
    """Write the new method's files under `root` (a checkout); returns the paths written or edited."""
    check_name(method, root)
    title = title or f"{method} (scaffold)"
    files = _files(method, title)
    registry = (root / "flows" / "registry.yaml").read_text()
    dvc = (root / "dvc.yaml").read_text()
    names = {"method": method, "Class": class_prefix(method), "title_yaml": json.dumps(title),
             "schedule": free_schedule(read_params(root / PARAMS_DIR))}
    files[section_file(method)] = Template(PARAMS).substitute(names)
    at = registry.index("\nprep_stages:")
    edits = {"flows/registry.yaml": registry[:at].rstrip("\n") + "\n" + Template(REGISTRY).substitute(names)
             + registry[at:]}
    written: list[Path] = []
    new_dirs = [d for d in {(root / p).parent for p in files} if not d.exists()]
    try:
        for path, text in [*files.items(), *edits.items()]:
            _write(root / path, text, written)
        # the stage's deps: what the files just written import
        modules = stage_modules(f"flows.{method}:{method}_flow",
                                f"paperline.methods.{method}.config:{class_prefix(method)}Config", prep=False)
        _write(root / "dvc.yaml", with_stage(method, dvc, code_deps(modules, root)), written)
    except BaseException:
        for path in written:  # restore: new files removed, edited ones back to their text
            original = {"flows/registry.yaml": registry, "dvc.yaml": dvc}.get(
                path.relative_to(root).as_posix())
            path.write_text(original) if original is not None else path.unlink()
        for folder in new_dirs:
            if folder.exists():
                folder.rmdir()
        raise
    return [*files, *edits, "dvc.yaml"]


def _write(path: Path, text: str, written: list[Path]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    written.append(path)
