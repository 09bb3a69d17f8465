"""GeoAda and the fine-tuning baselines around a pretrained EGTN.

Every variant is a module with one call, `model(cond, noisy, t, charges, edges, control, original)`:
`cond` the new task's conditioning frames (centred), `control` the global control (B,) or None;
`original=True` runs the original task (the base's own conditioning window, no control): what
forgetting is measured on. Every variant's `additions` flag switches what it added to the base
(adapter copies and their zero maps, prompts, heads, the control embedding) on or off: off, any
variant is its base (whose weights moved only under full fine-tuning and PARTIAL-k); forgetting
is scored both ways for every variant (experiment.finetune_variant).

Control types and their coupling operators C (how the control enters a graph), spec (b) [I]:
- frame control: more conditioning frames than the base was pretrained on (15 → 20 after 10 → 20):
  C concatenates the given frames along time (the base's own input format, longer);
- global control: an invariant global vector c (here the log interaction strength): C adds
  MLP(c̃) to every node's h after the input embedding (spec (f): h′ = h + MLP(c̃));
- subgraph control: the whole trajectory of a subgraph (the first S particles) is given, the others
  are generated: C adds the given subgraph's nodes, with their coordinates at every frame (the
  conditioning frames and the future ones), to the graph and connects them by edges to every node
  (spec (b) [I]: "add the given subgraph's nodes/coordinates and connect them with edges"; an added
  node's edges carry the features of the particle it copies, q_i q_j here, and it carries that
  particle's charge and the given-frame flag at every frame). `control` is then the subgraph's
  future positions (B, H, S, 3): a geometric control, rotated and translated with the input.
The decoupling operator D removes what C added: the extra leading frames (frame control); nothing
for global control (it added no nodes or frames); the added nodes (subgraph control).

GeoAda [I, following spec (b) and its update (f)]: the base is frozen. A control stream runs the
coupled graph through the network, with the selected blocks (the first of every K consecutive
blocks: 0, K, 2K, …) replaced by trainable copies and the unselected ones the frozen originals
(the stream is independent of the frozen one after C, as ControlNet's encoder copy is). After each
selected block ℓ the copy's output, decoupled, enters the frozen stream through an equivariant
zero-initialised "convolution": Δh = ϕ_h ⊙ h′ and Δx = ϕ_x·(x′ − x̄′), x̄′ each frame's centre of
mass (update (f); the copy's coordinate update x′ − x′_in is the option `adapter_x: update`, see
EquivariantZeroConv), ϕ_x a scalar and ϕ_h an H-vector, both 0 at init (update (f)): added to
the frozen block's (h, x). At init the model equals the base; switching the adapter off restores
it exactly at any time; Δx is rotation-equivariant and translation-invariant, Δh invariant, so the
adapted model keeps the base's SE(3) equivariance.

The non-equivariant ControlNet ablation: the same control stream, but its zero-initialised layers
are ordinary linear maps over the channels [h′, x′] (raw coordinates as three channels), as a
ControlNet on images would apply them: exact at init, not equivariant once trained.

Baselines (the paper's, update (f)): full fine-tuning; PARTIAL-k (the last k blocks trainable);
MLP-k (a k-block EGTN head on the frozen base's output, gated by a zero-initialised ϕ so it starts
at the base); GPF (a learnable prompt vector added to every node's embedded h, zero at init);
GPF-plus (Fang et al., "Universal Prompt Tuning for Graph Neural Networks": k learnable basis prompts
p_1..p_k, each node's prompt Σ_j softmax_j(a_jᵀ h_i) p_j added to its features; here to the embedded h,
the basis zero at init so the start is the base [I]); GPF and GPF-plus each train MLP-k's gated EGTN
head too (update (f): "GPF, GPF-plus (3-layer EGTN head)", `gpf_head_blocks`); Prompt-Template [I: the paper names it without
a form we could read]: a learnable prompt added to the h of what the coupling operator added (the
extra frames, the added subgraph nodes), the frozen base reading that template, so it fits frame and
subgraph control but not global control; and the frozen base. Each baseline gets the coupled input on
its single stream (the longer window; the global embedding added to h, its last layer zero so the
start is the base; the added subgraph nodes and their edges). The prompts act on invariant features
only, so every baseline keeps the base's equivariance.
"""
from __future__ import annotations

import copy
from typing import TypeVar

import torch
from torch import nn

