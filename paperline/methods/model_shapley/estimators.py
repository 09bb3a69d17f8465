"""The closed form and its block-Fisher estimator, with the baselines' scores (spec §b).

Parameter game: players are parameters, the value of a coalition S is the loss of the model with
the others set to 0, u(S) = L(θ_S). On a quadratic L the Shapley value is exactly

    φᵢ = θᵢ gᵢ − ½ θᵢ (Hθ)ᵢ,   Σᵢ φᵢ = L(θ) − L(0)   (efficiency),

g = ∇L(θ): expanding around 0, the linear term θᵢ(g − Hθ)ᵢ goes to i alone and each interaction
θᵢH_ijθⱼ is split equally. [I] This form is our derivation (spec §b, [I-derived]); the paper's
Remark 4.7 and the CV code write −gθ − ½θ(Hθ) (`paper_phi`, spec §g): the two terms then have the
same sign, which no quadratic game gives; it is kept as the variant `paper_sign`. A unit (a
neuron's row, a head's rows, a layer) is a group of players: its Shapley value in the game whose
players are the groups is the sum of its parameters' φ (`unit_sums`), exactly, on a quadratic L.

Ranking: both official benchmarks rank units by |Φ| (NLP-Benchmark `torch.abs(param_value)` before
the argsort; CV-Benchmark `torch.abs(param_shapley_value)`), so the method's row `model_shapley`
is |Φ|. φ is the share of the *loss*: removing an important unit raises the loss, so its φ is
negative, and the signed ranking −Φ is kept as the variant `model_shapley_signed` (|·| hides the
sign, spec §f). The NLP code's `calculate_shapley()` multiplies the cooperative term by 0.0,
leaving the first-order |Σ g·θ|: that is our `grad_weight` row, named for what it computes.

H ≈ block Fisher F_b = E[g_b g_bᵀ] over per-example gradients of one weight block. Over mini-batches
g is a running mean and, by default, so are Fθ and diag F: the official code sums each batch's
score, linear in that batch's g and F, with equal weights, which is the score of the uniform means
(`fisher_rho=None`). The spec's reading (§b), an EWMA F ← ρF + (1−ρ)F̂ with g still a running mean
[I: the first batch initialises it], is the variant `fisher_rho=ρ`. F is never formed:
(Fθ)ᵢ = E[gᵢ (g·θ)] (spec §b's trick); the per-example gradients of a linear layer come from the
one backward of the batch (the layer's input and output gradient: G_n = Σ_t δ_ntᵀ x_nt).
Two Fishers [I]: `empirical` (gradients of the true labels, the backward that also gives g: one
backward per batch) and `sampled` (labels drawn from the model's own predictive distribution, the
Fisher information, which for a block that the logits are piecewise linear in, as a ReLU MLP's
first layer, is in expectation that block's exact Hessian (Gauss-Newton); a second backward per
batch). Measured on the digits MLP the empirical Fisher ranks neurons far worse (docs); `sampled`
is the default, `model_shapley_empirical` the row with the empirical one. The spec's code uses the
batch-mean gradient Gram GGᵀ instead, under bf16 autocast (spec §f): here gradients are float32 and
the statistics float64.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


def _check_same(name_a: str, a: torch.Tensor, name_b: str, b: torch.Tensor) -> None:
    for name, t in ((name_a, a), (name_b, b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name}: expected a floating-point tensor, got dtype {t.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"{name_b}: shape {tuple(b.shape)} does not match {name_a}'s {tuple(a.shape)}")


def closed_form_phi(theta: torch.Tensor, grad: torch.Tensor, h_theta: torch.Tensor) -> torch.Tensor:
    """φ = θ⊙g − ½θ⊙(Hθ), elementwise (the exact Shapley value of the quadratic game)."""
    _check_same("theta", theta, "grad", grad)
    _check_same("theta", theta, "h_theta", h_theta)
    return theta * grad - 0.5 * theta * h_theta


def paper_phi(theta: torch.Tensor, grad: torch.Tensor, h_theta: torch.Tensor) -> torch.Tensor:
    """The paper's Remark 4.7 / CV code form −θ⊙g − ½θ⊙(Hθ) (spec §g), ranked by |·| as its code."""
    _check_same("theta", theta, "grad", grad)
    _check_same("theta", theta, "h_theta", h_theta)
    return -theta * grad - 0.5 * theta * h_theta


