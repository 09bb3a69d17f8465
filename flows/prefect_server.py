"""`python -m flows.prefect_server [--port P] -- COMMAND...`: run COMMAND (e.g. `dvc repro`) with
PREFECT_API_URL pointing at one Prefect server on 127.0.0.1:P, so every stage's flow reports there
instead of starting a temporary server of its own (~10 s a stage on 2 cores). The server of
`make ui` is used when it answers; otherwise one is started for COMMAND and stopped after it.
Imports nothing heavy: it runs before every `make run`.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from flows.env import DATABASE_URL, TASK_RUN_RECORDER, TEMPORARY_SERVER_DB
from tasks.prefect_api import api as _api  # noqa: F401 (_api: the tests call the API)
from tasks.prefect_api import release_orphaned_slots

HOST = "127.0.0.1"
STARTUP_TIMEOUT_S = 120.0  # ~12 s on a quiet 2-core machine, far more when it is loaded
_LOG_TAIL = 20


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a server of a test or a benchmark)."""
    import socket

    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def api_url(port: int) -> str:
    return f"http://{HOST}:{port}/api"


def is_healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _wait_healthy(url: str, server: subprocess.Popen | None, timeout: float) -> bool:
    """True once `url` answers; False when `server` exits first or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_healthy(url):
            return True
        if server is not None and server.poll() is not None:
            return False
        time.sleep(0.5)
    return False


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def server_env(env: dict[str, str]) -> dict[str, str]:
    """`env` for a server of ours: the task-run recorder off unless `env` sets it (flows/env.py
    TASK_RUN_RECORDER says why), and its database PREFECT_HOME's prefect.db, never the temporary
    server's, which a process that ran a flow without a server URL passes on (flows/env.py)."""
    env = {TASK_RUN_RECORDER: "false"} | env
    if env.get(DATABASE_URL, "").endswith(TEMPORARY_SERVER_DB):
        del env[DATABASE_URL]
    return env


def _default_server_command(port: int) -> list[str]:
    return [str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", HOST, "--port", str(port)]


@contextmanager
def prefect_server(port: int, log_path: Path, server_command: Sequence[str] | None = None,
                   env: dict[str, str] | None = None) -> Iterator[str]:
    """The API URL of a Prefect server on 127.0.0.1:`port`: the one already answering there, or
    one started now (its output in `log_path`, its environment `env`, default this process's, with
    the task-run recorder off; slots left taken in its database freed) and stopped when the block
    ends."""
    url = api_url(port)
    if is_healthy(url):
        yield url
        return
    command = list(server_command or _default_server_command(port))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        # a session of its own: Ctrl-C reaches the command's stages, which still report to the
        # server while they stop; the server is stopped after them
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                  env=server_env(dict(os.environ if env is None else env)))
    try:
        if not _wait_healthy(url, server, STARTUP_TIMEOUT_S):
            # the port may belong to a server that is still starting (`make ui` just launched)
            if server.poll() is None or not _wait_healthy(url, None, STARTUP_TIMEOUT_S):
                tail = log_path.read_text(errors="replace").splitlines()[-_LOG_TAIL:]
                raise RuntimeError(f"no Prefect server answered at {url} ({' '.join(command)}; "
                                   f"{log_path}):\n" + "\n".join(tail))
        elif server.poll() is None:  # ours answered: it holds no lease yet
            freed = release_orphaned_slots(url)
            if freed:
                print(f"freed the slots of {', '.join(freed)} left taken when the previous server stopped",
                      file=sys.stderr)
        yield url
    finally:
        _stop(server)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.prefect_server", description=__doc__)
    parser.add_argument("--port", type=int, default=4200)
    parser.add_argument("--log", type=Path, default=Path(".ui/prefect-run.log"),
                        help="the started server's output (default: %(default)s)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    try:
        with prefect_server(args.port, args.log) as url:
            print(f"Prefect server for this run: {url.removesuffix('/api')}", file=sys.stderr)
            process = subprocess.Popen(command, env=os.environ | {"PREFECT_API_URL": url})
            while True:
                try:
                    return process.wait()
                except KeyboardInterrupt:  # the command got the Ctrl-C too: let it stop first
                    continue
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
