"""The FVAE-LoRA adapter (spec ../shared/methods/fvae_lora.md (b), after the official
`peft/src/peft/tuners/fvae_peft/fvae_peft_mlp_layer.py`), as a custom layer of peft's LoRA.

For a frozen linear layer W₀ with input x (the last dimension; tokens are flattened):
    encoder i (i = 1, 2): h = Dropout(ReLU(Linear(x))) repeated, μ_i = Linear(h), log σ_i² = Linear(h)
        (the heads zero-initialised: μ = 0, σ = 1 at the start; log σ² clamped to [−20, 20])
    z_i = μ_i + σ_i ⊙ ε
    decoder: x̂ = Linear(Dropout(ReLU(Linear(...[z₁, z₂])))), a learned diagonal std s (ones) + 1e-5
    y = W₀x + (α/r)·B·z₁ in training, W₀x + (α/r)·B·μ₁ at evaluation; B ~ N(0, 0.02²)
    ℓ = λ_rec·(−log N(x; x̂, diag s²)) + λ_kl·KL(q₁ ‖ N(0, I)) + λ_z2·mean((z₂ − m)²) − λ_z1·mean(z₁²)

Reductions as the code's: the Gaussian log-likelihood is summed over the input's features and
averaged over tokens, the KL summed over latent dimensions and averaged over tokens, the two
latent penalties averaged over every element. KL(q₂ ‖ N(m, 1)) is computed there but unused, so
it is not computed here. The layer's ℓ of its last training forward is in `last_loss`; the model
loss averages it over the adapted layers (`fvae_loss`).

Not mergeable: the update B·μ₁(x) is a nonlinear function of x, so no matrix folds into W₀ (the
official `merge()` adds an unused `lora_E` and is meaningless, spec (f)); `merge` raises.

It is a peft LoRA layer registered through peft's custom-module API
(`LoraConfig._register_custom_module({nn.Linear: ...})`, dispatched before peft's own Linear), so
the LoRA baseline and FVAE-LoRA select their layers with the same `target_modules` and are injected
by the same `inject_adapter_in_model`. Every trainable tensor sits under a `lora_` name, which is
what peft marks trainable."""
from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

# The constants of the code's ELBO (spec (b)).
LOGVAR_CLAMP = 20.0  # log σ² is clamped to [−20, 20]
DECODER_STD_EPS = 1e-5  # added to the decoder's learned diagonal std
B_INIT_STD = 0.02  # B ~ N(0, 0.02²): not zero, so training injects B·ε from step 0 (spec (f))
DROPOUT = 0.1  # the encoders' and the decoder's (FVAEPEFTConfig enc_dropout, dec_dropout)
LOG_2PI = math.log(2 * math.pi)


def scaling_of(r: int, lora_alpha: float) -> float:
    """The update's scale, as the official FVAE-LoRA layer computes it (AdaLoRA's): α / (r + 1e-5),
    with α = r when α <= 0 (the 1e-5 moves it by 2.5e-6 of α/r at r = 4)."""
    return (lora_alpha if lora_alpha > 0 else r) / (r + 1e-5)


@dataclass(frozen=True)
class FvaeSettings:
    """One FVAE-LoRA configuration: the latent dim is the LoRA rank r (`lora_r`), α the LoRA alpha."""

    encoder_hidden: int = 4  # width of each encoder's hidden layers
    encoder_layers: int = 1
    decoder_hidden: int = 32
    decoder_layers: int = 2
    z2_mean: float = 1.5  # m: z₂'s prior is N(m, 1)
    lambda_rec: float = 1.0
    lambda_kl: float = 1.0
    lambda_z2: float = 1.0
    lambda_z1: float = 1.0
    dropout: float = DROPOUT


class SeededDropout(nn.Module):
    """nn.Dropout drawing its mask from `generator` (set by the layer; the global stream when None):
    variants trained side by side in threads of one process must not share torch's global RNG."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        keep = torch.rand(x.shape, generator=self.generator, device=x.device) >= self.p
        return x * keep / (1 - self.p)


def mlp(dim_in: int, hidden: int, layers: int, dropout: float) -> nn.Sequential:
    """`layers` × (Linear, ReLU, Dropout): the code's order (dropout after the ReLU)."""
    mods: list[nn.Module] = []
    for i in range(layers):
        mods += [nn.Linear(dim_in if i == 0 else hidden, hidden), nn.ReLU(), SeededDropout(dropout)]
    return nn.Sequential(*mods)


