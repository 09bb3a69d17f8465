"""Parameters of the GeoAda experiment (spec (e) at small scale, with update (f)'s layer choice,
zero-initialised form and splits); torch-free, so validating them imports no torch."""
from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, model_validator

from paperline.config import MethodConfig, StrictModel

Variant = Literal["frozen", "full_ft", "partial_k", "mlp_k", "gpf", "gpf_plus", "prompt_template", "controlnet",
                  "geoada"]
VARIANTS: tuple[Variant, ...] = get_args(Variant)
Control = Literal["frame", "global", "subgraph"]
CONTROLS: tuple[Control, ...] = get_args(Control)
# A prompt template marks what the coupling operator added (frames, nodes): global control adds
# neither, so the template does not fit it (the paper runs each baseline "where it fits" [I])
FITS = {"prompt_template": ("frame", "subgraph")}


# Forgetting is scored two ways for every variant, on the original task (the base's window, no
# control): with the variant's additions off (adapters, prompts, heads, the control embedding) and
# with them on. Off, a variant is the base except where fine-tuning changed the base's own weights
# (CHANGES_BASE); on, it differs from "off" only where an addition acts without the control
# (ACTS_ON_ORIGINAL: GeoAda's control stream reads the original input, the prompts and heads act on
# any input; the control embedding needs the control, a prompt template marks added frames or nodes
# the original task has none of). Elsewhere the two are the same model, scored once (the identities
# are tested in tests/methods/test_geoada_adapters.py).
CHANGES_BASE = ("full_ft", "partial_k")
ACTS_ON_ORIGINAL = ("mlp_k", "gpf", "gpf_plus", "controlnet", "geoada")


def fits(variant: str, control: str) -> bool:
    return control in FITS.get(variant, CONTROLS)
PositiveInt = Annotated[int, Field(ge=1)]


class EGTNShape(StrictModel):
    """GeoTDM's EGTN (update (f), Table 8: 6 blocks, hidden 128, time embedding 32)."""

    hidden: PositiveInt = 32
    blocks: PositiveInt = 3
    time_dim: PositiveInt = 32


class TrainConfig(StrictModel):
    steps: Annotated[int, Field(ge=0)] = 400
    batch_size: PositiveInt = 32
    lr: float = Field(1e-3, gt=0)  # Adam (0.9, 0.999, 1e-8); the paper's 1e-4 at its 128-batch, long runs


