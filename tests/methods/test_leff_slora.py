"""SLoRA (Babakniya et al. 2023), LEFF's second-best baseline, exactly: the fixed sparse support of
its first stage, what a client sends of it and how the server rebuilds it, the masked local step,
and the second stage's LoRA start from the truncated SVD of the first stage's update."""
from __future__ import annotations

import pytest
import torch

from paperline.methods.leff.data import Windows
from paperline.methods.leff.fed import local_train
from paperline.methods.leff.leff import (
    add_lora,
    aggregate,
    build_model,
    classify,
    lora_from_update,
    lora_target_keys,
    pack_sparse,
    sparse_masks,
    trainable_keys,
    unpack_sparse,
)
from tests.methods.test_leff_math import batch, tiny_lm


def test_the_sparse_support_is_a_seeded_share_of_each_lora_target_weight():
    model = build_model("slora", tiny_lm(), 2, 4.0, classes=3)
    masks = sparse_masks(model, 0.1, seed=0)
    assert sorted(masks) == sorted(lora_target_keys(model.state_dict()))
    assert len(masks) == 4 * 4 and all(k.split(".")[-2] in ("q_proj", "k_proj", "v_proj", "o_proj") for k in masks)
    state = model.state_dict()
    for key, mask in masks.items():
        assert mask.shape == state[key].shape and mask.dtype == torch.bool
        assert int(mask.sum()) == -(-state[key].numel() // 10)  # ⌈0.1 · numel⌉
    again, other = sparse_masks(model, 0.1, seed=0), sparse_masks(model, 0.1, seed=1)
    assert all(torch.equal(masks[k], again[k]) for k in masks)  # the server's and every client's
    assert not all(torch.equal(masks[k], other[k]) for k in masks)


def test_a_client_sends_its_masked_entries_and_the_server_rebuilds_its_update():
    model = build_model("slora", tiny_lm(), 2, 4.0, classes=3)
    masks = sparse_masks(model, 0.25, seed=0)
    global_state = {k: v.clone() for k, v in model.state_dict().items()}
    trained = {k: v + 1.0 for k, v in global_state.items()}
    sent = pack_sparse(trained, masks)
    assert all(v.dim() == 1 and v.numel() == int(masks[k].sum()) for k, v in sent.items())
    rebuilt = unpack_sparse(global_state, sent | {"classifier.1.bias": trained["classifier.1.bias"]}, masks)
    for key, mask in masks.items():
        assert torch.equal(rebuilt[key][mask], trained[key][mask])
        assert torch.equal(rebuilt[key][~mask], global_state[key][~mask])  # what the client did not train
    assert torch.equal(rebuilt["classifier.1.bias"], trained["classifier.1.bias"])


def test_the_masked_local_step_moves_the_masked_entries_only():
    x, _ = batch(n=6, T=8)
    shard = Windows(x, torch.tensor([0, 1, 2, 0, 1, 2]))
    model = build_model("slora", tiny_lm(), 2, 4.0, classes=3)
    masks = sparse_masks(model, 0.1, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    keys = list(masks) + trainable_keys("slora", [n for n, _ in model.named_parameters()])
    metrics = local_train(model, keys, shard, [torch.arange(6)] * 3, lr=1e-2, head_lr=1e-2, grad_masks=masks)
    after = model.state_dict()
    for key, mask in masks.items():
        assert torch.equal(after[key][~mask], before[key][~mask])
        assert not torch.equal(after[key][mask], before[key][mask])
    assert torch.equal(after["layers.0.mlp.up_proj.weight"], before["layers.0.mlp.up_proj.weight"])
    head = sum(p.numel() for n, p in model.named_parameters() if n.startswith("classifier."))
    assert metrics["trained_params"] == sum(int(m.sum()) for m in masks.values()) + head
    assert all(p._backward_hooks is None or not p._backward_hooks for p in model.parameters())  # hooks removed


def test_the_second_stage_starts_from_the_rank_r_truncation_of_the_sparse_update():
    x, _ = batch()
    pretrained = build_model("slora", tiny_lm(), 2, 4.0, classes=3)
    start = {k: v.clone() for k, v in pretrained.state_dict().items() if k in lora_target_keys(pretrained.state_dict())}
    g = torch.Generator().manual_seed(1)
    # an update of rank 2 per weight: a rank-2 LoRA start reproduces the updated model exactly
    low = build_model("slora", tiny_lm(), 2, 4.0, classes=3)
    with torch.no_grad():
        for key in start:
            w = dict(low.named_parameters())[key]
            w += 0.1 * torch.randn(w.shape[0], 2, generator=g) @ torch.randn(2, w.shape[1], generator=g)
    updated = {k: v.clone() for k, v in low.state_dict().items()}
    reference = classify(low, x).detach()
    lora, kept = lora_from_update(low, start, 2, 4.0, seed=0)
    assert kept == pytest.approx(1.0)
    assert torch.allclose(classify(lora, x), reference, atol=1e-5)
    state = lora.state_dict()
    for key in start:  # the base weights are the pretrained ones again; the adapters carry the update
        assert torch.equal(state[key.replace(".weight", ".base_layer.weight")], start[key])
    assert sorted(k for k in trainable_keys("slora", state) if ".lora_" in k) == \
        sorted(trainable_keys("fedlora", [n for n, _ in add_lora(tiny_lm(), 2, 4.0).named_parameters()]))
    # a full-rank update: B A is its best rank-1 approximation, and the kept share is S_1² / Σ S²
    full = build_model("slora", tiny_lm(), 2, 4.0, classes=3)
    with torch.no_grad():
        for key in start:
            dict(full.named_parameters())[key].add_(torch.randn(start[key].shape, generator=g))
    deltas = {k: full.state_dict()[k] - start[k] for k in start}
    lora, kept = lora_from_update(full, start, 1, 4.0, seed=0)
    energy = [torch.linalg.svdvals(d.double()) ** 2 for d in deltas.values()]
    assert kept == pytest.approx(float(sum(e[0] for e in energy) / sum(e.sum() for e in energy)))
    layer = lora.layers[0].attn.q_proj
    product = layer.scaling["default"] * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    u, s, vh = torch.linalg.svd(deltas["layers.0.attn.q_proj.weight"])
    assert torch.allclose(product, s[0] * torch.outer(u[:, 0], vh[0]), atol=1e-5)
    assert not torch.equal(updated["layers.0.attn.q_proj.weight"], start["layers.0.attn.q_proj.weight"])


def test_the_sparse_stage_averages_the_masked_entries_as_sent_and_keeps_the_rest_exactly():
    model = build_model("slora", tiny_lm(), 2, 4.0, classes=3)
    masks = sparse_masks(model, 0.25, seed=0)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(2)
    clients = [{k: v + torch.randn(v.shape, generator=g) for k, v in state.items()} for _ in range(2)]
    updates = [(1.0, pack_sparse(clients[0], masks)), (3.0, pack_sparse(clients[1], masks))]
    merged = aggregate(state, updates, masks)
    for key, mask in masks.items():
        assert torch.allclose(merged[key][mask], (clients[0][key][mask] + 3 * clients[1][key][mask]) / 4)
        assert torch.equal(merged[key][~mask], state[key][~mask])  # not re-averaged: bit for bit
    assert torch.equal(merged["layers.0.mlp.up_proj.weight"], state["layers.0.mlp.up_proj.weight"])  # nobody sent it
