"""The deep unconstrained-feature model (UFM) under cross-entropy, linear or ReLU.

    H1 ∈ R^{d×N} free, W_1..W_{L−1} ∈ R^{d×d}, W_L ∈ R^{K×d}, no biases
    H_{l+1} = W_l H_l (linear) or ReLU(W_l H_l),   Z = W_L H_L
    objective = mean_i CE(z_i, y_i) + (λ/2)(‖H1‖² + Σ_l ‖W_l‖²)

float64, full batch. All seeds of one (K, L, d) train together: every parameter carries a leading
seed axis S and products are batched matmuls. A seed's gradient involves only its own slice and
Adam and GD are elementwise, so seeds never mix; each seed is initialised from its own generator
and stops on its own gradient norm, so its run does not depend on which other seeds share the batch.
Schedule (spec §c, its recommendation): Adam for adam_steps, then plain GD until the seed's
gradient norm is below grad_tol or gd_steps run out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from paperline.methods.dnc import metrics, theory
from paperline.methods.dnc.config import DNCConfig
from paperline.train.checkpoint import Resumable

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8

# is_dnc: besides the objective tolerance (cfg.dnc_objective_tol), Z must have numerical rank K−1
# at ε = 1e-3, near-equal nonzero singular values and simplex-ETF class means.
DNC_SIGMA_RATIO = 0.95  # σ_{K−1}/σ_1 of Z
DNC_NC2_TOL = 0.05  # NC2-ETF of the class means of Z


@dataclass
class UFMGroupResult:
    K: int
    L: int
    width: int
    activation: str
    f_dnc_star: float
    seeds: list[dict]  # per-seed final metrics, see seed_metrics
    history: dict  # {"step": [...], "objective": [[...] per seed], "grad_norm": [[...] per seed]}
    Z: torch.Tensor | None = field(default=None, repr=False)  # final logits (S, K, N); not in to_dict

    def to_dict(self) -> dict:
        return json_safe({"K": self.K, "L": self.L, "width": self.width, "activation": self.activation,
                           "f_dnc_star": self.f_dnc_star, "seeds": self.seeds, "history": self.history})

    @classmethod
    def from_dict(cls, d: dict) -> "UFMGroupResult":
        return cls(**d)


def json_safe(obj: Any) -> Any:
    """Plain JSON: NaN/inf (a diverged seed, a 0/0 normalisation of a zero matrix) become None."""
    if isinstance(obj, float):
        return obj if np.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


# ---------------------------------------------------------------- model
# All parameters of all seeds live in one flat float64 tensor θ of shape (S, P), with
# [H1, W_1, .., W_L] as (S, rows, cols) views into it: Adam, GD and the gradient norm are then a
# handful of tensor ops per step whatever L is (these matrices are tiny, so per-op overhead dominates).

def param_shapes(K: int, L: int, width: int, N: int) -> list[tuple[int, int]]:
    return [(width, N)] + [(width, width)] * (L - 1) + [(K, width)]


def unflatten(theta: torch.Tensor, shapes: list[tuple[int, int]]) -> list[torch.Tensor]:
    """[H1, W_1, .., W_L] as views of θ (S, P)."""
    out, offset = [], 0
    for rows, cols in shapes:
        out.append(theta[:, offset:offset + rows * cols].view(-1, rows, cols))
        offset += rows * cols
    return out


def labels_for(K: int, n: int, device: torch.device) -> torch.Tensor:
    """Class-major labels: column c·n + i belongs to class c."""
    return torch.arange(K, device=device).repeat_interleave(n)


def generator_seed(base_seed: int, K: int, L: int, width: int, seed_index: int) -> int:
    """Seed of one run's generator. The group (K, L, width) is part of it so that seeds of different
    widths are independent draws (a fraction-vs-width comparison needs that), not prefixes of one
    random stream."""
    return int(np.random.SeedSequence([base_seed, K, L, width, seed_index]).generate_state(1)[0])


def init_theta(cfg: DNCConfig, K: int, L: int, width: int, device: torch.device) -> torch.Tensor:
    """θ (S, P). "normal": every entry ~ N(0, init_scale²); "orthogonal": each factor a semi-orthogonal
    matrix (unit singular values) times init_scale (the spec allows both). Seed s is drawn on CPU from its own generator, so
    its draw is the same on every device and in every batch of seeds."""
    shapes = param_shapes(K, L, width, K * cfg.samples_per_class)
    rows = []
    for s in cfg.run_seeds():
        gen = torch.Generator().manual_seed(generator_seed(cfg.seed, K, L, width, s))
        factors = []
        for shape in shapes:
            if cfg.init == "normal":
                factor = torch.randn(shape, generator=gen, dtype=torch.float64)
            else:
                factor = torch.nn.init.orthogonal_(torch.empty(shape, dtype=torch.float64), generator=gen)
            factors.append(factor.flatten() * cfg.init_scale)
        rows.append(torch.cat(factors))
    return torch.stack(rows).to(device)


def forward(params: list[torch.Tensor], activation: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(Z, [H_1..H_L]) for batched params [H1, W_1..W_L]."""
    H = params[0]
    features = [H]
    for W in params[1:-1]:
        H = W @ H
        if activation == "relu":
            H = torch.relu(H)
        features.append(H)
    return params[-1] @ H, features


