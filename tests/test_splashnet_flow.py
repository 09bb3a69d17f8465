"""The SplashNet flow: its outputs in the tiny DAG (the data stages' outputs, a row per variant on
that variant's MLflow run with zero-shot and fine-tuned CER, greedy and beam search with the
character LM, the mean over the profile's seeds with their spread and a nested MLflow run per
seed, the paper parameter/FLOP table, plots as MLflow artifacts and DVC files); a run that
died mid-training resumes from its Lightning checkpoint; missing features, and features of other
data parameters, are refused before any work; and the prep CLI's errors."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml

from flows.__main__ import main as flows_cli
from flows.launch import run_method
from paperline.methods.splashnet import pipeline
from paperline.methods.splashnet.claims import SPECS
from paperline.metrics import validate_metrics
from tasks import track
from tests.conftest import finished_flow_runs, report_rows


def _tiny(project) -> dict:
    return yaml.safe_load((project / "params" / "splashnet.yaml").read_text())["splashnet"]["profiles"]["tiny"]


def test_tiny_dag_outputs(dag):
    path = dag / "results" / "splashnet.json"
    metrics = validate_metrics(json.loads(path.read_text()), str(path))
    tiny, rows = _tiny(dag), metrics.rows
    assert sorted(rows) == sorted(tiny["variants"]) == sorted(report_rows(dag, "splashnet"))
    assert (metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == ("baseline", "zero_shot_cer", False)
    seeds = [str(s) for s in tiny["seeds"]]
    per_seed = metrics.details["per_seed"]
    for name, row in rows.items():
        for key in ("zero_shot_cer", "finetuned_cer", "params", "zero_shot_cer_minus_baseline", "zero_shot_ctc_loss",
                    "finetuned_ctc_loss", "final_train_ctc_loss", "zero_shot_beam_cer", "finetuned_beam_cer",
                    "zero_shot_cer_std", "finetuned_cer_std"):
            assert isinstance(row[key], (int, float)), (name, key)
        assert row["zero_shot_cer"] >= 0 and row["train_steps"] == tiny["max_steps"] and row["seeds"] == len(seeds)
        assert isinstance(row["best_val_cer"], float) and row["best_val_cer"] >= 0, name  # the validation user's
        assert list(per_seed[name]) == seeds  # the row is the mean of the seeds' rows
        assert row["zero_shot_cer"] == pytest.approx(sum(per_seed[name][s]["zero_shot_cer"] for s in seeds) / len(seeds))
    assert rows["splashnet_mini"]["params"] < rows["baseline"]["params"]
    headline = metrics.headline
    assert headline["seeds"] == len(seeds)
    # the claims, paired by seed: every one declared, SplashNet-mini against the blank decoder among
    # them (its CER on the same test sessions: every keystroke deleted), two seeds decide nothing
    assert metrics.claims and {c.name for c in metrics.claims} <= {s.name for s in SPECS}
    trivial = next(c for c in metrics.claims if c.trivial and c.method == "splashnet_mini")
    assert trivial.versus == "blank" and trivial.versus_mean == 100.0
    assert metrics.tables["trivial"]["blank"]["zero_shot_cer"] == 100.0
    assert list(metrics.details["per_seed_blank"]) == seeds
    assert all(c.seeds == len(seeds) and c.verdict == "inconclusive" for c in metrics.claims)
    if rows["baseline"]["zero_shot_cer"]:
        assert headline["splashnet_mini_zero_shot_cer_vs_baseline"] == pytest.approx(
            rows["splashnet_mini"]["zero_shot_cer"] / rows["baseline"]["zero_shot_cer"])
    assert metrics.details["decoders"] == ["greedy", "beam_char_lm"]
    user = metrics.details["test_users"][0]
    assert metrics.details["per_user"]["baseline"][f"zero_shot_cer/{user}"] >= 0
    lm = json.loads((dag / "models" / "splashnet" / "char_lm.json").read_text())  # counted on the checkout's
    assert lm["order"] == tiny.get("beam_search", {}).get("lm_order", 4) and lm["counts"]  # Shakespeare slice
    paper = metrics.tables["paper_models"]
    assert round(paper["splashnet_mini"]["params_vs_baseline"], 2) == 0.26
    assert 0.55 < paper["splashnet_mini"]["flops_vs_baseline"] < 0.65
    assert 1.05 < paper["splashnet"]["flops_vs_baseline"] < 1.2
    assert headline["rtn_cross_user_std_of_channel_means"] < headline["raw_cross_user_std_of_channel_means"]
    index = json.loads((dag / "data" / "splashnet" / "features" / "index.json").read_text())
    assert len(index["sessions"]) == 6 and (dag / "data" / "splashnet" / "sessions" / "manifest.json").exists()

    parent, children = finished_flow_runs(dag, "splashnet")
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")
    assert not any("/" in k for k in parent.data.metrics)  # headline figures only
    assert sorted(r.data.tags["variant"] for r in children) == sorted(tiny["variants"])
    assert all(r.info.status == "FINISHED" for r in children)
    for variant_run in children:  # each variant's run carries its row (the means), under the same names
        variant = variant_run.data.tags["variant"]
        row = rows[variant]
        assert variant_run.data.metrics["zero_shot_cer"] == row["zero_shot_cer"]
        assert variant_run.data.metrics["zero_shot_cer_std"] == row["zero_shot_cer_std"]
        assert variant_run.data.metrics["finetuned_cer_minus_baseline"] == row["finetuned_cer_minus_baseline"]
        nested = c.search_runs([parent.info.experiment_id],
                               filter_string=f"tags.mlflow.parentRunId = '{variant_run.info.run_id}'")
        assert sorted(r.info.run_name for r in nested) == sorted(f"{variant}/seed{s}" for s in seeds)
        for seed_run in nested:  # and a run per seed under it with that seed's figures
            seed = seed_run.info.run_name.rsplit("/seed", 1)[1]
            assert seed_run.data.params["seed"] == seed and seed_run.info.status == "FINISHED"
            assert seed_run.data.metrics["zero_shot_cer"] == per_seed[variant][seed]["zero_shot_cer"]
            assert f"zero_shot_cer/{user}" in seed_run.data.metrics  # per user, as the user is evaluated
    child = nested[0]
    assert len(c.get_metric_history(child.info.run_id, "train_ctc_loss")) == tiny["max_steps"]
    assert any(a.path.endswith("generic.pt") for a in c.list_artifacts(child.info.run_id, "checkpoints"))
    assert [m.step for m in c.get_metric_history(child.info.run_id, "val_cer")] == [tiny["val_every"]]
    variant, seed = child.info.run_name.split("/")
    assert (dag / "models" / "splashnet" / variant / seed / "lightning_generic" / "best.ckpt").is_file()
    pngs = sorted(a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")
                  if a.path.endswith(".png"))
    assert pngs == sorted(p.name for p in (dag / "plots" / "splashnet").glob("*.png"))
    assert {"cer_per_variant.png", "loss_curves.png", "channel_stats.png", "session_traces.png",
            "band_powers.png"} <= set(pngs)
    assert (dag / "plots" / "splashnet" / "cer.csv").read_text().startswith("variant,")
    per_seed_csv = (dag / "plots" / "splashnet" / "cer_per_seed.csv").read_text().splitlines()
    assert per_seed_csv[0].startswith("variant,seed,") and len(per_seed_csv) == 1 + len(rows) * len(seeds)
    assert json.loads((dag / "models" / "splashnet" / "run.json").read_text())["complete"]


@pytest.mark.dag_stage("splashnet")
def test_a_run_that_died_resumes_and_other_features_are_refused(dag_stage, project, prefect_server):
    """The baseline alone, on the DAG's features: it dies after the generic model's first
    checkpoint (step 2 of 3), then runs again from it; features missing or made with other data
    parameters are refused before any work."""
    only_baseline = ["variants=[baseline]", "seeds=[0]"]
    with pytest.raises(FileNotFoundError, match="manifest.json: not prepared; run the semg stages"):
        run_method("splashnet", "tiny", only_baseline)
    assert not (project / "models" / "splashnet").exists()
    shutil.copytree(dag_stage / "data" / "splashnet", project / "data" / "splashnet")
    tiny = _tiny(project)
    real_fit = pipeline._fit

    def dies_after_a_checkpoint(module, dataset, cfg, max_steps, device, ckpt_dir, *rest):
        if ckpt_dir.name == "lightning_generic" and ckpt_dir.parent.parent.name == "baseline":
            real_fit(module, dataset, cfg, cfg.checkpoint_every, device, ckpt_dir, *rest)
            raise RuntimeError("died mid-training")
        real_fit(module, dataset, cfg, max_steps, device, ckpt_dir, *rest)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "_fit", dies_after_a_checkpoint)
        with pytest.raises(RuntimeError, match="died mid-training"):
            run_method("splashnet", "tiny", only_baseline)
    assert (project / "models" / "splashnet" / "baseline" / "seed0" / "lightning_generic" / "last.ckpt").is_file()
    run_method("splashnet", "tiny", only_baseline)
    resumed = json.loads((project / "results" / "splashnet.json").read_text())["rows"]["baseline"]
    parent, children = finished_flow_runs(project, "splashnet")
    c = track.client()
    (seed_run,) = c.search_runs([parent.info.experiment_id],
                                filter_string=f"tags.mlflow.parentRunId = '{children[0].info.run_id}'")
    steps = [m.step for m in c.get_metric_history(seed_run.info.run_id, "train_ctc_loss")]
    assert steps == list(range(tiny["max_steps"]))  # the steps before the checkpoint came back with it
    assert resumed["train_steps"] == tiny["max_steps"]

    # features of other data parameters are refused, naming the folder, and the run above is kept
    with pytest.raises(ValueError, match="sessions: prepared with other data parameters"):
        run_method("splashnet", "tiny", [*only_baseline, "data.generator.users=4"])
    assert json.loads((project / "models" / "splashnet" / "run.json").read_text())["complete"]


def test_prep_flows_name_a_missing_session_folder(project, prefect_server, capsys):
    code = flows_cli(["run", "semg-sessions", "--profile", "tiny", "--set", "data.source=directory",
                      "--set", "data.directory=no/such/dir"])
    assert code == 2 and "no/such/dir: no such folder of emg2qwerty sessions" in capsys.readouterr().err
    assert flows_cli(["run", "semg-normalize", "--profile", "tiny"]) == 2
    assert "no session manifest" in capsys.readouterr().err
    assert flows_cli(["run", "semg-sessions", "--profile", "tiny", "--set", "window_samples=0"]) == 2
