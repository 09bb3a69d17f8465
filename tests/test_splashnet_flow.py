"""The SplashNet flow end to end at the tiny profile: the data stages' outputs, a metrics row per
variant with zero-shot and fine-tuned CER (greedy and beam search with the character LM), the
paper parameter/FLOP table, an MLflow parent with a child per variant, plots as MLflow artifacts
and DVC files; a run that died mid-training resumes from its Lightning checkpoint; features of
other data parameters are refused; and the prep flows' errors."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml

from flows.__main__ import main as flows_cli
from flows.launch import run_method
from paperline.methods.splashnet import pipeline
from tasks import track
from tests.conftest import finished_flow_runs


def _prepare(*overrides: str) -> None:
    sets = [a for o in overrides for a in ("--set", o)]
    assert flows_cli(["run", "semg-sessions", "--profile", "tiny", *sets]) == 0
    assert flows_cli(["run", "semg-normalize", "--profile", "tiny", *sets]) == 0


def test_tiny_flow_writes_metrics_plots_and_mlflow_runs(project, prefect_server):
    with pytest.raises(FileNotFoundError, match="manifest.json: not prepared; run the semg stages"):
        run_method("splashnet", "tiny")
    _prepare()
    run_method("splashnet", "tiny")
    metrics = json.loads((project / "metrics" / "splashnet.json").read_text())
    tiny = yaml.safe_load((project / "params.yaml").read_text())["splashnet"]["profiles"]["tiny"]
    assert sorted(metrics["variants"]) == sorted(tiny["variants"])
    for name, row in metrics["variants"].items():
        for key in ("zero_shot_cer", "finetuned_cer", "params", "zero_shot_cer_vs_baseline", "zero_shot_ctc_loss",
                    "finetuned_ctc_loss", "final_train_ctc_loss", "zero_shot_beam_cer", "finetuned_beam_cer"):
            assert isinstance(row[key], (int, float)), (name, key)
        assert row["zero_shot_cer"] >= 0 and row["train_steps"] == tiny["max_steps"]
    assert metrics["variants"]["splashnet_mini"]["params"] < metrics["variants"]["baseline"]["params"]
    assert metrics["decoders"] == ["greedy", "beam_char_lm"]
    for name, row in metrics["variants"].items():  # validated on the validation user's sessions
        assert isinstance(row["best_val_cer"], float) and row["best_val_cer"] >= 0, name
    lm = json.loads((project / "models" / "splashnet" / "char_lm.json").read_text())  # counted on the checkout's
    assert lm["order"] == tiny.get("beam_search", {}).get("lm_order", 4) and lm["counts"]  # Shakespeare slice
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
    assert [m.step for m in c.get_metric_history(child.info.run_id, "val_cer")] == [tiny["val_every"]]
    assert (project / "models" / "splashnet" / child.data.tags["variant"] / "lightning_generic" / "best.ckpt").is_file()
    pngs = sorted(a.path.rsplit("/", 1)[-1] for a in c.list_artifacts(parent.info.run_id, "plots")
                  if a.path.endswith(".png"))
    assert pngs == sorted(p.name for p in (project / "plots" / "splashnet").glob("*.png"))
    assert {"cer_per_variant.png", "loss_curves.png", "channel_stats.png", "session_traces.png",
            "band_powers.png"} <= set(pngs)
    assert (project / "plots" / "splashnet" / "cer.csv").read_text().startswith("variant,")
    assert json.loads((project / "models" / "splashnet" / "run.json").read_text())["complete"]

    # dies after the generic model's first checkpoint (step 2 of 3), then runs again
    shutil.rmtree(project / "models" / "splashnet")
    real_fit = pipeline._fit

    def dies_after_a_checkpoint(module, dataset, cfg, max_steps, device, ckpt_dir, *rest):
        if ckpt_dir.name == "lightning_generic" and ckpt_dir.parent.name == "baseline":
            real_fit(module, dataset, cfg, cfg.checkpoint_every, device, ckpt_dir, *rest)
            raise RuntimeError("died mid-training")
        real_fit(module, dataset, cfg, max_steps, device, ckpt_dir, *rest)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "_fit", dies_after_a_checkpoint)
        with pytest.raises(RuntimeError, match="died mid-training"):
            run_method("splashnet", "tiny")
    assert (project / "models" / "splashnet" / "baseline" / "lightning_generic" / "last.ckpt").is_file()
    run_method("splashnet", "tiny")
    resumed = json.loads((project / "metrics" / "splashnet.json").read_text())["variants"]["baseline"]
    parent, children = finished_flow_runs(project, "splashnet")
    baseline = next(r for r in children if r.data.tags["variant"] == "baseline")
    steps = [m.step for m in c.get_metric_history(baseline.info.run_id, "train_ctc_loss")]
    assert steps == list(range(tiny["max_steps"]))  # the steps before the checkpoint came back with it
    assert resumed["train_steps"] == tiny["max_steps"]

    # features of other data parameters are refused, naming the folder
    with pytest.raises(ValueError, match="sessions: prepared with other data parameters"):
        run_method("splashnet", "tiny", ["data.generator.users=4"])


def test_prep_flows_name_a_missing_session_folder(project, prefect_server, capsys):
    code = flows_cli(["run", "semg-sessions", "--profile", "tiny", "--set", "data.source=directory",
                      "--set", "data.directory=no/such/dir"])
    assert code == 1 and "no/such/dir: no such folder of emg2qwerty sessions" in capsys.readouterr().err
    assert flows_cli(["run", "semg-normalize", "--profile", "tiny"]) == 1
    assert "no session manifest" in capsys.readouterr().err
    assert flows_cli(["run", "semg-sessions", "--profile", "tiny", "--set", "window_samples=0"]) == 2