class GaussianEncoder(nn.Module):
    """q(z|x) = N(μ(x), diag σ²(x)): a shared MLP body, zero-initialised μ and log σ² heads."""

    def __init__(self, dim_in: int, latent: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.body = mlp(dim_in, hidden, layers, dropout)
        self.mean = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        for head in (self.mean, self.logvar):
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(x)
        return self.mean(h), self.logvar(h).clamp(-LOGVAR_CLAMP, LOGVAR_CLAMP)


class GaussianDecoder(nn.Module):
    """p(x|z₁, z₂) = N(x̂([z₁, z₂]), diag s²), s a learned vector initialised to ones."""

    def __init__(self, latent_in: int, dim_out: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.body = mlp(latent_in, hidden, layers, dropout)
        self.out = nn.Linear(hidden, dim_out)
        self.std = nn.Parameter(torch.ones(dim_out))

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.out(self.body(z)), self.std + DECODER_STD_EPS


def gaussian_nll(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """−log N(x; mean, diag std²) per row (summed over the last dim). |std|: the code uses the
    parameter as a scale_tril diagonal without forcing it positive."""
    return 0.5 * (((x - mean) / std) ** 2 + 2 * std.abs().log() + LOG_2PI).sum(-1)


def kl_standard_normal(mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """KL(N(mean, diag e^logvar) ‖ N(0, I)) per row."""
    return 0.5 * (mean ** 2 + logvar.exp() - 1 - logvar).sum(-1)


def fvae_layer_loss(x: torch.Tensor, x_hat: torch.Tensor, std: torch.Tensor, mu1: torch.Tensor,
                    logvar1: torch.Tensor, z1: torch.Tensor, z2: torch.Tensor,
                    s: FvaeSettings) -> dict[str, torch.Tensor]:
    """The per-layer loss ℓ of spec (b) and its terms (rows: tokens)."""
    terms = {"rec": gaussian_nll(x, x_hat, std).mean(),
             "kl": kl_standard_normal(mu1, logvar1).mean(),
             "z2": ((z2 - s.z2_mean) ** 2).mean(),
             "z1": (z1 ** 2).mean()}
    terms["loss"] = (s.lambda_rec * terms["rec"] + s.lambda_kl * terms["kl"] + s.lambda_z2 * terms["z2"]
                     - s.lambda_z1 * terms["z1"])
    return terms


@functools.lru_cache(maxsize=1)
def fvae_linear_class() -> type:
    """The FVAE-LoRA layer class, a peft `LoraLayer` (built lazily: importing peft costs seconds)."""
    from peft.tuners.lora import LoraLayer  # peft imports transformers: only when a layer is built

    class _FvaeLinear(nn.Module, LoraLayer):
        adapter_layer_names = ("lora_B", "lora_encoder1", "lora_encoder2", "lora_decoder")

        def __init__(self, base_layer: nn.Module, adapter_name: str, settings: FvaeSettings, config=None,
                     r: int = 4, lora_alpha: float = 4, **kwargs) -> None:
            super().__init__()
            LoraLayer.__init__(self, base_layer)
            if not isinstance(self.get_base_layer(), nn.Linear):
                raise TypeError(f"FVAE-LoRA adapts nn.Linear layers, got {type(self.get_base_layer()).__name__}")
            self.lora_encoder1 = nn.ModuleDict()
            self.lora_encoder2 = nn.ModuleDict()
            self.lora_decoder = nn.ModuleDict()
            self.settings: dict[str, FvaeSettings] = {}
            self.last_loss: dict[str, dict[str, torch.Tensor]] = {}
            self.generator: torch.Generator | None = None  # of ε and the dropout masks (set_generator)
            self._active_adapter = adapter_name
            self.update_layer(adapter_name, r, lora_alpha, settings)

        # peft's LoraLayer takes a LoraConfig here: our layer is built (and updated) by __init__ alone
        def update_layer(self, adapter_name: str, r: int, lora_alpha: float,  # type: ignore[override]
                         settings: FvaeSettings, **kwargs) -> None:
            if r <= 0:
                raise ValueError(f"the FVAE latent dim r must be positive, got {r}")
            d, d_out, s = self.in_features, self.out_features, settings
            assert d is not None and d_out is not None  # LoraLayer's, of the nn.Linear base layer
            self.r[adapter_name], self.lora_alpha[adapter_name] = r, lora_alpha
            # the official layer (AdaLoRA's): scaling = α (r when α <= 0), divided by ranknum + 1e-5
            self.scaling[adapter_name] = scaling_of(r, lora_alpha)
            self.settings[adapter_name] = s
            self.lora_encoder1[adapter_name] = GaussianEncoder(d, r, s.encoder_hidden, s.encoder_layers, s.dropout)
            self.lora_encoder2[adapter_name] = GaussianEncoder(d, r, s.encoder_hidden, s.encoder_layers, s.dropout)
            self.lora_decoder[adapter_name] = GaussianDecoder(2 * r, d, s.decoder_hidden, s.decoder_layers, s.dropout)
            lora_b = nn.Linear(r, d_out, bias=False)
            self.lora_B[adapter_name] = lora_b
            nn.init.normal_(lora_b.weight, std=B_INIT_STD)
            self._move_adapter_to_device_of_base_layer(adapter_name)
            self.set_adapter(self.active_adapters)

        def set_generator(self, generator: torch.Generator | None) -> None:
            self.generator = generator
            for m in self.modules():
                if isinstance(m, SeededDropout):
                    m.generator = generator

        def _normal(self, like: torch.Tensor) -> torch.Tensor:
            return torch.randn(like.shape, generator=self.generator, device=like.device, dtype=like.dtype)

        def merge(self, safe_merge: bool = False, adapter_names=None) -> None:
            raise NotImplementedError("FVAE-LoRA cannot be merged: its update B·μ₁(x) is nonlinear in x "
                                      "(inference keeps encoder 1 and B)")

        def unmerge(self) -> None:
            raise NotImplementedError("FVAE-LoRA is never merged")

        def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
            result = self.base_layer(x, *args, **kwargs)
            if self.disable_adapters:
                return result
            for name in self.active_adapters:
                if name not in self.lora_encoder1:
                    continue
                lora_b = self.lora_B[name]
                assert isinstance(lora_b, nn.Linear)  # update_layer's
                flat = x.reshape(-1, x.shape[-1]).to(lora_b.weight.dtype)
                mu1, logvar1 = self.lora_encoder1[name](flat)
                if self.training:
                    s = self.settings[name]
                    z1 = mu1 + (0.5 * logvar1).exp() * self._normal(mu1)
                    mu2, logvar2 = self.lora_encoder2[name](flat)
                    z2 = mu2 + (0.5 * logvar2).exp() * self._normal(mu2)
                    x_hat, std = self.lora_decoder[name](torch.cat([z1, z2], -1))
                    self.last_loss[name] = fvae_layer_loss(flat, x_hat, std, mu1, logvar1, z1, z2, s)
                else:  # μ₁ at evaluation: encoder 2 and the decoder are training-only cost
                    z1 = mu1
                delta = lora_b(z1) * self.scaling[name]
                result = result + delta.reshape(*x.shape[:-1], -1).to(result.dtype)
            return result

        def __repr__(self) -> str:
            return "fvae_lora." + super().__repr__()

    _FvaeLinear.__name__ = _FvaeLinear.__qualname__ = "FvaeLinear"
    return _FvaeLinear


def linear_modules(model: nn.Module) -> dict[str, nn.Linear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}


def check_targets(model: nn.Module, targets: list[str], rank: int, where: str = "target_modules") -> list[str]:
    """The full names of the nn.Linear layers `targets` selects (peft's rule: a name equal to a
    target or ending in '.' + target), or a ValueError naming the key: a target that matches no
    linear layer, or a rank above a matched layer's width (min of its in and out features)."""
    linears = linear_modules(model)
    chosen = []
    for t in targets:
        hits = [n for n in linears if n == t or n.endswith("." + t)]
        if not hits:
            raise ValueError(f"{where}: {t!r} matches no nn.Linear of the backbone "
                             f"(its linear layers: {', '.join(sorted(linears)) or 'none'})")
        for n in hits:
            width = min(linears[n].in_features, linears[n].out_features)
            if rank > width:
                raise ValueError(f"{where}: rank {rank} is above the width {width} of layer {n!r} "
                                 f"({linears[n].in_features}→{linears[n].out_features})")
        chosen += hits
    return sorted(set(chosen))


def inject(model: nn.Module, kind: str, targets: list[str], rank: int, alpha: float,
           settings: FvaeSettings | None = None) -> nn.Module:
    """Inject a peft LoRA (`kind` 'lora': B zero-initialised by peft) or FVAE-LoRA adapter into the
    `targets` of `model` (in place; returned), every non-adapter parameter frozen."""
    from peft import LoraConfig, inject_adapter_in_model

    check_targets(model, targets, rank)
    # peft annotates lora_alpha int but only divides it by r: the config's float is kept
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets),  # type: ignore[arg-type]
                        lora_dropout=0.0)
    if kind == "fvae":
        cls = fvae_linear_class()
        # peft annotates the mapping's values as classes; it calls them, so a partial is fine
        config._register_custom_module({nn.Linear: functools.partial(cls, settings=settings  # type: ignore[dict-item]
                                                                     or FvaeSettings())})
    elif kind != "lora":
        raise ValueError(f"unknown adapter kind {kind!r}: expected 'lora' or 'fvae'")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft's notes on custom modules being experimental
        return inject_adapter_in_model(config, model)


def fvae_layers(model: nn.Module) -> list[Any]:  # FvaeLinear, a class built at run time
    cls = fvae_linear_class()
    return [m for m in model.modules() if isinstance(m, cls)]


def set_generator(model: nn.Module, generator: torch.Generator | None) -> None:
    """Every FVAE layer of `model` draws its noise (ε, dropout masks) from `generator`."""
    for layer in fvae_layers(model):
        layer.set_generator(generator)


def fvae_loss(model: nn.Module) -> dict[str, torch.Tensor]:
    """The mean over adapted layers of each layer's last training ℓ and its terms."""
    losses = [t for layer in fvae_layers(model) for t in layer.last_loss.values()]
    if not losses:
        raise RuntimeError("no FVAE layer has a training loss: run a forward pass in train mode first")
    return {k: torch.stack([t[k] for t in losses]).mean() for k in losses[0]}


__all__ = ["FvaeSettings", "check_targets", "fvae_layer_loss", "fvae_loss", "fvae_linear_class", "inject",
           "set_generator"]
