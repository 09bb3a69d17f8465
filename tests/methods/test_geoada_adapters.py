"""GeoAda's exact properties: at initialisation every adapted model's output equals the base's; the
equivariance error under a random rotation + translation is at float precision for GeoAda (and the
baselines and the base) but not for the non-equivariant ControlNet once its zero layers have moved;
switching the adapter off restores the base exactly; the trainable parameters are the copies and
the zero layers (the first block of every K); the DDPM schedule and the metrics."""
from __future__ import annotations

import copy

import pytest
import torch

from paperline.methods.geoada.adapters import (
    GeoAda,
    GPFPlus,
    build_variant,
    copied_blocks,
    couple_subgraph,
    equivariance_error,
    trainable_parameters,
)
from paperline.methods.geoada.config import ACTS_ON_ORIGINAL, CHANGES_BASE, VARIANTS, fits
from paperline.methods.geoada.egtn import EGTN, Schedule, sample
from paperline.methods.geoada.train import Windows, evaluate, train

TB, TF, H, N = 3, 5, 4, 5


def _inputs(seed: int = 0, batch: int = 3, cond: int = TF, control: str = "global"):
    """A batch; `control` "subgraph": the given future of the first two particles (B, H, 2, 3),
    otherwise a global strength (B,)."""
    g = torch.Generator().manual_seed(seed)
    charges = torch.randint(0, 2, (batch, N), generator=g).double() * 2 - 1
    out = dict(cond=torch.randn(batch, cond, N, 3, generator=g, dtype=torch.float64),
               noisy=torch.randn(batch, H, N, 3, generator=g, dtype=torch.float64),
               t=torch.randint(0, 10, (batch,), generator=g), charges=charges,
               edges=charges[:, :, None] * charges[:, None, :],
               control=torch.rand(batch, generator=g, dtype=torch.float64) * 3 + 0.2)
    if control == "subgraph":
        out["control"] = torch.randn(batch, H, 2, 3, generator=g, dtype=torch.float64)
    return out


@torch.no_grad()  # the same kernels with and without frozen parameters (autograd picks others: 1e-18 apart)
def _call(model, x, **kw):
    return model(x["cond"], x["noisy"], x["t"], x["charges"], x["edges"], x["control"], **kw)


def _base(blocks: int = 3, scale: float = 1.0) -> EGTN:
    torch.manual_seed(0)
    return EGTN(hidden=16, blocks=blocks, time_dim=8, diffusion_steps=10, scale=scale).double()


def _perturb(model, scale: float = 0.3) -> None:
    """Move every trainable parameter (zero-initialised ones included) as training would."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to float64 rounding: MKL's kernels may sum in another order for another memory
    alignment (measured: 1.7e-18 between two calls of the same module), so bitwise equality is not
    what the same computation guarantees here; a real difference (a ϕ of 1e-12) is far above this."""
    return (a - b).abs().max().item() <= 1e-15


def _base_output(base, x):
    with torch.no_grad():
        return base(x["cond"][:, -TB:], x["noisy"], x["charges"], x["edges"], x["t"])


@pytest.mark.parametrize("control", ["frame", "global", "subgraph"])
def test_at_init_the_adapted_model_is_the_base(control):
    """Equal to the base's output (float64 rounding, see _same). Global control keeps the base's
    window; subgraph control too, its control stream sees the added nodes. With a displacement scale
    ≠ 1 (the smoke's 3): a variant that assembles ε̂ itself must scale it as the base does."""
    base, x = _base(scale=3.0), _inputs(cond=TF if control == "frame" else TB, control=control)
    reference = _base_output(base, x)
    for variant in VARIANTS:
        if not fits(variant, control):
            continue
        model = build_variant(variant, base, control, TB)
        if control in ("frame", "subgraph") and variant not in ("frozen", "geoada", "controlnet"):
            continue  # the single-stream baselines see the longer window / added nodes: another input
        out = _call(model, x)
        assert _same(out, _base_output(model.base, x)) and _same(out, reference), variant


