"""Model Shapley's closed form on a quadratic game (where it is the exact Shapley value), the
no-F trick against the formed block Fisher, OBD's diagonal, per-example gradients from one
backward, the paper's sign form, and clear errors on bad input."""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from paperline.methods.model_shapley import estimators as E
from paperline.methods.model_shapley.shapley import exact_shapley, marginals


@pytest.fixture(autouse=True)
def _float64():
    """Exact comparisons in float64 (restored after: the default dtype is process-wide)."""
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(dtype)


def quadratic(n: int, seed: int):
    """L(w) = c + aᵀw + ½wᵀAw (A symmetric, indefinite allowed) and a point θ."""
    g = torch.Generator().manual_seed(seed)
    a, theta = torch.randn(n, generator=g), torch.randn(n, generator=g)
    M = torch.randn(n, n, generator=g)
    A = M + M.T
    c = 0.7

    def loss(w):
        return c + w @ a + 0.5 * w @ A @ w
    return loss, a, A, theta


def loss_game(loss, theta, groups):
    """u(S) = L(θ with the players (groups of parameters) outside S set to 0)."""
    def value(masks):
        out = []
        for m in masks:
            keep = torch.zeros_like(theta)
            for present, idx in zip(m.tolist(), groups):
                if present:
                    keep[idx] = 1
            out.append(loss(theta * keep))
        return torch.stack(out)
    return value


def test_two_parameters_by_hand():
    # L = ½(w1 + w2)², θ = (1, 1): L(θ) = 2, L({1}) = L({2}) = ½, L(∅) = 0, so φ = (1, 1);
    # g = (2, 2), Hθ = (2, 2): θg − ½θ(Hθ) = 2 − 1 = 1
    theta = torch.tensor([1.0, 1.0])
    phi = E.closed_form_phi(theta, torch.tensor([2.0, 2.0]), torch.tensor([2.0, 2.0]))
    assert phi.tolist() == [1.0, 1.0]
    assert E.paper_phi(theta, torch.tensor([2.0, 2.0]), torch.tensor([2.0, 2.0])).tolist() == [-3.0, -3.0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closed_form_is_the_exact_shapley_value_of_the_quadratic_game(seed):
    n = 6
    loss, a, A, theta = quadratic(n, seed)
    grad, h_theta = a + A @ theta, A @ theta
    phi = E.closed_form_phi(theta, grad, h_theta)
    exact = exact_shapley(loss_game(loss, theta, [[i] for i in range(n)]), n)
    assert phi.tolist() == pytest.approx(exact.tolist(), abs=1e-12)
    assert float(phi.sum()) == pytest.approx(float(loss(theta) - loss(torch.zeros(n))), abs=1e-12)  # efficiency
    # the paper's form (−θg − ½θ(Hθ)) is not this game's Shapley value, and its sum is not L(θ) − L(0)
    paper = E.paper_phi(theta, grad, h_theta)
    assert (paper - exact).abs().max() > 1e-3
    assert abs(float(paper.sum()) - float(loss(theta) - loss(torch.zeros(n)))) > 1e-3


def test_unit_sums_are_the_exact_shapley_value_of_the_group_game():
    """A neuron (a row of a block) is a group of players: Φ_u = Σ_{i∈u} φᵢ exactly."""
    rows, cols = 4, 3
    loss, a, A, theta = quadratic(rows * cols, 3)
    phi = E.closed_form_phi(theta, a + A @ theta, A @ theta).view(rows, cols)
    groups = [list(range(r * cols, (r + 1) * cols)) for r in range(rows)]
    exact = exact_shapley(loss_game(loss, theta, groups), rows)
    assert E.unit_sums(phi).tolist() == pytest.approx(exact.tolist(), abs=1e-12)
    # heads: units of 2 rows; a layer: all rows
    assert E.unit_sums(phi, 2).tolist() == pytest.approx([float(phi[:2].sum()), float(phi[2:].sum())], abs=1e-12)
    assert float(E.unit_sums(phi, rows)[0]) == pytest.approx(float(loss(theta) - loss(torch.zeros(rows * cols))))


def test_all_permutations_give_the_exact_value():
    n = 4
    loss, a, A, theta = quadratic(n, 4)
    value = loss_game(loss, theta, [[i] for i in range(n)])
    orders = torch.tensor(list(itertools.permutations(range(n))))
    assert marginals(value, orders).mean(0).tolist() == pytest.approx(exact_shapley(value, n).tolist(), abs=1e-12)


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))


def batch(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 5, generator=g), torch.randint(3, (n,), generator=g)