def per_example_grads(inputs: torch.Tensor, output_grads: torch.Tensor, bias: bool) -> torch.Tensor:
    """Per-example gradients (N, out, in[+1]) of a linear layer's [W | b] from its inputs (N, [T,] in)
    and the per-example loss gradients of its outputs (N, [T,] out): G_n = Σ_t δ_ntᵀ [x_nt, 1]."""
    if inputs.dim() != output_grads.dim() or inputs.dim() not in (2, 3) or inputs.shape[:-1] != output_grads.shape[:-1]:
        raise ValueError(f"inputs {tuple(inputs.shape)} and output_grads {tuple(output_grads.shape)}: expected "
                         "(N, [T,] in) and (N, [T,] out) with the same N and T")
    if inputs.dim() == 2:
        inputs, output_grads = inputs[:, None], output_grads[:, None]
    if bias:
        inputs = torch.cat([inputs, inputs.new_ones(inputs.shape[:2] + (1,))], dim=-1)
    return torch.einsum("nto,nti->noi", output_grads, inputs)


def block_theta(layer: nn.Linear) -> torch.Tensor:
    """[W | b] of a linear layer (out, in[+1]), detached: the block's parameters as one matrix."""
    w = layer.weight.detach()
    return torch.cat([w, layer.bias.detach()[:, None]], dim=1) if layer.bias is not None else w


def _running(old: torch.Tensor | None, new: torch.Tensor, seen: int, rho: float | None) -> torch.Tensor:
    """The estimate after `seen` earlier batches and this one: their uniform mean (rho None) or the
    EWMA ρ·old + (1−ρ)·new, the first batch initialising either (no zero-start bias)."""
    if old is None:
        return new
    return old + (new - old) / (seen + 1) if rho is None else rho * old + (1 - rho) * new


@dataclass
class BlockStatistics:
    """Running estimates of one block over mini-batches: g (always a uniform mean), Fθ (no F formed)
    and diag F (for OBD), uniform means (official) or EWMAs with ρ = `fisher_rho` (the spec's)."""

    fisher_rho: float | None = None
    batches: int = 0
    grad: torch.Tensor | None = None
    f_theta: torch.Tensor | None = None
    f_diag: torch.Tensor | None = None

    def update(self, grads: torch.Tensor, theta: torch.Tensor) -> None:
        """One mini-batch of per-example gradients (N, *θ.shape) of the block at θ."""
        if grads.shape[1:] != theta.shape:
            raise ValueError(f"per-example gradients {tuple(grads.shape)} do not fit the block θ {tuple(theta.shape)}")
        grads = grads.to(torch.float64)
        theta = theta.to(torch.float64)
        s = (grads * theta).flatten(1).sum(1)  # g_n·θ per example
        self.grad = _running(self.grad, grads.mean(0), self.batches, None)
        self.f_theta = _running(self.f_theta, (s.view(-1, *[1] * theta.dim()) * grads).mean(0), self.batches,
                                self.fisher_rho)
        self.f_diag = _running(self.f_diag, grads.square().mean(0), self.batches, self.fisher_rho)
        self.batches += 1


def formed_fisher(batches: list[torch.Tensor], fisher_rho: float | None) -> torch.Tensor:
    """The block Fisher formed (P × P) from per-example gradient batches, averaged as BlockStatistics:
    the primal check of the no-F trick (tests), never used by a run."""
    fisher = None
    for seen, grads in enumerate(batches):
        flat = grads.to(torch.float64).flatten(1)
        fisher = _running(fisher, flat.T @ flat / len(flat), seen, fisher_rho)
    if fisher is None:
        raise ValueError("no gradient batches")
    return fisher


@dataclass
class Attribution:
    """Per-block parameter scores, each (out, in[+1]) like the block: what the rankings sum."""

    theta: dict[str, torch.Tensor] = field(default_factory=dict)
    states: dict[str, BlockStatistics] = field(default_factory=dict)  # true labels: g, empirical F
    fisher: dict[str, BlockStatistics] = field(default_factory=dict)  # sampled labels: F (none: empirical)

    def scores(self, name: str) -> dict[str, torch.Tensor]:
        theta, state = self.theta[name].to(torch.float64), self.states[name]
        fisher = self.fisher.get(name, state)
        # every block's statistics have seen a batch (attribute's)
        assert state.grad is not None and state.f_theta is not None
        assert fisher.f_theta is not None and fisher.f_diag is not None
        return {"magnitude": theta.abs(),
                "grad_weight": theta * state.grad,
                "obd": 0.5 * theta.square() * fisher.f_diag,
                "phi": closed_form_phi(theta, state.grad, fisher.f_theta),
                "paper_phi": paper_phi(theta, state.grad, fisher.f_theta),
                "phi_empirical": closed_form_phi(theta, state.grad, state.f_theta)}


