"""MLflow tracking: one experiment per method, a parent run per flow run, a child run per variant.

Runs go to `sqlite:///<repo>/mlflow.db` with artifacts in `mlartifacts/` beside that database
unless MLFLOW_TRACKING_URI says otherwise. Everything goes through `MlflowClient` with explicit run
ids: the fluent API keeps its active run per thread, which breaks inside threaded tasks.

Every run is tagged `method`, `variant`, `profile`, `git_commit`, `git_dirty`, `data_version`,
`dvc_experiment` (the DVC experiment that ran it, `repro` or `none`), and
carries its data version as a logged dataset (the runs table's Dataset column). Experiments are
tagged as "custom model development" experiments (MLflow's experiment kind; the 3.17 UI itself
picks its GenAI or Model training pages from a switch of its own, which `make ui`'s link sets).
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from paperline.io import files_digest
from tasks.paths import code_root, repo_path, repo_root

STEP_BATCH = 1000  # MLflow accepts at most 1000 metrics per log_batch call
# MLflow 3's UI picks an experiment's landing page from this tag (its JS enum ExperimentKind)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
# DVC outputs a run rewrites (and the params files under `dvc exp run`): not what makes code dirty
_NOT_CODE = ("metrics", "results", "plots", "runs", "reports", "dvc.lock", "params")


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{repo_path('mlflow.db')}"


def client():
    return _client(tracking_uri())


@functools.lru_cache(maxsize=4)
def _client(uri: str):
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient

    with _store_lock(uri):  # MlflowClient opens the store: a new SQLite file gets its tables here
        return MlflowClient(uri)


@contextlib.contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """An exclusive lock, across processes, on opening the SQLite store `uri` (any other: none). Two
    flows started together on a new store both created its tables, and one failed ("table ... already
    exists", alembic's "expected to match one row"; tests/test_concurrency.py). The lock file is in
    the temporary folder, named by the database's path: nothing beside the store, which git sees."""
    import fcntl
    import hashlib
    import tempfile

    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        yield
        return
    database = str(Path(uri.removeprefix(prefix)).resolve())
    name = f"paperline-mlflow-{hashlib.sha256(database.encode()).hexdigest()[:16]}.lock"
    with open(Path(tempfile.gettempdir()) / name, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=code_root(), capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {code_root()}: {out.stderr.strip()}")
    return out.stdout


@functools.lru_cache(maxsize=1)
def git_state() -> dict[str, str]:
    """`git_commit` and `git_dirty` (uncommitted changes to tracked code; DVC outputs and the params files,
    which runs rewrite, do not count). A checkout that is not a git repository says so in both tags
    rather than failing a run: a source tarball is a legitimate way to get the code."""
    if not (code_root() / ".git").exists():
        return {"git_commit": "not a git checkout", "git_dirty": "unknown"}
    commit = _git("rev-parse", "HEAD").strip()
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", ".",
                 *[f":(exclude){p}" for p in _NOT_CODE]).splitlines()
    state = {"git_commit": commit, "git_dirty": str(bool(dirty)).lower()}
    if dirty:
        state["git_dirty_paths"] = ", ".join(line[3:] for line in dirty[:20])
    return state


def dvc_experiment() -> str:
    """The DVC experiment this process runs in: its name under `dvc exp run` (DVC sets
    DVC_EXP_NAME for the stage commands), `repro` under a plain `dvc repro` (DVC sets DVC_STAGE
    for every stage command), `none` outside DVC."""
    return os.environ.get("DVC_EXP_NAME") or ("repro" if os.environ.get("DVC_STAGE") else "none")


def git_commit() -> str:
    return git_state()["git_commit"]


def data_version(paths: Iterable[str | os.PathLike] = ()) -> str:
    """sha256 over the input files' contents (sorted, recursive); 'generated' when a method reads no
    files (its data is made in-process from the config, which is logged as parameters). A missing
    input is an error naming it."""
    paths = list(paths)
    if not paths:
        return "generated"
    return "sha256:" + files_digest(paths, repo_root(), cache=repo_path(".cache", "file_digests.json"))


def _artifact_root() -> Path | None:
    """Artifacts beside a SQLite tracking database (`<dir>/mlartifacts`), wherever the run's code
    runs: a `dvc exp run --temp` copy of the project must not own artifacts it deletes. None for a
    tracking server, which has its own artifact store."""
    uri = tracking_uri()
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///"):]).resolve().parent / "mlartifacts"


def experiment_id(method: str) -> str:
    c = client()
    exp = c.get_experiment_by_name(method)
    if exp is None:
        root = _artifact_root()
        kwargs = {"artifact_location": (root / method).as_uri()} if root else {}
        try:
            return c.create_experiment(method, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}, **kwargs)
        except Exception:  # created meanwhile by another process
            exp = c.get_experiment_by_name(method)
            if exp is None:
                raise
    if exp.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:  # one made before this tag existed
        c.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return exp.experiment_id


NOTE_TAG = "mlflow.note.content"  # what the MLflow UI shows as an experiment's or a run's description


