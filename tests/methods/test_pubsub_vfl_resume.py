"""A killed PubSub-VFL experiment resumes past what it had finished: the plan it measured (a
re-profile may pick another (w_a, w_p, B) on a busier moment) and every finished run, read back from
the run directory's records; a record of another config is never mixed in. The runs are stand-ins
(no processes): what is tested is the bookkeeping of `run_experiment`."""
from __future__ import annotations

import pickle

import pytest

from paperline.methods.pubsub_vfl import experiment
from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
from paperline.methods.pubsub_vfl.data import load
from paperline.methods.pubsub_vfl.train import RunResult

CFG = PubSubVFLConfig(data={"name": "breast_cancer"}, seeds=[0, 1], epochs=1, variants=["vfl", "pubsub_vfl"],
                      plan_workers=[1, 2], plan_batches=[32, 64], dp_mu=[1.0], kill_worker=True)


class Killed(Exception):
    pass


def fake_run(calls: list, kill_after: int | None = None):
    """run_variant's stand-in: a result that names its call; raises at call `kill_after`."""
    def run(cfg, data, variant, seed, workers=None, batch_size=None, dp_mu=0.0, kill_passive_after_s=None):
        if kill_after is not None and len(calls) == kill_after:
            raise Killed
        calls.append((variant, seed, dp_mu, kill_passive_after_s is not None))
        return RunResult(variant, seed, *workers, batch_size, dp_mu, metric=0.5 + len(calls) / 100, curve=[{"seconds": 1.0, "metric": 0.5}],
                         wall_s=1.0 + len(calls), time_to_target_s=None, idle_fraction={}, cpu_utilisation=0.5,
                         busy_fraction=0.5, dropped=0, params={"active": {"w": len(calls)}})
    return run


def fake_plan(picks: list):
    def choose(cfg, data):
        w_a, w_p, B = picks.pop(0)
        return {"w_a": w_a, "w_p": w_p, "B": B, "measured_cost_model": None}
    return choose


@pytest.fixture
def data():
    return load(CFG.data)


def test_a_killed_experiment_resumes_with_its_plan_and_finished_runs(tmp_path, monkeypatch, data):
    uninterrupted = []
    monkeypatch.setattr(experiment, "choose", fake_plan([(1, 2, 64)]))
    monkeypatch.setattr(experiment, "run_variant", fake_run(uninterrupted))
    expected = experiment.run_experiment(CFG, data)

    killed: list = []
    monkeypatch.setattr(experiment, "choose", fake_plan([(1, 2, 64), (2, 2, 32)]))  # a re-plan would pick another
    monkeypatch.setattr(experiment, "run_variant", fake_run(killed, kill_after=3))
    with pytest.raises(Killed):
        experiment.run_experiment(CFG, data, records=tmp_path, data_version="v1")
    resumed_calls: list = []
    monkeypatch.setattr(experiment, "run_variant", fake_run(resumed_calls))
    resumed = experiment.run_experiment(CFG, data, records=tmp_path, data_version="v1")

    assert resumed.plan == expected.plan  # the killed run's plan, not a second profile's
    assert len(resumed_calls) == len(uninterrupted) - 3  # the three finished runs read back
    # every run in its place: the run order's numbering (metric, wall) is the uninterrupted one's
    flat = [r for runs in resumed.runs.values() for r in runs] + resumed.dp + [resumed.fault]
    want = [r for runs in expected.runs.values() for r in runs] + expected.dp + [expected.fault]
    assert [(r.variant, r.seed, r.dp_mu, r.workers_active, r.batch_size) for r in flat] == \
        [(r.variant, r.seed, r.dp_mu, r.workers_active, r.batch_size) for r in want]
    assert [r.metric for r in flat[:3]] == [r.metric for r in want[:3]]


def test_records_of_another_config_or_data_are_not_mixed_in(tmp_path, monkeypatch, data):
    calls: list = []
    monkeypatch.setattr(experiment, "choose", fake_plan([(1, 2, 64), (1, 2, 64), (1, 2, 64)]))
    monkeypatch.setattr(experiment, "run_variant", fake_run(calls))
    experiment.run_experiment(CFG, data, records=tmp_path, data_version="v1")
    first = len(calls)
    experiment.run_experiment(CFG, data, records=tmp_path, data_version="v1")
    assert len(calls) == first  # all read back
    experiment.run_experiment(CFG.model_copy(update={"lr": 0.2}), data, records=tmp_path, data_version="v1")
    experiment.run_experiment(CFG, data, records=tmp_path, data_version="v2")
    assert len(calls) == 3 * first


