"""AltLoRA's steps as the spec writes them, exactly (float64, ε = 0 where the identity needs it): the
A-step times B is s·P_col(B)·G, the B-step's mirror, the transport matrix is I when the other factor
did not move, the state counts are the spec's formulas, the alternation, the LoRA-Pro-like step is
the projection of its Adam step, and the invariance under (A, B) → (A·c, B/c)."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from paperline.methods.altlora.adapters import AdapterError, add_lora, expected_state_floats, make_optimizer, rescale
from paperline.methods.altlora.config import OptimizerSettings
from paperline.optim.altlora import (
    AltLoRA,
    LoRAPair,
    LoRAProLike,
    count_state_floats,
    lora_pairs,
    phase_of,
    projected_gradient,
    scaled_gd,
    transport,
)


class TwoLayers(nn.Module):
    """Two layers of different shapes (k ≠ d), so a formula that swaps k and d is caught."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(12, 20, bias=False)
        self.down = nn.Linear(20, 7, bias=False)

    def forward(self, x):
        return self.down(torch.tanh(self.up(x)))


def lora_model(rank=3, alpha=6.0, seed=0, random_B=True):
    torch.manual_seed(seed)
    model = add_lora(TwoLayers().double(), ["up", "down"], rank, alpha).double()
    if random_B:  # peft starts B at 0; the identities need B of full column rank
        with torch.no_grad():
            for pair in lora_pairs(model):
                pair.B.normal_()
    return model


def col_projector(M):
    Q, _ = torch.linalg.qr(M)
    return Q @ Q.T


def full_gradient_step(model, x, G_by_layer):
    """Backward of Σ ⟨G_l, W_l x⟩-type loss whose gradient w.r.t. each adapted weight is G_l:
    loss = Σ_l ⟨G_l, s·B_l·A_l⟩, so ∇_A = s·BᵀG and ∇_B = s·G·Aᵀ exactly."""
    loss = sum((G * (p.scale * p.B @ p.A)).sum() for p, G in zip(lora_pairs(model), G_by_layer))
    loss.backward()


def random_G(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(p.B.shape[0], p.A.shape[1], generator=g, dtype=torch.float64) for p in lora_pairs(model)]


def test_a_step_times_B_is_s_times_the_column_projection_of_G():
    model = lora_model()
    pairs = lora_pairs(model)
    Gs = random_G(model)
    for pair in pairs:
        pair.B.requires_grad_(False)  # an A step
    before = [p.A.detach().clone() for p in pairs]
    optimizer = AltLoRA(pairs, lr=1.0, weight_decay=0.0, reg=0.0)  # first step: M/(1 − β₁) = ĝ
    full_gradient_step(model, None, Gs)
    optimizer.step()
    for pair, A0, G in zip(pairs, before, Gs):
        step = A0 - pair.A.detach()  # = ĝ_A
        assert torch.allclose(pair.B @ step, pair.scale * col_projector(pair.B) @ G, atol=1e-10)


def test_b_step_times_A_is_s_times_G_times_the_row_projection():
    model = lora_model()
    Gs = random_G(model)
    full_gradient_step(model, None, Gs)
    for pair, G in zip(lora_pairs(model), Gs):
        g_B = projected_gradient(pair.B.grad.T, pair.A.T, 0.0).T  # ∇_B(AAᵀ)⁻¹
        assert torch.allclose(g_B @ pair.A, pair.scale * G @ col_projector(pair.A.T), atol=1e-10)


def test_transport_is_the_identity_when_the_other_factor_did_not_move():
    g = torch.Generator().manual_seed(0)
    B = torch.randn(20, 4, generator=g, dtype=torch.float64)
    assert torch.allclose(transport(B, B, 0.0), torch.eye(4, dtype=torch.float64), atol=1e-12)
    # with damping it is I − ε(BᵀB + εI)⁻¹, as the formula says
    reg = 1e-3
    expected = torch.eye(4, dtype=torch.float64) - reg * torch.linalg.inv(B.T @ B + reg * torch.eye(4, dtype=torch.float64))
    assert torch.allclose(transport(B, B, reg), expected, atol=1e-12)
    # after B moved, P maps old coordinates to new: B·P·M = P_col(B)·B_prev·M
    B_prev = B + 0.1 * torch.randn(20, 4, generator=g, dtype=torch.float64)
    M = torch.randn(4, 9, generator=g, dtype=torch.float64)
    assert torch.allclose(B @ transport(B, B_prev, 0.0) @ M, col_projector(B) @ B_prev @ M, atol=1e-10)


