"""JVP embeddings, landmarks and kernel-ridge propagation (spec §b pipeline steps 2–4; the official
`infdist/jvp.py` and `infdist/distil.py`).

- `jvp_embeddings`: the model cut to its first `num_blocks` blocks, the head an identity (so the final
  RMSNorm applies); `num_tangents` Gaussian tangents over every parameter of the cut model, token
  embeddings included; the forward-mode derivative (`torch.func.jvp`) of the last real token's
  normed hidden state along each tangent, concatenated (tangents × hidden), then a Rademacher
  projection to `proj_dim`. About one partial forward pass per tangent.
- `choose_landmarks`: uniform at random.
- `propagate`: RBF kernel ridge regression, per target column: σ the median pairwise distance among
  up to `bandwidth_samples` landmark embeddings, K_LL + damp·mean(diag K_LL)·I, v = K_LL⁻¹ p_L,
  p̂ = K_EL v.
"""
from __future__ import annotations

import torch
from torch.func import functional_call, jvp, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from paperline.methods.influence_distillation.model import InfluenceLM, TokenizedSet


def jvp_embeddings(model: InfluenceLM, data: TokenizedSet, num_blocks: int, num_tangents: int,
                   proj_dim: int, seed: int, batch_size: int = 64) -> torch.Tensor:
    """(N, proj_dim) embeddings of every sample (N, num_tangents·hidden when proj_dim is 0), as the
    official `create_jvp_store` (infdist/jvp.py) computes them: the model cut to its first
    `num_blocks` blocks with the head an identity, so the output is the last token's hidden state
    after the final RMSNorm; Gaussian tangents (`randn_like`) over every parameter of that cut model
    (token embeddings, the kept blocks, the norm); the JVP along each, concatenated tangent by
    tangent; then a Rademacher (±1) projection divided by √proj_dim (TRAK's BasicProjector with
    ProjectionType.rademacher, as `_project_grad` scales it), applied whatever the input width."""
    cut = model.truncated(num_blocks)
    params = {k: v.detach() for k, v in cut.named_parameters()}
    g = torch.Generator().manual_seed(seed)
    # stacked: one vmap over the tangents shares the primal pass among them
    tangents = {k: torch.randn((num_tangents, *v.shape), generator=g, dtype=torch.float32).to(v)
                for k, v in params.items()}

    def last_hidden(p, tokens, last):
        return functional_call(cut, p, (tokens,))[torch.arange(len(tokens)), last]

    out = []
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):  # the fused CPU kernel has no forward-mode AD
        for start in range(0, len(data), batch_size):
            index = torch.arange(start, min(start + batch_size, len(data)))
            tokens, _ = data.batch(index)
            last = (data.lengths[index] - 1).to(tokens.device)
            along = vmap(lambda t: jvp(lambda p: last_hidden(p, tokens, last), (params,), (t,))[1])(tangents)
            out.append(along.permute(1, 0, 2).reshape(len(index), -1).float().cpu())  # (B, tangents·hidden)
    emb = torch.cat(out)
    if proj_dim:
        signs = torch.randint(0, 2, (emb.shape[1], proj_dim), generator=g).float().mul_(2).sub_(1)
        emb = emb @ signs / proj_dim ** 0.5
    return emb


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
    if not off.numel():  # one landmark: no pair to take a median of
        return 1.0
    return max(float(off.median()), 1e-6)  # the official floor: coinciding landmarks get 1e-6


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
