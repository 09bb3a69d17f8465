"""JVP embeddings, landmarks and kernel-ridge propagation (spec §b pipeline steps 2–4; the official
`infdist/jvp.py` and `infdist/distil.py`).

- `jvp_embeddings`: the model cut to its first `num_blocks` blocks (no head); `num_tangents` Gaussian
  tangents over those blocks' parameters; the forward-mode derivative (`torch.func.jvp`) of the last
  real token's hidden state along each tangent, concatenated (tangents × hidden), optionally
  randomly projected. About one partial forward pass per tangent.
- `choose_landmarks`: uniform at random.
- `propagate`: RBF kernel ridge regression, per target column: σ the median pairwise distance among
  up to `bandwidth_samples` landmark embeddings, K_LL + damp·mean(diag K_LL)·I, v = K_LL⁻¹ p_L,
  p̂ = K_EL v.
"""
from __future__ import annotations

import torch
from torch.func import jvp, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from paperline.methods.influence_distillation.model import InfluenceLM, TokenizedSet


def jvp_embeddings(model: InfluenceLM, data: TokenizedSet, num_blocks: int, num_tangents: int,
                   proj_dim: int, seed: int, batch_size: int = 64) -> torch.Tensor:
    """(N, num_tangents·hidden, or proj_dim) embeddings of every sample."""
    names = model.block_param_names(num_blocks)
    params = {k: v.detach() for k, v in model.named_parameters()}
    primals = {k: params[k] for k in names}
    g = torch.Generator().manual_seed(seed)
    # stacked: one vmap over the tangents shares the primal pass among them
    tangents = {k: torch.randn((num_tangents, *v.shape), generator=g, dtype=torch.float32).to(v)
                for k, v in primals.items()}

    def last_hidden(block_params, tokens, last):
        hidden = _hidden(model, params | block_params, tokens, num_blocks)
        return hidden[torch.arange(len(tokens)), last]

    out = []
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):  # the fused CPU kernel has no forward-mode AD
        for start in range(0, len(data), batch_size):
            index = torch.arange(start, min(start + batch_size, len(data)))
            tokens, _ = data.batch(index)
            last = data.lengths[index] - 1
            along = vmap(lambda t: jvp(lambda p: last_hidden(p, tokens, last), (primals,), (t,))[1])(tangents)
            out.append(along.permute(1, 0, 2).reshape(len(index), -1).float().cpu())  # (B, tangents·hidden)
    emb = torch.cat(out)
    if proj_dim and proj_dim < emb.shape[1]:
        proj = torch.randn(emb.shape[1], proj_dim, generator=g) / proj_dim ** 0.5
        emb = emb @ proj
    return emb


def _hidden(model: InfluenceLM, params: dict, tokens: torch.Tensor, num_blocks: int) -> torch.Tensor:
    """hidden_states(tokens, num_blocks) with the parameters `params` swapped in (functional_call
    only calls `forward`, and the truncated pass is another method)."""
    from torch.func import functional_call

    return functional_call(_HiddenStates(model, num_blocks), {f"model.{k}": v for k, v in params.items()},
                           (tokens,))


class _HiddenStates(torch.nn.Module):
    def __init__(self, model: InfluenceLM, num_blocks: int):
        super().__init__()
        self.model, self.num_blocks = model, num_blocks

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.hidden_states(tokens, self.num_blocks)


def choose_landmarks(n: int, k: int, seed: int) -> torch.Tensor:
    if k > n:
        raise ValueError(f"num_landmarks {k} exceeds the pool size {n}")
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:k].sort().values


def rbf_bandwidth(landmark_emb: torch.Tensor, max_samples: int, seed: int = 0) -> float:
    """Median pairwise distance among up to `max_samples` landmark embeddings."""
    x = landmark_emb
    if len(x) > max_samples:
        x = x[torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:max_samples]]
    d = torch.cdist(x.double(), x.double())
    off = d[~torch.eye(len(x), dtype=torch.bool)]
    sigma = float(off.median()) if off.numel() else 1.0
    return sigma if sigma > 0 else 1.0


def rbf_kernel(a: torch.Tensor, b: torch.Tensor, sigma: float) -> torch.Tensor:
    return torch.exp(-torch.cdist(a.double(), b.double()).pow(2) / (2 * sigma ** 2))


def propagate(embeddings: torch.Tensor, landmarks: torch.Tensor, p_landmarks: torch.Tensor,
              damp: float = 1e-2, bandwidth_samples: int = 1000) -> torch.Tensor:
    """p̂ (N, targets) on every sample from the landmarks' influences p_L (L, targets)."""
    emb_l = embeddings[landmarks]
    sigma = rbf_bandwidth(emb_l, bandwidth_samples)
    k_ll = rbf_kernel(emb_l, emb_l, sigma)
    k_ll = k_ll + damp * k_ll.diagonal().mean() * torch.eye(len(k_ll), dtype=k_ll.dtype)
    v = torch.linalg.solve(k_ll, p_landmarks.double())
    return (rbf_kernel(embeddings, emb_l, sigma) @ v).float()
