"""Parameters of the SplashNet experiments (spec ../shared/methods/splashnet.md).

One `splashnet:` section holds the data (the generated or real emg2qwerty sessions), the window
and training settings, the model sizes of the three families (baseline, SplashNet-mini,
SplashNet) and the variants of the ablation. The data prep stages (`semg-sessions`,
`semg-normalize`) read `data`; the method stage reads everything.
"""
from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, model_validator

from paperline.config import MethodConfig, StrictModel

PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0)]

# The ablation: each single SplashNet change added to the baseline, and the two SplashNet configs.
VariantName = Literal["baseline", "rtn", "acm", "split_share", "six_bands", "splashnet_mini", "splashnet"]
VARIANTS: tuple[VariantName, ...] = get_args(VariantName)  # in VARIANT_CHANGES' order
SizeName = Literal["baseline", "splashnet_mini", "splashnet"]
VARIANT_CHANGES: dict[str, dict[str, bool]] = {
    "baseline": {},
    "rtn": {"rtn": True},
    "acm": {"acm": True},
    "split_share": {"share": True},
    "six_bands": {"six_bands": True},
    "splashnet_mini": {"rtn": True, "acm": True, "share": True, "six_bands": True},
    "splashnet": {"rtn": True, "acm": True, "share": True, "six_bands": True},
}
# which model size each variant uses (single changes keep the baseline's sizes)
VARIANT_SIZE: dict[str, SizeName] = {"splashnet_mini": "splashnet_mini", "splashnet": "splashnet"}


class GeneratorConfig(StrictModel):
    """The synthetic session generator (paperline.data.semg_synth): what makes users differ."""

    users: PositiveInt = 8
    sessions_per_user: PositiveInt = 3
    session_seconds: PositiveFloat = 60.0
    vocabulary: str = "etaoinshrdlcumwfgyp "  # spec §e: a 20-character vocabulary
    keys_per_second: PositiveFloat = 4.0
    hold_seconds: tuple[PositiveFloat, PositiveFloat] = (0.06, 0.14)  # press to release, uniform
    motor_units_per_key: PositiveInt = 6
    gain_range: tuple[PositiveFloat, PositiveFloat] = (0.3, 3.0)  # per-user, per-electrode gain ×
    max_rotation: Annotated[int, Field(ge=0, le=8)] = 2  # per-user electrode offset in {-r..r}
    noise_floor_range: tuple[PositiveFloat, PositiveFloat] = (0.5, 2.0)  # per-user noise scale
    # signal units: ×30 puts the background's log10 power near 0, so SpecAugment's zero-valued
    # masks read as background rather than as a burst (ours; real recordings carry their own units)
    scale: PositiveFloat = 1.0
    highpass_hz: PositiveFloat = 40.0  # the real recordings are already high-passed


class DataConfig(StrictModel):
    source: Literal["generated", "directory"] = "generated"
    directory: str | None = None  # real emg2qwerty *.hdf5 sessions (source: directory)
    generator: GeneratorConfig = GeneratorConfig()
    corpus: str = "data/raw/splashnet/in_the_year_2889.txt"  # typed text (public domain)
    # the split, over users sorted by name: the last `test_users` are held out (zero-shot and
    # per-user fine-tuning), the `val_users` before them validate the generic model
    test_users: PositiveInt = 2
    val_users: Annotated[int, Field(ge=0)] = 0
    test_sessions_per_user: PositiveInt = 1  # a held-out user's last sessions: test; the rest fine-tune

    @model_validator(mode="after")
    def _directory_given(self):
        if self.source == "directory" and not self.directory:
            raise ValueError("data.directory: required when data.source is 'directory'")
        return self


class BeamSearchConfig(StrictModel):
    """CTC prefix beam search with a character n-gram LM, reported beside greedy CER (emg2qwerty's
    option: beam 50 with a 6-gram character KenLM trained on WikiText-103)."""

    enabled: bool = True
    beam_size: PositiveInt = 16
    max_candidates: PositiveInt = 8  # labels a frame may extend a prefix by (its likeliest)
    lm_order: PositiveInt = 4
    lm_weight: Annotated[float, Field(ge=0)] = 0.5
    insertion_bonus: float = 0.0
    # a text the typed prompts are not drawn from: a file, or a folder of *.txt files
    lm_corpus: str = "data/raw/shakespeare"


