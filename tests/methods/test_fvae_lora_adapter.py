"""The FVAE-LoRA adapter, exactly: the per-layer loss against torch.distributions, the training
forward against the spec's formula with the same noise, μ₁ at evaluation (an identity at
initialisation), peft's selection shared with LoRA, no merge, and the refused targets."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.distributions import Normal, kl_divergence

from paperline.methods.fvae_lora.adapter import (
    FvaeSettings,
    check_targets,
    fvae_layer_loss,
    fvae_layers,
    fvae_loss,
    inject,
    scaling_of,
    set_generator,
)


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(6, 5), nn.Linear(5, 5), nn.Linear(5, 3)

    def forward(self, x):
        return self.head(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def _model(seed=0):
    torch.manual_seed(seed)
    return TwoLayer()


def test_layer_loss_is_the_codes_elbo_term_by_term():
    g = torch.Generator().manual_seed(1)
    n, d, r = 7, 5, 3
    x, x_hat = torch.randn(n, d, generator=g), torch.randn(n, d, generator=g)
    std = torch.rand(d, generator=g) + 0.5
    mu1, logvar1 = torch.randn(n, r, generator=g), torch.randn(n, r, generator=g)
    z1, z2 = torch.randn(n, r, generator=g), torch.randn(n, r, generator=g)
    s = FvaeSettings(z2_mean=1.5, lambda_rec=0.3, lambda_kl=2.0, lambda_z2=0.7, lambda_z1=1.1)
    t = fvae_layer_loss(x, x_hat, std, mu1, logvar1, z1, z2, s)
    rec = -Normal(x_hat, std).log_prob(x).sum(-1).mean()
    kl = kl_divergence(Normal(mu1, (0.5 * logvar1).exp()), Normal(0.0, 1.0)).sum(-1).mean()
    torch.testing.assert_close(t["rec"], rec)
    torch.testing.assert_close(t["kl"], kl)
    torch.testing.assert_close(t["z2"], ((z2 - 1.5) ** 2).mean())
    torch.testing.assert_close(t["z1"], (z1 ** 2).mean())
    torch.testing.assert_close(t["loss"], 0.3 * rec + 2.0 * kl + 0.7 * t["z2"] - 1.1 * t["z1"])


def test_training_forward_is_base_plus_scaled_B_z1_and_stores_the_loss():
    model = _model()
    base = {n: (m.weight.clone(), m.bias.clone()) for n, m in (("fc1", model.fc1), ("fc2", model.fc2))}
    inject(model, "fvae", ["fc1"], rank=3, alpha=6.0, settings=FvaeSettings(encoder_hidden=4, dropout=0.0))
    layer = fvae_layers(model)[0]
    with torch.no_grad():  # a non-trivial encoder 1 (its heads start at zero)
        layer.lora_encoder1["default"].mean.weight.normal_()
        layer.lora_encoder1["default"].logvar.bias.fill_(-1.0)
    x = torch.randn(4, 6)
    model.train()
    set_generator(model, torch.Generator().manual_seed(5))
    out = layer(x)
    g = torch.Generator().manual_seed(5)
    eps = [torch.randn(4, 3, generator=g) for _ in range(2)]  # ε₁ then ε₂, as the layer draws them
    enc1 = layer.lora_encoder1["default"]
    h = torch.relu(enc1.body[0](x))
    mu1, logvar1 = enc1.mean(h), enc1.logvar(h)
    z1 = mu1 + (0.5 * logvar1).exp() * eps[0]
    W, b = base["fc1"]
    torch.testing.assert_close(out, x @ W.T + b + 6.0 / (3 + 1e-5) * z1 @ layer.lora_B["default"].weight.T)
    enc2 = layer.lora_encoder2["default"]
    h2 = torch.relu(enc2.body[0](x))
    z2 = enc2.mean(h2) + (0.5 * enc2.logvar(h2)).exp() * eps[1]
    x_hat, std = layer.lora_decoder["default"](torch.cat([z1, z2], -1))
    expected = fvae_layer_loss(x, x_hat, std, mu1, logvar1, z1, z2, FvaeSettings())
    torch.testing.assert_close(fvae_loss(model)["loss"], expected["loss"])
    # the heads start at zero (μ = 0, σ = 1) and B ~ N(0, 0.02²) is not zero: noise from step 0
    fresh = inject(_model(), "fvae", ["fc1"], rank=3, alpha=3.0)
    assert float(fresh.fc1.lora_B["default"].weight.detach().std()) == pytest.approx(0.02, rel=0.5)
    assert all(float(p.detach().abs().sum()) == 0 for n, p in fresh.fc1.named_parameters()
               if ".mean." in n or ".logvar." in n)


def test_the_scale_is_the_official_layers_alpha_over_r_plus_1e_5():
    assert scaling_of(4, 8.0) == 8.0 / 4.00001 and scaling_of(4, 8.0) != 2.0  # not α / r
    assert scaling_of(4, 0.0) == 4 / 4.00001  # α <= 0: α = r, as AdaLoRA's layer


def test_evaluation_uses_mu1_an_identity_at_initialisation():
    x = torch.randn(9, 6)
    reference = _model().eval()(x)
    model = inject(_model(), "fvae", ["fc1", "fc2"], rank=2, alpha=2.0).eval()
    torch.testing.assert_close(model(x), reference, rtol=0, atol=0)
    layer = model.fc2
    with torch.no_grad():
        layer.lora_encoder1["default"].mean.weight.normal_()
        layer.lora_encoder2["default"].mean.weight.normal_()  # encoder 2: training-only, no effect here
    h = torch.relu(model.fc1(x))
    enc1 = layer.lora_encoder1["default"]
    mu1 = enc1.mean(torch.relu(enc1.body[0](h)))
    expected = layer.base_layer(h) + 1.0 * mu1 @ layer.lora_B["default"].weight.T
    torch.testing.assert_close(layer(h), expected)
    torch.testing.assert_close(model(x), model(x), rtol=0, atol=0)  # no sampling at evaluation


def test_lora_and_fvae_adapt_the_same_layers_and_fvae_does_not_merge():
    lora = inject(_model(), "lora", ["fc1", "fc2"], rank=2, alpha=2.0)
    fvae = inject(_model(), "fvae", ["fc1", "fc2"], rank=2, alpha=2.0)
    adapted = lambda m: sorted(n for n, mod in m.named_modules() if hasattr(mod, "base_layer"))  # noqa: E731
    assert adapted(lora) == adapted(fvae) == ["fc1", "fc2"]
    trainable = [n for n, p in fvae.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in n for n in trainable)  # W₀ and the head frozen by peft
    assert {n.split(".")[1] for n in trainable} == {"lora_B", "lora_encoder1", "lora_encoder2", "lora_decoder"}
    with pytest.raises(NotImplementedError, match="cannot be merged"):
        fvae_layers(fvae)[0].merge()


def test_targets_that_do_not_exist_or_ranks_above_a_width_are_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"adapter.target_modules: 'q_proj' matches no nn.Linear .*fc1, fc2, head"):
        check_targets(_model(), ["q_proj"], 2, where="adapter.target_modules")
    with pytest.raises(ValueError, match=r"rank 6 is above the width 5 of layer 'fc1'"):
        inject(_model(), "fvae", ["fc1"], rank=6, alpha=1.0)
    assert check_targets(_model(), ["fc1", "fc2"], 5) == ["fc1", "fc2"]