@pytest.mark.parametrize("control", ["frame", "global", "subgraph"])
def test_geoada_is_equivariant_at_float_precision_and_controlnet_is_not(control):
    """Under subgraph control the given subgraph's positions rotate and translate with the input."""
    base, x = _base(), _inputs(control=control)
    frozen = build_variant("frozen", base, control, TB)
    assert equivariance_error(frozen, x["cond"], x["noisy"], x["t"], x["charges"], x["edges"]) < 1e-12
    for variant in VARIANTS:
        if not fits(variant, control):
            continue
        model = build_variant(variant, base, control, TB)
        _perturb(model)
        error = equivariance_error(model, x["cond"], x["noisy"], x["t"], x["charges"], x["edges"], x["control"])
        if variant == "controlnet":
            assert error > 1e-2, error
        else:
            assert error < 1e-12, (variant, error)
    other = GeoAda(copy.deepcopy(base), control, TB, every=2, x_form="update").double()  # the alternative Δx
    _perturb(other)
    assert equivariance_error(other, x["cond"], x["noisy"], x["t"], x["charges"], x["edges"], x["control"]) < 1e-12
    # in float32 GeoAda's error is float32's (spec (e): "about 1e-5"); the randomly moved weights
    # amplify rounding (1.2e-4 measured under subgraph control, whose added nodes deepen the sums):
    # the float64 check above is the exact one
    model = build_variant("geoada", base, control, TB).float()
    _perturb(model)
    error32 = equivariance_error(model, x["cond"], x["noisy"], x["t"], x["charges"], x["edges"], x["control"],
                                 dtype=torch.float32)
    assert error32 < 5e-4


def test_switching_the_adapter_off_restores_the_base():
    base, x = _base(), _inputs()
    reference = _base_output(base, x)
    for equivariant in (True, False):
        model = GeoAda(base, "frame", TB, every=2, equivariant=equivariant).double()  # wraps `base` itself
        _perturb(model)
        assert not torch.allclose(_call(model, x), reference)
        model.additions = False
        assert _same(_call(model, x), reference)
        assert _same(_call(model, x, original=True), reference)  # the original task, adapter off
        model.additions = True
        # on the original task with the adapter on, the control stream reads the original input
        assert not torch.allclose(_call(model, x, original=True), reference)


@pytest.mark.parametrize("control", ["frame", "global", "subgraph"])
def test_forgetting_is_scored_both_ways_for_every_variant(control):
    """On the original task with the additions off every variant is its base (the base's figures
    stand in, except under CHANGES_BASE); with them on it differs from "off" exactly where
    ACTS_ON_ORIGINAL says (elsewhere "on" is scored as "off")."""
    base, x = _base(), _inputs(control="subgraph" if control == "subgraph" else "global")
    reference = _base_output(base, x)
    for variant in VARIANTS:
        if not fits(variant, control):
            continue
        model = build_variant(variant, base, control, TB, gpf_head=1)
        _perturb(model)
        model.additions = False
        off = _call(model, x, original=True)
        assert _same(off, _base_output(model.base, x)), variant
        assert _same(off, reference) == (variant not in CHANGES_BASE), variant
        model.additions = True
        on = _call(model, x, original=True)
        assert _same(on, off) == (variant not in ACTS_ON_ORIGINAL), variant


def test_geoada_trains_copies_of_the_first_of_every_k_blocks_and_nothing_of_the_base():
    base = _base(blocks=6)
    model = GeoAda(base, "global", TB, every=2).double()
    assert model.selected == [0, 2, 4]  # update (f): layers 0, 2, 4 of a 6-layer EGTN
    assert not any(p.requires_grad for p in model.base.parameters())
    copies = sum(p.numel() for p in model.copies.parameters())
    assert copies == 3 * sum(p.numel() for p in base.blocks[0].parameters())
    zero = sum(p.numel() for p in model.zero.parameters())
    assert zero == 3 * (1 + base.hidden)  # ϕ_x scalar + ϕ_h H-vector per copied block
    assert trainable_parameters(model) == copies + zero + sum(p.numel() for p in model.global_embed.parameters())
    # a training step moves the copies and ϕ, never the base
    before = {k: v.clone() for k, v in model.base.state_dict().items()}
    data = Windows(torch.randn(16, TB, N, 3).double(), torch.randn(16, H, N, 3).double(),
                   torch.ones(16, N).double(), torch.ones(16, N, N).double(), torch.rand(16).double() + 0.5)
    train(model, data, Schedule.linear(10), steps=3, batch_size=8, lr=1e-2, seed=0)
    assert all(torch.equal(before[k], v) for k, v in model.base.state_dict().items())
    assert any(z.phi_x.detach().item() != 0 for z in model.zero.values())


def test_partial_k_trains_the_last_k_blocks_only():
    model = build_variant("partial_k", _base(), "frame", TB, last_k=1)
    trainable = {n.split(".")[1] for n, p in model.base.named_parameters() if p.requires_grad}
    assert trainable == {"2"}


def test_schedule_and_noise():
    s = Schedule.linear(50)
    assert s.alphas_bar[-1] < 1e-3 < s.alphas_bar[0]  # scaled linear: ≈ pure noise at T at any length
    x0, eps = torch.randn(4, 2, 3), torch.randn(4, 2, 3)
    t = torch.tensor([0, 10, 20, 49])
    a = s.alphas_bar[t].float().view(-1, 1, 1)
    assert torch.allclose(s.noise(x0, t, eps), a.sqrt() * x0 + (1 - a).sqrt() * eps)


