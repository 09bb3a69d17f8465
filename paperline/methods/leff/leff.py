"""LEFF's server-side steps and the per-method client models, as plain functions on a paperline
`CausalLM` (so the Flower strategy in `fed.py`, or any other round loop, calls them):

    importance I_l = Σ_{m∈l} (g_m θ_m)²  →  Ī_k = Σ_{l=k}^{k+L_i−1} I_l  →  p_i(k) = softmax(Ī_k / std Ī)
    → block [k, k+L_i)  →  the layers below and above it distilled into ⌈n·r⌉-layer frozen stacks
    → the client trains its block  →  each layer averaged over the clients that trained it (by D_i).

Layer numbering: `model.layers[l]`; a state-dict key `layers.<l>.…` belongs to layer l.

The downstream task is sequence classification: `add_classifier` gives the LM a head on its mean
final hidden state (`classify`); every method trains the head with what it trains of the body (the
paper's GLUE heads [I]); `fedhead` trains the head alone (the frozen pretrained model's linear
probe, the trivial baseline). The server's importance and distillation stay unsupervised, on the
unlabelled proxy text (importance through the LM head's next-token loss [I]).
"""
from __future__ import annotations

import copy
import math
import re
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from paperline.nn.attention.common import rope_at, rotate
from paperline.nn.attention.gqa import GroupedQueryAttention
from paperline.nn.causal_lm import CausalLM, CausalLMConfig
from paperline.seeds import seeded_init

LAYER_KEY = re.compile(r"^layers\.(\d+)\.")
HEAD = "classifier"  # the classification head's module name (state-dict keys classifier.weight/.bias)
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


# --- importance and block choice ------------------------------------------------------------------

