"""AltLoRA (Yu, Wang, Chen, Xue 2025; official `optimizer_new.py`, class `altlora`), AltLoRA+,
ScaledGD and a LoRA-Pro-like step: optimizers of the LoRA factors of W = W₀ + s·B·A, with
B ∈ ℝ^{k×r}, A ∈ ℝ^{r×d}, s = α/r, and G = ∂L/∂W, so that autograd gives ∇_A = s·BᵀG, ∇_B = s·G·Aᵀ.

- AltLoRA, A-step (B fixed): ĝ_A = (BᵀB + εI)⁻¹∇_A, so B·ĝ_A = s·P_col(B)·G, the least-squares
  projection of the full gradient onto what moving A can reach. The momentum lives in the r×d factor
  space and is transported to the current B before it is used: P_A = (BᵀB + εI)⁻¹BᵀB_prev (r×r;
  B_prev: B the last time A was updated), M_A ← β₁·P_A·M_A + (1 − β₁)·ĝ_A,
  A ← A − η/(1 − β₁ᵗ)·M_A, then decoupled weight decay A ← A − η·wd·A. The B-step mirrors it:
  ĝ_B = ∇_B(AAᵀ + εI)⁻¹, P_B = A_prev·Aᵀ(AAᵀ + εI)⁻¹, M_B ← β₁·M_B·P_B + (1 − β₁)·ĝ_B.
  When both factors have gradients in one step, A is updated first and B's step uses the new A
  (the repo's order). The alternation of the repo's trainer (`logtrainer.py`, alter_freq = 10:
  one factor trains for that many steps while the other is frozen) is the optimizer's own here
  (`alter_freq`): it updates the phase's factor only and sets requires_grad so that the next
  backward pass runs through that factor alone (under DDP it zeroes the other's gradient instead,
  `zero_frozen`), so any training loop gets it, and a resumed run
  (the step count is in the param groups, hence in the state dict) continues in its phase.
- AltLoRA+ (the paper's Alg. 2, as the official `altlora_plus`): an Adam second moment on the
  projected gradient, v ← β₂v + (1 − β₂)ĝ², and the step η/(1 − β₁ᵗ)·(β₁PM + (1 − β₁)ĝ)/(√v + eps):
  v is *not* bias-corrected (so the first steps are up to 1/√(1 − β₂) ≈ 32× Adam's), and the stored
  momentum is the *untransported* M ← β₁M + (1 − β₁)ĝ, P entering this step's numerator only (spec
  §f leaves the choice open; the official's is the default). Named variants, off by default:
  `bias_correct_v` (√(v/(1 − β₂ᵗ)) + eps, Adam's) and `transport_plus_momentum` (store the
  transported momentum, AltLoRA's rule). v is elementwise and is not transported (no r×r map
  carries it).
- ScaledGD (the repo's `SGDr`): the same preconditioned steps without momentum (β₁ = 0: no state),
  both factors every step, A first.
- LoRA-Pro-like (as the repo's `AdamWr_full`, extended by LoRA-Pro's B part): the equivalent full
  gradient G̃ = B·ĝ_A + (I − P_B)·ĝ_B·A (k×d) goes through Adam with full-size k×d moments; the
  Adam step ΔW is realised by the factor steps that best reach it (ΔA = s⁻¹(BᵀB+εI)⁻¹BᵀΔW,
  ΔB = s⁻¹(I − P_B)ΔW·Aᵀ(AAᵀ+εI)⁻¹, both from the old factors): O(kd) state, which AltLoRA avoids.

The learning rate is each param group's `lr`, so a torch LR scheduler acts on every optimizer here
(the repo's altlora reads `self.defaults["lr"]`: its trainer's scheduler has no effect, spec §g).

Factors are paired by module (`lora_pairs` walks peft's LoraLayer modules), never by the order of
`named_parameters`, and the rank is read from A's shape: the repo's two pitfalls (spec §f).
State floats per k×d layer at rank r (`STATE_FLOATS`, checked against the allocated states):
AltLoRA 2(k+d)r (M_A, M_B, A_prev, B_prev), AltLoRA+ 3(k+d)r (+ v_A, v_B), ScaledGD 0,
LoRA-Pro-like 2kd, LoRA-AdamW 2(k+d)r, LoRA SGD-momentum (k+d)r, full fine-tuning with AdamW 2kd.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch
from torch import nn

# (k, d, r) -> optimizer-state floats of one adapted k×d layer
STATE_FLOATS: dict[str, Callable[[int, int, int], int]] = {
    "lora_adamw": lambda k, d, r: 2 * (k + d) * r,
    "lora_sgdm": lambda k, d, r: (k + d) * r,
    "scaledgd": lambda k, d, r: 0,
    "altlora": lambda k, d, r: 2 * (k + d) * r,
    "altlora_plus": lambda k, d, r: 3 * (k + d) * r,
    "lora_pro": lambda k, d, r: 2 * k * d,
    "full_ft": lambda k, d, r: 2 * k * d,
}


@dataclass(frozen=True)
class LoRAPair:
    """One adapted layer: A (r×d, peft's lora_A.weight), B (k×r, lora_B.weight), s = α/r."""

    name: str
    A: nn.Parameter
    B: nn.Parameter
    scale: float

    @property
    def shape(self) -> tuple[int, int, int]:
        """(k, d, r)"""
        return self.B.shape[0], self.A.shape[1], self.A.shape[0]


def lora_pairs(model: nn.Module, adapter: str = "default") -> list[LoRAPair]:
    """Every peft LoRA layer of `model` as a (A, B, s) pair, paired by module."""
    from peft.tuners.lora import LoraLayer

    pairs = [LoRAPair(name, m.lora_A[adapter].weight, m.lora_B[adapter].weight,  # type: ignore[arg-type]  # peft: a Module
                      float(m.scaling[adapter]))
             for name, m in model.named_modules() if isinstance(m, LoraLayer) and adapter in m.lora_A]
    if not pairs:
        raise ValueError(f"the model has no peft LoRA layer with adapter {adapter!r}")
    return pairs


def state_floats_formula(name: str, pairs: list[LoRAPair]) -> int:
    return sum(STATE_FLOATS[name](*pair.shape) for pair in pairs)


def count_state_floats(optimizer: torch.optim.Optimizer) -> int:
    """Floats the optimizer holds in state tensors (scalar step counters are not counted)."""
    return sum(v.numel() for state in optimizer.state.values() for v in state.values()
               if torch.is_tensor(v) and v.dim() > 0)


def phase_of(step: int, every: int) -> str:
    """The factor the alternation trains at `step` (0-based): B for `every` steps, then A, and so on.
    We start with B (spec §f: with B = 0 at the start ∇_A = s·BᵀG = 0, an A phase would waste its
    steps)."""
    return "B" if (step // every) % 2 == 0 else "A"


def _check(name: str, lr: float, betas: tuple[float, float], reg: float, weight_decay: float) -> None:
    if not lr > 0:
        raise ValueError(f"{name}: lr must be > 0, got {lr!r}")
    for i, beta in enumerate(betas):
        if not 0 <= beta < 1:
            raise ValueError(f"{name}: betas[{i}] must be in [0, 1), got {beta!r}")
    if reg < 0 or weight_decay < 0:
        raise ValueError(f"{name}: reg and weight_decay must be ≥ 0, got {reg!r}, {weight_decay!r}")


def _pair_groups(pairs: list[LoRAPair]) -> list[dict]:
    if not pairs:
        raise ValueError("no LoRA pairs to optimize")
    return [{"params": [p.A, p.B], "scale": p.scale, "name": p.name} for p in pairs]


def _up(t: torch.Tensor) -> torch.Tensor:
    """float32 at least (bf16/fp16 factors): the solves are the numerically delicate part."""
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def _gram(Y: torch.Tensor, reg: float) -> torch.Tensor:
    """YᵀY + εI (r×r)."""
    Y = _up(Y)
    return Y.T @ Y + reg * torch.eye(Y.shape[1], dtype=Y.dtype, device=Y.device)


def oriented(pair_params: list[torch.Tensor], side: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(X, Y, X.grad) with the product written Y·X, X the factor that moves (r×n), Y the fixed one
    (m×r): for A, X = A and Y = B; for B, X = Bᵀ and Y = Aᵀ (since (BA)ᵀ = AᵀBᵀ). Views: an in-place
    update of X updates the parameter."""
    A, B = pair_params
    if side == "A":
        return A, B, A.grad
    return B.T, A.T, None if B.grad is None else B.grad.T


def projected_gradient(X_grad: torch.Tensor, Y: torch.Tensor, reg: float) -> torch.Tensor:
    """ĝ = (YᵀY + εI)⁻¹∇_X: for A, (BᵀB + εI)⁻¹∇_A; for Bᵀ, (AAᵀ + εI)⁻¹∇_Bᵀ = (∇_B(AAᵀ + εI)⁻¹)ᵀ."""
    return torch.linalg.solve(_gram(Y, reg), _up(X_grad))


def transport(Y: torch.Tensor, Y_prev: torch.Tensor, reg: float) -> torch.Tensor:
    """P = (YᵀY + εI)⁻¹YᵀY_prev (r×r): the momentum kept for Y_prev·X re-expressed against Y.
    For A: P_A; for Bᵀ: (AAᵀ+εI)⁻¹A·A_prevᵀ = P_Bᵀ, the spec's P_B transposed."""
    return torch.linalg.solve(_gram(Y, reg), _up(Y).T @ _up(Y_prev))


class AltLoRA(torch.optim.Optimizer):
    """AltLoRA (second_moment False) and AltLoRA+ (True); with betas[0] = 0 and no second moment it
    is ScaledGD. `bias_correct_v`, `transport_plus_momentum`: AltLoRA+'s non-official variants (the
    module's docstring). Built from `lora_pairs(model)`: one param group [A, B] per layer. `alter_freq`:
    alternate the factors every that many steps (None: both factors every step).

    `zero_frozen`: the factor out of its phase keeps requires_grad and its gradient is zeroed by a
    hook instead, for data-parallel training: DDP syncs the parameters that required grad when it
    was built, so a factor whose requires_grad flips would leave it unsynced (and waiting for a
    gradient that never comes). The update is the same (the frozen factor is not stepped; a zero
    gradient adds nothing to a clipping norm); the backward pass computes both factors' gradients."""

    def __init__(self, pairs: list[LoRAPair], lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-4, weight_decay: float = 1e-5, reg: float = 1e-5, second_moment: bool = False,
                 alter_freq: int | None = None, zero_frozen: bool = False, bias_correct_v: bool = False,
                 transport_plus_momentum: bool = False):
        _check(type(self).__name__, lr, betas, reg, weight_decay)
        if alter_freq is not None and alter_freq < 1:
            raise ValueError(f"{type(self).__name__}: alter_freq must be ≥ 1 or None, got {alter_freq!r}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, reg=reg, second_moment=second_moment,
                        alter_freq=alter_freq, alter_step=0, bias_correct_v=bias_correct_v,
                        transport_plus_momentum=transport_plus_momentum)
        super().__init__(_pair_groups(pairs), defaults)
        self.zero_frozen = zero_frozen
        if zero_frozen and alter_freq:
            for index, group in enumerate(self.param_groups):
                for side, param in zip("AB", group["params"]):
                    param.requires_grad_(True)
                    param.register_hook(partial(self._gradient_in_phase, index, side))
        self._freeze_for_phase()

    def _gradient_in_phase(self, index: int, side: str, grad: torch.Tensor) -> torch.Tensor:
        group = self.param_groups[index]  # by index: load_state_dict replaces the group dicts
        return grad if phase_of(group["alter_step"], group["alter_freq"]) == side else torch.zeros_like(grad)

    def _freeze_for_phase(self) -> None:
        if self.zero_frozen:
            return
        for group in self.param_groups:
            if group["alter_freq"]:
                phase = phase_of(group["alter_step"], group["alter_freq"])
                group["params"][0].requires_grad_(phase == "A")
                group["params"][1].requires_grad_(phase == "B")

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._freeze_for_phase()

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            sides: tuple[str, ...] = ("A", "B")  # A first; B's preconditioner then reads the new A
            if group["alter_freq"]:
                sides = (phase_of(group["alter_step"], group["alter_freq"]),)
                group["alter_step"] += 1
            for side in sides:
                X, Y, grad = oriented(group["params"], side)
                if grad is not None:
                    self._factor_step(group, group["params"][0 if side == "A" else 1], X, Y, grad)
        self._freeze_for_phase()
        return loss

    def _factor_step(self, group: dict, param: torch.Tensor, X: torch.Tensor, Y: torch.Tensor,
                     grad: torch.Tensor) -> None:
        beta1, beta2 = group["betas"]
        reg, lr = group["reg"], group["lr"]
        g = projected_gradient(grad, Y, reg)
        state = self.state[param]
        if not state:
            state["step"] = 0
            if beta1 > 0:  # kept in the oriented r×n form
                state["momentum"] = torch.zeros_like(g)
                state["other_prev"] = _up(Y.detach()).clone()
            if group["second_moment"]:
                state["second_moment"] = torch.zeros_like(g)
        state["step"] += 1
        t = state["step"]
        if beta1 > 0:
            M = state["momentum"]
            P = transport(Y, state["other_prev"], reg)
            transported = beta1 * (P @ M) + (1 - beta1) * g
            state["other_prev"].copy_(Y)
            update = transported / (1 - beta1 ** t)
            if group["second_moment"] and not group["transport_plus_momentum"]:
                M.mul_(beta1).add_(g, alpha=1 - beta1)  # the official altlora_plus keeps M without P
            else:
                M.copy_(transported)
        else:
            update = g
        if group["second_moment"]:
            v = state["second_moment"]
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            v_hat = v / (1 - beta2 ** t) if group["bias_correct_v"] else v  # the official: no correction
            update = update / (v_hat.sqrt() + group["eps"])
        X.sub_(lr * update.to(X.dtype))
        if group["weight_decay"]:
            X.mul_(1 - lr * group["weight_decay"])


def scaled_gd(pairs: list[LoRAPair], lr: float, weight_decay: float = 0.0, reg: float = 1e-5) -> AltLoRA:
    """ScaledGD (the repo's SGDr): the AltLoRA preconditioners, no momentum, no state."""
    return AltLoRA(pairs, lr=lr, betas=(0.0, 0.999), weight_decay=weight_decay, reg=reg, second_moment=False)


class LoRAProLike(torch.optim.Optimizer):
    """The equivalent full gradient with full-size (k×d) Adam moments, realised on the factors."""

    def __init__(self, pairs: list[LoRAPair], lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, reg: float = 1e-5):
        _check(type(self).__name__, lr, betas, reg, weight_decay)
        super().__init__(_pair_groups(pairs), dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, reg=reg))

    @staticmethod
    def equivalent_gradient(A: torch.Tensor, B: torch.Tensor, grad_A: torch.Tensor, grad_B: torch.Tensor,
                            reg: float) -> torch.Tensor:
        """G̃ = B·ĝ_A + (I − P_B)·ĝ_B·A = s·[P_col(B)·G + (I − P_col(B))·G·P_row(A)] (ε → 0)."""
        A, B = _up(A), _up(B)
        gram_B, gram_A = _gram(B, reg), _gram(A.T, reg)
        g_A = torch.linalg.solve(gram_B, _up(grad_A))
        g_B = torch.linalg.solve(gram_A, _up(grad_B).T).T
        g_B = g_B - B @ torch.linalg.solve(gram_B, B.T @ g_B)
        return B @ g_A + g_B @ A

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            A, B = group["params"]
            if A.grad is None and B.grad is None:
                continue
            reg, lr, (beta1, beta2) = group["reg"], group["lr"], group["betas"]
            grad_A = A.grad if A.grad is not None else torch.zeros_like(A)
            grad_B = B.grad if B.grad is not None else torch.zeros_like(B)
            G = self.equivalent_gradient(A, B, grad_A, grad_B, reg)
            state = self.state[A]  # one k×d state per layer, kept under A
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(G)
                state["exp_avg_sq"] = torch.zeros_like(G)
            state["step"] += 1
            t = state["step"]
            state["exp_avg"].mul_(beta1).add_(G, alpha=1 - beta1)
            state["exp_avg_sq"].mul_(beta2).addcmul_(G, G, value=1 - beta2)
            denom = (state["exp_avg_sq"] / (1 - beta2 ** t)).sqrt().add_(group["eps"])
            delta_W = -lr * (state["exp_avg"] / (1 - beta1 ** t)) / denom
            Af, Bf, s = _up(A), _up(B), group["scale"]
            gram_B, gram_A = _gram(Bf, reg), _gram(Af.T, reg)
            delta_A = torch.linalg.solve(gram_B, Bf.T @ delta_W) / s
            right = torch.linalg.solve(gram_A, Af @ delta_W.T).T  # ΔW·Aᵀ(AAᵀ+εI)⁻¹
            delta_B = (right - Bf @ torch.linalg.solve(gram_B, Bf.T @ right)) / s
            A.add_(delta_A.to(A.dtype))
            B.add_(delta_B.to(B.dtype))
            if group["weight_decay"]:
                A.mul_(1 - lr * group["weight_decay"])
                B.mul_(1 - lr * group["weight_decay"])
        return loss


def finite(optimizer: torch.optim.Optimizer) -> bool:
    return all(bool(torch.isfinite(p).all()) for g in optimizer.param_groups for p in g["params"])


__all__ = ["AltLoRA", "LoRAPair", "LoRAProLike", "STATE_FLOATS", "phase_of", "count_state_floats", "finite",
           "lora_pairs", "scaled_gd", "state_floats_formula"]