def test_evaluate_reports_average_and_min_over_samples():
    """With an oracle ε (the one whose x̂_0 is the truth at every step) sampling returns the truth:
    ADE = FDE = 0; min ≤ average for any model."""
    s = Schedule.linear(10)
    g = torch.Generator().manual_seed(0)
    target = torch.randn(6, H, N, 3, generator=g, dtype=torch.float64)
    cond = torch.randn(6, TB, N, 3, generator=g, dtype=torch.float64)
    data = Windows(cond, target, torch.ones(6, N).double(), torch.ones(6, N, N).double())

    class Oracle(torch.nn.Module):
        def forward(self, c, noisy, t, charges, edges, control, original=False):
            k = len(noisy) // len(target)
            truth = target.repeat(k, 1, 1, 1) - cond.repeat(k, 1, 1, 1)[:, -1:]  # the displacement
            a = s.alphas_bar[t].view(-1, 1, 1, 1).to(noisy.dtype)
            return (noisy - a.sqrt() * truth) / (1 - a).sqrt()

    exact = evaluate(Oracle(), data, s, samples=3, seed=0)
    assert exact["ade"] < 1e-9 and exact["fde"] < 1e-9 and exact["min_ade"] < 1e-9
    scores = evaluate(build_variant("frozen", _base(), "frame", TB), data, s, samples=3, seed=0)
    assert scores["min_ade"] <= scores["ade"] and scores["min_fde"] <= scores["fde"] and scores["ade"] > 0.1


def test_sampling_commutes_with_translations():
    """DDPM sampling commutes with translations of the conditioning frames, for the same noise (the
    diffused displacements are translation-invariant)."""
    base = _base()
    model = build_variant("geoada", base, "frame", TB)
    _perturb(model, scale=0.02)  # a trained-like adapter (a large random one makes the chain chaotic)
    x = _inputs()
    s = Schedule.linear(10)

    def run(cond):
        return sample(lambda c, z, t: model(c, z, t, x["charges"], x["edges"]), s, cond, H,
                      torch.Generator().manual_seed(3))

    b = torch.tensor([1.5, -2.0, 0.7], dtype=torch.float64)
    assert torch.allclose(run(x["cond"] + b), run(x["cond"]) + b, atol=1e-9)


def test_subgraph_coupling_adds_the_given_nodes_and_the_control_reaches_the_output():
    """C appends the given particles with their positions at every frame and q_i q_j edges; D drops
    them: the output covers the N particles; a trained GeoAda's output depends on the given future,
    the frozen base's does not."""
    x = _inputs(cond=TB, control="subgraph")
    (extra_x, extra_q), edges = couple_subgraph(x["cond"], x["control"], x["charges"], x["edges"])
    assert extra_x.shape == (3, TB + H, 2, 3) and torch.equal(extra_x[:, :TB], x["cond"][:, :, :2])
    assert torch.equal(extra_x[:, TB:], x["control"]) and torch.equal(extra_q, x["charges"][:, :2])
    assert edges.shape == (3, N + 2, N + 2) and torch.equal(edges[:, :N, :N], x["edges"])
    assert torch.equal(edges[:, N, :N], x["charges"][:, 0, None] * x["charges"][:, :N])
    base = _base()
    for variant in ("geoada", "full_ft", "gpf_plus", "prompt_template", "mlp_k"):
        model = build_variant(variant, base, "subgraph", TB)
        _perturb(model)
        out = _call(model, x)
        assert out.shape == x["noisy"].shape
        other = dict(x, control=x["control"] + 1.0)
        assert not torch.allclose(_call(model, other), out), variant
    frozen = build_variant("frozen", base, "subgraph", TB)
    assert torch.equal(_call(frozen, dict(x, control=x["control"] + 1.0)), _call(frozen, x))


def test_gpf_plus_mixes_basis_prompts_by_attention_per_node():
    """Node i's prompt is Σ_j softmax_j(a_jᵀ h_i) p_j (Fang et al.): a convex combination of the k
    basis prompts, another one per node; zero basis at init; k·H + H·k trainable parameters, plus
    the EGTN head's blocks and gate (GPF and GPF-plus train one, update (f))."""
    base = _base()
    block = sum(p.numel() for p in base.blocks[0].parameters())
    model = GPFPlus(copy.deepcopy(base), "frame", TB, basis=3, head=0).double()
    assert trainable_parameters(model) == 3 * 16 + 16 * 3
    assert trainable_parameters(GPFPlus(copy.deepcopy(base), "frame", TB, basis=3, head=2)) == 3 * 16 + 16 * 3 + 2 * block + 1
    h = torch.randn(2, 4, N, 16, dtype=torch.float64)
    assert torch.equal(model.node_prompts(h), torch.zeros_like(h))
    with torch.no_grad():
        model.basis.copy_(torch.eye(3, 16, dtype=torch.float64))
    weights = model.node_prompts(h)[..., :3]  # with unit basis vectors the prompt is the weights
    assert torch.allclose(weights.sum(-1), torch.ones(2, 4, N, dtype=torch.float64))
    assert torch.allclose(weights, (h @ model.attention.weight.T).softmax(-1))
    assert not torch.allclose(weights[:, :, 0], weights[:, :, 1])


