"""Exact checks of the quantisers and of LoTA's merge (issue 21): merged == unmerged outputs bit for
bit, merged codes in [0, 2ᵇ−1], B = 0 gives exactly the quantised model; RTN/GPTQ properties."""
import pytest
import torch
from torch import nn

from paperline.methods.lota_qaf.config import AdapterSettings, LotaSettings
from paperline.methods.lota_qaf.layers import (
    LotaLinear,
    QALoraLinear,
    QuantLinear,
    select_targets,
    threshold_projection,
)
from paperline.methods.lota_qaf.quant import QuantError, check_bits, quantize_gptq, quantize_rtn, requantize
from paperline.methods.lota_qaf.tsignsgd import TSignSGD, quantile_at


def _weight(d_out=12, d_in=40, seed=0):
    return torch.randn(d_out, d_in, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_rtn_codes_on_the_grid_and_error_within_half_a_step(bits):
    w = _weight()
    qw = quantize_rtn(w, bits, 16)  # 40 columns: groups 16, 16 and a short last one of 8
    assert qw.scale.shape == (12, 3) and qw.q.dtype == torch.uint8
    assert int(qw.q.min()) >= 0 and int(qw.q.max()) <= 2 ** bits - 1
    step = qw.dequantize() - w
    s = qw.scale.float()[:, torch.arange(40) // 16]
    assert (step.abs() <= s / 2 + 1e-6).all()
    assert (torch.equal(requantize(qw.dequantize(), qw).q, qw.q))  # a grid point rounds to itself


def test_bad_bit_width_names_the_key():
    for bad in (1, 5, 16):
        with pytest.raises(QuantError, match="bits: bit width"):
            check_bits(bad)
    with pytest.raises(QuantError, match="bits"):
        quantize_rtn(_weight(), 5, 16)


def test_gptq_with_an_identity_hessian_is_rtn_and_lowers_the_output_error():
    w = _weight(16, 64)
    # H = I: no error is carried to other columns; GPTQ and RTN round the same grid
    assert torch.equal(quantize_gptq(w, torch.eye(64), 3, 16).q, quantize_rtn(w, 3, 16).q)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(512, 64, generator=gen) @ torch.randn(64, 64, generator=gen)  # correlated inputs
    H = 2 * x.t() @ x / len(x)
    for bits in (2, 3, 4):
        err = {name: float(((x @ (qw.dequantize() - w).t()) ** 2).mean())
               for name, qw in (("rtn", quantize_rtn(w, bits, 16)), ("gptq", quantize_gptq(w, H, bits, 16)))}
        assert err["gptq"] < err["rtn"], (bits, err)


def _lota(bits=2, rank=8, omega=5, seed=0):
    base = QuantLinear(quantize_rtn(_weight(24, 48, seed), bits, 16), torch.randn(24))
    layer = LotaLinear(base, rank, omega, torch.Generator().manual_seed(seed))
    return base, layer


def test_B_zero_at_start_gives_exactly_the_quantised_model():
    base, layer = _lota()
    assert set(layer.A.unique().tolist()) <= {-1.0, 0.0, 1.0} and (layer.A != 0).any()
    x = torch.randn(5, 48)
    assert torch.equal(layer(x), base(x))


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_merged_and_unmerged_outputs_are_bit_identical_and_codes_stay_on_the_grid(bits):
    base, layer = _lota(bits)
    with torch.no_grad():  # an adapter past the threshold in many places, overflow masks exercised
        layer.B.copy_(torch.randint(-1, 2, layer.B.shape, generator=torch.Generator().manual_seed(3)).float())
        layer.A.copy_(torch.sign(layer.A) + (layer.A == 0).float())
    assert layer.changed() > 0
    merged = layer.merge()
    x = torch.randn(7, 48)
    assert torch.equal(layer(x), merged(x))
    assert int(merged.q.min()) >= 0 and int(merged.q.max()) <= 2 ** bits - 1
    # the masks: T never pushes a code past the ends of the grid, so some codes sit at 0 and qmax
    assert ((merged.q.int() - base.q.int()).abs() <= 1).all()


def test_threshold_projection_masks():
    U = torch.tensor([[7.0, -7.0, 7.0, -7.0, 3.0]])
    q = torch.tensor([[3, 0, 2, 1, 1]], dtype=torch.uint8)
    assert threshold_projection(U, q, 6, 3).tolist() == [[0.0, 0.0, 1.0, -1.0, 0.0]]


def test_straight_through_gradient_and_offset_reach_A_and_B():
    base, layer = _lota()
    with torch.no_grad():
        layer.B.fill_(1.0)
    layer(torch.randn(3, 48)).sum().backward()
    assert layer.A.grad.abs().sum() > 0 and layer.B.grad.abs().sum() > 0


def test_tsignsgd_schedule_and_update():
    # steps counted from 1, as the official (`current_step += 1` before the schedule)
    assert quantile_at(1, 100) == pytest.approx(0.95 + 0.049 / 80)
    assert quantile_at(80, 100) == pytest.approx(0.999)
    assert quantile_at(81, 100) == pytest.approx(0.999 + 0.0009 / 20)
    assert quantile_at(100, 100) == pytest.approx(0.9999) == quantile_at(120, 100)  # held past T
    p = nn.Parameter(torch.zeros(1000))
    p.grad = torch.linspace(-1, 1, 1000)
    opt = TSignSGD([p], 100)
    opt.step()  # q ≈ 0.9506: the 5% largest |g| (25 pairs of equal |g|) move one level against the sign
    assert opt.moved == 50 and set(p.unique().tolist()) == {-1.0, 0.0, 1.0}
    assert (p[:25] == 1).all() and (p[-25:] == -1).all()
    p.grad = torch.full((1000,), -1.0)
    opt.step()  # all |g| equal: none above the quantile, nothing moves
    assert opt.moved == 0


def test_tsignsgd_first_step_already_has_the_step_one_quantile():
    """|g| = 0, 1, …, 10000: the quantile q sits at 10000·q. Step 1 of 100 has q = 0.95 + 0.049/80
    = 0.9506125 → σ = 9506.125, so 9507…10000 move: 494 (a schedule counted from 0 moves 500)."""
    p = nn.Parameter(torch.zeros(10001))
    p.grad = torch.arange(10001.0)
    opt = TSignSGD([p], 100)
    opt.step()
    assert opt.moved == 494 and int((p == -1).sum()) == 494


def _tenth_of_twelve_steps(grad: torch.Tensor) -> int:
    """Entries moved at step 10 of T = 12 (nine zero-gradient steps first: nothing moves)."""
    p = nn.Parameter(torch.zeros_like(grad))
    opt = TSignSGD([p], 12)
    for _ in range(9):
        p.grad = torch.zeros_like(grad)
        opt.step()
    p.grad = grad
    opt.step()
    return opt.moved


def test_tsignsgd_phase_two_starts_after_step_floor_of_0_8_t():
    """T = 12: 0.8·T = 9.6, so steps 1…9 are phase 1 and step 10 is phase 2, q = 0.999 + 0.0009·0.4/2.4
    = 0.99915. |g| = 0, …, 9999 (norm > 10: a spike): σ = 9999·0.99915 = 9990.5 and the cap
    9999·0.99995 = 9998.5, so 9991…9998 move: 8 (counted from 0, step 10 would still be phase 1,
    q = 0.99594: 41 moved)."""
    assert quantile_at(9, 12) == pytest.approx(0.95 + 0.049 * 9 / 9.6)
    assert quantile_at(10, 12) == pytest.approx(0.99915)
    assert _tenth_of_twelve_steps(torch.arange(10000.0)) == 8


def test_tsignsgd_spike_cap_is_strict():
    """As above with the two largest |g| equal (9999, 9999): the 0.99995 quantile is then exactly 9999,
    and a gradient at the cap does not move (the official's `<`): 9991…9997, 7 moved (`<=`: 9)."""
    grad = torch.arange(10000.0)
    grad[-2] = grad[-1]
    assert _tenth_of_twelve_steps(grad) == 7


def test_qalora_merges_into_the_zero_points():
    base = QuantLinear(quantize_rtn(_weight(24, 40), 3, 16))
    layer = QALoraLinear(base, 4, 8.0, torch.Generator().manual_seed(0))
    with torch.no_grad():
        layer.B.normal_(0, 0.1)
    merged = layer.merge()
    x = torch.randn(5, 40)
    assert torch.equal(merged.q, base.q)
    assert torch.allclose(layer(x), merged(x), atol=2e-2)  # the zero points rounded to fp16


def test_target_selection_names_the_key():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    assert select_targets(model, ["0", "2"]) == ["0", "2"]
    with pytest.raises(QuantError, match="target_modules: 'q_proj' names no linear layer"):
        select_targets(model, ["q_proj"])


def test_rank_above_the_width_and_omega_not_below_rank_are_refused():
    base = QuantLinear(quantize_rtn(_weight(6, 32), 4, 16))
    with pytest.raises(QuantError, match="lota.rank"):
        LotaLinear(base, 8, 6)
    with pytest.raises(QuantError, match="lota.omega"):
        LotaLinear(base, 4, 4)
    with pytest.raises(ValueError, match="omega"):
        LotaSettings(rank=4, omega=4)
    assert LotaSettings(rank=64).threshold() == 48 and AdapterSettings().rank == 8


def test_gptq_is_sequential_each_layer_from_the_already_quantised_layers_inputs():
    """quantize_model's GPTQ quantises layer by layer in forward order; the second layer's Hessian
    comes from the outputs of the quantised first layer, not the float one's."""
    from paperline.methods.lota_qaf.experiment import layer_hessian, quantize_model

    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(24, 20), nn.ReLU(), nn.Linear(20, 8))
    batches = [torch.randn(32, 24, generator=gen) for _ in range(3)]
    got = quantize_model(mlp, ["0", "2"], 2, 8, "gptq", batches)
    first = quantize_gptq(mlp[0].weight, layer_hessian(mlp, "0", batches), 2, 8)
    assert torch.equal(got[0].q, first.q)
    hidden = [torch.relu(QuantLinear(first, mlp[0].bias)(x)) for x in batches]
    h_seq = 2 * sum(x.double().t() @ x.double() for x in hidden) / sum(len(x) for x in hidden)
    second = quantize_gptq(mlp[2].weight, h_seq, 2, 8)
    assert torch.equal(got[2].q, second.q) and torch.equal(got[2].scale, second.scale)
    # the one-pass (float-input) Hessian differs, and so, at 2 bits, do the codes
    h_float = layer_hessian(mlp, "2", batches)
    assert not torch.allclose(h_float, h_seq)
    assert torch.allclose(layer_hessian(got, "2", batches), h_seq)


def test_every_adapter_init_comes_from_the_run_generator_not_the_global_stream():
    # peft draws lora_A from the global RNG, whose state depends on what ran before in the process
    # (the order in which the flow's groups get the slot): seeded from the run's generator instead
    from paperline.methods.lota_qaf.experiment import wrap

    quantized = nn.Sequential(QuantLinear(quantize_rtn(_weight(8, 16), 4, 16)), nn.ReLU(),
                              QuantLinear(quantize_rtn(_weight(4, 8, seed=1), 4, 8)))
    for method in ("lora", "lota", "qalora"):
        inits = []
        for global_seed in (1, 2):
            torch.manual_seed(global_seed)
            model, _ = wrap(quantized, method, LotaSettings(rank=4, omega=3), AdapterSettings(rank=2),
                            torch.Generator().manual_seed(0))
            inits.append([p.detach().clone() for p in model.parameters() if p.requires_grad])
        assert inits[0] and all(torch.equal(a, b) for a, b in zip(*inits)), method
