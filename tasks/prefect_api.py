"""Calls to a Prefect server's REST API that tasks and the server launcher share (stdlib only, so
`python -m flows.prefect_server` starts without importing the task machinery)."""
from __future__ import annotations

import json
import urllib.request


def api(url: str, method: str, path: str, body: dict | None = None) -> object:
    request = urllib.request.Request(f"{url}{path}", method=method, data=None if body is None else
                                     json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
    return json.loads(text) if text else None


def release_orphaned_slots(url: str) -> list[str]:
    """Free every slot that the database of a server that has just started still counts as taken;
    returns the names of the limits it freed. A server keeps its slot leases in its memory
    (Prefect's default lease storage) and its limits in its database: a slot held when the
    previous server process stopped (a `make run` interrupted while a task held `gpu`) had its
    lease die with that process, so nothing would ever free it, and every GPU task of the next
    run waited forever (measured: `gpu` left at 1 of 1, the next `make run` hung in its first
    task). A server that has just started holds no lease, so every taken slot is such a slot."""
    freed = []
    for limit in api(url, "POST", "/v2/concurrency_limits/filter", {}):
        if limit.get("active_slots"):
            api(url, "PATCH", f"/v2/concurrency_limits/{limit['id']}", {"active_slots": 0})
            freed.append(limit["name"])
    return freed
