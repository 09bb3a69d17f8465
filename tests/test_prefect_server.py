"""`make run` shares one Prefect server among its stages: `python -m flows.prefect_server` uses the
one answering on the port, or starts one for the command and stops it afterwards. A stand-in
server (a few lines of http.server answering /api/health) keeps this fast; the test of the
deployments starts the real one."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from flows import prefect_server
from flows.env import DATABASE_URL, TASK_RUN_RECORDER, TEMPORARY_SERVER_DB
from flows.prefect_server import api_url, free_port, is_healthy

STAND_IN = textwrap.dedent("""
    import http.server, json, sys, time
    time.sleep(float(sys.argv[2]))  # a server takes a while to answer
    limits = json.loads(sys.argv[3])  # the global concurrency limits in its database
    class Api(http.server.BaseHTTPRequestHandler):
        def reply(self, code, body=None):
            self.send_response(code)
            self.end_headers()
            if body is not None:
                self.wfile.write(json.dumps(body).encode())
        def do_GET(self):
            if self.path == "/api/health":
                self.reply(200, True)
            elif self.path.startswith("/api/v2/concurrency_limits/"):
                self.reply(200, next(l for l in limits if l["id"] == self.path.rsplit("/", 1)[1]))
            else:
                self.reply(404)
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.reply(200, limits) if self.path == "/api/v2/concurrency_limits/filter" else self.reply(404)
        def do_PATCH(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            next(l for l in limits if l["id"] == self.path.rsplit("/", 1)[1]).update(body)
            self.reply(204)
        def log_message(self, *args):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Api).serve_forever()
""")


def _stand_in(port: int, delay: float = 0.0, limits: list[dict] | None = None) -> list[str]:
    return [sys.executable, "-c", STAND_IN, str(port), str(delay), json.dumps(limits or [])]


def test_a_server_is_started_for_the_command_and_stopped_after_it(tmp_path):
    port = free_port()
    with prefect_server.prefect_server(port, tmp_path / "server.log", _stand_in(port, delay=1.0)) as url:
        assert url == api_url(port) and is_healthy(url)
    assert not is_healthy(url)


def test_a_running_server_is_used_and_left_running(tmp_path):
    port = free_port()
    running = subprocess.Popen(_stand_in(port))
    try:
        with prefect_server.prefect_server(port, tmp_path / "server.log", ["false"]) as url:
            assert is_healthy(url)  # `false` would have failed to start: it was not called
        assert is_healthy(url)
    finally:
        running.kill()
        running.wait()


def test_a_server_that_does_not_start_is_reported_with_its_log(tmp_path):
    port = free_port()
    failing = [sys.executable, "-c", "import sys; print('port in use'); sys.exit(1)"]
    with pytest.raises(RuntimeError, match=r"no Prefect server answered(.|\n)*port in use"), \
            pytest.MonkeyPatch.context() as patch:
        patch.setattr(prefect_server, "STARTUP_TIMEOUT_S", 2.0)
        with prefect_server.prefect_server(port, tmp_path / "server.log", failing):
            pass


def test_the_command_sees_the_servers_url_and_its_exit_status_is_returned(tmp_path, monkeypatch):
    port = free_port()
    monkeypatch.setattr(prefect_server, "_default_server_command", lambda p: _stand_in(p))
    check = f"import os, sys; sys.exit(0 if os.environ['PREFECT_API_URL'] == {api_url(port)!r} else 3)"
    argv = ["--port", str(port), "--log", str(tmp_path / "server.log"), "--", sys.executable, "-c"]
    assert prefect_server.main(argv + [check]) == 0
    assert prefect_server.main(argv + ["import sys; sys.exit(5)"]) == 5


def test_a_started_server_runs_without_the_task_run_recorder_unless_its_environment_says(tmp_path, monkeypatch):
    """... and on PREFECT_HOME's database, never the temporary server's that a process which ran a
    flow without a server URL passes on in its environment (flows/env.py)."""
    monkeypatch.setattr(prefect_server, "STARTUP_TIMEOUT_S", 1.0)
    show = [sys.executable, "-c", f"import os; print('recorder=' + os.environ.get({TASK_RUN_RECORDER!r}, 'unset')"
                                  f" + ' db=' + os.environ.get({DATABASE_URL!r}, 'unset'))"]
    base = {k: v for k, v in os.environ.items() if k not in (TASK_RUN_RECORDER, DATABASE_URL)}
    temporary, other = f"sqlite+aiosqlite:////x/{TEMPORARY_SERVER_DB}", "sqlite+aiosqlite:////x/other.db"
    for env, seen in [(base, "recorder=false db=unset"), (base | {TASK_RUN_RECORDER: "true"}, "recorder=true"),
                      (base | {DATABASE_URL: temporary}, "db=unset"), (base | {DATABASE_URL: other}, f"db={other}")]:
        with pytest.raises(RuntimeError, match=re.escape(seen)):
            with prefect_server.prefect_server(free_port(), tmp_path / "server.log", show, env=env):
                pass


def test_slots_a_started_servers_database_still_counts_as_taken_are_freed(tmp_path):
    """A server starts without leases (they live in its memory): a `gpu` slot its database counts
    as taken was held under the server before, and would never be freed."""
    port = free_port()
    limits = [{"id": "1", "name": "gpu", "limit": 1, "active_slots": 1},
              {"id": "2", "name": "dvc", "limit": 1, "active_slots": 0}]
    with prefect_server.prefect_server(port, tmp_path / "server.log", _stand_in(port, limits=limits)) as url:
        assert [prefect_server._api(url, "GET", f"/v2/concurrency_limits/{i}")["active_slots"]
                for i in ("1", "2")] == [0, 0]
    running = subprocess.Popen(_stand_in(port, limits=limits))  # a server already up: its slots are live
    try:
        with prefect_server.prefect_server(port, tmp_path / "server.log", ["false"]) as url:
            assert prefect_server._api(url, "GET", "/v2/concurrency_limits/1")["active_slots"] == 1
    finally:
        running.kill()
        running.wait()
