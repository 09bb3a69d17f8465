"""Test environment: a temporary PREFECT_HOME and one Prefect server per session (a second one for
the tiny DAG), a migrated MLflow template database copied per test, and a temporary project root
(PAPERLINE_ROOT) so no test writes into the checkout's models/, metrics/, results/ or mlflow.db.

When the collected tests need them, the session's Prefect server and its one tiny `dvc repro` of
the whole DAG (on a server of its own) start in the background as soon as collection ends: the
DAG's stages (one single-threaded process each, mostly imports) then overlap the unit tests under
tests/methods/, which run first, on the machine's second core."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent
_SESSION_TMP = Path(tempfile.mkdtemp(prefix="paperline-tests-"))
_SESSION_STARTED = time.monotonic()

# Before anything imports prefect or mlflow (measured pitfalls: ../shared/TOOLING.md).
os.environ.update({
    "PREFECT_HOME": str(_SESSION_TMP / "prefect"),
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DVC_NO_ANALYTICS": "1",
    "HF_HUB_OFFLINE": "1",
    "MPLBACKEND": "Agg",
    "RAY_USAGE_STATS_ENABLED": "0",
})
os.environ.pop("PREFECT_API_URL", None)
os.environ.pop("PAPERLINE_ROOT", None)
os.environ.pop("MLFLOW_TRACKING_URI", None)


_DAG_CLONE = _SESSION_TMP / "tiny-dag" / "clone"


_PREFECT_TEMPLATE_DB = _SESSION_TMP / "template-prefect.db"


class _SessionServices:
    """The tiny DAG on a Prefect server of its own and the session's server, started on background
    threads. The DAG is the suite's critical path, so its server starts first, on a fresh database;
    a copy of that migrated database is the session server's (a fresh one spends ~14 of its ~25 s
    of CPU on migrations), which the tests under tests/methods, run first, do not need."""

    def __init__(self) -> None:
        # Every subprocess started on a background thread gets this copy of the environment,
        # taken on the main thread: one started with the default (the C `environ`, read while
        # exec'ing) raced a test's monkeypatch.setenv and failed with "[Errno 14] Bad address".
        self._env: dict[str, str] = {}
        self._stack = contextlib.ExitStack()
        self._stack_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=3, thread_name_prefix="session-services")
        self._dag_process: subprocess.Popen | None = None
        self._dag_server: Future | None = None
        self._server: Future | None = None
        self._dag: Future | None = None
        self.dag_result: TinyDag | None = None

    def server(self) -> str:
        self._start_server_once()
        return self._server.result()

    def start_dag(self) -> None:
        if self._dag is None:
            self._env = self._env or dict(os.environ)
            # The DAG's stages report to a server (and database) of their own: on the session's,
            # their `gpu` slot (one on a CPU machine) was the one the foreground tests' flows
            # take, so each side's training waited for the other's while a core sat idle.
            home = _SESSION_TMP / "prefect-dag"
            self._dag_server = (
                self._executor.submit(self._serve_fresh, "prefect-server-dag.log", home) if self._server is None
                else self._executor.submit(self._serve_copy, "prefect-server-dag.log", home, self._server))
            self._dag = self._executor.submit(self._run_dag)
            self._start_server_once()

    def _start_server_once(self) -> None:
        if self._server is None:
            self._env = self._env or dict(os.environ)
            self._server = self._executor.submit(self._start_server)

    def dag(self) -> "TinyDag":
        self.start_dag()
        return self._dag.result()

    def stage_outputs(self, method: str) -> Path:
        """The DAG's clone once `method`'s stage is done (its metrics written, a prep stage has
        none, and its entry in dvc.lock, so DVC has committed its outputs), while later stages may
        still run. The clone starts with the checkout's dvc.lock (the committed profile's): an
        entry is this run's once it differs from that one, or once the DAG is over."""
        from flows import METHODS

        self.start_dag()
        metrics, lock = _DAG_CLONE / "metrics" / f"{method}.json", _DAG_CLONE / "dvc.lock"
        committed = _lock_entry(CHECKOUT / "dvc.lock", method)
        while not ((metrics.exists() or method not in METHODS)
                   and _lock_entry(lock, method) not in (None, committed)):
            if self._dag.done():
                self._dag.result()  # raises the DAG's failure
                if _lock_entry(lock, method) is None:
                    raise AssertionError(f"the tiny DAG ended without a {method} stage")
                break
            time.sleep(0.5)
        return _DAG_CLONE

    def _serve(self, log: str, home: Path) -> str:
        from flows.prefect_server import free_port
        from flows.prefect_server import prefect_server as serve

        server = serve(free_port(), _SESSION_TMP / log, env=self._env | {"PREFECT_HOME": str(home)})
        url = server.__enter__()
        with self._stack_lock:
            self._stack.push(server.__exit__)
        return url

    def _serve_fresh(self, log: str, home: Path) -> str:
        """A server on a new database, copied once migrated, before any flow writes to it: the
        template of the other servers (fixture prefect_template_db)."""
        import sqlite3

        url = self._serve(log, home)
        with contextlib.closing(sqlite3.connect(home / "prefect.db")) as source, \
                contextlib.closing(sqlite3.connect(_PREFECT_TEMPLATE_DB)) as template:
            source.backup(template)
        return url

    def _serve_copy(self, log: str, home: Path, first: Future) -> str:
        """A server on a copy of the template, once the `first` server has made it."""
        first.result()
        home.mkdir(parents=True, exist_ok=True)
        shutil.copy(_PREFECT_TEMPLATE_DB, home / "prefect.db")
        return self._serve(log, home)

    def _start_server(self) -> str:
        home = Path(self._env["PREFECT_HOME"])
        if self._dag_server is None:
            return self._serve_fresh("prefect-server.log", home)
        return self._serve_copy("prefect-server.log", home, self._dag_server)

    def prefect_template_db(self) -> Path:
        self.server()
        return _PREFECT_TEMPLATE_DB

    def _run_dag(self) -> "TinyDag":
        clone = make_clone(_DAG_CLONE, env=self._env)
        api = self._dag_server.result()
        dvc = str(Path(sys.executable).parent / "dvc")
        started = time.monotonic()
        # PAPERLINE_DAG_STAGES="a b": only those stages and what they need, then the report (a
        # method's own loop while it is built; the whole-DAG test then fails, as it should).
        targets = os.environ.get("PAPERLINE_DAG_STAGES", "").split()
        self._dag_process = subprocess.Popen(
            [dvc, "repro"] if not targets else
            ["bash", "-c", f"{dvc} repro {' '.join(targets)} && {sys.executable} -m flows report >/dev/null"],
            cwd=clone, env=clone_env(clone, api, self._env), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        lines: list[tuple[float, str]] = []  # (seconds since the start, line) as DVC prints them
        reader = threading.Thread(target=lambda: lines.extend((time.monotonic() - started, line)
                                                              for line in self._dag_process.stdout))
        reader.start()
        try:
            self._dag_process.wait(timeout=1500)
        except subprocess.TimeoutExpired:
            self._kill_dag()
            raise
        finally:
            reader.join()
        output, seconds = "".join(line for _, line in lines), time.monotonic() - started
        assert self._dag_process.returncode == 0, output[-30000:]
        self.dag_result = TinyDag(clone, seconds, output, _stage_seconds(lines, seconds),
                                  time.monotonic() - _SESSION_STARTED)
        return self.dag_result

    def _kill_dag(self) -> None:
        if self._dag_process is not None and self._dag_process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._dag_process.pid, signal.SIGKILL)
            self._dag_process.wait()

    def close(self) -> None:
        self._kill_dag()  # a session stopped early (-x, Ctrl-C) does not wait for the DAG
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._stack.close()


