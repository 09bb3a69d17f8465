"""The rankings on the shared causal LM: per-sequence gradients of the SwiGLU and query blocks from
one backward equal autograd's, a pruned neuron is a zeroed output (weights restored after), neuron,
head and layer sums, and the margins and mean rows computed from per-seed tables."""
from __future__ import annotations

import pytest
import torch

from paperline.methods.model_shapley import estimators as E
from paperline.methods.model_shapley import lm
from paperline.methods.model_shapley.summary import margins, mean_table
from paperline.nn.causal_lm import CausalLM


@pytest.fixture(scope="module")
def model():
    shape = type("Shape", (), {"hidden_size": 8, "num_layers": 2, "num_heads": 2, "head_dim": 4})
    return CausalLM.seeded(lm.lm_config(shape, 20, 6), torch.Generator().manual_seed(0)).double()


def windows(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(20, (3, 6), generator=g)
    return x, torch.randint(20, (3, 6), generator=g)


def test_per_sequence_gradients_from_one_backward(model):
    x, y = windows()
    blocks = lm.neuron_blocks(model)
    capture = E.LinearGradCapture(blocks)
    lm.lm_loss(model, x, y).backward()
    got = {name: capture.per_example(name, len(x)) for name in blocks}
    capture.close()
    model.zero_grad()
    for n in range(len(x)):  # the loss of sequence n alone is its mean token loss (in float32: CausalLM's)
        grads = torch.autograd.grad(lm.lm_loss(model, x[n:n + 1], y[n:n + 1]), [b.weight for b in blocks.values()])
        for name, g in zip(blocks, grads):
            assert torch.allclose(got[name][n], g, rtol=1e-5, atol=1e-9), name


def test_pruned_neurons_output_nothing_and_weights_come_back(model):
    x, _ = windows(1)
    hidden = model.config.intermediate_size
    keep = torch.ones(2 * hidden, dtype=torch.bool)
    keep[[0, 3, hidden + 1]] = False
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad(), lm.pruned(model, keep):
        logits = model(x).logits
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    # the same model with those neurons' down_proj columns zeroed instead
    other = CausalLM(model.config).double()
    other.load_state_dict(before)
    with torch.no_grad():
        other.layers[0].mlp.down_proj.weight[:, [0, 3]] = 0
        other.layers[1].mlp.down_proj.weight[:, [1]] = 0
        assert torch.allclose(other(x).logits, logits, atol=1e-12)
    with pytest.raises(ValueError, match=rf"keep mask of shape \(5,\): expected \({2 * hidden},\)"):
        with lm.pruned(model, torch.ones(5, dtype=torch.bool)):
            pass


def test_neuron_head_and_layer_sums(model):
    attribution = E.attribute(model, lm.neuron_blocks(model), [windows(2), windows(3)], lm.lm_loss, None,
                              lm.lm_sampled_loss)
    units = lm.unit_scores(attribution, 2)
    hidden = model.config.intermediate_size
    gate, up = attribution.scores("layers.1.mlp.gate_proj")["phi"], attribution.scores("layers.1.mlp.up_proj")["phi"]
    assert units["phi"].shape == (2 * hidden,)
    assert torch.allclose(units["phi"][hidden:], gate.sum(1) + up.sum(1), atol=1e-15)
    agg = lm.head_and_layer_phi(attribution, 2, 4)
    q = attribution.scores("layers.0.attn.q_proj")["phi"]
    assert agg["layer0_heads_phi"] == pytest.approx([float(q[:4].sum()), float(q[4:].sum())], abs=1e-15)
    assert agg["layer1_mlp_phi"] == pytest.approx(float(units["phi"][hidden:].sum()), abs=1e-12)


def test_margins_over_the_best_baseline_and_rows_averaged_over_seeds():
    def row(spearman, prune, tune, lm_auc, at50=0.5):
        return {"spearman_vs_shapley": spearman, "prune_accuracy_auc": prune, "finetune_shift_accuracy": tune,
                "lm_prune_loss_auc": lm_auc, "prune_accuracy_at_50pct": at50}
    table = {"magnitude": row(0.3, 0.6, 0.5, 4.2), "obd": row(0.5, 0.7, 0.55, 4.1),
             "model_shapley": row(0.6, 0.65, 0.6, 4.0), "paper_sign": row(0.9, 0.9, 0.9, 3.0),
             "random": row(0.0, 0.5, 0.52, 4.5)}
    got = margins(table)
    assert got["model_shapley_margin_spearman_vs_shapley"] == pytest.approx(0.1)  # paper_sign is no baseline
    assert got["best_baseline_prune_accuracy_auc"] == "obd"
    assert got["model_shapley_margin_prune_accuracy_auc"] == pytest.approx(-0.05)
    assert got["model_shapley_margin_lm_prune_loss_auc"] == pytest.approx(0.1)  # lower is better
    assert not any("best_" in k and isinstance(v, bool) for k, v in got.items())  # verdicts are claims
    assert margins({"obd": table["obd"]}) == {}
    other = {v: r | {"spearman_vs_shapley": r["spearman_vs_shapley"] + 0.2, "prune_accuracy_at_50pct": None}
             for v, r in table.items()}
    mean = mean_table({0: table, 1: other})
    assert mean["obd"]["spearman_vs_shapley"] == pytest.approx(0.6)
    assert mean["obd"]["spearman_vs_shapley_std"] == pytest.approx(0.2 / 2 ** 0.5)  # sample std of 0.5, 0.7
    assert mean["obd"]["prune_accuracy_at_50pct"] == 0.5  # a seed without the figure does not count