def description(title: str, paper: str, page: str, claims: list[Mapping[str, Any]]) -> str:
    """Markdown: the method, its paper, where its page is, and each claim with this run's verdict."""
    lines = [f"**{title}**", "", f"Paper: {paper}", "",
             f"Method page: `{page}`; every run's figures: `reports/results.md`.", ""]
    if claims:
        lines += ["Claims (verdicts of the latest run):", ""]
        lines += [f"- `{c['name']}`: {c['claim']} ({c['metric']}, `{c['method']}`"
                  + (f" vs `{c['versus']}`" if c.get("versus") else "") + f"): **{c['verdict']}**, {c['seeds']} seeds"
                  for c in claims]
    return "\n".join(lines)


def describe(parent: "Run", title: str, paper: str, page: str, claims: list[Mapping[str, Any]]) -> None:
    """Set the experiment's and the parent run's descriptions (the UI's Description column)."""
    text = description(title, paper, page, claims)
    client().set_experiment_tag(parent.experiment_id, NOTE_TAG, text)
    client().set_tag(parent.run_id, NOTE_TAG, text)


REPORT_EXPERIMENT = "report"  # one run per report: the verdicts figure and reports/results.md
REPORT_DESCRIPTION = ("**The report of the nineteen methods**\n\nOne run per report: `verdicts.png` (every claim's "
                      "effect with its 95% interval, coloured by verdict) and `results.md` (the claims table). "
                      "Each method's own experiment holds its runs; its page is `docs/methods/<method>.md`.")
DEFAULT_DESCRIPTION = ("MLflow's default experiment: paperline logs nothing here. Each method has an experiment of "
                       "its own (named after it, its paper in the description); the report has `report`.")


def log_verdicts(reports: Path, methods: Iterable[str], pointer: Any) -> str:
    """The report's figures in MLflow: each method's rows of the verdicts figure on the method's last
    parent run (`pointer(method)`: its runs/<method>/mlflow_run.json), the whole figure and
    results.md on a run of the `report` experiment. Returns that run's id. A pointer naming a run
    another tracking store holds is skipped with a warning (the figure stays in reports/)."""
    from mlflow.exceptions import MlflowException

    c = client()
    for method in methods:
        figure, path = reports / "verdicts" / f"{method}.png", Path(pointer(method))
        if not (figure.is_file() and path.is_file()):
            continue
        run_id = json.loads(path.read_text())["run_id"]
        try:
            c.log_artifact(run_id, str(figure), "verdicts")
        except MlflowException as err:
            warnings.warn(f"{path}: run {run_id} is not in {tracking_uri()} ({err.error_code}); "
                          f"its verdicts figure stays in {figure}")
    exp = c.get_experiment_by_name(REPORT_EXPERIMENT)
    root = _artifact_root()
    exp_id = exp.experiment_id if exp else c.create_experiment(
        REPORT_EXPERIMENT, **({"artifact_location": (root / REPORT_EXPERIMENT).as_uri()} if root else {}))
    c.set_experiment_tag(exp_id, NOTE_TAG, REPORT_DESCRIPTION)
    if c.get_experiment_by_name("Default") is not None:  # MLflow's own, which no paperline run uses
        c.set_experiment_tag(c.get_experiment_by_name("Default").experiment_id, NOTE_TAG, DEFAULT_DESCRIPTION)
    run = c.create_run(exp_id, tags={"git_commit": git_commit(), NOTE_TAG: "Every claim of the last `make run`: "
                                     "effect and 95% interval, coloured by verdict (`reports/results.md`)."})
    for name in ("verdicts.png", "results.md"):
        if (reports / name).is_file():
            c.log_artifact(run.info.run_id, str(reports / name))
    c.set_terminated(run.info.run_id)
    return run.info.run_id