def cross_entropy(Z: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean CE per seed; Z is (S, K, N)."""
    correct = Z.gather(1, labels.expand(Z.shape[0], 1, -1)).squeeze(1)
    return (torch.logsumexp(Z, dim=1) - correct).mean(-1)


def objective(params: list[torch.Tensor], labels: torch.Tensor, lam: float, activation: str):
    """(objective, CE), each (S,): mean CE + (λ/2)(‖H1‖² + Σ‖W_l‖²)."""
    Z, _ = forward(params, activation)
    ce = cross_entropy(Z, labels)
    return ce + lam / 2 * sum(p.pow(2).sum((1, 2)) for p in params), ce


def objective_and_grad(theta: torch.Tensor, shapes, labels: torch.Tensor, lam: float, activation: str):
    """(objective (S,), ∇_θ objective (S, P)) by an explicit backward pass through the product
    (autograd's graph bookkeeping would cost more than these small matmuls; a test checks this
    against autograd)."""
    params = unflatten(theta, shapes)
    Z, features = forward(params, activation)
    log_p = torch.log_softmax(Z, dim=1)
    index = labels.expand(Z.shape[0], 1, -1)
    ce = -log_p.gather(1, index).squeeze(1).mean(-1)
    obj = ce + lam / 2 * theta.pow(2).sum(1)
    dZ = log_p.exp().scatter_add_(1, index, -torch.ones_like(Z[:, :1])) / Z.shape[-1]  # (softmax − Y)/N
    L = len(params) - 1
    grads: list[torch.Tensor] = [dZ] * (L + 1)  # every slot is overwritten below
    grads[L] = dZ @ features[L - 1].mT
    dH = params[L].mT @ dZ
    for l in range(L - 1, 0, -1):  # W_l maps H_l = features[l−1] to H_{l+1} = features[l]
        if activation == "relu":
            dH = dH * (features[l] > 0)
        grads[l] = dH @ features[l - 1].mT
        dH = params[l].mT @ dH
    grads[0] = dH
    return obj, torch.cat([g.flatten(1) for g in grads], 1).add_(theta, alpha=lam)


# ---------------------------------------------------------------- metrics of a trained seed

def layer_metrics(params: list[torch.Tensor], features: list[torch.Tensor], K: int, activation: str) -> list[dict]:
    """Per layer l = 1..L: spectra/ranks of W_l and H_l, and NC1–NC3 of H_l (one seed, no batch axis).
    NC3 is the classifier form at l = L and the projector form below it."""
    L = len(params) - 1
    out = []
    for l in range(1, L + 1):
        W, H = params[l], features[l - 1]
        post_relu = activation == "relu" and l >= 2  # H1 is free; H_l, l ≥ 2, are ReLU outputs
        etf, of = metrics.nc2_etf(H, K), metrics.nc2_of(H, K)
        out.append({
            "layer": l,
            "W": metrics.rank_measures(W),
            "H": metrics.rank_measures(H),
            "nc1": metrics.nc1(H, K),
            "nc1_trace": metrics.nc1_trace(H, K),
            "nc2_etf": etf,
            "nc2_of": of,
            "nc2": of if post_relu else etf,
            "nc3": metrics.nc3(W, H, K) if l == L else metrics.nc3_projector(W, H, K),
        })
    return out


def is_dnc(seed: dict, K: int, f_dnc_star: float, objective_tol: float) -> bool:
    """DNC signature of a trained seed: rank(Z) = K−1 (ε = 1e-3) with near-equal singular values,
    simplex-ETF logit class means, and objective within objective_tol (relative) of f_DNC*.
    The objective test is two-sided: a seed clearly below f_DNC* found something better than DNC."""
    sv = seed["singular_values"]
    return (seed["rank_1e-3"] == K - 1
            and sv[K - 2] / sv[0] >= DNC_SIGMA_RATIO
            and seed["Z_nc2_etf"] <= DNC_NC2_TOL
            and abs(seed["objective"] - f_dnc_star) <= objective_tol * f_dnc_star)


def seed_metrics(params_s: list[torch.Tensor], labels: torch.Tensor, cfg: DNCConfig, K: int,
                 f_dnc_star: float, initial_objective: float) -> dict:
    """Final metrics of one seed (params without the seed axis). Z's spectrum and ranks sit at the
    top level; NC1–NC3 there are those of the last layer (H_L, W_L). A seed that ends non-finite or
    above its initial objective has diverged (a descent method that worked ends lower): it gets no
    metrics, whose SVDs would fail or mean nothing on blown-up matrices."""
    batched = [p[None] for p in params_s]
    obj, ce = objective(batched, labels, cfg.lam, cfg.activation)
    if not (torch.isfinite(obj).all() and float(obj[0]) <= initial_objective):
        return {"diverged": True, "is_dnc": False, "objective": None, "ce": None, "layers": []}
    Z, features = forward(batched, cfg.activation)
    Z, features = Z[0], [H[0] for H in features]
    layers = layer_metrics(params_s, features, K, cfg.activation)
    seed = {
        "diverged": False,
        "objective": float(obj[0]),
        "ce": float(ce[0]),
        **metrics.rank_measures(Z),
        "Z_nc2_etf": metrics.nc2_etf(Z, K),
        **{k: layers[-1][k] for k in ("nc1", "nc1_trace", "nc2_etf", "nc2_of", "nc2", "nc3")},
        "layers": layers,
    }
    seed["is_dnc"] = is_dnc(seed, K, f_dnc_star, cfg.dnc_objective_tol)
    return seed


# ---------------------------------------------------------------- training

def group_fingerprint(cfg: DNCConfig, K: int, L: int, width: int) -> dict:
    """What a checkpoint must match to be resumed: every field that changes this group's training
    (the grid lists and checkpoint_every do not)."""
    fields = cfg.model_dump(exclude={"classes", "depths", "width_multipliers", "checkpoint_every"})
    return {**fields, "K": K, "L": L, "width": width}


def train_ufm_group(cfg: DNCConfig, K: int, L: int, width: int, device: torch.device,
                    checkpoint_path: Path | None = None, progress: bool = False) -> UFMGroupResult:
    """Train a deep UFM of (K, L, width) per seed of cfg.run_seeds(), together; resume from
    checkpoint_path when it holds this group's checkpoint. Checkpoints every cfg.checkpoint_every steps and once at the end (a
    finished checkpoint is reloaded, not retrained). Thread count is the caller's (it is
    process-wide): use torch.set_num_threads(1) on CPU, as 2 threads made a smoke group ~7× slower."""
    n, S = cfg.samples_per_class, len(cfg.run_seeds())
    shapes = param_shapes(K, L, width, K * n)
    labels = labels_for(K, n, device)
    total_steps = cfg.adam_steps + cfg.gd_steps
    fingerprint = group_fingerprint(cfg, K, L, width)
    f_dnc_star, _ = theory.f_dnc_min(K, n, L, cfg.lam)

    run = Resumable(checkpoint_path, fingerprint, cfg.checkpoint_every)
    saved = run.resume()
    if saved is None:
        theta = init_theta(cfg, K, L, width, device)
        adam_m, adam_v = torch.zeros_like(theta), torch.zeros_like(theta)
        step, done = 0, False
        active = torch.ones(S, dtype=torch.bool, device=device)  # GD still running for this seed
        converged_at = torch.full((S,), -1, dtype=torch.long, device=device)
        history: dict[str, list] = {"step": [], "objective": [], "grad_norm": []}  # per logged step: S values each
    else:
        theta, adam_m, adam_v, active, converged_at = (
            saved[k].to(device) for k in ("theta", "adam_m", "adam_v", "active", "converged_at"))
        step, done, history = saved["step"], saved["done"], saved["history"]

    def checkpoint(done: bool) -> None:
        run.save({"step": step, "done": done, "phase": "adam" if step < cfg.adam_steps else "gd",
                  "theta": theta.cpu(), "adam_m": adam_m.cpu(), "adam_v": adam_v.cpu(),
                  "active": active.cpu(), "converged_at": converged_at.cpu(), "history": history})

    bar = tqdm(total=total_steps, initial=step, disable=not progress or done,
               desc=f"UFM K={K} L={L} d={width}", leave=False)
    beta1, beta2 = ADAM_BETAS
    while not done and step < total_steps:
        obj, grad = objective_and_grad(theta, shapes, labels, cfg.lam, cfg.activation)
        grad_norm = grad.norm(dim=1)
        if step % cfg.log_every == 0:
            history["step"].append(step)
            history["objective"].append(obj.tolist())
            history["grad_norm"].append(grad_norm.tolist())
            if progress:
                bar.set_postfix(obj=f"{obj.min():.4f}", grad=f"{grad_norm.max():.1e}")
        if step < cfg.adam_steps:  # Adam (Kingma & Ba, as torch.optim.Adam without weight decay)
            t = step + 1
            adam_m.mul_(beta1).add_(grad, alpha=1 - beta1)
            adam_v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (adam_v / (1 - beta2 ** t)).sqrt_().add_(ADAM_EPS)
            theta.addcdiv_(adam_m, denom, value=-cfg.adam_lr / (1 - beta1 ** t))
        else:  # GD; a seed whose gradient norm is below tolerance stops for good
            newly = active & (grad_norm < cfg.grad_tol)
            converged_at[newly] = step
            active &= ~newly & torch.isfinite(obj)  # a diverged seed stops too (reported as such)
            if not active.any():
                break
            theta.sub_(grad * (cfg.gd_lr * active.to(theta.dtype))[:, None])
        step += 1
        bar.update(1)
        if run.due(step, total_steps):
            checkpoint(done=False)
    bar.close()
    if not done:
        checkpoint(done=True)

    obj, grad = objective_and_grad(theta, shapes, labels, cfg.lam, cfg.activation)
    grad_norm = grad.norm(dim=1)
    if not history["step"] or history["step"][-1] != step:
        history["step"].append(step)
        history["objective"].append(obj.tolist())
        history["grad_norm"].append(grad_norm.tolist())
    params = unflatten(theta, shapes)
    seeds = []
    for s in range(S):
        seed = seed_metrics([p[s] for p in params], labels, cfg, K, f_dnc_star, history["objective"][0][s])
        seed["seed_index"] = s
        seed["grad_norm"] = float(grad_norm[s])
        seed["converged"] = bool(converged_at[s] >= 0 or grad_norm[s] < cfg.grad_tol)
        seed["steps_run"] = int(converged_at[s]) if converged_at[s] >= 0 else step
        seeds.append(seed)
    Z, _ = forward(params, cfg.activation)
    per_seed = {k: [list(row) for row in zip(*history[k])] for k in ("objective", "grad_norm")}
    return UFMGroupResult(K=K, L=L, width=width, activation=cfg.activation, f_dnc_star=f_dnc_star,
                          seeds=seeds, history={"step": list(history["step"]), **per_seed},
                          Z=Z.cpu())