def _lock_entry(lock: Path, stage: str) -> dict | None:
    """`stage`'s entry in a dvc.lock (None: no file, no entry, or a file being written)."""
    import yaml

    try:
        return (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).get(stage)
    except (OSError, yaml.YAMLError):
        return None


_SERVICES = _SessionServices()
_STAGE_ORDER: list[str] = []


def pytest_configure(config):
    config.addinivalue_line("markers", "dag_stage(method): the test compares its own run with the "
                                       "outputs of the tiny DAG's `method` stage (fixture dag_stage)")


def _dag_order(item) -> tuple[int, int]:
    """(0, 0) a test that needs no DAG; (1, i) one that needs the DAG's stage i (dvc.yaml order);
    (2, 0) one that reads the whole DAG."""
    fixtures = set(getattr(item, "fixturenames", ()))
    if {"tiny_dag", "dag"} & fixtures:
        return 2, 0
    if "dag_stage" in fixtures:
        return 1, _STAGE_ORDER.index(item.get_closest_marker("dag_stage").args[0])
    return 0, 0


@pytest.hookimpl(trylast=True)  # after `-k`/`-m` deselect: a run of other tests starts no DAG
def pytest_collection_modifyitems(session, config, items):
    """Tests that read the tiny DAG run last (in their collected order), after those that compare
    with one of its stages (in the DAG's order, each as soon as its stage is done), the others
    first, while the DAG runs."""
    global _STAGE_ORDER
    import yaml

    _STAGE_ORDER = list(yaml.safe_load((CHECKOUT / "dvc.yaml").read_text())["stages"])
    if any(_dag_order(item) != (0, 0) for item in items):
        items.sort(key=_dag_order)  # stable
        _SERVICES.start_dag()