def per_example_autograd(model, x, y):
    layer = model[0]
    out = []
    for i in range(len(x)):
        gw, gb = torch.autograd.grad(F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]), [layer.weight, layer.bias])
        out.append(torch.cat([gw, gb[:, None]], 1))
    return torch.stack(out)


def test_per_example_gradients_from_one_backward_equal_autograd_per_example():
    model = mlp()
    x, y = batch(7, 0)
    capture = E.LinearGradCapture({"h": model[0]})
    F.cross_entropy(model(x), y).backward()
    got = capture.per_example("h", len(x))
    capture.close()
    assert torch.allclose(got, per_example_autograd(model, x, y), atol=1e-12)


@pytest.mark.parametrize("fisher_rho", [None, 0.8])
def test_no_f_trick_and_obd_diagonal_equal_the_formed_block_fisher(fisher_rho):
    model = mlp(1)
    batches = [batch(6, s) for s in range(3)]
    result = E.attribute(model, {"h": model[0]}, batches, lambda m, x, y: F.cross_entropy(m(x), y), fisher_rho)
    formed = E.formed_fisher([per_example_autograd(model, x, y) for x, y in batches], fisher_rho)
    theta = E.block_theta(model[0])
    state = result.states["h"]
    assert torch.allclose(state.f_theta.flatten(), formed @ theta.flatten(), atol=1e-12)
    assert torch.allclose(state.f_diag.flatten(), formed.diagonal(), atol=1e-12)
    mean_grad = sum(per_example_autograd(model, x, y).mean(0) for x, y in batches) / 3  # g: a mean either way
    assert torch.allclose(state.grad, mean_grad, atol=1e-12)
    scores = result.scores("h")
    assert torch.allclose(scores["obd"], 0.5 * theta ** 2 * formed.diagonal().view_as(theta), atol=1e-12)
    assert torch.allclose(scores["phi"], theta * mean_grad - 0.5 * theta * (formed @ theta.flatten()).view_as(theta),
                          atol=1e-12)
    assert model[0].weight.grad is None  # nothing left behind


def three_batches() -> list[torch.Tensor]:
    """Per-example gradients (1 example, block 1×2) of three batches: g = [1, 0], [0, 1], [1, 1]."""
    return [torch.tensor([[[1.0, 0.0]]]), torch.tensor([[[0.0, 1.0]]]), torch.tensor([[[1.0, 1.0]]])]


def test_official_average_weights_every_batch_equally():
    """θ = [1, 2]. Per batch g·θ = 1, 2, 3, so Fθ = (g·θ)g = [1, 0], [0, 2], [3, 3] and diag F = g².
    The official code sums each batch's score θg − ½θ(F_bθ) = [0.5, 0], [0, 0], [−0.5, −1]: [0, −1],
    a third of it is φ of the uniform means g = [2/3, 2/3], Fθ = [4/3, 5/3]: [0, −1/3]. (The old
    EWMA of g and F with ρ = 0.5 gives g = [3/4, 3/4], Fθ = [7/4, 2].)"""
    theta = torch.tensor([[1.0, 2.0]])
    state = E.BlockStatistics()
    for grads in three_batches():
        state.update(grads, theta)
    assert torch.allclose(state.grad, torch.tensor([[2 / 3, 2 / 3]]), atol=1e-15)
    assert torch.allclose(state.f_theta, torch.tensor([[4 / 3, 5 / 3]]), atol=1e-15)
    assert torch.allclose(state.f_diag, torch.tensor([[2 / 3, 2 / 3]]), atol=1e-15)
    phi = E.closed_form_phi(theta, state.grad, state.f_theta)
    assert torch.allclose(phi, torch.tensor([[0.0, -1 / 3]]), atol=1e-15)
    assert state.batches == 3


def test_spec_average_is_an_ewma_of_f_only():
    """The spec's reading, ρ = 0.5: Fθ = [1, 0] → [0.5, 1] → [1.75, 2], diag F [1, 0] → [0.5, 0.5] →
    [0.75, 0.75]; g stays the uniform mean [2/3, 2/3] (the old EWMA of g gave [3/4, 3/4])."""
    theta = torch.tensor([[1.0, 2.0]])
    state = E.BlockStatistics(fisher_rho=0.5)
    for grads in three_batches():
        state.update(grads, theta)
    assert torch.allclose(state.grad, torch.tensor([[2 / 3, 2 / 3]]), atol=1e-15)
    assert torch.allclose(state.f_theta, torch.tensor([[1.75, 2.0]]), atol=1e-15)
    assert torch.allclose(state.f_diag, torch.tensor([[0.75, 0.75]]), atol=1e-15)