def test_momentum_of_two_a_steps_with_b_fixed_is_the_plain_ema():
    model = lora_model()
    pairs = lora_pairs(model)
    for pair in pairs:
        pair.B.requires_grad_(False)
    optimizer = AltLoRA(pairs, lr=1e-3, betas=(0.9, 0.999), weight_decay=0.0, reg=0.0)
    grads = []
    for seed in (1, 2):
        optimizer.zero_grad(set_to_none=True)
        full_gradient_step(model, None, random_G(model, seed))
        grads.append([projected_gradient(p.A.grad, p.B, 0.0) for p in pairs])
        optimizer.step()
    for i, pair in enumerate(pairs):
        expected = 0.9 * 0.1 * grads[0][i] + 0.1 * grads[1][i]
        assert torch.allclose(optimizer.state[pair.A]["momentum"], expected, atol=1e-12)


def _two_plus_a_steps(**variant) -> tuple[list[float], list[float], AltLoRA]:
    """Two AltLoRA+ A-steps by hand (r = 1, k = 1, d = 2, ε = 0, no decay, lr 0.1, betas (0.9, 0.999),
    eps 1e-4): B = 2 then B = 1 (as if a B-step had halved it), ∇_A = (4, −8) then (1, 1), so
    ĝ₁ = ∇_A/BᵀB = (1, −2), ĝ₂ = (1, 1) and the transport at step 2 is P = (BᵀB)⁻¹BᵀB_prev = 2.
    Returns A after each step."""
    A, B = nn.Parameter(torch.zeros(1, 2, dtype=torch.float64)), nn.Parameter(torch.tensor([[2.0]], dtype=torch.float64))
    optimizer = AltLoRA([LoRAPair("one", A, B, 1.0)], lr=0.1, betas=(0.9, 0.999), eps=1e-4, weight_decay=0.0,
                        reg=0.0, second_moment=True, **variant)
    after = []
    for grad, b in (((4.0, -8.0), 2.0), ((1.0, 1.0), 1.0)):
        with torch.no_grad():
            B.fill_(b)
        A.grad = torch.tensor([grad], dtype=torch.float64)  # B.grad None: an A-step only
        optimizer.step()
        after.append(A.detach().flatten().tolist())
    return after[0], after[1], optimizer


def test_altlora_plus_step_is_the_official_one():
    """The official `altlora_plus`: A ← A − lr/(1 − β₁ᵗ)·(β₁PM + (1 − β₁)ĝ)/(√v + eps) with v not
    bias-corrected, and M stored without P: M₁ = 0.1ĝ₁ = (0.1, −0.2), v₁ = 0.001ĝ₁² = (0.001, 0.004);
    step 2: numerator 0.9·2·M₁ + 0.1ĝ₂ = (0.28, −0.26), v₂ = 0.999v₁ + 0.001 = (0.001999, 0.004996),
    stored M₂ = 0.9M₁ + 0.1ĝ₂ = (0.19, −0.08)."""
    first, second, optimizer = _two_plus_a_steps()
    sq = math.sqrt
    step1 = [-0.1 / 0.1 * m / (sq(v) + 1e-4) for m, v in ((0.1, 0.001), (-0.2, 0.004))]
    assert first == pytest.approx(step1, rel=1e-12)  # ≈ (−3.152, +3.152): 31.5× Adam's ≈ 0.1
    step2 = [-0.1 / 0.19 * m / (sq(v) + 1e-4) for m, v in ((0.28, 0.001999), (-0.26, 0.004996))]
    assert second == pytest.approx([a + b for a, b in zip(step1, step2)], rel=1e-12)
    assert optimizer.state[optimizer.param_groups[0]["params"][0]]["momentum"].flatten().tolist() == \
        pytest.approx([0.19, -0.08], rel=1e-12)


