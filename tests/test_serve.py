"""Every flow becomes a Prefect deployment with its cron schedule and default parameters."""
from __future__ import annotations

import yaml

from flows import METHODS
from flows.launch import deployments


def test_every_flow_is_a_deployment_with_its_schedule(project):
    params = yaml.safe_load((project / "params.yaml").read_text())
    deps = {d.flow_name: d for d in deployments()}
    assert set(deps) == set(METHODS)
    for name, dep in deps.items():
        section = params[name]
        assert dep.name == f"{name}-{section['profile']}"
        assert dep.parameters == {"profile": section["profile"], "overrides": []}
        assert [s.schedule.cron for s in dep.schedules] == [section["schedule"]]