class ModelSize(StrictModel):
    mlp_features: list[PositiveInt] = Field(min_length=1)
    block_channels: list[PositiveInt] = Field(min_length=1)


class SplashNetConfig(MethodConfig):
    data: DataConfig = DataConfig()
    variants: list[VariantName] = Field(default=list(VARIANTS), min_length=1)
    # `seeds` (MethodConfig's): every variant is trained once per seed (model init, window order, augmentation) and compared
    # on the mean: one seed of a smoke-sized CTC fit moves zero-shot CER by tens of points (issue 25)
    sizes: dict[SizeName, ModelSize]
    kernel_width: PositiveInt = 32
    # windows in samples at 2 kHz (emg2qwerty: 8000 with 1800 past and 200 future padding)
    window_samples: PositiveInt = 8000
    splashnet_window_samples: PositiveInt | None = None  # SplashNet's config: 32000 (16 s)
    left_padding: Annotated[int, Field(ge=0)] = 1800
    right_padding: Annotated[int, Field(ge=0)] = 200
    batch_size: PositiveInt = 32
    lr: PositiveFloat = 1e-3
    warmup_epochs: Annotated[int, Field(ge=0)] = 10
    epochs: PositiveInt = 150
    max_steps: PositiveInt | None = None  # a cap on optimizer steps (smoke: the time budget)
    # the generic model's cosine horizon in steps, when longer than the steps trained: a capped
    # run is then the start of this longer schedule, not a whole schedule squeezed into the cap
    schedule_steps: PositiveInt | None = None
    finetune_epochs: Annotated[int, Field(ge=0)] = 150
    finetune_max_steps: PositiveInt | None = None
    finetune_lr: PositiveFloat | None = None  # the per-user fine-tuning's peak lr (None: lr, as emg2qwerty)
    # SpecAugment's time-mask width (emg2qwerty: ≤ 25 frames of a 4 s, 500-frame window; a smoke
    # with 1 s windows scales it to the window). ACM has no time masks.
    time_mask_frames: Annotated[int, Field(ge=0)] = 25
    # initial bias of the classifier's blank logit (0: PyTorch's default init, as emg2qwerty); a
    # positive value starts CTC in its all-blank phase instead of spending the first steps reaching it
    ctc_blank_bias: float = 0.0
    # torch threads a variant's task uses: on a CPU the variants hold the one `gpu` slot in turn, so
    # a smoke can give each all the cores; 1 where tasks run side by side (GPUs, a Dask cluster)
    threads: PositiveInt = 1
    rtn_warmup_frames: PositiveInt = 125
    rtn_eps: PositiveFloat = 0.1
    beam_search: BeamSearchConfig = BeamSearchConfig()
    checkpoint_every: PositiveInt = 200  # optimizer steps between Lightning checkpoints
    val_every: PositiveInt = 500  # optimizer steps between validations (with data.val_users > 0)


    @model_validator(mode="after")
    def _sizes_fit(self):
        for name in ("baseline", "splashnet_mini", "splashnet"):
            if name not in self.sizes:
                raise ValueError(f"sizes.{name}: missing")
        for name, size in self.sizes.items():
            shared = name != "baseline"
            for variant, changes in VARIANT_CHANGES.items():
                if VARIANT_SIZE.get(variant, "baseline") != name:
                    continue
                width = size.mlp_features[-1] * (1 if changes.get("share") else 2)
                bad = [c for c in size.block_channels if width % c]
                if bad:
                    raise ValueError(f"sizes.{name}.block_channels: {bad} do not divide the "
                                     f"{'per-hand' if shared or changes.get('share') else 'two-hand'} "
                                     f"width {width} (variant {variant})")
        return self