from paperline.methods.geoada.config import VARIANTS, Control
from paperline.methods.geoada.egtn import EGTN, Block, mlp


class GlobalEmbedding(nn.Module):
    """c̃ = log strength → MLP → (B, 1, 1, H), added to h; last layer zero-initialised."""

    def __init__(self, hidden: int):
        super().__init__()
        self.net = mlp(1, hidden, hidden)
        last: nn.Linear = self.net[-1]  # type: ignore[assignment]  # Sequential's index is typed Module
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)

    def forward(self, control: torch.Tensor) -> torch.Tensor:
        first: nn.Linear = self.net[0]  # type: ignore[assignment]
        return self.net(torch.log(control)[:, None].to(first.weight.dtype))[:, None, None]


ModuleT = TypeVar("ModuleT", bound=nn.Module)


def freeze(module: ModuleT) -> ModuleT:
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def trainable_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def couple_subgraph(cond: torch.Tensor, control: torch.Tensor, charges: torch.Tensor, edges: torch.Tensor
                    ) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Subgraph control's C: the given subgraph (the first S particles) as S added nodes with their
    positions at every frame — their conditioning frames then `control`, their future (B, H, S, 3) —
    and their charges; the edges of the N + S nodes: an added node's edge features are those of the
    particle it copies (q_i q_j in the charged system; MD17's 3-bond-hop graph: joined to the atoms
    within 3 bonds of the atom it copies, 0 — no edge — to that atom itself) [I]."""
    S, N = control.shape[2], edges.shape[1]
    extra_x = torch.cat([cond[:, :, :S], control.to(cond.dtype)], dim=1)
    index = torch.cat([torch.arange(N), torch.arange(S)]).to(edges.device)
    return (extra_x, charges[:, :S]), edges[:, index][:, :, index]


class Variant(nn.Module):
    def __init__(self, base: EGTN, control: Control, base_cond: int):
        super().__init__()
        self.base, self.control_type, self.base_cond = base, control, base_cond
        self.global_embed = GlobalEmbedding(base.hidden) if control == "global" else None
        self.additions = True  # False: the variant is its base on the base's own window

    def forward(self, cond, noisy, t, charges, edges, control=None, original=False):
        if not self.additions:
            return self.base(self.base_view(cond), noisy, charges, edges, t)
        return self.run(cond, noisy, t, charges, edges, control, original)

    def run(self, cond, noisy, t, charges, edges, control, original: bool) -> torch.Tensor:
        """ε̂ with the variant's additions on (each subclass's own)."""
        raise NotImplementedError

    def base_view(self, cond: torch.Tensor) -> torch.Tensor:
        return cond[:, -self.base_cond:]

    def shift(self, control: torch.Tensor | None, original: bool) -> torch.Tensor | None:
        return None if original or self.global_embed is None else self.global_embed(control)

    def couple(self, cond, charges, edges, control, original: bool) -> dict:
        """C for this control type, as keyword arguments of EGTN.forward (cond, edges, h_shift,
        extra); the original task: the base's own window, no control."""
        if original:
            return dict(cond=self.base_view(cond), edges=edges, h_shift=None, extra=None)
        if self.control_type == "subgraph":
            extra, coupled = couple_subgraph(cond, control, charges, edges)
            return dict(cond=cond, edges=coupled, h_shift=None, extra=extra)
        return dict(cond=cond, edges=edges, h_shift=self.shift(control, original), extra=None)


class Frozen(Variant):
    """The pretrained base as it is: its own window, no control."""

    def __init__(self, base: EGTN, control: Control, base_cond: int):
        super().__init__(freeze(base), control, base_cond)
        self.global_embed = None

    def run(self, cond, noisy, t, charges, edges, control=None, original=False):
        return self.base(self.base_view(cond), noisy, charges, edges, t)


class FullFT(Variant):
    """Every parameter trains (PARTIAL-k: only the last k blocks and the control embedding)."""

    def __init__(self, base: EGTN, control: Control, base_cond: int, last_k: int | None = None):
        super().__init__(base, control, base_cond)
        if last_k is not None:
            freeze(self.base)
            for block in self.base.blocks[len(self.base.blocks) - last_k:]:
                for p in block.parameters():
                    p.requires_grad_(True)

    def run(self, cond, noisy, t, charges, edges, control=None, original=False):
        return self.base(noisy=noisy, charges=charges, t=t, **self.couple(cond, charges, edges, control, original))


