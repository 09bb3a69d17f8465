"""HRM-PET's models and training pieces, exactly where the maths is exact: a task's LoRA (peft)
equals the backbone with W + (α/r)·BA merged into every qkv, no adapter equals the frozen backbone,
routing runs each sample through its task's LoRA, HiDe's momentum initialization, the Gaussian
replay statistics and sampling, CTIRD's relation matrices, its top-K rules and the fixed batch
order of its two passes; and a killed learner resumes to the same records."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from paperline.methods.hrm_pet.config import HrmPetConfig, SequenceConfig
from paperline.methods.hrm_pet.data import build_sequence
from paperline.methods.hrm_pet.model import ClassStats, LoraViT, adapter_name
from paperline.methods.hrm_pet.train import batches, ctird_loss, old_tasks, relation, run_learner
from paperline.nn.vit import ViT


def _model(tasks: int = 3) -> tuple[ViT, LoraViT]:
    torch.manual_seed(0)
    backbone = ViT(dim=16, depth=2, heads=2, num_classes=4)
    model = LoraViT(backbone, tasks, num_classes=6, rank=3, alpha=6.0)
    for layer in model.lora_layers:
        for t in range(tasks):
            torch.nn.init.normal_(layer.lora_B[adapter_name(t)].weight, std=0.3)
    return backbone, model


def test_lora_equals_the_merged_weight_and_no_adapter_the_backbone():
    backbone, model = _model()
    x = torch.rand(5, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(model.features(x, None), backbone.features(x), rtol=0, atol=0)
        merged = copy.deepcopy(backbone)
        for block, layer in zip(merged.blocks, model.lora_layers):
            a, b = layer.lora_A["task1"].weight, layer.lora_B["task1"].weight
            block.attn.qkv.weight += (6.0 / 3) * b @ a
        torch.testing.assert_close(model.features(x, 1), merged.features(x), rtol=1e-5, atol=1e-5)
        assert not torch.allclose(model.features(x, 1), model.features(x, 0))
        model.use(1)
        for layer in model.lora_layers:  # peft's own merge gives the same function
            layer.merge(adapter_names=["task1"])
        assert all(layer.merged for layer in model.lora_layers)
        torch.testing.assert_close(model.vit.features(x), merged.features(x), rtol=1e-5, atol=1e-5)


def test_routing_runs_each_sample_through_its_task():
    _, model = _model()
    x, tasks = torch.rand(6, 8, 8), torch.tensor([2, 0, 1, 2, 0, 1])
    with torch.no_grad():
        routed = model.routed_features(x, tasks)
        for i, t in enumerate(tasks.tolist()):
            torch.testing.assert_close(routed[i], model.features(x[i:i + 1], t)[0], rtol=1e-5, atol=1e-6)


def test_train_only_and_momentum_init():
    _, model = _model()
    params = model.train_only(1)
    assert {id(p) for p in params} == {id(p) for p in model.parameters() if p.requires_grad}
    assert len(params) == 2 * 2 * 1 + 2  # A and B in two blocks, the head's weight and bias
    old = [[layer.lora_A[adapter_name(s)].weight.clone() for s in range(2)] for layer in model.lora_layers]
    fresh = [layer.lora_A["task2"].weight.clone() for layer in model.lora_layers]
    model.momentum_init(2, 0.4)
    for layer, (a0, a1), f in zip(model.lora_layers, old, fresh):
        torch.testing.assert_close(layer.lora_A["task2"].weight, 0.4 * (a0 + a1) / 2 + 0.6 * f)


def test_gaussian_class_statistics_and_sampling():
    rng = np.random.default_rng(0)
    f = torch.as_tensor(rng.normal(size=(40, 3)), dtype=torch.float32)
    y = torch.tensor([0] * 25 + [4] * 15)
    stats = ClassStats(3, eps=1e-3)
    stats.add(f, y)
    for c in (0, 4):
        fc = f[y == c].double().numpy()
        np.testing.assert_allclose(stats.mean[c].numpy(), fc.mean(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(stats.cov[c].numpy(), np.cov(fc.T) + 1e-3 * np.eye(3), rtol=1e-5, atol=1e-6)
    x, labels = stats.sample(7, torch.Generator().manual_seed(5))
    z = torch.randn(7, 3, generator=torch.Generator().manual_seed(5))  # the first class's draws
    torch.testing.assert_close(x[:7], stats.mean[0] + z @ torch.linalg.cholesky(stats.cov[0]).T)
    assert labels.tolist() == [0] * 7 + [4] * 7
    big, _ = stats.sample(20000, torch.Generator().manual_seed(1))
    np.testing.assert_allclose(np.cov(big[:20000].numpy().T), stats.cov[0].numpy(), atol=0.05)


def test_relation_and_ctird_loss():
    torch.manual_seed(0)
    e = torch.randn(6, 4)
    w = relation(e, 1.0)
    torch.testing.assert_close(w.sum(1), torch.ones(6))
    cos = torch.nn.functional.normalize(e, dim=1) @ torch.nn.functional.normalize(e, dim=1).T
    torch.testing.assert_close(w[2], cos[2].softmax(0))
    same = w.unsqueeze(1).expand(6, 2, 6)
    assert ctird_loss(e, same, 1.0).item() == pytest.approx(0.0, abs=1e-6)
    other = relation(torch.randn(6, 4), 1.0).unsqueeze(1)
    kl = (other[:, 0] * (other[:, 0].log() - w.log())).sum(1).mean()
    assert ctird_loss(e, other, 1.0).item() == pytest.approx(kl.item(), rel=1e-5)


def test_ctird_top_k_rules():
    class_task = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    # sample 0: task 1 most likely (0.5 + 0.1 of its classes), then task 0; class 1 least likely, then 4
    logits = torch.tensor([[2.0, -3.0, 3.0, 1.0, -2.0, 0.5, 9.0, 9.0]])
    assert old_tasks(logits, class_task, 3, 2, "paper").tolist() == [[1, 0]]
    assert old_tasks(logits, class_task, 3, 2, "code").tolist() == [[0, 2]]  # least likely classes 1, 4
    assert old_tasks(logits, class_task, 3, 5, "paper").shape == (1, 3)  # min(t, K)
    dup = torch.tensor([[-3.0, -2.0, 3.0, 1.0, 2.0, 0.5, 9.0, 9.0]])
    assert old_tasks(dup, class_task, 3, 2, "code").tolist() == [[0, 0]]  # duplicates possible


def test_ctird_batches_are_one_fixed_order():
    a = batches(10, 4, torch.Generator().manual_seed(3))
    b = batches(10, 4, torch.Generator().manual_seed(3))
    assert [x.tolist() for x in a] == [x.tolist() for x in b] and [len(x) for x in a] == [4, 4, 2]
    assert sorted(torch.cat(a).tolist()) == list(range(10))


def _tiny_run(tmp_path, stop_after: int | None = None):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, size=(120, 8, 8)).astype(np.float32)
    y = np.repeat(np.arange(4), 30)
    x[np.arange(120), y, y] = 1.0  # a learnable mark per class
    seq_cfg = SequenceConfig(name="toy", source="digits", tasks=2)
    cfg = HrmPetConfig(sequences=[seq_cfg], tii={"epochs": 2, "align_epochs": 1},
                       lora={"epochs": 2, "batch_size": 16, "lr": 0.01, "align_epochs": 1}, samples_per_class=8)
    seq = build_sequence(x, y, seq_cfg, 8, seed=0)
    torch.manual_seed(1)
    backbone = ViT(dim=16, depth=1, heads=2, num_classes=4)

    def stop(t, state):
        if stop_after is not None and t == stop_after:
            raise KeyboardInterrupt

    return run_learner(cfg, "ctird", seq, backbone, 0, checkpoint=tmp_path / "ctird.pt", fingerprint="f", on_task=stop)


def test_a_killed_learner_resumes_to_the_same_records(tmp_path):
    full = _tiny_run(tmp_path / "a")
    with pytest.raises(KeyboardInterrupt):
        _tiny_run(tmp_path / "b", stop_after=0)
    resumed = _tiny_run(tmp_path / "b")
    assert resumed["evaluations"] == full["evaluations"]
    assert len(full["evaluations"]["hrm_pet"]) == 2 and set(full["evaluations"]) >= {"ctird", "hrm_pet"}
    assert [h["lora_loss"] for h in resumed["history"]] == [h["lora_loss"] for h in full["history"]]
