"""The layers of the comparison, each a drop-in for a target `nn.Linear`:

- `QuantLinear`: the frozen int-b weight (codes, 16-bit scales and zero points), computed as
  s_g(Q − z_g) on each call;
- `LotaLinear`: LoTA-QAF's ternary adapter over a QuantLinear (spec §b): U = AB, the threshold
  projection T, the offsets o, the straight-through estimator, and the lossless merge;
- `QALoraLinear`: a QA-LoRA-style adapter whose input is pooled per quantisation group, so its
  update is constant within a group and merges into the zero points.

The 16-bit LoRA baseline is peft's own (`peft_lora`). LoTA and QA-LoRA are modules of ours that
wrap the quantised layer with peft's `target_modules` selection rule (`select_targets`): peft's
custom-module hook adds a delta to a base layer's output, while a ternary adapter rewrites the
integer codes and zero points of the base weight itself (its forward is not base(x) + Δ(x)), and
peft has no layer over our quantised weight to pool by group.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from paperline.methods.lota_qaf.quant import STORE_DTYPE, QuantError, QuantizedWeight, expand, group_index, group_mean


def select_targets(model: nn.Module, targets: list[str], key: str = "target_modules") -> list[str]:
    """Names of the nn.Linear modules that `targets` select, by peft's rule (a module name equal to
    a target or ending in "." + target). A target that selects no linear layer is an error naming
    the key, before any training."""
    linears = [name for name, m in model.named_modules() if isinstance(m, (nn.Linear, QuantLinear))]
    chosen = []
    for target in targets:
        hits = [n for n in linears if n == target or n.endswith("." + target)]
        if not hits:
            raise QuantError(f"{key}: {target!r} names no linear layer of the model "
                             f"(linear layers: {', '.join(linears[:12])}{', …' if len(linears) > 12 else ''})")
        chosen += [n for n in hits if n not in chosen]
    return [n for n in linears if n in chosen]  # module order


def replace_module(model: nn.Module, name: str, new: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)


class QuantLinear(nn.Module):
    q: torch.Tensor  # the buffers registered below
    scale: torch.Tensor
    zero: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, weight: QuantizedWeight, bias: torch.Tensor | None = None):
        super().__init__()
        self.bits, self.group_size = weight.bits, weight.group_size
        self.register_buffer("q", weight.q)
        self.register_buffer("scale", weight.scale)
        self.register_buffer("zero", weight.zero)
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self.out_features, self.in_features = weight.q.shape

    @property
    def weight_q(self) -> QuantizedWeight:
        return QuantizedWeight(self.q, self.scale, self.zero, self.bits, self.group_size)

    @property
    def qmax(self) -> int:
        return 2 ** self.bits - 1

    def dequantized(self) -> torch.Tensor:
        return self.weight_q.dequantize()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.dequantized(), self.bias)

    def nbytes(self) -> int:
        return self.weight_q.nbytes() + (0 if self.bias is None else self.bias.numel() * 2)


def ternarize(w: torch.Tensor, ratio: float = 0.75) -> torch.Tensor:
    """sign(w) where |w| > ratio · mean|w|, else 0 (the repo's initial ternarisation of A)."""
    return torch.sign(w) * (w.abs() > ratio * w.abs().mean())


def threshold_projection(U: torch.Tensor, q: torch.Tensor, omega: int, qmax: int) -> torch.Tensor:
    """T = +1 where U > ω and the code can go up, −1 where U < −ω and it can go down, else 0
    (the repo's plain-torch `ThresholdFunction`; the masks keep Q + T inside [0, qmax])."""
    up = (U > omega) & (q < qmax)
    down = (U < -omega) & (q > 0)
    return up.to(U.dtype) - down.to(U.dtype)


class LotaLinear(nn.Module):
    """y = x · [s_g(Q + T − (z_g − o_g))]ᵀ with T = threshold_projection(U), U = (AB)ᵀ.

    A (d_in × r) and B (r × d_out) hold values in {−1, 0, 1} as float parameters (t-SignSGD keeps
    them there). T passes U's gradient straight through; the offsets o_g = mean_{i∈g}(U − ωT)/ω are
    differentiable in U. The zero point z_g − o_g is rounded to its stored 16-bit type inside the
    forward (a cast passes its gradient unchanged), and Q + T is an exact small integer in float32,
    so the merged layer (Q′ = Q + T, z′ = z − o) computes the very same weight: outputs are
    bit-identical. (The repo stores new_zero_factors in bf16; we store zero points in fp16.)"""

    def __init__(self, base: QuantLinear, rank: int, omega: int, generator: torch.Generator | None = None):
        super().__init__()
        if not 1 <= rank <= min(base.in_features, base.out_features):
            raise QuantError(f"lota.rank: rank {rank} outside 1..{min(base.in_features, base.out_features)} "
                             f"(the layer is {base.in_features} → {base.out_features})")
        if not 1 <= omega < rank:
            raise QuantError(f"lota.omega: threshold {omega} must lie in [1, rank {rank}): U = AB ∈ [−r, r]")
        self.base, self.rank, self.omega = base, rank, omega
        a = torch.empty(base.in_features, rank)
        # Kaiming-normal (fan_in = r for a (d_in, r) tensor under torch's convention), then ternary
        nn.init.normal_(a, 0.0, math.sqrt(2.0 / rank), generator=generator)
        self.A = nn.Parameter(ternarize(a))
        self.B = nn.Parameter(torch.zeros(rank, base.out_features))  # exact identity at the start

    def adapter(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(T with its straight-through gradient, the stored zero points z − o)."""
        U = (self.A @ self.B).t()  # (d_out, d_in), integer valued in [−r, r]
        T = threshold_projection(U.detach(), self.base.q, self.omega, self.base.qmax)
        T_ste = U + (T - U).detach()  # value T (exact: integers), gradient of U
        offset = group_mean((U - self.omega * T) / self.omega, self.base.group_size)
        zero = (self.base.zero.float() - offset).to(STORE_DTYPE).float()
        return T_ste, zero

    def dequantized(self) -> torch.Tensor:
        T, zero = self.adapter()
        G, d_in = self.base.group_size, self.base.in_features
        return expand(self.base.scale.float(), G, d_in) * ((self.base.q.float() + T) - expand(zero, G, d_in))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.dequantized(), self.base.bias)

    @torch.no_grad()
    def merge(self) -> QuantLinear:
        """Q′ = Q + T (on the grid by construction), z′ = z − o: the same function, int-b again."""
        T, zero = self.adapter()
        q = self.base.q.to(torch.int16) + T.to(torch.int16)
        assert int(q.min()) >= 0 and int(q.max()) <= self.base.qmax, "masks keep Q + T on the grid"
        merged = QuantizedWeight(q.to(torch.uint8), self.base.scale.clone(), zero.to(STORE_DTYPE),
                                 self.base.bits, self.base.group_size)
        return QuantLinear(merged, self.base.bias)

    @torch.no_grad()
    def changed(self) -> int:
        T, _ = self.adapter()
        return int((T != 0).sum())


class QALoraLinear(nn.Module):
    """QA-LoRA-style (Xu et al. 2023): y = base(x) + (α/r) · B A · avgpool_g(x). Its weight update
    (α/r)(BA)_{j,g}/|g| is constant over each group's inputs, so it merges into the zero points:
    z′_g = z_g − Δ_g / s_g (rounded to the stored 16-bit type: the one source of a merge gap)."""

    pool: torch.Tensor  # a buffer (registered in __init__)

    def __init__(self, base: QuantLinear, rank: int, alpha: float, generator: torch.Generator | None = None):
        super().__init__()
        groups = -(-base.in_features // base.group_size)
        if rank < 1:
            raise QuantError(f"qalora.rank: rank {rank} must be ≥ 1")
        # BA has rank ≤ min(groups, d_out): a larger rank adds nothing, so it is capped per layer
        # (the scaling keeps the configured α / r)
        rank_used = min(rank, groups, base.out_features)
        self.base, self.rank, self.scaling = base, rank_used, alpha / rank
        self.A = nn.Parameter(torch.empty(rank_used, groups))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5), generator=generator)  # peft's LoRA A init
        self.B = nn.Parameter(torch.zeros(base.out_features, rank_used))
        pool = F.one_hot(group_index(base.in_features, base.group_size), groups).float()
        self.register_buffer("pool", pool / pool.sum(0))  # (d_in, groups): the mean over each group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = x @ self.pool
        return self.base(x) + self.scaling * F.linear(F.linear(pooled, self.A), self.B)

    @torch.no_grad()
    def merge(self) -> QuantLinear:
        # per input column of group g: (α/r)(BA)_{j,g} / |g|
        delta = self.scaling * (self.B @ self.A) / self.pool.gt(0).sum(0).float()
        zero = (self.base.zero.float() - delta / self.base.scale.float()).to(STORE_DTYPE)
        return QuantLinear(QuantizedWeight(self.base.q.clone(), self.base.scale.clone(), zero,
                                           self.base.bits, self.base.group_size), self.base.bias)
