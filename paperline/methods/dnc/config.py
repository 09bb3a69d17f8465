"""Parameters of the deep-UFM experiment (E1 linear / E2 ReLU of the spec)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from paperline.config import MethodConfig

PositiveInt = Annotated[int, Field(ge=1)]


class DNCConfig(MethodConfig):
    # grid: every (K, L, d = m·K) is one training group of independent runs, one per seed of
    # `seeds` (MethodConfig's): a seed is the run's index in its generator's seed (ufm.generator_seed)
    classes: list[Annotated[int, Field(ge=2)]] = Field(min_length=1)  # K
    samples_per_class: PositiveInt = 10  # n; N = K·n
    depths: list[PositiveInt] = Field(min_length=1)  # L: number of weight matrices
    width_multipliers: list[PositiveInt] = Field(min_length=1)  # d = m·K
    activation: Literal["linear", "relu"] = "linear"
    lam: float = Field(1e-3, ge=0)  # one λ on H1 and on every W_l (the reduction needs it common)
    # "normal": entries N(0, init_scale²); "orthogonal": semi-orthogonal factors (unit singular
    # values) times init_scale. N(0, 0.1²) at d ≤ 4K and L ≥ 2 mostly falls into Z = 0 (a local
    # minimum for L ≥ 2), so orthogonal is the default.
    init: Literal["normal", "orthogonal"] = "orthogonal"
    init_scale: float = Field(1.0, gt=0)
    # schedule (spec §c): full-batch Adam for adam_steps, then plain GD until ‖∇‖ < grad_tol or
    # gd_steps run out
    adam_steps: Annotated[int, Field(ge=0)] = 20000
    adam_lr: float = Field(1e-3, gt=0)
    gd_steps: Annotated[int, Field(ge=0)] = 30000
    gd_lr: float = Field(0.5, gt=0)
    grad_tol: float = Field(1e-6, gt=0)
    # is_dnc (see ufm.is_dnc) also needs the final objective within this relative distance of f_DNC*:
    # loose enough for a run stopped by its step budget, far tighter than the ≥10% gaps seen
    # between DNC and the low-rank critical points
    dnc_objective_tol: float = Field(1e-2, gt=0)
    checkpoint_every: PositiveInt = 1000
    log_every: PositiveInt = 100
