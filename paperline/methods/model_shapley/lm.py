"""The same rankings on the shared causal LM (paperline.nn.causal_lm): its SwiGLU neurons, a
neuron k of a layer being row k of gate_proj and of up_proj (the rows the official NLP code scores;
zeroing either zeroes the neuron's output), ranked across all layers at once (Φ is in loss units,
so one global order is meaningful), pruned, and perplexity measured per pruned fraction. Heads (the
query rows of a head) and layers are aggregated from the same per-parameter φ."""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from paperline.methods.model_shapley import estimators


def lm_config(shape, vocab_size: int, block_size: int):
    """A CausalLMConfig (MHA) of an LMShapeConfig."""
    from paperline.nn.causal_lm import CausalLMConfig

    return CausalLMConfig(vocab_size=vocab_size, hidden_size=shape.hidden_size, num_layers=shape.num_layers,
                          attention="mha", num_heads=shape.num_heads, head_dim=shape.head_dim,
                          max_position_embeddings=block_size)


def neuron_blocks(model) -> dict[str, torch.nn.Linear]:
    """The linear layers scored: per layer its gate_proj and up_proj rows (neurons) and q_proj
    rows (heads)."""
    blocks = {}
    for i, layer in enumerate(model.layers):
        blocks[f"layers.{i}.mlp.gate_proj"] = layer.mlp.gate_proj
        blocks[f"layers.{i}.mlp.up_proj"] = layer.mlp.up_proj
        blocks[f"layers.{i}.attn.q_proj"] = layer.attn.q_proj
    return blocks


def lm_loss(model, x, y) -> torch.Tensor:
    return model(x, labels=y).loss


def lm_sampled_loss(model, x, generator: torch.Generator) -> torch.Tensor:
    """Next-token cross-entropy of tokens drawn from the model's own predictions (sampled Fisher)."""
    logits = model(x).logits
    with torch.no_grad():
        probs = F.softmax(logits.float().reshape(-1, logits.shape[-1]), -1)
        labels = torch.multinomial(probs, 1, generator=generator).view(x.shape)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


def unit_scores(attribution: estimators.Attribution, num_layers: int) -> dict[str, torch.Tensor]:
    """Per-neuron sums over all layers, concatenated in layer order: {score name: (layers·hidden,)}."""
    per_layer = []
    for i in range(num_layers):
        gate = attribution.scores(f"layers.{i}.mlp.gate_proj")
        up = attribution.scores(f"layers.{i}.mlp.up_proj")
        per_layer.append({k: estimators.unit_sums(gate[k]) + estimators.unit_sums(up[k]) for k in gate})
    return {k: torch.cat([layer[k] for layer in per_layer]) for k in per_layer[0]}


def head_and_layer_phi(attribution: estimators.Attribution, num_layers: int, head_dim: int) -> dict:
    """Φ of each attention head (its q_proj rows) and of each layer's MLP (all its neurons)."""
    out: dict[str, list[float] | float] = {}
    for i in range(num_layers):
        q = attribution.scores(f"layers.{i}.attn.q_proj")["phi"]
        out[f"layer{i}_heads_phi"] = estimators.unit_sums(q, head_dim).tolist()
        out[f"layer{i}_mlp_phi"] = float(sum(attribution.scores(f"layers.{i}.mlp.{p}")["phi"].sum()
                                             for p in ("gate_proj", "up_proj")))
    return out


@contextlib.contextmanager
def pruned(model, keep: torch.Tensor):
    """The model with the neurons where `keep` (layers·hidden,) is False zeroed (gate and up rows),
    restored on exit."""
    hidden = model.config.intermediate_size
    if keep.shape != (len(model.layers) * hidden,):
        raise ValueError(f"keep mask of shape {tuple(keep.shape)}: expected ({len(model.layers) * hidden},)")
    saved = []
    with torch.no_grad():
        for i, layer in enumerate(model.layers):
            drop = ~keep[i * hidden:(i + 1) * hidden]
            for proj in (layer.mlp.gate_proj, layer.mlp.up_proj):
                saved.append((proj.weight, proj.weight[drop].clone(), drop))
                proj.weight[drop] = 0
    try:
        yield model
    finally:
        with torch.no_grad():
            for weight, rows, drop in saved:
                weight[drop] = rows


def pruning_curve(model, windows, importance: torch.Tensor, fractions: list[float], batch_size: int, device) -> dict:
    """Validation perplexity with the least important fraction of neurons removed."""
    from paperline.methods.model_shapley.ranking import keep_masks
    from paperline.train.lm import evaluate

    losses = []
    for keep in keep_masks(importance, fractions):
        with pruned(model, keep):
            losses.append(evaluate(model, windows, batch_size, device))
    return {"fraction": list(fractions), "loss": losses, "perplexity": [math.exp(x) for x in losses]}
