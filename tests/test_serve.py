"""`python -m flows serve` registers a deployment per method and one for the whole pipeline, each
with its schedule; every run goes through DVC (flows/dvc_run.py), its parameters validated first."""
from __future__ import annotations

import itertools
import math
from datetime import datetime

import pytest

from flows import METHODS
from flows.dvc_run import deployments, dvc_command, hydra_value
from paperline.config import ParamsError, read_params
from tests.conftest import CHECKOUT


def test_every_method_and_the_pipeline_is_a_deployment_with_its_schedule(project):
    params = read_params(project / "params")
    deps = {d.name: d for d in deployments()}
    assert set(deps) == set(METHODS) | {"pipeline"}
    for name in METHODS:
        assert deps[name].flow_name == "dvc-stage"
        assert deps[name].parameters == {"method": name, "profile": None, "overrides": []}
        assert [s.schedule.cron for s in deps[name].schedules] == [params[name]["schedule"]]
    assert deps["pipeline"].flow_name == "dvc-pipeline"
    assert [s.schedule.cron for s in deps["pipeline"].schedules] == [params["pipeline"]["schedule"]]


def test_no_two_schedules_fire_in_the_same_minute():
    from cronsim import CronSim

    params = read_params(CHECKOUT / "params")
    crons = {name: params[name]["schedule"] for name in [*METHODS, "pipeline"]}
    start = datetime(2027, 1, 4)  # a Monday; two weeks hold every firing of a weekly cron
    firings = {name: set(itertools.takewhile(lambda t: (t - start).days < 14, CronSim(cron, start)))
               for name, cron in crons.items()}
    clashes = [(a, b) for a, b in itertools.combinations(crons, 2) if firings[a] & firings[b]]
    assert not clashes, [f"{a} ({crons[a]}) and {b} ({crons[b]})" for a, b in clashes]


def test_defaults_run_dvc_repro_and_parameters_a_dvc_experiment(project):
    assert dvc_command("dnc", None, [], "run")[0][1:] == ["repro", "dnc"]
    assert dvc_command("dnc", "smoke", [], "run")[0][1:] == ["repro", "dnc"]  # params/dnc.yaml's profile
    command, experiment = dvc_command("dnc", "tiny", ["seeds=[0]", "depths=[1, 4]", "grad_tol=1e-5"],
                                      "crafty wolf-1a2b3c")
    assert experiment == "dnc-tiny-crafty-wolf-1a2b3c"  # a valid git ref name
    assert command[1:] == ["exp", "run", "--temp", "-n", experiment, "-S", "params/dnc.yaml:dnc.profile=tiny",
                           "-S", "params/dnc.yaml:++dnc.profiles.tiny.seeds=[0]",
                           "-S", "params/dnc.yaml:++dnc.profiles.tiny.depths=[1,4]",
                           "-S", "params/dnc.yaml:++dnc.profiles.tiny.grad_tol=1e-05", "dnc"]


def test_bad_parameters_fail_with_the_clis_message_before_dvc_starts(project):
    with pytest.raises(ParamsError, match=r"params/dnc.yaml: dnc.profiles.tiny.lamda: unknown parameter"):
        dvc_command("dnc", "tiny", ["lamda=0.1"], "run")
    with pytest.raises(ParamsError, match=r"dnc.profiles.smoke.seeds: .*valid list"):
        dvc_command("dnc", None, ["seeds=3"], "run")
    with pytest.raises(ParamsError, match=r"unknown method 'dcn'"):
        dvc_command("dcn", None, [], "run")


@pytest.mark.parametrize("value", [
    0, -3, 1e-5, 0.1, -2.5e10, math.inf, True, False, None, "orthogonal", "", "1e-3", "true", "null",
    "[1, 2]", "a,b c", "it's", "a\\'b", "back\\", "C:\\data\\x", "é ü", [1, [2.5, "x"]], [],
    {"a": 1, "b_c": "x y", "d": [1]},
])
def test_hydra_value_reads_back_as_the_value(value):
    """What DVC's `-S` parses (Hydra's override grammar) is the value the override's YAML gave."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(f"++k={hydra_value('k', value)}").value()
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize("value, message", [
    ("${oc.env:HOME}", "cannot be passed"), ({"a b": 1}, "mapping key 'a b'"),
    (datetime(2027, 1, 1), "a datetime value"),
])
def test_values_hydra_would_misread_are_refused_naming_the_key(value, message):
    with pytest.raises(ParamsError, match=f"override 'k': .*{message}"):
        hydra_value("k", value)