def test_altlora_plus_named_variants_are_adams_correction_and_the_transported_momentum():
    """`bias_correct_v`: step 1 divides by √(v₁/(1 − β₂)) + eps = |ĝ₁| + eps (Adam's, ≈ lr in size);
    `transport_plus_momentum`: the stored M₂ is the transported numerator (0.28, −0.26)."""
    first, _, _ = _two_plus_a_steps(bias_correct_v=True)
    assert first == pytest.approx([-0.1 * 0.1 / 0.1 * g / (abs(g) + 1e-4) for g in (1.0, -2.0)], rel=1e-12)
    _, _, optimizer = _two_plus_a_steps(transport_plus_momentum=True)
    assert optimizer.state[optimizer.param_groups[0]["params"][0]]["momentum"].flatten().tolist() == \
        pytest.approx([0.28, -0.26], rel=1e-12)


NAMES = ("lora_adamw", "lora_sgdm", "scaledgd", "altlora", "altlora_plus", "lora_pro")


@pytest.mark.parametrize("name", NAMES)
def test_state_floats_equal_the_spec_formulas(name):
    model = lora_model(random_B=False)
    optimizer = make_optimizer(name, model, 1e-3, OptimizerSettings(alter_freq=1))
    x = torch.randn(5, 12, dtype=torch.float64)
    for _ in range(2):  # with alter_freq 1 both factors have stepped (and allocated their states)
        optimizer.zero_grad(set_to_none=True)
        model(x).pow(2).mean().backward()
        optimizer.step()
    (k1, d1), (k2, d2), r = (20, 12), (7, 20), 3
    formula = {"lora_adamw": 2 * ((k1 + d1) + (k2 + d2)) * r, "lora_sgdm": ((k1 + d1) + (k2 + d2)) * r,
               "scaledgd": 0, "altlora": 2 * ((k1 + d1) + (k2 + d2)) * r,
               "altlora_plus": 3 * ((k1 + d1) + (k2 + d2)) * r, "lora_pro": 2 * (k1 * d1 + k2 * d2)}[name]
    assert count_state_floats(optimizer) == expected_state_floats(name, model) == formula


def test_full_ft_state_is_two_floats_per_weight():
    model = TwoLayers()
    optimizer = make_optimizer("full_ft", model, 1e-3, OptimizerSettings())
    model(torch.randn(3, 12)).sum().backward()
    optimizer.step()
    assert count_state_floats(optimizer) == expected_state_floats("full_ft", model) == 2 * (20 * 12 + 7 * 20)


def test_alternation_trains_one_factor_per_phase_starting_with_b():
    assert [phase_of(t, 2) for t in range(6)] == ["B", "B", "A", "A", "B", "B"]
    model = lora_model()
    pairs = lora_pairs(model)
    optimizer = AltLoRA(pairs, lr=1e-2, alter_freq=2)
    x = torch.randn(5, 12, dtype=torch.float64)
    seen = []
    for _ in range(4):
        seen.append([(p.A.requires_grad, p.B.requires_grad) for p in pairs][0])
        before = [(p.A.detach().clone(), p.B.detach().clone()) for p in pairs]
        optimizer.zero_grad(set_to_none=True)
        model(x).pow(2).mean().backward()
        optimizer.step()
        moved = [(not torch.equal(A0, p.A), not torch.equal(B0, p.B)) for p, (A0, B0) in zip(pairs, before)][0]
        assert moved == seen[-1]
    assert seen == [(False, True), (False, True), (True, False), (True, False)]
    # the phase is in the state dict: a resumed optimizer continues in it
    state = optimizer.state_dict()
    again = AltLoRA(pairs, lr=1e-2, alter_freq=2)
    again.load_state_dict(state)
    assert (pairs[0].A.requires_grad, pairs[0].B.requires_grad) == (False, True)