def test_the_estimator_config_chooses_the_average():
    from paperline.methods.model_shapley.config import EstimatorConfig

    assert EstimatorConfig().fisher_rho is None  # the official uniform mean is the default
    assert EstimatorConfig(fisher_average="ewma", rho=0.8).fisher_rho == 0.8
    assert EstimatorConfig(rho=0.8).fisher_rho is None  # ρ only matters for the EWMA


def test_sampled_fisher_is_a_second_pass_and_g_stays_the_true_labels():
    model = mlp(2)
    batches = [batch(6, s) for s in range(2)]
    loss = lambda m, x, y: F.cross_entropy(m(x), y)  # noqa: E731

    def sampled(m, x, g):
        with torch.no_grad():
            labels = torch.multinomial(F.softmax(m(x), -1), 1, generator=g).squeeze(1)
        return F.cross_entropy(m(x), labels)
    both = E.attribute(model, {"h": model[0]}, batches, loss, None, sampled)
    true_only = E.attribute(model, {"h": model[0]}, batches, loss, None)
    assert torch.equal(both.states["h"].grad, true_only.states["h"].grad)
    assert not torch.equal(both.fisher["h"].f_theta, true_only.states["h"].f_theta)
    s = both.scores("h")
    theta = both.theta["h"]
    assert torch.equal(s["phi"], E.closed_form_phi(theta, both.states["h"].grad, both.fisher["h"].f_theta))
    assert torch.equal(s["phi_empirical"], E.closed_form_phi(theta, both.states["h"].grad, both.states["h"].f_theta))


def test_importances_and_their_signs():
    unit = {"magnitude": torch.tensor([1.0, 2.0]), "grad_weight": torch.tensor([-3.0, 1.0]),
            "obd": torch.tensor([0.5, 0.1]), "phi": torch.tensor([-2.0, 1.0]), "paper_phi": torch.tensor([0.5, -4.0]),
            "phi_empirical": torch.tensor([1.0, -1.0])}
    assert E.unit_importance("model_shapley", unit).tolist() == [2.0, 1.0]  # |Φ|: the official ranking
    assert E.unit_importance("model_shapley_signed", unit).tolist() == [2.0, -1.0]  # −Φ: a loss share
    assert E.unit_importance("grad_weight", unit).tolist() == [3.0, 1.0]  # the code's 0.0 factor: |Σgθ|
    assert E.unit_importance("paper_sign", unit).tolist() == [0.5, 4.0]
    assert E.unit_importance("model_shapley_empirical", unit).tolist() == [1.0, 1.0]  # |Φ|, empirical F
    assert E.unit_importance("obd", unit).tolist() == [0.5, 0.1]
    with pytest.raises(ValueError, match="unknown estimator 'taylor'"):
        E.unit_importance("taylor", unit)


def test_the_method_ranks_by_absolute_phi():
    """Φ = [−2, 1, −0.5]: the official |Φ| = [2, 1, 0.5] selects units 0 and 1 first and prunes unit 2
    first; the signed −Φ = [2, −1, 0.5] selects 0 and 2 and prunes unit 1 first."""
    from paperline.methods.model_shapley.ranking import keep_masks, top_units

    unit = {"phi": torch.tensor([-2.0, 1.0, -0.5])}
    official, signed = E.unit_importance("model_shapley", unit), E.unit_importance("model_shapley_signed", unit)
    assert top_units(official, 2 / 3) == [0, 1] and top_units(signed, 2 / 3) == [0, 2]
    assert keep_masks(official, [1 / 3]).tolist() == [[True, True, False]]
    assert keep_masks(signed, [1 / 3]).tolist() == [[True, False, True]]


def test_bad_input_is_named():
    theta = torch.ones(3, 2)
    with pytest.raises(ValueError, match=r"grad: shape \(2, 3\) does not match theta's \(3, 2\)"):
        E.closed_form_phi(theta, torch.ones(2, 3), torch.ones(3, 2))
    with pytest.raises(TypeError, match="h_theta: expected a floating-point tensor, got dtype torch.int64"):
        E.closed_form_phi(theta, torch.ones(3, 2), torch.ones(3, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="grad: expected a torch tensor, got list"):
        E.paper_phi(theta, [1.0], torch.ones(3, 2))
    with pytest.raises(ValueError, match=r"per-example gradients \(4, 2, 2\) do not fit the block θ \(3, 2\)"):
        E.BlockStatistics().update(torch.ones(4, 2, 2), theta)
    with pytest.raises(ValueError, match="5 rows do not split into units of 2"):
        E.unit_sums(torch.ones(5, 2), 2)
    with pytest.raises(ValueError, match=r"inputs \(4, 3\) and output_grads \(5, 2\)"):
        E.per_example_grads(torch.ones(4, 3), torch.ones(5, 2), bias=True)
