"""The selection pipeline on a small embedded pool: costs are counted as the method defines them,
exact first-order influence prefers the samples that match the target, and with every pool sample
a landmark the propagated influence reproduces the exact one."""
from __future__ import annotations

import pytest
import torch

from paperline.data.tulu_pool import TuluPoolConfig, write_pool
from paperline.methods.influence_distillation import pipeline
from paperline.methods.influence_distillation.config import InfluenceDistillationConfig

SMALL = dict(llama={"hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "num_layers": 2}, max_length=96,
             warmup_samples=60, warmup_steps=15, batch_size=8, lr=3e-3, grad_proj_dim=512, select_k=30,
             num_landmarks=20)


@pytest.fixture(scope="module")
def pool_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tulu") / "tulu"
    write_pool(TuluPoolConfig(pool_size=120, target_size=4, eval_size=6, targets=["mmlu_like", "squad_like"]), out)
    return out


def test_costs_selections_and_comparison(pool_dir):
    torch.manual_seed(0)
    cfg = InfluenceDistillationConfig(**(SMALL | {"landmark_curve": [64, 16, 20, 500]}))
    prep = pipeline.prepare(cfg, pool_dir)
    optimizer, history = pipeline.warm_up(cfg, prep, None)
    assert len(history["train_loss"]) == 15 and history["train_loss"][-1] < history["train_loss"][0]
    out = pipeline.select_all(cfg, prep, optimizer)
    sel = out["selections"]
    targets = len(prep.targets)
    assert targets == 8
    assert sel["exact_first_order"]["gradient_evaluations"] == 120 + targets
    assert sel["influence_distillation"]["gradient_evaluations"] == 20 + targets
    assert sel["influence_distillation"]["forward_passes"] == 120 * cfg.jvp_tangents
    assert sel["random"]["gradient_evaluations"] == 0
    for method, s in sel.items():
        assert len(set(s["indices"])) == 30, method
    comparison = out["comparison"]
    assert comparison["cost_ratio_gradient_evaluations"] == pytest.approx(28 / 128)
    assert comparison["cost_ratio_wall_time"] > 0
    # exact influence finds the target-like sub-datasets far above their 1/5 share of the pool
    exact_share = pipeline.composition(prep.pool.datasets, prep.evals, sel["exact_first_order"]["indices"])
    random_share = pipeline.composition(prep.pool.datasets, prep.evals, sel["random"]["indices"])
    assert exact_share["share_mmlu_like"] + exact_share["share_squad_like"] > \
        random_share["share_mmlu_like"] + random_share["share_squad_like"] + 0.2
    assert comparison["id_vs_exact_spearman_of_target_mean"] > 0.3
    assert -1 <= comparison["plain_vs_adam_exact_spearman_mean_over_targets"] <= 1
    # per target set: the mean over its examples, so with sets of equal size their mean is the overall one
    by_target = out["propagation_by_target"]
    assert sorted(by_target) == ["mmlu_like", "squad_like"] and prep.target_names.count("mmlu_like") == 4
    for key in ("id_vs_exact", "rds_vs_exact"):
        assert sum(r[key] for r in by_target.values()) / 2 == pytest.approx(
            comparison[f"{key}_spearman_mean_over_targets"], abs=1e-12)
    # the landmark-count curve: counts below the pool, its point at the run's count is the run's own
    assert [r["num_landmarks"] for r in out["landmark_curve"]] == [16, 20, 64]  # sorted, below the pool size
    own = out["landmark_curve"][1]
    for key in ("spearman_of_target_mean", "spearman_mean_over_targets"):
        assert own[key] == pytest.approx(comparison[f"id_vs_exact_{key}"], abs=1e-3)


def test_with_every_sample_a_landmark_propagation_reproduces_the_exact_influence(pool_dir):
    torch.manual_seed(0)
    # damp far below K_LL's smallest eigenvalue (its condition number is ~4e7 on the normed JVPs)
    cfg = InfluenceDistillationConfig(**(SMALL | {"num_landmarks": 120, "kernel_damp": 1e-9,
                                                  "methods": ["exact_first_order", "influence_distillation"]}))
    prep = pipeline.prepare(cfg, pool_dir)
    optimizer, _ = pipeline.warm_up(cfg, prep, None)
    out = pipeline.select_all(cfg, prep, optimizer)
    exact, propagated = out["scores"]["exact_first_order"], out["scores"]["influence_distillation"]
    assert torch.allclose(propagated, exact, atol=1e-3 * float(exact.abs().max()))
    assert out["comparison"]["selection_overlap_id_exact"] == 1.0
