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


def test_a_seed_fine_tunes_the_stages_selections_and_draws_random_selection_again(pool_dir, tmp_path):
    """At the stage's seed every selection is the stage's file; at another seed random selection
    is drawn as the stage draws it (so drawing seed 0 again gives the stage's seed-0 file), its
    composition counted anew; the targeted selections stay the stage's."""
    import json

    from paperline.data.tulu_pool import load_pool_dir
    from paperline.methods.influence_distillation.baselines import random_selection

    pool, _, _ = load_pool_dir(pool_dir)
    stage_ids = [pool[i].id for i in random_selection(len(pool), 30, 0 + pipeline.RANDOM_DRAW)]  # the stage at seed 0
    (tmp_path / "random.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in stage_ids))
    (tmp_path / "rds_plus.jsonl").write_text(json.dumps({"id": pool[0].id}) + "\n")
    summary = {"selections": {"random": {"file": "random.jsonl", "wall_s": 1e-4, "share_squad_like": 0.5},
                              "rds_plus": {"file": "rds_plus.jsonl", "wall_s": 2.0}}}
    cfg = InfluenceDistillationConfig(**(SMALL | {"pool_dir": str(pool_dir), "seeds": [0, 1]}))
    ids, sel, path = pipeline.seed_selection(cfg, summary, tmp_path, "random", 0)
    assert ids == stage_ids and sel == summary["selections"]["random"] and path == tmp_path / "random.jsonl"
    assert pipeline.seed_selection(cfg, summary, tmp_path, "rds_plus", 1)[0] == [pool[0].id]
    other = cfg.model_copy(update={"seed": 7})  # seed 0 is now not the stage's: drawn, as the stage drew it
    assert pipeline.seed_selection(other, summary, tmp_path, "random", 0)[0] == stage_ids
    ids, sel, path = pipeline.seed_selection(cfg, summary, tmp_path, "random", 1)
    assert path is None and len(set(ids)) == 30 and ids != stage_ids
    assert sel["wall_s"] == 1e-4 and "file" not in sel
    chosen = [i for i, r in enumerate(pool) if r.id in set(ids)]
    assert sel["share_squad_like"] == pytest.approx(
        pipeline.composition([r.dataset for r in pool], ["mmlu_like", "squad_like"], chosen)["share_squad_like"])
    with pytest.raises(ValueError, match=r"seeds: \[1\] listed more than once"):
        InfluenceDistillationConfig(**(SMALL | {"seeds": [1, 1]}))