def test_the_delta_t_sweep_runs_each_delta_t0_once_and_reuses_the_comparisons_run(tmp_path, monkeypatch):
    calls: list = []
    deltas: list = []
    run = fake_run(calls)

    def recording(cfg, data, variant, seed, **kw):
        deltas.append(cfg.delta_t0)
        return run(cfg, data, variant, seed, **kw)

    monkeypatch.setattr(experiment, "run_variant", recording)
    monkeypatch.setattr(experiment, "choose", fake_plan([(2, 2, 32)]))
    cfg = CFG.model_copy(update={"seeds": [0], "dp_mu": [], "kill_worker": False, "delta_t0_sweep": [1, 2]})
    exp = experiment.run_experiment(cfg, load(cfg.data), records=tmp_path)
    assert [d["delta_t0"] for d in exp.delta_t] == [1, 2, 5] and deltas == [5, 5, 1, 2]  # vfl, pubsub_vfl, then 1, 2
    assert exp.delta_t[2]["metric"] == exp.runs["pubsub_vfl"][0].metric  # ΔT₀ = 5: the comparison's run
    assert len({d["metric"] for d in exp.delta_t}) == 3  # each ΔT₀ its own record, none read back for another


def test_a_final_model_is_kept_once_in_the_models_folder_and_resumed_from_there(tmp_path, monkeypatch, data):
    """The comparison's and the DP claim's final models are files `<variant>/seed<s>.pkl` of the
    models folder; their runs' records hold no copy, only the file's digest; a resume reads the model
    back from the file, and a file that is not the recorded one (a later run's) is computed again."""
    records, models = tmp_path / "units", tmp_path
    calls: list = []
    monkeypatch.setattr(experiment, "choose", fake_plan([(1, 2, 64)] * 3))
    monkeypatch.setattr(experiment, "run_variant", fake_run(calls))
    first = experiment.run_experiment(CFG, data, records=records, data_version="v1", models=models)
    kept = sorted(str(p.relative_to(models)) for p in models.glob("*/seed*.pkl"))
    assert kept == [f"{v}/seed{s}.pkl" for v in ("pubsub_vfl", "pubsub_vfl_dp_mu1", "vfl") for s in (0, 1)]
    for variant, runs in [*first.runs.items(), ("pubsub_vfl_dp_mu1", first.dp)]:
        for r in runs:
            assert pickle.loads((models / variant / f"seed{r.seed}.pkl").read_bytes()) == r.params
    saved = [pickle.loads(p.read_bytes())["result"] for p in (records / "runs").glob("*.pkl")]
    # a record with a kept model holds no params; the fault run's (no file of its own) keeps its own
    assert sum(isinstance(r, dict) and r["run"].params is None for r in saved) == 6
    assert sum(not isinstance(r, dict) and r.params is not None for r in saved) == 1

    resumed = experiment.run_experiment(CFG, data, records=records, data_version="v1", models=models)
    assert len(calls) == 7  # everything read back, the models from their files
    assert [r.params for r in resumed.runs["vfl"] + resumed.dp] == [r.params for r in first.runs["vfl"] + first.dp]

    (models / "vfl" / "seed1.pkl").write_bytes(pickle.dumps({"active": {"w": "another run's"}}))
    again = experiment.run_experiment(CFG, data, records=records, data_version="v1", models=models)
    assert len(calls) == 8 and again.runs["vfl"][1].params == {"active": {"w": 8}}
    assert pickle.loads((models / "vfl" / "seed1.pkl").read_bytes()) == {"active": {"w": 8}}


def _other(value):
    """A value unlike `value`, of its kind (a config copied with it is not validated)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, value[0]] if value else [1]
    return 1 if value is None else None


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # the unvalidated values' types
def test_two_run_configs_that_differ_in_any_field_get_different_records():
    """A run's record is named and fingerprinted by the whole config it runs with: an override of
    any field (a nested channel setting included) is never read back from another's record."""
    base = experiment.run_record(CFG, "pubsub_vfl", 0, "v1", {"workers": (1, 2), "batch_size": 64})
    records = {base[0]}
    fingerprints = {str(base[1])}
    changed = [{name: _other(getattr(CFG, name))} for name in CFG.model_fields if name not in ("data", "channels")]
    for nested in ("data", "channels"):
        part = getattr(CFG, nested)
        changed += [{nested: part.model_copy(update={name: _other(getattr(part, name))})} for name in part.model_fields]
    for update in changed:
        name, fingerprint = experiment.run_record(CFG.model_copy(update=update), "pubsub_vfl", 0, "v1",
                                                  {"workers": (1, 2), "batch_size": 64})
        records.add(name)
        fingerprints.add(str(fingerprint))
    assert len(records) == len(fingerprints) == len(changed) + 1


def test_models_are_kept_only_beside_their_runs_records(tmp_path, data):
    with pytest.raises(ValueError, match="records"):
        experiment.run_experiment(CFG, data, models=tmp_path)