class MLPHead(Variant):
    """MLP-k: k EGTN blocks on the frozen base's final (h, x); x ← x + ϕ·(x_head − x), ϕ = 0 at init
    (so the start is the base). GPF and GPF-plus train the same head (update (f): "GPF, GPF-plus
    (3-layer EGTN head)"); k = 0: no head."""

    def __init__(self, base: EGTN, control: Control, base_cond: int, k: int):
        super().__init__(freeze(base), control, base_cond)
        self.head = nn.ModuleList(Block(base.hidden) for _ in range(k))
        self.gate = nn.Parameter(torch.zeros(())) if k else None

    def with_head(self, coupled: dict, noisy, t, charges) -> torch.Tensor:
        """ε̂ of the frozen base on the coupled input, its final (h, x) through the head."""
        _, h, x, x_in = self.base(noisy=noisy, charges=charges, t=t, return_state=True, **coupled)
        if self.head:
            h2, x2 = h, x
            for block in self.head:
                h2, x2 = block(h2, x2, coupled["edges"])
            x = x + self.gate * (x2 - x)
        return (x - x_in)[:, coupled["cond"].shape[1]:, :noisy.shape[2]] * self.base.scale

    def run(self, cond, noisy, t, charges, edges, control=None, original=False):
        return self.with_head(self.couple(cond, charges, edges, control, original), noisy, t, charges)


def with_prompt(shift: torch.Tensor | None, prompt):
    """The global control's shift (a tensor or None) and a prompt (a tensor, or a callable of h) as one
    h_shift for EGTN.forward."""
    if shift is None:
        return prompt
    if callable(prompt):
        return lambda h: shift + prompt(h)
    return shift + prompt


class GPF(MLPHead):
    """GPF (Fang et al. 2023): a prompt vector p added to every node's embedded h of the frozen base
    (p = 0 at init), trained with an EGTN head of `head` blocks on the base's output (update (f):
    the paper's GPF and GPF-plus carry a 3-layer EGTN head; graph prompt tuning trains a task head
    beside the prompt)."""

    def __init__(self, base: EGTN, control: Control, base_cond: int, head: int):
        super().__init__(base, control, base_cond, head)
        self.prompt = nn.Parameter(torch.zeros(base.hidden))

    def run(self, cond, noisy, t, charges, edges, control=None, original=False):
        coupled = self.couple(cond, charges, edges, control, original)
        coupled["h_shift"] = with_prompt(coupled["h_shift"], self.prompt)
        return self.with_head(coupled, noisy, t, charges)


class GPFPlus(MLPHead):
    """GPF-plus (Fang et al. 2023): k basis prompts p_j (H) and k attention vectors a_j; node i's
    prompt is Σ_j softmax_j(a_jᵀ h_i) p_j, added to its embedded h (the input features in GPF-plus;
    the embedding is where node features enter this model), with GPF's EGTN head. The basis starts
    at zero, so the start is the base [I: the GPF paper initialises it at random]; a_j random (they
    get a gradient once the basis moves)."""

    def __init__(self, base: EGTN, control: Control, base_cond: int, basis: int, head: int):
        super().__init__(base, control, base_cond, head)
        self.basis = nn.Parameter(torch.zeros(basis, base.hidden))
        self.attention = nn.Linear(base.hidden, basis, bias=False)

    def node_prompts(self, h: torch.Tensor) -> torch.Tensor:
        return self.attention(h).softmax(dim=-1) @ self.basis

    def run(self, cond, noisy, t, charges, edges, control=None, original=False):
        coupled = self.couple(cond, charges, edges, control, original)
        coupled["h_shift"] = with_prompt(coupled["h_shift"], self.node_prompts)
        return self.with_head(coupled, noisy, t, charges)