def pytest_terminal_summary(terminalreporter):
    """The tiny DAG's wall time, stage by stage: what each method's stage costs the suite (its
    budget: README, Adding a method)."""
    dag = _SERVICES.dag_result
    if dag is not None:
        stages = ", ".join(f"{name} {seconds:.0f}" for name, seconds in dag.stage_seconds.items())
        terminalreporter.write_line(f"tiny DAG in the background: {dag.seconds:.0f} s, done {dag.done_at:.0f} s "
                                    f"after the session started ({stages})")


def pytest_sessionfinish(session, exitstatus):
    _SERVICES.close()
    shutil.rmtree(_SESSION_TMP, ignore_errors=True)


@pytest.fixture(scope="session")
def prefect_server() -> str:
    """The session's `prefect server start` on 127.0.0.1 (as `make ui` starts it: its scheduler and
    concurrency leases are a real server's), its API URL set for this process only: flows run
    here and a test's subprocess reports to it when clone_env passes it on, while a subprocess
    started with the plain environment gets a temporary server of its own (the tiny DAG has its
    own long-lived one)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    url = _SERVICES.server()
    with temporary_settings({PREFECT_API_URL: url}):
        yield url


@pytest.fixture(scope="session")
def prefect_template_db(prefect_server) -> Path:
    """A migrated Prefect database: copied to `<PREFECT_HOME>/prefect.db`, a temporary server a
    test's subprocess starts skips the ~14 s of migrations."""
    return _SERVICES.prefect_template_db()


@pytest.fixture(scope="session")
def mlflow_template_db() -> Path:
    """A migrated MLflow SQLite database (migrations take ~2 s; copying takes ms)."""
    from mlflow.tracking import MlflowClient

    path = _SESSION_TMP / "template-mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def project(tmp_path, monkeypatch, mlflow_template_db) -> Path:
    """A fresh project root holding the checkout's params files and an empty MLflow database."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(CHECKOUT / "params", root / "params")
    shutil.copy(mlflow_template_db, root / "mlflow.db")
    monkeypatch.setenv("PAPERLINE_ROOT", str(root))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    return root


def finished_flow_runs(project: Path, method: str, profile: str = "tiny"):
    """(parent, children) of the MLflow run `runs/<method>/mlflow_run.json` points at, after
    checking that the parent finished under `profile`."""
    import json

    from tasks import track

    pointer = json.loads((project / "runs" / method / "mlflow_run.json").read_text())
    client = track.client()
    parent = client.get_run(pointer["run_id"])
    assert parent.info.status == "FINISHED" and parent.data.tags["profile"] == profile
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    return parent, children


# DVC outputs a clone must make itself (a fresh clone's `dvc repro` writes them)
OUTPUT_DIRS = ("metrics/", "results/", "runs/", "reports/", "plots/")


def run_git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


def make_clone(dest: Path, profile: str | None = "tiny", env: dict[str, str] | None = None,
               with_outputs: bool = False) -> Path:
    """A fresh clone of the working tree as `git clone` of a commit of it would give (tracked and
    untracked-but-not-ignored files; the committed DVC outputs only `with_outputs`, a workspace as
    a user has it after `make run`), every method and data section at `profile` (None: as
    the params files say), committed in a new git repository (DVC experiments need one)."""
    import yaml

    from flows import METHODS

    run_git(CHECKOUT, "worktree", "prune", env=env)
    files = run_git(CHECKOUT, "ls-files", "--cached", "--others", "--exclude-standard", env=env).split()
    for f in files:
        if (CHECKOUT / f).is_file() and (with_outputs or not f.startswith(OUTPUT_DIRS)):
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(CHECKOUT / f, dest / f)
    if profile:
        for name in METHODS:
            path = dest / "params" / f"{name}.yaml"
            params = yaml.safe_load(path.read_text())
            params[name]["profile"] = profile
            path.write_text(yaml.safe_dump(params, sort_keys=False))
    run_git(dest, "init", "-q", env=env)
    run_git(dest, "add", "-A", env=env)
    run_git(dest, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "clone", env=env)
    return dest


def clone_env(clone: Path, api: str | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a command run in a clone as `make run` runs it: the venv first on PATH,
    the clone's own mlflow.db (the default), and the session's Prefect server (every stage reports
    to it rather than starting a temporary server: ~8 s a stage on 2 cores)."""
    if api is None:
        from prefect.settings import get_current_settings

        api = get_current_settings().api.url
    assert api, "the prefect_server fixture sets the API URL"
    env = {k: v for k, v in (base or os.environ).items() if k not in ("PAPERLINE_ROOT", "MLFLOW_TRACKING_URI")}
    return env | {"PATH": str(Path(sys.executable).parent) + os.pathsep + env["PATH"],
                  "PREFECT_API_URL": str(api)}


