"""HRM-PET's models and training pieces, exactly where the maths is exact: a task's LoRA (peft)
equals the backbone with W + (α/r)·BA merged into every qkv, no adapter equals the frozen backbone,
routing runs each sample through its task's LoRA, the official LoRA placement (k and v of the
first blocks), momentum (a copy of t − 1, mixed after training), Stage 2's gradient clip and TAP
schedule, the Gaussian
replay statistics and sampling, CTIRD's relation matrices, its top-K rules and the fixed batch
order of its two passes; and a killed learner resumes to the same records."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from paperline.methods.hrm_pet import train
from paperline.methods.hrm_pet.config import HrmPetConfig, SequenceConfig
from paperline.methods.hrm_pet.data import build_sequence
from paperline.methods.hrm_pet.model import ClassStats, LoraViT, adapter_name
from paperline.methods.hrm_pet.train import (
    _fit,
    ctird_loss,
    old_tasks,
    relation,
    relation_targets,
    run_learner,
    tap,
)
from paperline.nn.vit import ViT
from paperline.train.classifier import epoch_batches


def _model(tasks: int = 3) -> tuple[ViT, LoraViT]:
    torch.manual_seed(0)
    backbone = ViT(dim=16, depth=2, heads=2, num_classes=4)
    model = LoraViT(backbone, tasks, num_classes=6, rank=3, alpha=6.0, targets="qkv", depth=None)
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


def test_train_only_and_momentum_mix():
    _, model = _model()
    params = model.train_only(1)
    assert {id(p) for p in params} == {id(p) for p in model.parameters() if p.requires_grad}
    assert len(params) == 2 * 2 * 1 + 2  # A and B in two blocks, the head's weight and bias
    old = [[layer.lora_A[adapter_name(s)].weight.clone() for s in range(2)] for layer in model.lora_layers]
    fresh = [layer.lora_A["task2"].weight.clone() for layer in model.lora_layers]
    model.mix_with_old(2, 0.4)
    for layer, (a0, a1), f in zip(model.lora_layers, old, fresh):
        torch.testing.assert_close(layer.lora_A["task2"].weight, 0.4 * (a0 + a1) / 2 + 0.6 * f)


def test_official_placement_k_and_v_of_the_first_blocks():
    """targets kv, depth 2 of 3 blocks: LoRA only in blocks 0 and 1; after a training step the delta
    of qkv is (α/r)·[0; B_k A_k; B_v A_v], k and v each with their own rank-r factors (the code's
    `HideLoraPool.cal_delta_w`), q untouched. (The old default, q, k, v in every block, fails each.)"""
    from peft.tuners.lora import LoraLayer

    torch.manual_seed(0)
    dim, r = 8, 2
    backbone = ViT(dim=dim, depth=3, heads=2, num_classes=4)
    model = LoraViT(backbone, 2, num_classes=4, rank=r, alpha=4.0, targets="kv", depth=2)
    assert [isinstance(b.attn.qkv, LoraLayer) for b in model.vit.blocks] == [True, True, False]
    params = model.train_only(0)
    x = torch.rand(3, 8, 8)
    model.features(x, 0).pow(2).sum().backward()
    torch.optim.Adam(params, lr=0.1).step()
    merged = copy.deepcopy(backbone)
    with torch.no_grad():
        for block, layer in zip(merged.blocks, model.lora_layers):
            a, b = layer.lora_A["task0"].weight, layer.lora_B["task0"].weight  # (2r, d), (3d, 2r)
            assert b[:dim].abs().max() == 0 and b[dim:2 * dim, r:].abs().max() == 0 and b[2 * dim:, :r].abs().max() == 0
            assert b[dim:2 * dim, :r].abs().min() > 0 and b[2 * dim:, r:].abs().min() > 0
            delta = torch.cat([torch.zeros(dim, dim), b[dim:2 * dim, :r] @ a[:r], b[2 * dim:, r:] @ a[r:]])
            block.attn.qkv.weight += (4.0 / r) * delta
        torch.testing.assert_close(model.features(x, 0), merged.features(x), rtol=1e-5, atol=1e-5)


def test_momentum_after_training_mixes_a_copy_of_the_previous_task():
    """The code's timing: task 2 starts as task 1's LoRA; after training it becomes
    0.6·trained + 0.4·mean(LoRA_0, LoRA_1)."""
    _, model = _model()
    a = [[layer.lora_A[adapter_name(s)].weight.clone() for s in range(2)] for layer in model.lora_layers]
    model.copy_adapter(1, 2)
    for layer, (_, a1) in zip(model.lora_layers, a):
        torch.testing.assert_close(layer.lora_A["task2"].weight, a1, rtol=0, atol=0)
        with torch.no_grad():
            layer.lora_A["task2"].weight.add_(1.0)  # stands in for training
    model.mix_with_old(2, 0.4)
    for layer, (a0, a1) in zip(model.lora_layers, a):
        torch.testing.assert_close(layer.lora_A["task2"].weight, 0.6 * (a1 + 1.0) + 0.4 * (a0 + a1) / 2)


def test_gradient_clip_by_hand():
    """grad (3, 4) of norm 5 clipped at 2 -> (1.2, 1.6): one SGD step (lr 1) from 0 lands at −(1.2, 1.6)."""
    for clip, expected in ((2.0, [-1.2, -1.6]), (None, [-3.0, -4.0])):
        p = torch.nn.Parameter(torch.zeros(2))
        _fit([p], lambda e: [()], lambda i: 3 * p[0] + 4 * p[1], 1, 1.0, cosine=False, clip=clip, optimizer="sgd")
        torch.testing.assert_close(p.detach(), torch.tensor(expected))


def test_tap_schedule_of_the_code():
    """sgd (the code's): no TAP on the first task; then `old` mini-batches of 5·batch an epoch."""
    stats = ClassStats(3, eps=1e-3)
    stats.add(torch.randn(40, 3, generator=torch.Generator().manual_seed(0)), torch.arange(4).repeat(10))
    cfg = HrmPetConfig(sequences=[SequenceConfig(name="toy", source="digits")], samples_per_class=6,
                       lora={"batch_size": 2, "align_epochs": 2})
    head = torch.nn.Linear(3, 4)
    rows: list[int] = []
    head.register_forward_hook(lambda m, i, o: rows.append(len(i[0])))
    gen = torch.Generator().manual_seed(1)
    tap(head, stats, 2, 0, cfg, gen)
    assert rows == []
    tap(head, stats, 4, 2, cfg, gen)
    assert rows == [10, 10] * 2  # 2 epochs of crct_num = 2 batches of 5·2 (of 4·10 samples)
    rows.clear()
    tap(head, stats, 4, 0, cfg.model_copy(update={"lora": cfg.lora.model_copy(update={"tap_optimizer": "adam"})}), gen)
    assert rows == [8, 8, 8] * 2  # the adam option: every task, 4·6 samples in batches of 4·2


def test_stage_two_runs_copy_train_then_mix_with_the_clip(tmp_path, monkeypatch):
    """run_learner's order on the second task: copy t − 1, train (clip 2.0), then mix; no mix before."""
    events: list = []
    monkeypatch.setattr(LoraViT, "copy_adapter", lambda self, s, t: events.append(("copy", s, t)))
    monkeypatch.setattr(LoraViT, "mix_with_old", lambda self, t, m: events.append(("mix", t, m)))
    real_fit = train._fit

    def fit(*args, clip=None, **kw):
        if kw.get("cosine") and clip is not None:
            events.append(("train", clip))
        return real_fit(*args, clip=clip, **kw)

    monkeypatch.setattr(train, "_fit", fit)
    _tiny_run(tmp_path)
    assert events == [("train", 2.0), ("mix", 0, 0.1), ("copy", 0, 1), ("train", 2.0), ("mix", 1, 0.1)]


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


def test_ctird_targets_take_every_sample_under_its_own_kth_task():
    """The official W_k[i, j] = softmax_j cos(e_i under t_ik, e_j under t_jk) (each sample under its
    own k-th task's LoRA), by hand; the old per-row reading (row i's task for every j) gives other rows."""
    old_features = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]],   # the batch under task 0
                                 [[0.0, 1.0], [0.0, 1.0], [1.0, 0.0]]])  # under task 1
    chosen = torch.tensor([[0, 0], [1, 0], [1, 0]])  # sample i's k-th old task
    e = float(np.e)
    # k = 0: samples 0, 1, 2 under tasks 0, 1, 1 -> [1, 0], [0, 1], [1, 0]: cosines [1 0 1; 0 1 0; 1 0 1]
    w0 = torch.tensor([[e, 1, e], [1, e, 1], [e, 1, e]]) / torch.tensor([[2 * e + 1], [e + 2], [2 * e + 1]])
    # k = 1: every sample under task 0 -> [1, 0], [1, 0], [0, 1]
    w1 = torch.tensor([[e, e, 1], [e, e, 1], [1, 1, e]]) / torch.tensor([[2 * e + 1], [2 * e + 1], [e + 2]])
    # (the per-row reading gives k = 0 rows [e, e, 1]/(2e+1), [e, e, 1]/(2e+1), [1, 1, e]/(e+2): all three differ)
    torch.testing.assert_close(relation_targets(old_features, chosen, 1.0), torch.stack([w0, w1], 1))


def test_ctird_targets_equal_the_routed_lora_features():
    """On the model: the targets from the per-task passes equal the relation of one routed pass per k
    (each sample through its own task's LoRA, as the official `model(input, task_id=ids)`)."""
    _, model = _model(tasks=3)
    x = torch.rand(5, 8, 8, generator=torch.Generator().manual_seed(2))
    chosen = torch.tensor([[0, 1], [1, 0], [1, 1], [0, 0], [1, 0]])
    with torch.no_grad():
        targets = relation_targets(torch.stack([model.features(x, s) for s in range(2)]), chosen, 0.5)
        for k in range(2):
            torch.testing.assert_close(targets[:, k], relation(model.routed_features(x, chosen[:, k]), 0.5))


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
    a = epoch_batches(10, 4, torch.Generator().manual_seed(3))
    b = epoch_batches(10, 4, torch.Generator().manual_seed(3))
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