class PromptTemplate(Variant):
    """Prompt-Template [I]: the frozen base on the coupled graph, a learnable prompt (zero at init)
    added to the h of what C added — the extra leading frames (frame control), the added subgraph
    nodes (subgraph control) — marking them as the control for the frozen layers."""

    def __init__(self, base: EGTN, control: Control, base_cond: int):
        if control == "global":
            raise ValueError("prompt_template does not fit global control (C adds no frames or nodes to mark)")
        super().__init__(freeze(base), control, base_cond)
        self.prompt = nn.Parameter(torch.zeros(base.hidden))

    def run(self, cond, noisy, t, charges, edges, control=None, original=False):
        coupled = self.couple(cond, charges, edges, control, original)
        if not original:
            T = coupled["cond"].shape[1] + noisy.shape[1]
            N = noisy.shape[2] + (0 if coupled["extra"] is None else coupled["extra"][1].shape[1])
            mask = torch.zeros(T, N, 1, dtype=noisy.dtype, device=noisy.device)
            if self.control_type == "frame":
                mask[:cond.shape[1] - self.base_cond] = 1  # the frames C added in front of the base's window
            else:
                mask[:, noisy.shape[2]:] = 1  # the added subgraph nodes
            coupled["h_shift"] = mask * self.prompt
        return self.base(noisy=noisy, charges=charges, t=t, **coupled)