@dataclass(frozen=True)
class TinyDag:
    root: Path
    seconds: float
    output: str
    stage_seconds: dict[str, float]  # wall time of each stage, DVC's own work around it included
    done_at: float  # seconds after the session started


def _stage_seconds(lines: list[tuple[float, str]], end: float) -> dict[str, float]:
    """Each stage's wall time: from its "Running stage" line to the next one (or the end)."""
    starts = [(t, line.split("'")[1]) for t, line in lines if line.startswith("Running stage '")]
    return {name: round(t_next - t, 1) for (t, name), (t_next, _) in zip(starts, [*starts[1:], (end, "")])}


@pytest.fixture(scope="session")
def tiny_dag(prefect_server) -> TinyDag:
    """The whole DAG, run once per test session: `dvc repro` on a fresh clone at the tiny profile,
    started in the background at collection. Each method's flow test checks its outputs here
    instead of running its flow again."""
    return _SERVICES.dag()


@pytest.fixture
def dag_stage(request, prefect_server) -> Path:
    """The tiny DAG's clone once the stage the test's `dag_stage` mark names is done, the rest of
    the DAG possibly still running: a test that compares a run of its own with that stage's files
    runs beside the DAG instead of after it. Files only: the clone's MLflow store is still being
    written (use `dag` for its runs)."""
    mark = request.node.get_closest_marker("dag_stage")
    assert mark, "a test using dag_stage names its stage: @pytest.mark.dag_stage(method)"
    return _SERVICES.stage_outputs(mark.args[0])


@pytest.fixture
def dag(tiny_dag, monkeypatch) -> Path:
    """The tiny DAG's clone as the project of a test (read its outputs, query its MLflow runs)."""
    monkeypatch.setenv("PAPERLINE_ROOT", str(tiny_dag.root))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tiny_dag.root / 'mlflow.db'}")
    return tiny_dag.root


def report_rows(project: Path, method: str) -> list[str]:
    """The first cells of the rows of `method`'s comparison table in the project's report."""
    text = (project / "reports" / "results.md").read_text()
    section = text.split(f"## {method}:", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| variant |"))
    rows = []
    for line in lines[start + 2:]:  # after the header and its |---| line
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip().removesuffix(" (baseline)"))
    return rows


def two_play_slice(dest: Path) -> Path:
    """A hash-checked slice of two committed Shakespeare plays (macbeth, tempest) in `dest`, the
    layout `paperline.data.text_corpus.read_slice` reads: the LM tests' small corpus."""
    import hashlib

    dest.mkdir(parents=True)
    sums = []
    for name in ("macbeth.txt", "tempest.txt"):
        shutil.copy(CHECKOUT / "data" / "raw" / "shakespeare" / name, dest / name)
        sums.append(f"{hashlib.sha256((dest / name).read_bytes()).hexdigest()}  {name}")
    (dest / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    return dest


def vit_source_copy(project: Path, tmp_path: Path, profile: str = "tiny"):
    """The vit_source config at `profile` pointing at a copy of the project's vit-source folder (a
    test may break the copy's files: the refused-input tests of the vision methods)."""
    from paperline.config import read_params
    from tasks import vit_source

    _, source_cfg = vit_source.resolve(read_params(project / "params"), profile)
    folder = tmp_path / "vit_source"
    shutil.copytree(project / "data" / "vit_source", folder)
    return source_cfg.model_copy(update={"out": str(folder)})
