"""AltLoRA's linear runs in the run directory: a finished run is read back by a resumed task, not
retrained, and its curves are logged on the resumed run's MLflow runs as a trained one's are."""
from __future__ import annotations

import pytest

from paperline.methods.altlora.config import AltLoRAConfig
from tasks import track
from tasks.runners import ensure_gpu_limit


def test_a_finished_linear_run_is_read_back_and_logged_again(project, prefect_server, monkeypatch):
    from tasks import altlora

    cfg = AltLoRAConfig(optimizers=["lora_adamw"], seeds=[0], linear={
        "dim": 8, "singular_values": [1.0], "ranks": [2], "scales": [1.0], "steps": 4, "batch_size": 8,
        "eval_samples": 16, "log_every": 2, "lr_grid": {"lora_adamw": [1e-2, 3e-2]}})
    ensure_gpu_limit()

    def linear_runs(cfg):
        with track.parent_run("altlora", "tiny", {}, "generated") as parent:
            ctx = track.RunContext("altlora", "tiny", "generated", parent)
            with altlora.optimizer_runs(cfg, ctx) as runs:
                return altlora.linear_variant.fn(cfg, "lora_adamw", ctx, runs["lora_adamw"]), parent

    first, _ = linear_runs(cfg)
    records = sorted(p.name for p in (project / "models" / "altlora" / "linear" / "lora_adamw").glob("*.json"))
    assert records == ["r2_c1_lr0.01.json", "r2_c1_lr0.03.json"]

    def retrained(*args, **kwargs):
        raise AssertionError("retrained")

    monkeypatch.setattr(altlora, "train_linear", retrained)
    again, parent = linear_runs(cfg)
    assert again == first
    client = track.client()
    (seed0,) = [r for r in client.search_runs([parent.experiment_id])
                if r.data.tags.get("mlflow.parentRunId") == track.child_runs(parent)["lora_adamw"]]
    history = sorted(client.get_metric_history(seed0.info.run_id, "error/c1_lr0.01"), key=lambda m: m.step)
    assert [m.value for m in history] == pytest.approx(first[0]["history"]["error"])
    with pytest.raises(AssertionError, match="retrained"):  # a record of other settings is not read back
        linear_runs(cfg.model_copy(update={"settings": cfg.settings.model_copy(update={"reg": 1e-3})}))
