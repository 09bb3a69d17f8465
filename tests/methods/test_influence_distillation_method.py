"""Influence Distillation's pieces against their definitions: the randomised Hadamard projection,
per-sample gradients (torch.func) against a loop, the Adam coefficient a against AdamW's actual
update, JVP embeddings against finite differences, kernel-ridge propagation, round-robin and
first-order selection, the convex second-order check, and checkpoint resume."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from scipy.linalg import hadamard

from paperline.data.tulu import TuluRecord
from paperline.methods.influence_distillation import landmarks
from paperline.methods.influence_distillation.config import InfluenceDistillationConfig
from paperline.methods.influence_distillation.finetune import epoch_batches, make_optimizer, train
from paperline.methods.influence_distillation.influence import (
    HadamardProjector,
    adam_coefficients,
    fwht,
    per_sample_gradients,
)
from paperline.methods.influence_distillation.model import build_model, masked_lm_loss, tokenize
from paperline.methods.influence_distillation.qp import qp_check
from paperline.methods.influence_distillation.selection import first_order_weights, lambda_for_k, round_robin

TINY = dict(llama={"hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "num_layers": 2}, max_length=48,
            batch_size=4)


def _records(n: int) -> list[TuluRecord]:
    words = "alpha beta gamma delta epsilon zeta eta theta".split()
    return [TuluRecord("d", f"s{i}", ({"role": "user", "content": " ".join(words[(i + j) % 8] for j in range(1 + i % 4))},
                                      {"role": "assistant", "content": words[i % 8] * (1 + i % 3)}))
            for i in range(n)]


@pytest.fixture
def tiny():
    cfg = InfluenceDistillationConfig(**TINY)
    model, tok = build_model(cfg, 0)
    return cfg, model, tokenize(_records(10), tok, cfg.max_length)


def test_fwht_is_the_orthonormal_hadamard_matrix():
    x = torch.randn(3, 16, dtype=torch.float64)
    expected = x @ torch.tensor(hadamard(16), dtype=torch.float64) / 4
    assert torch.allclose(fwht(x), expected)
    with pytest.raises(ValueError, match="power-of-two"):
        fwht(torch.zeros(12))


def test_full_hadamard_projection_preserves_inner_products_and_a_partial_one_nearly():
    x = torch.randn(5, 100)
    full = HadamardProjector(100, 128, seed=0)
    assert torch.allclose(full(x) @ full(x).T, x @ x.T, atol=1e-3)
    g = torch.randn(2000)
    half = HadamardProjector(2000, 1024, seed=1)
    assert abs(float(half(g).norm() / g.norm()) - 1) < 0.1


def test_per_sample_gradients_match_a_loop_of_autograd(tiny):
    cfg, model, data = tiny
    names = model.down_proj_names()
    assert len(names) == 2
    got = per_sample_gradients(model, data, [0, 3, 7], names, chunk=2)
    params = dict(model.named_parameters())
    for row, i in zip(got, [0, 3, 7]):
        tokens, mask = data.batch([i])
        model.zero_grad()
        masked_lm_loss(model(tokens), tokens, mask).backward()
        expected = torch.cat([params[n].grad.reshape(-1) for n in names])
        assert torch.allclose(row, expected, atol=1e-5)


def test_adam_coefficient_is_the_slope_of_adamws_next_update(tiny):
    cfg, model, data = tiny
    opt = make_optimizer(model, cfg, lr=1e-2)
    train(model, opt, data, range(10), epoch_batches(10, 4, 2, 0), None, {})
    names = model.down_proj_names()
    a = adam_coefficients(opt, model, names)
    params = dict(model.named_parameters())

    def update(g_scale: float) -> torch.Tensor:
        m, o = copy.deepcopy(model), None
        o = make_optimizer(m, cfg, lr=1e-2)
        o.load_state_dict(copy.deepcopy(opt.state_dict()))  # load_state_dict keeps the tensors: copy
        mp = dict(m.named_parameters())
        for n, p in mp.items():
            p.grad = torch.full_like(p, g_scale) if n in names else torch.zeros_like(p)
        before = torch.cat([mp[n].detach().reshape(-1).clone() for n in names])
        o.step()
        return torch.cat([mp[n].detach().reshape(-1) for n in names]) - before

    # Δθ(g) = −η(a ⊙ g + b) with the moments held fixed: a gradient far below sqrt(v) barely moves v,
    # so the difference of two updates isolates a (the spec's affine form)
    g = 1e-7
    slope = (update(g) - update(0.0)) / g
    close = torch.isclose(-slope / 1e-2, a, rtol=5e-2)
    assert close.float().mean() > 0.95
    assert a.shape[0] == sum(params[n].numel() for n in names)


def test_jvp_embeddings_are_directional_derivatives_of_the_cut_model_after_its_norm(tiny):
    cfg, model, data = tiny
    emb = landmarks.jvp_embeddings(model, data, num_blocks=1, num_tangents=2, proj_dim=0, seed=3, batch_size=4)
    assert emb.shape == (10, 2 * 16)
    # the official create_jvp_store's tangents: every parameter of the cut model, embeddings and norm too
    cut = model.truncated(1)
    names = [n for n, _ in cut.named_parameters()]
    assert names[0] == "net.embed_tokens.weight" and names[-1] == "net.norm.weight"
    assert {n.split(".")[2] for n in names if n.startswith("net.layers.")} == {"0"}
    assert len(model.net.layers) == 2 and cut.net.layers[0] is model.net.layers[0]  # shared, not copied
    # finite difference along the first tangent (re-drawn with the same generator, in the same order)
    params = dict(cut.named_parameters())
    g = torch.Generator().manual_seed(3)
    tangent = {n: torch.randn((2, *params[n].shape), generator=g)[0] for n in names}
    eps = 1e-5

    def last_hidden(sign: float) -> torch.Tensor:
        m = copy.deepcopy(model).double()  # float64: the RMSNorm makes the derivatives large
        mp = dict(m.named_parameters())
        with torch.no_grad():
            for n in names:
                mp[n].add_(sign * eps * tangent[n].double())
            h = m.net.norm(m.hidden_states(data.tokens, 1))  # after the final RMSNorm
        return h[torch.arange(10), data.lengths - 1]

    fd = (last_hidden(1) - last_hidden(-1)) / (2 * eps)
    assert torch.allclose(emb[:, :16].double(), fd, atol=1e-2, rtol=1e-3)
    with torch.no_grad():  # block 2 does not enter the embedding; the norm's gain does
        model.net.layers[1].mlp.down_proj.weight.mul_(3.0)
    assert torch.allclose(landmarks.jvp_embeddings(model, data, 1, 2, 0, 3, 4), emb, atol=1e-5)
    with torch.no_grad():
        model.net.norm.weight.mul_(2.0)
    assert not torch.allclose(landmarks.jvp_embeddings(model, data, 1, 2, 0, 3, 4), emb, atol=1e-3)


def test_jvp_projection_is_rademacher_and_nearly_keeps_distances(tiny):
    cfg, model, data = tiny
    raw = landmarks.jvp_embeddings(model, data, 1, 2, 0, seed=3)
    projected = landmarks.jvp_embeddings(model, data, 1, 2, 4096, seed=3)
    assert projected.shape == (10, 4096)  # projected even though 2·16 is narrower (as the official code)
    # a linear map of the same JVPs (R, entries ±1/√4096, drawn after the tangents)
    r = torch.linalg.lstsq(raw.double(), projected.double()).solution
    scaled = raw.double() @ r
    assert torch.allclose(scaled, projected.double(), atol=1e-4)
    d_raw, d_proj = torch.cdist(raw, raw), torch.cdist(projected, projected)
    off = ~torch.eye(10, dtype=torch.bool)
    assert ((d_proj[off] / d_raw[off]) - 1).abs().max() < 0.1  # Johnson–Lindenstrauss at k = 4096


def test_chunk_sizes_do_not_change_jvp_embeddings_or_per_sample_gradients(tiny):
    # a batch is padded to its longest sample: chunking changes the padding, never the result
    cfg, model, data = tiny
    one_by_one = landmarks.jvp_embeddings(model, data, 1, 2, 0, seed=3, batch_size=1)
    assert torch.allclose(landmarks.jvp_embeddings(model, data, 1, 2, 0, seed=3, batch_size=10), one_by_one,
                          atol=1e-5)
    names = model.down_proj_names()
    single = per_sample_gradients(model, data, range(10), names, chunk=1)
    assert torch.allclose(per_sample_gradients(model, data, range(10), names, chunk=32), single, atol=1e-6)


def test_kernel_ridge_propagation_recovers_a_smooth_influence():
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(400, 3, generator=g)
    truth = torch.stack([torch.sin(emb[:, 0]) + emb[:, 1] ** 2, emb[:, 2]], dim=1)
    marks = landmarks.choose_landmarks(400, 80, seed=1)
    est = landmarks.propagate(emb, marks, truth[marks], damp=1e-3)
    rest = np.setdiff1d(np.arange(400), marks.numpy())
    from scipy.stats import spearmanr

    for j in range(2):
        assert spearmanr(est[rest, j], truth[rest, j]).statistic > 0.85
    sigma = landmarks.rbf_bandwidth(emb[marks], 1000)
    d = torch.cdist(emb[marks], emb[marks])
    assert sigma == pytest.approx(float(d[~torch.eye(80, dtype=torch.bool)].median()), rel=1e-5)
    assert landmarks.rbf_bandwidth(torch.ones(4, 3), 1000) == 1e-6  # coinciding: the official floor
    assert landmarks.rbf_bandwidth(torch.ones(1, 3), 1000) == 1.0  # one landmark: no pair
    with pytest.raises(ValueError, match="exceeds the pool size"):
        landmarks.choose_landmarks(5, 6, 0)


def test_round_robin_takes_turns_and_never_repeats():
    scores = torch.tensor([[9.0, 8.0], [5.0, 9.5], [4.0, 9.0], [1.0, 0.0], [0.5, 0.1]])
    # t0 takes 0; t1 takes 1; t0's next free is 2 (t1 liked it too); t1's next free is 4, not 3
    assert round_robin(scores, 4) == [0, 1, 2, 4]
    assert round_robin(torch.tensor([[1.0, 1.0], [0.0, 0.9], [0.5, 0.0]]), 3) == [0, 1, 2]
    chosen = round_robin(torch.randn(50, 3), 30)
    assert len(set(chosen)) == 30
    # the official order: each round visits the targets in a new random order
    firsts = {tuple(round_robin(torch.eye(4) + 0.0, 4, seed=s)) for s in range(20)}
    assert len(firsts) > 1 and all(sorted(f) == [0, 1, 2, 3] for f in firsts)
    scores = torch.randn(60, 3, generator=torch.Generator().manual_seed(0))
    assert round_robin(scores, 30, seed=5) == round_robin(scores, 30, seed=5)
    rounds = round_robin(torch.arange(30.0).repeat(3, 1).T.flip(0) * torch.tensor([1.0, 0.5, 0.25]), 9, seed=1)
    assert sorted(rounds[:3]) == [0, 1, 2]  # every target takes one per round, whatever the order
    with pytest.raises(ValueError, match="exceeds the pool size"):
        round_robin(torch.zeros(3, 1), 4)


def test_first_order_solution_is_top_k_by_influence():
    p = np.random.default_rng(0).normal(size=30)
    lam = lambda_for_k(p, 7)
    w = first_order_weights(p, lam)
    assert np.count_nonzero(w) == 7 and w.sum() == pytest.approx(30)
    assert set(np.nonzero(w)[0]) == set(np.argsort(-p)[:7]) and np.all(w >= 0)


def test_second_order_qp_agrees_with_first_order_at_small_learning_rates():
    out = qp_check(n_source=30, n_target=15, dim=4, k=8, lrs=[1e-3, 1e-1, 10.0], seed=0)
    small, mid, large = out["rows"]
    assert small["relative_weight_difference"] < 1e-2 and small["support_jaccard"] == 1.0
    assert small["relative_weight_difference"] < mid["relative_weight_difference"] < large["relative_weight_difference"]
    assert large["relative_weight_difference"] > 0.05
    # the step with the first-order weights lowers the target loss (the weights point the right way)
    assert small["target_loss_drop_first_order"] > 0


def _train_twice(tiny, batches, **second):
    """Train from the same start twice on the 10 tiny samples: plainly, then with `second`'s
    options (checkpoint path and fingerprint as ckpt / fp); (first history, first weights, second history)."""
    cfg, model, data = tiny
    start = copy.deepcopy(model.state_dict())
    first = train(model, make_optimizer(model, cfg, 1e-2), data, range(10), batches, None, {})
    reference = copy.deepcopy(model.state_dict())
    model.load_state_dict(start)
    ckpt, fp = second.pop("ckpt", None), second.pop("fp", {})
    prepare = second.pop("prepare", None)
    if prepare is not None:
        prepare(model, start)
    again = train(model, make_optimizer(model, cfg, 1e-2), data, range(10), batches, ckpt, fp, **second)
    return first, reference, again


def test_training_resumes_from_its_checkpoint(tiny, tmp_path):
    cfg, model, data = tiny
    ckpt = tmp_path / "ck.pt"
    batches = epoch_batches(10, 4, 3, 0)

    steps_run = []

    def killed_after_step_5(model, start):  # the checkpoint holds step 4; then a fresh process
        train(model, make_optimizer(model, cfg, 1e-2), data, range(10), batches, ckpt, {"a": 1},
              checkpoint_every=2, stop_after=5)
        model.load_state_dict(start)
        real_batch = data.batch
        data.batch = lambda index: steps_run.append(1) or real_batch(index)  # count the resumed run's steps

    full, reference, resumed = _train_twice(tiny, batches, ckpt=ckpt, fp={"a": 1}, checkpoint_every=2,
                                            prepare=killed_after_step_5)
    assert len(steps_run) == len(batches) - 4  # it went on from the checkpoint
    assert resumed["train_loss"] == pytest.approx(full["train_loss"], rel=1e-5)
    for k, v in reference.items():
        assert torch.allclose(model.state_dict()[k], v, atol=1e-6)


def test_micro_batches_accumulate_to_the_whole_batch_step(tiny):
    model = tiny[1].double()  # float32 rounding, amplified by Adam where a gradient is ~0, reached 5e-5
    whole, reference, sliced = _train_twice(tiny, epoch_batches(10, 5, 2, 0), micro_batch_size=2)
    assert sliced["train_loss"] == pytest.approx(whole["train_loss"], rel=1e-9)
    for name, value in model.state_dict().items():
        assert torch.allclose(value, reference[name], atol=1e-9), (name, (value - reference[name]).abs().max())


def test_long_samples_keep_their_answer_in_the_window():
    cfg = InfluenceDistillationConfig(**TINY)
    _, tok = build_model(cfg, 0)
    rec = TuluRecord("d", "long", ({"role": "user", "content": "x" * 200}, {"role": "assistant", "content": "yes"}))
    data = tokenize([rec], tok, 48)
    assert data.tokens.shape[1] == 48 and data.mask[0].sum() == len("yes") + 1  # reply, eos (nothing after it)


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="hf_model_path"):
        InfluenceDistillationConfig(model="hf")
    with pytest.raises(ValueError, match="jvp_blocks 3 exceeds"):
        InfluenceDistillationConfig(jvp_blocks=3)
    with pytest.raises(ValueError, match="include influence_distillation"):
        InfluenceDistillationConfig(methods=["random"])
