"""The split model's maths: split learning's gradients equal the centralised model's for the same
batch (torch autograd on the composed model), the DP noise scale, the metrics."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperline.methods.pubsub_vfl import model


def _torch(p):
    return {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_split_gradients_equal_the_centralised_gradients(task):
    rng = np.random.default_rng(0)
    xa, xp = rng.normal(size=(16, 5)), rng.normal(size=(16, 7))
    y = (rng.random(16) > 0.5) * 1.0 if task == "classification" else rng.normal(size=16)
    pa, pp, top = model.init_bottom(rng, 5, 6, 3), model.init_bottom(rng, 7, 6, 3), model.init_top(rng, 3, 4)
    # the two parties: the passive party sends z_p, the active party returns ∇z_p L
    z_p, cache_p = model.bottom_forward(pp, xp)
    z_a, cache_a = model.bottom_forward(pa, xa)
    loss, g_top, g_za, g_zp = model.top_loss_and_grads(top, z_a, z_p, y, task)
    g_a, g_p = model.bottom_backward(pa, cache_a, g_za), model.bottom_backward(pp, cache_p, g_zp)
    # the centralised model, autograd
    ta, tp, tt = _torch(pa), _torch(pp), _torch(top)

    def bottom(p, x):
        return torch.relu(torch.tensor(x) @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]

    z = torch.cat([bottom(ta, xa), bottom(tp, xp)], 1)
    out = (torch.relu(z @ tt["U1"] + tt["c1"]) @ tt["U2"] + tt["c2"])[:, 0]
    yt = torch.tensor(y)
    ref = (torch.nn.functional.binary_cross_entropy_with_logits(out, yt) if task == "classification"
           else torch.mean((out - yt) ** 2))
    ref.backward()
    assert loss == pytest.approx(ref.item(), rel=1e-12)
    for ours, theirs in ((g_a, ta), (g_p, tp), (g_top, tt)):
        for k in ours:
            np.testing.assert_allclose(ours[k], theirs[k].grad.numpy(), rtol=1e-10, atol=1e-12)
    pred = model.predict(pa, pp, top, xa, xp)
    np.testing.assert_allclose(pred, out.detach().numpy(), rtol=1e-12)


def test_dp_noise_is_gaussian_with_scale_clip_over_mu():
    assert model.dp_noise_std(2.0, 1.0) == 0.5 and model.dp_noise_std(0.0, 1.0) == 0.0
    z = np.random.default_rng(1).normal(size=(4000, 8)) * 5
    noisy = model.privatise(z, 0.5, 1.0, np.random.default_rng(7))
    clipped = z / np.linalg.norm(z, axis=1, keepdims=True)  # every row's norm exceeds C = 1
    expected_noise = np.random.default_rng(7).normal(0.0, 2.0, z.shape)
    np.testing.assert_allclose(noisy - clipped, expected_noise, atol=1e-12)
    assert np.std(noisy - clipped) == pytest.approx(2.0, rel=0.02)
    assert model.privatise(z, 0.0, 1.0, np.random.default_rng(0)) is z  # μ = 0: no noise


def test_auc_and_rmse():
    y = np.array([0, 0, 1, 1])
    assert model.auc(y, np.array([0.1, 0.4, 0.35, 0.8])) == 0.75
    assert model.auc(y, np.array([1, 1, 1, 1])) == 0.5
    assert model.rmse(np.array([1.0, 3.0]), np.array([0.0, 3.0])) == pytest.approx(np.sqrt(0.5))


def test_sgd_and_average_on_nested_parameters():
    p = {"top": {"a": np.ones(2)}, "b": np.zeros(1)}
    g = {"top": {"a": np.full(2, 2.0)}, "b": np.ones(1)}
    stepped = model.sgd(p, g, 0.5)
    np.testing.assert_array_equal(stepped["top"]["a"], [0, 0])
    np.testing.assert_array_equal(model.average([p, stepped])["top"]["a"], [0.5, 0.5])


def test_a_deeper_bottom_models_gradients_equal_autograds():
    """The paper's bottom model is a 10-layer MLP: `layers` linear layers, ReLU between."""
    rng = np.random.default_rng(3)
    x, g_z = rng.normal(size=(9, 5)), rng.normal(size=(9, 3))
    p = model.init_bottom(rng, 5, 6, 3, layers=4)
    assert sorted(p) == ["W1", "W2", "W3", "W4", "b1", "b2", "b3", "b4"] and p["W4"].shape == (6, 3)
    z, cache = model.bottom_forward(p, x)
    grads = model.bottom_backward(p, cache, g_z)
    tp = _torch(p)
    h = torch.tensor(x)
    for i in range(1, 4):
        h = torch.relu(h @ tp[f"W{i}"] + tp[f"b{i}"])
    out = h @ tp["W4"] + tp["b4"]
    (out * torch.tensor(g_z)).sum().backward()
    np.testing.assert_allclose(z, out.detach().numpy(), rtol=1e-12)
    for k in grads:
        np.testing.assert_allclose(grads[k], tp[k].grad.numpy(), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="at least 2 layers"):
        model.init_bottom(rng, 5, 6, 3, layers=1)