def _flatten(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _flatten(f"{prefix}.{k}" if prefix else str(k), v)
    else:
        yield prefix, value


@dataclass(frozen=True)
class Run:
    """An MLflow run addressed by id (picklable: safe to pass to Dask workers)."""

    run_id: str
    experiment_id: str

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in _flatten("", params)]
        for i in range(0, len(items), 100):
            client().log_batch(self.run_id, params=items[i:i + 100])

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step or 0) for k, v in _flatten("", metrics)
                 if isinstance(v, (int, float)) and not isinstance(v, bool)]
        for i in range(0, len(items), STEP_BATCH):
            client().log_batch(self.run_id, metrics=items[i:i + STEP_BATCH])

    def log_history(self, key: str, steps: Iterable[int], values: Iterable[float]) -> None:
        """A per-step metric curve, in batches."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(key, float(v), now, int(s)) for s, v in zip(steps, values)]
        for i in range(0, len(items), STEP_BATCH):
            client().log_batch(self.run_id, metrics=items[i:i + STEP_BATCH])

    def log_final(self, metrics: Mapping[str, float]) -> None:
        """Final values: each at the last step of the curve the run already has under that name (a
        curve gains no point out of order, and its latest value becomes this one), else at step 0."""
        from mlflow.entities import Metric

        c = client()
        existing = set(c.get_run(self.run_id).data.metrics)
        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, max((m.step for m in c.get_metric_history(self.run_id, k)), default=0)
                        if k in existing else 0) for k, v in metrics.items()]
        for i in range(0, len(items), STEP_BATCH):
            c.log_batch(self.run_id, metrics=items[i:i + STEP_BATCH])

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        client().log_artifact(self.run_id, str(path), artifact_path)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        for k, v in tags.items():
            client().set_tag(self.run_id, k, str(v))


def _tags(method: str, variant: str, profile: str, data: str) -> dict[str, str]:
    return {"method": method, "variant": variant, "profile": profile, "data_version": data,
            "dvc_experiment": dvc_experiment(), **git_state()}


def _log_dataset(run: Run, method: str, data: str) -> None:
    """The data version as an MLflow dataset input: the runs table's Dataset column shows it."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    dataset = Dataset(name=f"{method}-inputs", digest=data.split(":")[-1][:36], source_type="local",
                      source=json.dumps({"uri": repo_root().as_uri(), "data_version": data}))
    client().log_inputs(run.run_id, [DatasetInput(dataset, [InputTag("mlflow.data.context", "training")])])


@contextlib.contextmanager
def _terminating(run: Run) -> Iterator[Run]:
    """FINISHED when the block ends normally, FAILED when it raises (or is interrupted)."""
    try:
        yield run
    except BaseException:
        client().set_terminated(run.run_id, "FAILED")
        raise
    client().set_terminated(run.run_id, "FINISHED")


@contextlib.contextmanager
def parent_run(method: str, profile: str, params: Mapping[str, Any], data: str) -> Iterator[Run]:
    exp = experiment_id(method)
    created = client().create_run(exp, run_name=f"{method}-{profile}-{time.strftime('%Y%m%d-%H%M%S')}",
                                  tags=_tags(method, "all", profile, data))
    run = Run(created.info.run_id, exp)
    with _terminating(run):
        run.log_params(params)
        _log_dataset(run, method, data)
        yield run


@dataclass(frozen=True)
class RunContext:
    """What a task needs to record its part of a flow run (picklable): the method, the profile,
    the data version and the parent MLflow run its child runs hang under."""

    method: str
    profile: str
    data_version: str
    parent: Run

    @contextlib.contextmanager
    def child(self, variant: str, params: Mapping[str, Any] | None = None, parent: Run | None = None) -> Iterator[Run]:
        """A child run of the flow's parent run (or of `parent`, for runs nested one level deeper)."""
        parent = parent or self.parent
        tags = _tags(self.method, variant, self.profile, self.data_version) | {"mlflow.parentRunId": parent.run_id}
        created = client().create_run(parent.experiment_id, run_name=variant, tags=tags)
        run = Run(created.info.run_id, parent.experiment_id)
        with _terminating(run):
            if params:
                run.log_params(params)
            _log_dataset(run, self.method, self.data_version)
            yield run

    @contextlib.contextmanager
    def children(self, params: Mapping[str, Mapping[str, Any]]) -> Iterator[dict[str, Run]]:
        """A child run per variant (`params`: variant -> its parameters), open for the block: the
        variant's units of work, tasks running side by side, record nested runs under it with
        `child(..., parent=runs[variant])`; its comparison row lands on it when the flow publishes."""
        with contextlib.ExitStack() as stack:
            yield {variant: stack.enter_context(self.child(variant, p)) for variant, p in params.items()}


def child_runs(parent: Run) -> dict[str, str]:
    """variant tag -> run id of the parent's direct children."""
    runs = client().search_runs([parent.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent.run_id}'",
                                max_results=5000)
    return {r.data.tags.get("variant", r.info.run_name): r.info.run_id for r in runs}


def run_pointer(run: Run, method: str) -> dict[str, str]:
    """What `mlflow_run.json` holds, so `dvc.lock` names the MLflow run."""
    return {"run_id": run.run_id, "experiment": method, "experiment_id": run.experiment_id,
            "tracking_uri": tracking_uri()}


def fail_if_running(run_id: str | None) -> bool:
    """Mark a run that died without ending (SIGKILL, power loss) FAILED, with its children; True
    when it did. A run this tracking store does not know (the store was moved or replaced) is
    warned about; any other error propagates."""
    if not run_id:
        return False
    from mlflow.exceptions import MlflowException

    c = client()
    try:
        run = c.get_run(run_id)
    except MlflowException as err:
        if err.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        warnings.warn(f"the previous run {run_id} is not in the tracking store {tracking_uri()}; "
                      "it cannot be marked FAILED there")
        return False
    if run.info.status != "RUNNING":
        return False
    children = c.search_runs([run.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run_id}'",
                             max_results=5000)
    for child in children:
        if child.info.status == "RUNNING":
            fail_if_running(child.info.run_id)  # and its own children (ZTSurv's folds)
    c.set_terminated(run_id, "FAILED")
    return True