def layer_importance(model: CausalLM, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(L,) first-order Taylor importance (Molchanov et al. 2019) of each layer on one proxy
    batch: one forward and one backward pass; I_m = (g_m θ_m)² (the squared form: the spec leaves
    squared vs absolute undecoded [I]), summed over the layer's parameters."""
    model.zero_grad(set_to_none=True)
    model(x, labels=y).loss.backward()
    # as_tensor: the sum (a tensor once a parameter has a gradient) unchanged, typed as one
    scores = torch.stack([torch.as_tensor(sum(((p.grad * p.detach()) ** 2).sum() for p in layer.parameters()
                                              if p.grad is not None))
                          for layer in model.layers])
    model.zero_grad(set_to_none=True)
    return scores.detach()


def block_importance(layer_scores: torch.Tensor, size: int) -> torch.Tensor:
    """Ī_k for every start k = 0 … L−size: the sum of `size` consecutive layer importances."""
    L = len(layer_scores)
    if not 1 <= size <= L:
        raise ValueError(f"block of {size} layers in a model of {L}")
    return torch.stack([layer_scores[k:k + size].sum() for k in range(L - size + 1)])


def block_probabilities(layer_scores: torch.Tensor, size: int) -> torch.Tensor:
    """p(k) = softmax_k(Ī_k / std(Ī)). The temperature is not in the paper [I]: dividing by the
    spread makes it scale-free (the spec's pitfall f); equal scores (or one start) give uniform."""
    scores = block_importance(layer_scores, size).double()
    spread = scores.std() if len(scores) > 1 else scores.new_tensor(0.0)
    if not torch.isfinite(spread) or spread <= 0:
        return torch.full_like(scores, 1.0 / len(scores)).float()
    return torch.softmax(scores / spread, dim=0).float()


def choose_block(rule: str, layer_scores: torch.Tensor | None, size: int, num_layers: int, server_round: int,
                 client: int, generator: torch.Generator) -> int:
    """The start k of a contiguous block of `size` layers: sampled by importance, uniformly, or
    round-robin ((round + client) cycles through the starts, so clients cover different blocks)."""
    starts = num_layers - size + 1
    if rule == "importance":
        if layer_scores is None:
            raise ValueError("block rule 'importance' needs the layer scores")
        return int(torch.multinomial(block_probabilities(layer_scores, size), 1, generator=generator))
    if rule == "random":
        return int(torch.randint(starts, (1,), generator=generator))
    if rule == "round_robin":
        return (server_round - 1 + client) % starts
    raise ValueError(f"block rule {rule!r}: not importance, random or round_robin")


# --- context compression --------------------------------------------------------------------------

def context_layers(n: int, ratio: float) -> int:
    """⌈n·r⌉ student layers for a context of n teacher layers (0 for an empty context)."""
    return math.ceil(n * ratio - 1e-9) if n else 0


def student_map(teacher: int, student: int) -> list[int]:
    """Teacher layer each student layer imitates: uniform, the last on the last (TinyBERT's
    mapping [I]; the paper does not say)."""
    return [math.ceil((j + 1) * teacher / student) - 1 for j in range(student)]


def attention_probs(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """(B, heads, T, T) causal attention probabilities of a GQA-family layer (MHA, MQA, GQA) on its
    (normed) input x: what its scaled-dot-product attention weights the values by."""
    if not isinstance(attn, GroupedQueryAttention):
        raise TypeError(f"attention KL needs q/k projections: {type(attn).__name__} is not MHA/MQA/GQA")
    B, T, _ = x.shape
    cos, sin = rope_at(0, T, attn.head_dim, attn.rope_base, x.device, x.dtype)
    q = rotate(attn.q_proj(x).view(B, T, attn.num_heads, attn.head_dim), cos, sin).transpose(1, 2)
    k = rotate(attn.k_proj(x).view(B, T, attn.num_kv_heads, attn.head_dim), cos, sin).transpose(1, 2)
    k = k.repeat_interleave(attn.num_heads // attn.num_kv_heads, dim=1)
    logits = q @ k.transpose(-1, -2) / math.sqrt(attn.head_dim)
    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
    return torch.softmax(logits.masked_fill(mask, float("-inf")), dim=-1)


def run_stack(layers, x: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each layer's output hidden states and attention probabilities."""
    hidden, attns = [], []
    for layer in layers:
        attns.append(attention_probs(layer.attn, layer.input_norm(x)))
        x, _ = layer(x, 0, None)
        hidden.append(x)
    return hidden, attns


def distillation_loss(teacher, student, x: torch.Tensor, kl_weight: float,
                      targets: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None) -> torch.Tensor:
    """E = Σ_j MSE(H_s^j, H_t^{m(j)}) + α·KL(A_t^{m(j)} ‖ A_s^j), each stack on the same input
    hidden states x; the KL is per query row, averaged over batch, heads and rows. `targets`: the
    frozen teacher's (hidden, attention) on x when already computed (distil_context's)."""
    if targets is None:
        with torch.no_grad():
            targets = run_stack(teacher, x)
    h_t, a_t = targets
    h_s, a_s = run_stack(student, x)
    loss = x.new_zeros(())
    for j, t in enumerate(student_map(len(teacher), len(student))):
        kl = (a_t[t] * (a_t[t].clamp_min(1e-12).log() - a_s[j].clamp_min(1e-12).log())).sum(-1).mean()
        loss = loss + F.mse_loss(h_s[j], h_t[t]) + kl_weight * kl
    return loss


def distil_context(teacher: nn.ModuleList, inputs: torch.Tensor, ratio: float, steps: int, lr: float,
                   kl_weight: float, batch_size: int, generator: torch.Generator) -> tuple[nn.ModuleList, list[float]]:
    """A ⌈n·r⌉-layer student of the n teacher layers, started from the mapped teacher layers
    (copies, [I]) and trained `steps` AdamW steps on the proxy hidden states `inputs` (B, T, d)
    (no labels); returned frozen, with its loss per step."""
    m = context_layers(len(teacher), ratio)
    student = nn.ModuleList(copy.deepcopy(teacher[t]) for t in student_map(len(teacher), m))
    teacher_frozen = [layer.requires_grad_(False) for layer in copy.deepcopy(teacher)]
    losses = []
    if m and steps:
        opt = torch.optim.AdamW(student.parameters(), lr=lr, weight_decay=0.0)
        # the frozen teacher's outputs on the whole proxy set once, each step's batch indexed out of
        # them: every row is computed alone (row-wise norms, per-window attention, per-row matmuls),
        # so they equal a per-batch forward's (tests/methods/test_leff_math.py) at a fraction of the cost
        with torch.no_grad():
            hidden, attns = run_stack(teacher_frozen, inputs)
        for _ in range(steps):
            idx = torch.randint(len(inputs), (min(batch_size, len(inputs)),), generator=generator)
            loss = distillation_loss(teacher_frozen, student, inputs[idx], kl_weight,
                                     ([h[idx] for h in hidden], [a[idx] for a in attns]))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return student.requires_grad_(False), losses


@torch.no_grad()
def hidden_before(model: CausalLM, x: torch.Tensor, layer: int) -> torch.Tensor:
    """The hidden states entering layer `layer` (after the embedding and layers < layer)."""
    return model.hidden_states(x, num_blocks=layer)


def leff_client_model(model: CausalLM, start: int, size: int, proxy_x: torch.Tensor, ratio: float, steps: int,
                      lr: float, kl_weight: float, batch_size: int,
                      generator: torch.Generator) -> tuple[CausalLM, int, dict]:
    """What the server sends a LEFF client: a CausalLM of [pre-context student, the block's L_i
    global layers, post-context student] with the global embedding, norm and head. Returns it,
    the client-local index of the block's first layer, and the distillation losses."""
    L = model.config.num_layers
    pre, post = list(range(start)), list(range(start + size, L))
    pre_student, pre_losses = distil_context(nn.ModuleList(model.layers[i] for i in pre),
                                             hidden_before(model, proxy_x, 0), ratio, steps, lr, kl_weight,
                                             batch_size, generator)
    post_student, post_losses = distil_context(nn.ModuleList(model.layers[i] for i in post),
                                               hidden_before(model, proxy_x, start + size), ratio, steps, lr,
                                               kl_weight, batch_size, generator)
    layers = list(pre_student) + [copy.deepcopy(model.layers[i]) for i in range(start, start + size)] + list(post_student)
    config = CausalLMConfig.from_dict({**model.config.to_dict(), "num_layers": len(layers)})
    client = CausalLM(config)
    if hasattr(model, HEAD):
        add_classifier(client, getattr(model, HEAD)[-1].out_features)
    client.load_state_dict({k: v for k, v in model.state_dict().items() if not LAYER_KEY.match(k)}, strict=False)
    client.layers = nn.ModuleList(layers)
    return client, len(pre_student), {"pre": pre_losses, "post": post_losses}


# --- the classification head -----------------------------------------------------------------

class FeatureStandardizer(nn.Module):
    """(f − mean) / std per feature, the mean and second moment a running average over every
    window it has trained on (no gradient through them; no batch statistics, so a batch of one
    window works and training and evaluation normalise alike). The pooled features share a large
    common component that swamps their differences (measured: a zero-started head on the raw mean
    hidden state learns the label prior, its loss overshooting); the statistics are buffers the
    clients send and the server averages by D_i, as FedAvg averages a BatchNorm's. Starts as the
    identity."""

    mean: torch.Tensor
    second_moment: torch.Tensor
    count: torch.Tensor

    def __init__(self, features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.register_buffer("mean", torch.zeros(features))
        self.register_buffer("second_moment", torch.ones(features))
        self.register_buffer("count", torch.zeros(()))

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        if self.training:
            with torch.no_grad():
                total = self.count + len(f)
                self.mean.mul_(self.count / total).add_(f.sum(0) / total)
                self.second_moment.mul_(self.count / total).add_((f * f).sum(0) / total)
                self.count.copy_(total)
        var = (self.second_moment - self.mean ** 2).clamp_min(0.0)
        return (f - self.mean) / torch.sqrt(var + self.eps)


def add_classifier(model: CausalLM, classes: int) -> CausalLM:
    """The head on the mean final hidden state: a FeatureStandardizer and a Linear to `classes`
    logits, zero-started (uniform before training, whatever the seed); in place."""
    linear = nn.Linear(model.config.hidden_size, classes)
    nn.init.zeros_(linear.weight)
    nn.init.zeros_(linear.bias)
    model.add_module(HEAD, nn.Sequential(FeatureStandardizer(model.config.hidden_size), linear))
    return model


def head_state_keys(model: nn.Module) -> list[str]:
    """The head's buffers (the standardiser's statistics): sent and averaged with what a client trains."""
    return [k for k, _ in model.named_buffers() if k.startswith(f"{HEAD}.")]


def classify(model: CausalLM, x: torch.Tensor) -> torch.Tensor:
    """(B, classes) logits: the head on the final (normed) hidden states averaged over positions."""
    return getattr(model, HEAD)(model.hidden_states(x).mean(dim=1))


# --- the baselines' models ------------------------------------------------------------------------

def add_zero_biases(model: CausalLM) -> CausalLM:
    """BitFit on a bias-free LM [I]: every Linear of the blocks gets a bias that starts at zero (the
    model's function is unchanged), and only those are trained."""
    for layer in model.layers:
        for name, module in list(layer.named_modules()):
            if isinstance(module, nn.Linear) and module.bias is None:
                module.bias = nn.Parameter(torch.zeros(module.out_features))
    return model


def add_lora(model: CausalLM, rank: int, alpha: float) -> CausalLM:
    """peft LoRA (B starts at zero) on the attention projections of every block."""
    from peft import LoraConfig, inject_adapter_in_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # peft annotates lora_alpha int but only divides it by r: the config's float is kept
        config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=LORA_TARGETS,  # type: ignore[arg-type]
                            lora_dropout=0.0)
        lora_model = inject_adapter_in_model(config, model)
    assert isinstance(lora_model, CausalLM)  # peft injects in place and returns the model it was given
    return lora_model


def trainable_keys(method: str, state_keys, block: range | None = None) -> list[str]:
    """The state-dict keys a client trains (and sends back) under `method`: its part of the body and
    the classification head (when the model has one)."""
    state_keys = list(state_keys)
    head = [k for k in state_keys if k.startswith(f"{HEAD}.")]
    if method == "fedhead":
        return head
    if method == "fedavg":
        return [k for k in state_keys if k != "lm_head.weight"]  # tied to embed_tokens: sent once
    if method in ("fedlora", "slora"):  # SLoRA's second stage (its first: its masks' keys, fed.py)
        return [k for k in state_keys if ".lora_" in k] + head
    if method == "fedbitfit":
        return [k for k in state_keys if LAYER_KEY.match(k) and k.endswith(".bias")] + head
    if method.startswith("leff"):
        if block is None:
            raise ValueError(f"method {method!r} trains a block: none given")
        return [k for k in state_keys if (m := LAYER_KEY.match(k)) and int(m.group(1)) in block] + head
    raise ValueError(f"method {method!r}")


def build_model(method: str, base: CausalLM, lora_rank: int, lora_alpha: float, seed: int = 0,
                classes: int | None = None) -> CausalLM:
    """The global model of `method`: the base LM with a zero-started classification head of
    `classes` (None: none), with LoRA adapters or zero biases where it needs them. LoRA's A is
    drawn from torch's global RNG: seeded here (and the global state restored), so a run's adapters
    depend on its seed, not on what ran before it in the process."""
    model = copy.deepcopy(base)
    if classes is not None:
        add_classifier(model, classes)
    if method == "fedlora":
        with seeded_init(seed, cuda=True):
            return add_lora(model, lora_rank, lora_alpha)
    if method == "fedbitfit":
        return add_zero_biases(model)
    return model


# --- SLoRA: a sparse first stage, then LoRA started from its update ------------------------------

def lora_target_keys(state_keys) -> list[str]:
    """The weights LoRA adapts (q/k/v/o of every block), in a model without adapters."""
    return [k for k in state_keys if LAYER_KEY.match(k) and k.rsplit(".", 2)[-2] in LORA_TARGETS
            and k.endswith(".weight")]


def sparse_masks(model: nn.Module, density: float, seed: int) -> dict[str, torch.Tensor]:
    """SLoRA's fixed random support: for each LoRA target weight, a boolean mask of ⌈density · numel⌉
    entries drawn from `seed` (the server and every client draw the same). The support is LoRA's
    target modules [I: the spec says "a few percent of the weights"; on LoRA's modules the SVD start
    carries the whole first-stage update, where a mask on the MLP too would lose that part]."""
    generator = torch.Generator().manual_seed(seed)
    shapes = dict(model.state_dict())
    masks = {}
    for key in lora_target_keys(shapes):
        numel = shapes[key].numel()
        mask = torch.zeros(numel, dtype=torch.bool)
        mask[torch.randperm(numel, generator=generator)[:math.ceil(density * numel - 1e-9)]] = True
        masks[key] = mask.view_as(shapes[key])
    return masks


def pack_sparse(state: dict[str, torch.Tensor], masks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What a first-stage client sends for its masked weights: their masked entries only (1-D)."""
    return {k: state[k][mask].detach().clone() for k, mask in masks.items()}


def unpack_sparse(global_state: dict[str, torch.Tensor], sent: dict[str, torch.Tensor],
                  masks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A client's masked entries scattered into the global weights (its full update: the entries
    outside the mask it did not train), the other keys as sent."""
    out = dict(sent)
    for key, mask in masks.items():
        if key in sent:
            full = global_state[key].clone()
            full[mask] = sent[key].to(full.dtype)
            out[key] = full
    return out


@torch.no_grad()
def lora_from_update(model: CausalLM, start: dict[str, torch.Tensor], rank: int, alpha: float,
                     seed: int) -> tuple[CausalLM, float]:
    """SLoRA's second-stage start: the model's LoRA target weights set back to `start` (the
    pretrained ones) and peft LoRA adapters added whose product is the rank-`rank` truncated SVD of
    each weight's update ΔW = W − W_start (ΔW ≈ U_r S_r V_rᵀ; B = U_r √S_r, A = √S_r V_rᵀ, each over
    √scaling, as peft adds scaling · B A). Returns the model and the share of the updates' squared
    Frobenius norm the truncation kept (1: every update had rank ≤ r)."""
    state = model.state_dict()
    updates = {k: state[k] - start[k] for k in start}
    model.load_state_dict(start, strict=False)
    with seeded_init(seed, cuda=True):
        model = add_lora(model, rank, alpha)
    from peft.tuners.lora import LoraLayer

    modules = dict(model.named_modules())
    kept = total = 0.0
    for key, delta in updates.items():
        layer = modules[key.removesuffix(".weight")]
        assert isinstance(layer, LoraLayer)  # add_lora wrapped every target
        u, s, vh = torch.linalg.svd(delta.double(), full_matrices=False)
        r = min(rank, len(s))
        root = (s[:r] / layer.scaling["default"]).sqrt()
        lora_b, lora_a = layer.lora_B["default"], layer.lora_A["default"]
        assert isinstance(lora_b, nn.Linear) and isinstance(lora_a, nn.Linear)
        b, a = lora_b.weight, lora_a.weight
        b.zero_()  # beyond the update's rank (r < rank) B stays zero, so B A is the truncation exactly
        b[:, :r] = (u[:, :r] * root).to(b.dtype)
        a[:r] = (root[:, None] * vh[:r]).to(a.dtype)
        kept, total = kept + float((s[:r] ** 2).sum()), total + float((s ** 2).sum())
    return model, kept / total if total > 0 else 1.0


# --- aggregation ----------------------------------------------------------------------------------

def aggregate(global_state: dict[str, torch.Tensor], updates: list[tuple[float, dict[str, torch.Tensor]]],
              masks: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Θ^k ← Σ_{i∈S_k} D_i Θ_i^k / Σ_{i∈S_k} D_i for every key k, S_k the clients that sent k; a key
    nobody sent keeps its value (LEFF's layers nobody trained, a dropped client's). `masks`: keys
    whose senders sent their masked entries only (SLoRA's sparse stage, `pack_sparse`): those are
    averaged as sent and scattered into the global weight once, the entries off the mask kept exactly."""
    masks = masks or {}
    out = global_state | pack_sparse(global_state, masks)
    for key, current in list(out.items()):
        senders = [(w, s[key]) for w, s in updates if key in s]
        if senders:
            total = sum(w for w, _ in senders)
            # as_tensor: the sum of the (non-empty) senders' tensors unchanged, typed as one
            out[key] = torch.as_tensor(sum(w * t.to(current.dtype) for w, t in senders)) / total
    return unpack_sparse(global_state, out, masks)
