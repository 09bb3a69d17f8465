"""The SplashNet flow end to end at the tiny profile: the data stages' outputs, a metrics row per
variant with zero-shot and fine-tuned CER, the paper parameter/FLOP table, an MLflow parent with
a child per variant, plots as MLflow artifacts and DVC files; and the prep CLI's errors."""
from __future__ import annotations

import json
import shutil

import yaml

from flows.launch import run_method
from tasks import track
from tests.conftest import CHECKOUT, finished_flow_runs


def _with_corpus(project):
    shutil.copytree(CHECKOUT / "data" / "raw" / "splashnet", project / "data" / "raw" / "splashnet")


def test_tiny_flow_writes_metrics_plots_and_mlflow_runs(project, prefect_server):
    _with_corpus(project)
    run_method("splashnet", "tiny")
    metrics = json.loads((project / "metrics" / "splashnet.json").read_text())
    tiny = yaml.safe_load((project / "params.yaml").read_text())["splashnet"]["profiles"]["tiny"]
    assert sorted(metrics["variants"]) == sorted(tiny["variants"])
    for name, row in metrics["variants"].items():
        for key in ("zero_shot_cer", "finetuned_cer", "params", "zero_shot_cer_vs_baseline", "zero_shot_ctc_loss",
                    "finetuned_ctc_loss", "final_train_ctc_loss"):
            assert isinstance(row[key], (int, float)), (name, key)
        assert row["zero_shot_cer"] >= 0 and row["train_steps"] == tiny["max_steps"]
    assert metrics["variants"]["splashnet_mini"]["params"] < metrics["variants"]["baseline"]["params"]
    paper = metrics["paper_models"]
    assert round(paper["splashnet_mini"]["params_vs_baseline"], 2) == 0.26
    assert 0.55 < paper["splashnet_mini"]["flops_vs_baseline"] < 0.65
    assert 1.05 < paper["splashnet"]["flops_vs_baseline"] < 1.2
    stats = metrics["feature_stats"]
    assert stats["rtn_cross_user_std_of_channel_means"] < stats["raw_cross_user_std_of_channel_means"]
    index = json.loads((project / "data" / "splashnet" / "features" / "index.json").read_text())
    assert len(index["sessions"]) == 6 and (project / "data" / "splashnet" / "sessions" / "manifest.json").exists()

    parent, children = finished_flow_runs(project, "splashnet")
    c = track.client()
    assert parent.data.tags["data_version"].startswith("sha256:")
    assert sorted(r.data.tags["variant"] for r in children) == sorted(tiny["variants"])
    assert all(r.info.status == "FINISHED" for r in children)
    child = children[0]
    assert len(c.get_metric_history(child.info.run_id, "train_ctc_loss")) == tiny["max_steps"]
    assert any(a.path.endswith("generic.pt") for a in c.list_artifacts(child.info.run_id, "checkpoints"))
    pngs = sorted(a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")
                  if a.path.endswith(".png"))
    assert pngs == sorted(p.name for p in (project / "plots" / "splashnet").glob("*.png"))
    assert {"cer_per_variant.png", "loss_curves.png", "channel_stats.png", "session_traces.png",
            "band_powers.png"} <= set(pngs)
    assert (project / "plots" / "splashnet" / "cer.csv").read_text().startswith("variant,")
    assert json.loads((project / "models" / "splashnet" / "run.json").read_text())["complete"]


def test_prep_cli_names_a_missing_session_folder(project, capsys):
    from tasks import semg_prep

    code = semg_prep.main(["sessions", "--profile", "tiny", "--set", "data.source=directory",
                           "--set", "data.directory=no/such/dir"])
    assert code == 1 and "no/such/dir: no such folder of emg2qwerty sessions" in capsys.readouterr().err
    assert semg_prep.main(["normalize", "--profile", "tiny"]) == 1
    assert "no session manifest" in capsys.readouterr().err
    assert semg_prep.main(["sessions", "--profile", "tiny", "--set", "window_samples=0"]) == 2