class GeoAdaConfig(MethodConfig):
    variants: list[Variant] = Field(list(VARIANTS), min_length=1)
    controls: list[Control] = Field(list(CONTROLS), min_length=1)
    # which of the nbody stage's datasets the run reads: the charged system or MD17 (no global label)
    dataset: Literal["charged", "md17"] = "charged"
    shape: EGTNShape = EGTNShape()
    diffusion_steps: PositiveInt = 50  # DDPM T (the paper's 1000)
    # the diffused variable is the displacement from the last given frame times this (data
    # normalisation: about 1 / its standard deviation)
    displacement_scale: float = Field(1.0, gt=0)
    # frame-conditioned forecasting: pretrain cond_frames → horizon; frame control conditions on
    # frame_control_frames (the paper's 10 → 20, then 15 → 20)
    cond_frames: PositiveInt = 10
    frame_control_frames: PositiveInt = 15
    horizon: PositiveInt = 20
    pretrain: TrainConfig = TrainConfig(steps=600)
    finetune: TrainConfig = TrainConfig(steps=150)
    # every fine-tuned variant's learning rate is chosen from this one sweep (empty: finetune.lr for
    # all) at the first fine-tuning seed, per control type, by the ε-prediction loss on a validation
    # set (the last `validation_trajectories` of that control's training windows, held out from
    # training; never the test set); the other seeds train at the chosen rate
    lr_sweep: list[Annotated[float, Field(gt=0)]] = []
    # where the best rate is the sweep's highest (lowest), the next rate up (down) by the grid's
    # ratio is tried too, at most this many times a side, so the chosen rate is bracketed (the same
    # rule for every variant: paperline/sweep.py; needs an lr_sweep of 2 rates or more)
    lr_sweep_extend: Annotated[int, Field(ge=0)] = 0
    validation_trajectories: Annotated[int, Field(ge=0)] = 0
    adapter_every: PositiveInt = 2  # GeoAda copies the first block of every K (update (f): 0, 2, 4 of 6)
    # the paper's block-count ablation: copy this many blocks, spread evenly, instead (None: every K)
    copied_blocks: PositiveInt | None = None
    # GeoAda's zero-initialised Δx: update (f)'s ϕ_x·(x′ − x̄′) ("com") or ϕ_x·(x′ − x′_in) ("update")
    adapter_x: Literal["update", "com"] = "com"
    partial_k: PositiveInt = 1  # PARTIAL-k: the last k blocks train
    head_blocks: PositiveInt = 1  # MLP-k: a k-block EGTN head
    gpf_plus_basis: PositiveInt = 4  # GPF-plus: k learnable basis prompts, mixed by attention per node
    # GPF and GPF-plus: the EGTN head they train beside the prompt (update (f): a 3-layer head on
    # the paper's 6-block base); 0: the prompt alone
    gpf_head_blocks: Annotated[int, Field(ge=0)] = 3
    # subgraph control: the whole trajectory of the first `subgraph_nodes` particles is given (spec
    # (e): particle 0's); ADE/FDE are measured on the others, the generated ones
    subgraph_nodes: PositiveInt = 1
    samples: PositiveInt = 5  # K samples a trajectory (ADE/FDE averaged over them, and the min)
    eval_trajectories: PositiveInt = 50  # of each test split
    # `seeds` (MethodConfig's), the fine-tuning seeds (a variant's new modules, batch order and diffusion noise, and the sampling
    # noise of every evaluation at that seed); the base is pretrained once, with `seed`. Empty: [seed]
    checkpoint_every: PositiveInt = 200  # steps between resume checkpoints
    threads: PositiveInt = 1

    @model_validator(mode="after")
    def _check(self):
        if "geoada" not in self.variants:
            raise ValueError("variants must include 'geoada' (the primary row)")
        for name, values in (("variants", self.variants), ("controls", self.controls)):
            if len(set(values)) != len(values):
                raise ValueError(f"{name} repeat a name: {values}")
        if self.dataset == "md17" and "global" in self.controls:
            raise ValueError("dataset md17 has no global label: set controls: [frame, subgraph]")
        if "frame" in self.controls and self.frame_control_frames <= self.cond_frames:
            raise ValueError(f"frame_control_frames {self.frame_control_frames} must exceed cond_frames "
                             f"{self.cond_frames} (frame control gives more frames than pretraining)")
        if len(self.lr_sweep) > 1 and not self.validation_trajectories:
            raise ValueError("an lr_sweep needs validation_trajectories: the rate is chosen on a validation set")
        if len(set(self.lr_sweep)) != len(self.lr_sweep):
            raise ValueError(f"lr_sweep repeats a rate: {self.lr_sweep}")
        if self.lr_sweep_extend and len(self.lr_sweep) < 2:
            raise ValueError(f"lr_sweep_extend needs an lr_sweep of 2 rates or more (its edge step): "
                             f"{self.lr_sweep}")
        if self.partial_k > self.shape.blocks:
            raise ValueError(f"partial_k {self.partial_k} exceeds shape.blocks {self.shape.blocks}")
        if self.copied_blocks is not None and self.copied_blocks > self.shape.blocks:
            raise ValueError(f"copied_blocks {self.copied_blocks} exceeds shape.blocks {self.shape.blocks}")
        if self.adapter_every > self.shape.blocks:
            raise ValueError(f"adapter_every {self.adapter_every} exceeds shape.blocks {self.shape.blocks}")
        return self

    @property
    def learning_rates(self) -> list[float]:
        """The fine-tuning learning rates a variant is tried at."""
        return list(self.lr_sweep) or [self.finetune.lr]

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """(control, variant) pairs the run measures: controls × variants where the variant fits."""
        return [(c, v) for c in self.controls for v in self.variants if fits(v, c)]

    @property
    def frames_needed(self) -> int:
        """Frames a trajectory must have: the longest conditioning window plus the horizon."""
        longest = self.frame_control_frames if "frame" in self.controls else self.cond_frames
        return longest + self.horizon