class EquivariantZeroConv(nn.Module):
    """Δh = ϕ_h ⊙ h′ and, `form` "com" (the default), Δx = ϕ_x·(x′ − x̄′) (update (f) read literally
    [I]: x̄′ the centre of mass of each frame), or, `form` "update", Δx = ϕ_x·(x′ − x′_in), the copy's
    own coordinate update at this block [I, an alternative; the smoke measured the two within 3% of
    each other, docs/methods/geoada.md]; both are rotation-equivariant and translation-invariant.
    ϕ_x, ϕ_h zero at init."""

    def __init__(self, hidden: int, form: str = "com"):
        super().__init__()
        self.form = form
        self.phi_x = nn.Parameter(torch.zeros(()))
        self.phi_h = nn.Parameter(torch.zeros(hidden))

    def forward(self, h: torch.Tensor, x: torch.Tensor, x_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        source = x - (x.mean(dim=2, keepdim=True) if self.form == "com" else x_in)
        return self.phi_h * h, self.phi_x * source


class LinearZeroConv(nn.Module):
    """ControlNet's zero convolution as on images: linear over the channels [h′, x′], zero at init
    (raw coordinates are channels: neither rotation- nor translation-equivariant once trained)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.to_h, self.to_x = nn.Linear(hidden + 3, hidden), nn.Linear(hidden + 3, 3)
        for layer in (self.to_h, self.to_x):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, h: torch.Tensor, x: torch.Tensor, x_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        channels = torch.cat([h, x], dim=-1)
        return self.to_h(channels), self.to_x(channels)


def copied_blocks(blocks: int, every: int, count: int | None = None) -> list[int]:
    """The blocks GeoAda copies: the first of every `every` consecutive blocks (update (f): 0, 2, 4 of
    6), or, `count` given (the paper's block-count ablation, 1–5 of 6), `count` blocks spread evenly,
    ⌊i·blocks/count⌋ (the same 0, 2, 4 for 3 of 6; 0, 3 for 2; 0, 1, 3, 4 for 4) [I: the paper
    states the counts, not which blocks]."""
    if count is None:
        return list(range(0, blocks, every))
    if not 1 <= count <= blocks:
        raise ValueError(f"copied blocks {count}: between 1 and the base's {blocks}")
    return [i * blocks // count for i in range(count)]


class GeoAda(Variant):
    """The frozen base plus a control stream of trainable copies (see the module docstring);
    `equivariant=False` is the ControlNet ablation. `additions = False` switches the adapter off; on
    the original task with it on, the control stream reads the original (uncoupled) input."""

    def __init__(self, base: EGTN, control: Control, base_cond: int, every: int, equivariant: bool = True,
                 x_form: str = "com", copied: int | None = None):
        super().__init__(freeze(base), control, base_cond)
        self.selected = copied_blocks(len(base.blocks), every, copied)
        self.copies = nn.ModuleDict({str(i): copy.deepcopy(base.blocks[i]) for i in self.selected})
        for p in self.copies.parameters():
            p.requires_grad_(True)
        self.zero = nn.ModuleDict({str(i): EquivariantZeroConv(base.hidden, x_form) if equivariant
                                   else LinearZeroConv(base.hidden) for i in self.selected})

    def run(self, cond, noisy, t, charges, edges, control=None, original=False):
        main_cond = self.base_view(cond)
        h, x_in = self.base.embed_input(main_cond, noisy, charges, t)
        coupled = self.couple(cond, charges, edges, control, original)  # C: the control stream's graph
        hc, xc = self.base.embed_input(coupled["cond"], noisy, charges, t, coupled["extra"])
        if coupled["h_shift"] is not None:
            hc = hc + coupled["h_shift"]  # h′ = h + MLP(c̃) (global control)
        x, frames, nodes = x_in, x_in.shape[1], x_in.shape[2]
        for i, block in enumerate(self.base.blocks):
            h, x = block(h, x, edges)
            if i > self.selected[-1]:
                continue  # the control stream ends at the last selected block
            key, xc_in = str(i), xc
            hc, xc = (self.copies[key] if key in self.copies else block)(hc, xc, coupled["edges"])
            if key in self.copies:
                # D: drop the added frames (frame control) and nodes (subgraph control)
                dh, dx = self.zero[key](hc[:, -frames:, :nodes], xc[:, -frames:, :nodes], xc_in[:, -frames:, :nodes])
                h, x = h + dh, x + dx
        return (x - x_in)[:, main_cond.shape[1]:] * self.base.scale


def build_variant(name: str, base: EGTN, control: Control, base_cond: int, every: int = 2, last_k: int = 1,
                  head_blocks: int = 1, x_form: str = "com", gpf_basis: int = 4, gpf_head: int = 1,
                  copied: int | None = None) -> Variant:
    """A fresh copy of `base` wrapped as the variant `name` (its new modules in the base's dtype)."""
    base = copy.deepcopy(base)
    dtype = next(base.parameters()).dtype
    if name == "frozen":
        return Frozen(base, control, base_cond)
    if name == "full_ft":
        return FullFT(base, control, base_cond).to(dtype)
    if name == "partial_k":
        return FullFT(base, control, base_cond, last_k=last_k).to(dtype)
    if name == "mlp_k":
        return MLPHead(base, control, base_cond, head_blocks).to(dtype)
    if name == "gpf":
        return GPF(base, control, base_cond, gpf_head).to(dtype)
    if name == "gpf_plus":
        return GPFPlus(base, control, base_cond, gpf_basis, gpf_head).to(dtype)
    if name == "prompt_template":
        return PromptTemplate(base, control, base_cond).to(dtype)
    if name in ("geoada", "controlnet"):
        return GeoAda(base, control, base_cond, every, equivariant=name == "geoada", x_form=x_form,
                      copied=copied).to(dtype)
    raise ValueError(f"unknown variant {name!r} (one of {', '.join(VARIANTS)})")


def random_rotation(generator: torch.Generator, dtype=torch.float64) -> torch.Tensor:
    """A uniformly random proper rotation (det +1) via QR."""
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=generator, dtype=dtype))
    q = q * torch.sign(torch.diagonal(r))
    if torch.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


@torch.no_grad()
def equivariance_error(model: nn.Module, cond: torch.Tensor, noisy: torch.Tensor, t: torch.Tensor,
                       charges: torch.Tensor, edges: torch.Tensor, control: torch.Tensor | None = None,
                       seed: int = 0, dtype=torch.float64) -> float:
    """max |ε̂(Qc + b, Qd) − Q ε̂(c, d)| / max |ε̂(c, d)| under a random rotation Q and translation b of
    the conditioning frames c and a geometric control (the noisy displacements d rotate and do not
    translate), in `dtype` on the CPU (the model is copied and cast: the probe is the same wherever the
    model trained)."""
    generator = torch.Generator().manual_seed(seed)
    model = copy.deepcopy(model).to("cpu", dtype)
    cond, noisy, t = cond.to("cpu", dtype), noisy.to("cpu", dtype), t.cpu()
    charges, edges = charges.to("cpu", dtype), edges.to("cpu", dtype)
    control = None if control is None else control.to("cpu", dtype)
    Q = random_rotation(generator, dtype)
    b = torch.randn(3, generator=generator, dtype=dtype) * 3
    # a geometric control (subgraph control's given positions, (B, H, S, 3)) moves with the input;
    # a global one (B,) is invariant
    moved = control if control is None or control.dim() == 1 else control @ Q.T + b
    eps = model(cond, noisy, t, charges, edges, control)
    eps_moved = model(cond @ Q.T + b, noisy @ Q.T, t, charges, edges, moved)
    return float((eps_moved - eps @ Q.T).abs().max() / eps.abs().max().clamp_min(1e-30))


__all__ = ["VARIANTS", "GeoAda", "build_variant", "equivariance_error", "trainable_parameters"]