def unit_sums(scores: torch.Tensor, group: int = 1) -> torch.Tensor:
    """Scores summed per unit: a unit is `group` consecutive rows (1: a neuron; head_dim: a head).
    A layer's value is the sum over all its units."""
    if scores.dim() != 2:
        raise ValueError(f"scores of shape {tuple(scores.shape)}: expected a (rows, columns) block")
    if scores.shape[0] % group:
        raise ValueError(f"{scores.shape[0]} rows do not split into units of {group}")
    return scores.reshape(scores.shape[0] // group, -1).sum(1)


def unit_importance(estimator: str, unit: dict[str, torch.Tensor], generator: torch.Generator | None = None
                    ) -> torch.Tensor:
    """A unit's importance under each ranking (higher: kept longer, selected first), from the
    unit sums of the block scores (`magnitude` Σ|θ|, `grad_weight` Σgθ, `obd` Σ½θ²F_ii, `phi`,
    `paper_phi`)."""
    if estimator == "magnitude":
        return unit["magnitude"]
    if estimator == "grad_weight":
        return unit["grad_weight"].abs()  # first order: the code's 0.0 factor (spec §f)
    if estimator == "obd":
        return unit["obd"]
    if estimator == "model_shapley":
        return unit["phi"].abs()  # the official ranking (both benchmarks): |Φ|
    if estimator == "model_shapley_empirical":
        return unit["phi_empirical"].abs()
    if estimator == "model_shapley_signed":
        return -unit["phi"]  # a loss share: the most negative φ is the most important unit
    if estimator == "paper_sign":
        return unit["paper_phi"].abs()  # the paper's form ranked as its code ranks
    if estimator == "random":
        if generator is None:
            raise ValueError("random: needs a generator")
        return torch.rand(unit["phi"].shape, generator=generator, dtype=torch.float64)
    raise ValueError(f"unknown estimator {estimator!r}")


class LinearGradCapture:
    """Forward hooks on linear layers that keep each layer's input and output (its gradient kept
    by the backward), so one backward of the batch-mean loss yields every block's per-example
    gradients (`per_example`)."""

    def __init__(self, layers: dict[str, nn.Linear]):
        self.layers = layers
        self.seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # name → (input, output)
        self.handles = [layer.register_forward_hook(self._hook(name)) for name, layer in layers.items()]

    def _hook(self, name: str):
        def hook(module, args, output):
            if output.requires_grad:  # a forward without grad (sampling labels) is not the batch's
                output.retain_grad()
                self.seen[name] = (args[0].detach(), output)
        return hook

    def per_example(self, name: str, examples: int) -> torch.Tensor:
        """G (N, out, in[+1]) after `loss.backward()`, the loss being the mean over `examples`
        per-example losses (so δ_n = N × the output's gradient)."""
        x, out = self.seen[name]
        if out.grad is None:
            raise RuntimeError(f"{name}: no gradient of its output (call loss.backward() first)")
        return per_example_grads(x, out.grad.detach() * examples, self.layers[name].bias is not None)

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self.seen.clear()


def attribute(model: nn.Module, layers: dict[str, nn.Linear], batches, loss_of, fisher_rho: float | None,
              sampled_loss_of=None, progress: bool = False, description: str = "fisher") -> Attribution:
    """Run `batches` (an iterable of (inputs, targets)): per batch one forward and one backward of
    `loss_of(model, inputs, targets)` (a mean over the batch's examples: g and the empirical
    Fisher) and, with `sampled_loss_of(model, inputs, generator)` (the loss of labels drawn from
    the model), a second one for the sampled Fisher. Returns each block's statistics (F averaged
    uniformly, or by an EWMA with ρ = `fisher_rho`). The
    parameters are left as they were; their .grad is cleared."""
    from tqdm.auto import tqdm

    capture = LinearGradCapture(layers)
    result = Attribution(theta={name: block_theta(layer) for name, layer in layers.items()},
                         states={name: BlockStatistics(fisher_rho) for name in layers},
                         fisher={name: BlockStatistics(fisher_rho) for name in layers} if sampled_loss_of else {})
    generator = torch.Generator().manual_seed(0)  # the labels drawn: the same every run
    was_training = model.training
    model.eval()  # [I] no dropout in these models; eval for the statistics of the model as it is
    try:
        for x, y in tqdm(batches, desc=description, disable=not progress, leave=False):
            passes = [(result.states, lambda: loss_of(model, x, y))]
            if sampled_loss_of:
                passes.append((result.fisher, lambda: sampled_loss_of(model, x, generator)))
            for states, loss in passes:
                model.zero_grad(set_to_none=True)
                loss().backward()
                for name in layers:
                    states[name].update(capture.per_example(name, len(x)), result.theta[name])
    finally:
        capture.close()
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return result