def test_an_lr_scheduler_acts_on_altlora():
    steps = {}
    for factor in (1.0, 0.5):
        model = lora_model()
        pairs = lora_pairs(model)
        optimizer = scaled_gd(pairs, lr=1e-2, reg=0.0)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: factor)
        A0 = pairs[0].A.detach().clone()
        full_gradient_step(model, None, random_G(model))
        optimizer.step()
        scheduler.step()
        steps[factor] = pairs[0].A.detach() - A0
    assert torch.allclose(steps[0.5], 0.5 * steps[1.0], atol=1e-14)


def test_lora_pro_step_is_the_tangent_projection_of_its_adam_step():
    model = lora_model()
    pairs = lora_pairs(model)
    optimizer = LoRAProLike(pairs, lr=1e-3, reg=0.0)
    before = [(p.A.detach().clone(), p.B.detach().clone()) for p in pairs]
    Gs = random_G(model)
    full_gradient_step(model, None, Gs)
    equivalent = [LoRAProLike.equivalent_gradient(p.A, p.B, p.A.grad, p.B.grad, 0.0) for p in pairs]
    optimizer.step()
    for pair, (A0, B0), G, G_eq in zip(pairs, before, Gs, equivalent):
        P_B, P_A = col_projector(B0), col_projector(A0.T)
        I = torch.eye(P_B.shape[0], dtype=torch.float64)
        # the equivalent gradient is s·[P_B·G + (I − P_B)·G·P_A]
        assert torch.allclose(G_eq, pair.scale * (P_B @ G + (I - P_B) @ G @ P_A), atol=1e-10)
        delta_W = -1e-3 * G_eq / (G_eq.abs() + 1e-8)  # Adam's first step: −lr·sign-like
        achieved = pair.scale * (B0 @ (pair.A.detach() - A0) + (pair.B.detach() - B0) @ A0)
        assert torch.allclose(achieved, P_B @ delta_W + (I - P_B) @ delta_W @ P_A, atol=1e-10)


@pytest.mark.parametrize("name", ["scaledgd", "altlora"])
def test_product_trajectory_is_invariant_to_rescaling_the_factors(name):
    """(A, B) → (A·c, B/c) leaves s·B·A's trajectory unchanged (ε = 0): the reparameterisation
    invariance the paper claims. LoRA-AdamW's changes (the contrast)."""
    x = torch.randn(16, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    settings = OptimizerSettings(reg=0.0, alter_freq=2)

    def trajectory(opt_name, c):
        model = lora_model()
        rescale(model, c)
        optimizer = make_optimizer(opt_name, model, 1e-2, settings)
        products = []
        for _ in range(6):
            optimizer.zero_grad(set_to_none=True)
            model(x).sin().pow(2).mean().backward()
            optimizer.step()
            products.append(torch.cat([(p.B @ p.A).flatten() for p in lora_pairs(model)]).detach())
        return torch.stack(products)

    reference = trajectory(name, 1.0)
    for c in (0.1, 10.0):
        assert torch.allclose(trajectory(name, c), reference, rtol=1e-7, atol=1e-10)
    assert not torch.allclose(trajectory("lora_adamw", 10.0), trajectory("lora_adamw", 1.0), rtol=1e-3)


def test_bad_targets_and_ranks_name_the_key():
    with pytest.raises(AdapterError, match=r"target_modules: 'q_proj' matches no linear layer .*down, up"):
        add_lora(TwoLayers(), ["up", "q_proj"], 3, 6.0)
    with pytest.raises(AdapterError, match=r"rank 8 is above the width of layer down \(7×20: at most 7\)"):
        add_lora(TwoLayers(), ["down"], 8, 16.0)


def test_invalid_hyperparameters_fail_on_construction():
    pairs = lora_pairs(lora_model())
    with pytest.raises(ValueError, match="lr must be > 0"):
        AltLoRA(pairs, lr=0.0)
    with pytest.raises(ValueError, match=r"betas\[1\] must be in \[0, 1\)"):
        AltLoRA(pairs, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="alter_freq must be ≥ 1"):
        AltLoRA(pairs, alter_freq=0)
