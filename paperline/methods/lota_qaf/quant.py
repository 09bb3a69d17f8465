"""Per-group asymmetric int-b weight quantisation (spec §b "quantised base"), ours, on CPU.

    W ≈ s_g · (Q − z_g),   Q ∈ {0, …, 2ᵇ−1},   groups of `group_size` along the input dimension

for a torch weight of shape (d_out, d_in): scale and zero have shape (d_out, ⌈d_in / group_size⌉).
Scales and zero points are stored in 16 bits (fp16), as a GPTQ checkpoint stores them; every
computation reads those stored values, so what is counted in `QuantizedWeight.nbytes` is what the
model computes with. `rtn` rounds to nearest; `gptq` is GPTQ (Frantar et al.) with groups, without
act-order, from a calibration Hessian H = 2 XᵀX / n.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

BIT_WIDTHS = (2, 3, 4, 8)
STORE_DTYPE = torch.float16  # scales and zero points as stored


class QuantError(ValueError):
    """A bit width, group size or weight the quantiser cannot take; the message names the key."""


def check_bits(bits: int, key: str = "bits") -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in BIT_WIDTHS:
        raise QuantError(f"{key}: bit width {bits!r} is not one of {', '.join(map(str, BIT_WIDTHS))}")
    return bits


def check_group(d_in: int, group_size: int, key: str = "group_size") -> int:
    """The number of groups; the last one is shorter when group_size does not divide d_in (as in
    GPTQ: the LM's SwiGLU width ⌊8d/3⌋ is rarely a multiple of the group size)."""
    if group_size < 1:
        raise QuantError(f"{key}: group size {group_size} must be ≥ 1")
    return -(-d_in // group_size)


@dataclass
class QuantizedWeight:
    q: torch.Tensor  # (d_out, d_in) uint8 codes in [0, 2^bits − 1]
    scale: torch.Tensor  # (d_out, groups) fp16
    zero: torch.Tensor  # (d_out, groups) fp16 (float: a merged offset moves it off the integers)
    bits: int
    group_size: int

    @property
    def qmax(self) -> int:
        return 2 ** self.bits - 1

    def dequantize(self, codes: torch.Tensor | None = None, zero: torch.Tensor | None = None) -> torch.Tensor:
        """s_g · (codes − zero_g) in float32; `codes` (float or int) and `zero` default to the stored ones."""
        return dequantize(self.q if codes is None else codes, self.scale,
                          self.zero if zero is None else zero, self.group_size)

    def nbytes(self) -> int:
        """Bytes as packed for inference: b bits per code, 16 bits per scale and per zero point."""
        return (self.q.numel() * self.bits + 7) // 8 + 2 * self.scale.numel() * 2


def group_index(d_in: int, group_size: int) -> torch.Tensor:
    """The group of each input column (`g_idx`)."""
    return torch.arange(d_in) // group_size


def expand(per_group: torch.Tensor, group_size: int, d_in: int | None = None) -> torch.Tensor:
    """(d_out, groups) → (d_out, d_in): each group's value over its input columns."""
    d_in = per_group.shape[1] * group_size if d_in is None else d_in
    return per_group[:, group_index(d_in, group_size)]


def group_mean(x: torch.Tensor, group_size: int) -> torch.Tensor:
    """(d_out, d_in) → (d_out, groups): the mean over each group's columns (a short last group too)."""
    d_in = x.shape[1]
    groups = -(-d_in // group_size)
    sums = x.new_zeros(x.shape[0], groups).index_add(1, group_index(d_in, group_size), x)
    counts = torch.bincount(group_index(d_in, group_size), minlength=groups).to(x.dtype)
    return sums / counts


def dequantize(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group_size: int) -> torch.Tensor:
    d_in = codes.shape[1]
    return expand(scale.float(), group_size, d_in) * (codes.float() - expand(zero.float(), group_size, d_in))


def group_params(w: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric min/max scale and integer zero point of each row of `w` (d_out, columns),
    rounded to their stored 16-bit values. The range always holds 0 (GPTQ's rule)."""
    qmax = 2 ** bits - 1
    lo = w.min(dim=1).values.clamp(max=0)
    hi = w.max(dim=1).values.clamp(min=0)
    flat = hi == lo  # an all-zero group: any scale reproduces it
    scale = torch.where(flat, torch.ones_like(hi), (hi - lo) / qmax).to(STORE_DTYPE)
    zero = torch.round(-lo / scale.float()).clamp(0, qmax).to(STORE_DTYPE)
    return scale, zero


def quantize_codes(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    """Codes of `w` (d_out, c) on a per-row grid (scale, zero of shape (d_out,) or (d_out, c))."""
    if scale.dim() == 1:
        scale, zero = scale[:, None], zero[:, None]
    return torch.clamp(torch.round(w / scale.float()) + zero.float(), 0, 2 ** bits - 1)


def requantize(w: torch.Tensor, grid: QuantizedWeight) -> QuantizedWeight:
    """`w` rounded onto a fixed grid (the given scales and zero points): the naive merge of a
    16-bit adapter into a quantised layer."""
    d_in = grid.q.shape[1]
    s, z = expand(grid.scale, grid.group_size, d_in), expand(grid.zero, grid.group_size, d_in)
    codes = quantize_codes(w.float(), s, z, grid.bits)
    return QuantizedWeight(codes.to(torch.uint8), grid.scale.clone(), grid.zero.clone(), grid.bits, grid.group_size)


def quantize_rtn(w: torch.Tensor, bits: int, group_size: int) -> QuantizedWeight:
    """Round to nearest per group."""
    check_bits(bits)
    d_out, d_in = w.shape
    groups = check_group(d_in, group_size)
    w = w.detach().float()
    scales, zeros, codes = [], [], []
    for g in range(groups):
        block = w[:, g * group_size:(g + 1) * group_size]
        s, z = group_params(block, bits)
        scales.append(s)
        zeros.append(z)
        codes.append(quantize_codes(block, s, z, bits))
    return QuantizedWeight(torch.cat(codes, 1).to(torch.uint8), torch.stack(scales, 1), torch.stack(zeros, 1),
                           bits, group_size)


def quantize_gptq(w: torch.Tensor, hessian: torch.Tensor, bits: int, group_size: int, damp: float = 0.01,
                  block_size: int = 128) -> QuantizedWeight:
    """GPTQ (the reference `fasterquant` without act-order): columns quantised left to right, each
    one's rounding error spread over the columns not yet quantised through the inverse Hessian's
    Cholesky factor. A group's scale and zero are taken when its first column comes up, from the
    columns as updated by then (the reference reads the not-yet-updated block there: a quirk we do
    not copy). `hessian` is (d_in, d_in), e.g. 2 XᵀX / n of the layer's calibration inputs."""
    check_bits(bits)
    d_out, d_in = w.shape
    groups = check_group(d_in, group_size)
    if hessian.shape != (d_in, d_in):
        raise QuantError(f"hessian: shape {tuple(hessian.shape)} does not fit the weight's input width {d_in}")
    W = w.detach().double().clone()
    H = hessian.detach().double().clone()
    dead = torch.diag(H) == 0  # inputs never active: weight irrelevant, keep the factorisation definite
    H[dead, dead] = 1
    W[:, dead] = 0
    H += damp * torch.mean(torch.diag(H)) * torch.eye(d_in, dtype=H.dtype)
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    block_size = max(group_size, block_size // group_size * group_size)
    Q = torch.zeros(d_out, d_in, dtype=torch.float64)
    scales = torch.zeros(d_out, groups, dtype=STORE_DTYPE)
    zeros = torch.zeros(d_out, groups, dtype=STORE_DTYPE)
    for i1 in range(0, d_in, block_size):
        i2 = min(i1 + block_size, d_in)
        W1 = W[:, i1:i2].clone()
        Err1 = torch.zeros_like(W1)
        H1 = Hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            col = i1 + i
            if col % group_size == 0:
                g = col // group_size
                scales[:, g], zeros[:, g] = group_params(W1[:, i:i + group_size].float(), bits)
            g = col // group_size
            s, z = scales[:, g].double(), zeros[:, g].double()
            q = torch.clamp(torch.round(W1[:, i] / s) + z, 0, 2 ** bits - 1)
            Q[:, col] = q
            err = (W1[:, i] - s * (q - z)) / H1[i, i]
            W1[:, i:] -= err[:, None] * H1[i, i:][None, :]
            Err1[:, i] = err
        W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:]
    return QuantizedWeight(Q.to(torch.uint8), scales, zeros, bits, group_size)