def test_gpf_trains_a_prompt_and_a_gated_egtn_head_on_the_frozen_base():
    """GPF: the prompt (H) and a k-block EGTN head gated by a zero ϕ (k·block + 1), nothing of the
    base; at init the base's output even on the longer frame-control window's single stream (the head
    gated off, the prompt zero: the base reading that window); a training step moves the head's gate."""
    base = _base()
    block = sum(p.numel() for p in base.blocks[0].parameters())
    model = build_variant("gpf", base, "frame", TB, gpf_head=3)
    assert len(model.head) == 3 and trainable_parameters(model) == 16 + 3 * block + 1
    assert not any(p.requires_grad for p in model.base.parameters())
    x = _inputs(cond=TF)
    with torch.no_grad():
        reference = base(x["cond"], x["noisy"], x["charges"], x["edges"], x["t"])
    assert _same(_call(model, x), reference)
    data = Windows(torch.randn(16, TF, N, 3).double(), torch.randn(16, H, N, 3).double(),
                   torch.ones(16, N).double(), torch.ones(16, N, N).double())
    train(model, data, Schedule.linear(10), steps=2, batch_size=8, lr=1e-2, seed=0)
    assert model.gate.detach().item() != 0


def test_prompt_template_marks_only_what_the_coupling_added_and_refuses_global_control():
    base = _base()
    x = _inputs(cond=TF)
    model = build_variant("prompt_template", base, "frame", TB)
    seen = {}
    model.base.embed.register_forward_hook(lambda m, i, o: seen.setdefault("h", o))
    with torch.no_grad():
        model.prompt.fill_(1.0)
    shifts = []
    original_forward = model.base.forward

    def spy(*args, **kw):
        shifts.append(kw["h_shift"])
        return original_forward(*args, **kw)

    model.base.forward = spy
    _call(model, x)
    mask = shifts[0][..., 0]  # (T, N): 1 on the frames C added in front of the base's window
    assert mask[:TF - TB].eq(1).all() and mask[TF - TB:].eq(0).all()
    with pytest.raises(ValueError, match="does not fit global control"):
        build_variant("prompt_template", base, "global", TB)


def test_an_edge_attribute_of_zero_is_no_edge():
    """MD17's 3-bond-hop graph: messages pass only where the edge attribute is nonzero, so node 0's
    update ignores node 4 when they are not joined, and not when they are."""
    from paperline.methods.geoada.egtn import ESLayer

    torch.manual_seed(0)
    layer = ESLayer(16).double()
    g = torch.Generator().manual_seed(0)
    h, x = torch.randn(1, 2, N, 16, generator=g, dtype=torch.float64), torch.randn(1, 2, N, 3, generator=g, dtype=torch.float64)
    moved = x.clone()
    moved[:, :, 4] += 1.0
    joined = torch.ones(1, N, N, dtype=torch.float64)
    apart = joined.clone()
    apart[:, 0, 4] = apart[:, 4, 0] = 0
    with torch.no_grad():
        for edges, ignores in ((apart, True), (joined, False)):
            (h0, x0), (h1, x1) = layer(h, x, edges), layer(h, moved, edges)
            assert torch.equal(h0[:, :, 0], h1[:, :, 0]) == ignores
            assert torch.equal(x0[:, :, 0], x1[:, :, 0]) == ignores


def test_the_block_count_ablation_copies_that_many_blocks_spread_evenly():
    assert copied_blocks(6, 2) == [0, 2, 4] == copied_blocks(6, 2, 3)  # update (f)'s B = 3 either way
    assert [copied_blocks(6, 2, b) for b in (1, 2, 4, 5)] == [[0], [0, 3], [0, 1, 3, 4], [0, 1, 2, 3, 4]]
    model = build_variant("geoada", _base(blocks=6), "frame", TB, copied=4)
    assert model.selected == [0, 1, 3, 4] and sorted(model.copies) == ["0", "1", "3", "4"]
    with pytest.raises(ValueError, match="copied blocks 7: between 1 and the base's 6"):
        copied_blocks(6, 2, 7)
