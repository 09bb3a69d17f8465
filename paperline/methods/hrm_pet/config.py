"""Parameters of the HRM-PET continual-learning experiment (spec ../shared/methods/hrm_pet.md):
class-incremental task sequences on the frozen vit-source backbone, a TII head with Gaussian
replay, a LoRA per task on the qkv projection, and the inference rules (initial matching, DRM, CRM) with the
four code-vs-paper switches of spec (g), each defaulting to the paper's rule."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from paperline.config import MethodConfig, ProjectPath, StrictModel
from paperline.data.images import ImageSource

PositiveInt = Annotated[int, Field(ge=1)]
Rule = Literal["paper", "code"]
# the trained learners: no CTIRD; CTIRD with the paper's top-K rule; CTIRD with the code's rule
Learner = Literal["plain", "ctird", "ctird_code"]
Variant = Literal["frozen_head", "hide_lora", "drm", "crm", "ctird", "hrm_pet", "hrm_pet_code"]
VARIANTS: tuple[Variant, ...] = Variant.__args__  # type: ignore[attr-defined]
SWITCHES = ("ctird_topk", "crm_candidates", "gen_input", "crm_select")


class Rules(StrictModel):
    """How one variant infers (spec (b) Inference, (g) 2–4)."""

    lora: bool = True  # False: the TII head's own class prediction (frozen backbone, no per-task adaptation)
    drm: bool = False
    crm: bool = False
    crm_candidates: Rule = "paper"  # paper: top-N classes of the TII distribution; code: of the initial LoRA logits
    gen_input: Rule = "paper"  # paper: GEN of the post-DRM distribution; code: of the pre-DRM softmax
    crm_select: Rule = "paper"  # paper: the higher GEN; code: the larger 0.1·logsumexp(z/0.1)


# variant -> (the learner it runs on, its inference rules); hrm_pet_code takes all four code rules;
# frozen_head is the trivial baseline: the frozen backbone and its replay-aligned head, no LoRA
VARIANT_SPECS: dict[str, tuple[str, Rules]] = {
    "frozen_head": ("plain", Rules(lora=False)),
    "hide_lora": ("plain", Rules()),
    "drm": ("plain", Rules(drm=True)),
    "crm": ("plain", Rules(crm=True)),
    "ctird": ("ctird", Rules()),
    "hrm_pet": ("ctird", Rules(drm=True, crm=True)),
    "hrm_pet_code": ("ctird_code", Rules(drm=True, crm=True, crm_candidates="code", gen_input="code",
                                         crm_select="code")),
}


class SequenceConfig(StrictModel):
    """One class-incremental task sequence: real images of `source` (a source that cannot be
    loaded is an error naming it, never replaced), resized to the backbone's image size, its
    classes split into `tasks` tasks by a seeded permutation."""

    name: str = Field(pattern=r"^[a-z0-9_]+$")
    source: ImageSource
    tasks: PositiveInt = 5
    classes: PositiveInt | None = None  # the first `classes` labels (all when None)
    max_images: Annotated[int, Field(ge=20)] | None = None  # a seeded subsample before the split
    train_fraction: float = Field(0.7, gt=0, lt=1)


class TiiConfig(StrictModel):
    """Stage 1 (spec (b)): the MLP head on frozen features, hidden = `hidden_ratio`·dim (the code's
    structure [2], read as one hidden layer of twice the width [I]), then its alignment on Gaussian
    samples of every seen class."""

    hidden_ratio: PositiveInt = 2
    epochs: PositiveInt = 20
    lr: float = Field(5e-4, gt=0)
    batch_size: PositiveInt = 128
    align_epochs: PositiveInt = 30
    align_lr: float = Field(5e-3, gt=0)


class LoraConfig(StrictModel):
    """Stage 2 (spec (b)): a LoRA per task on the qkv projection, trained with the unified head;
    each default is the official code's (`HideLoraPool`, `hrm_lora_wtp_and_tap_engine.py`)."""

    rank: PositiveInt = 4
    alpha: float = Field(4.0, gt=0)  # scaling alpha/rank
    targets: Literal["kv", "qkv"] = "kv"  # kv: k and v each their own rank-r LoRA, q none (the code's)
    depth: PositiveInt | None = 5  # LoRA in the first min(depth, blocks) blocks (the code's lora_depth); None: all
    momentum: float = Field(0.1, ge=0, le=1)  # adapter_t ← (1 − m)·adapter_t + m·mean(adapters < t)
    # after: the code's (t starts as a copy of t − 1, the mix applied after training);
    # before: the mix applied to the fresh initialization before training (HiDe-Prompt's prompts [I])
    momentum_timing: Literal["after", "before"] = "after"
    clip_grad: float | None = Field(2.0, gt=0)  # gradient-norm clip in Stage 2 (the code's clip_grad); None: off
    epochs: PositiveInt = 50
    lr: float = Field(0.03, gt=0)  # Adam, cosine schedule
    batch_size: PositiveInt = 24
    align_epochs: PositiveInt = 30  # the TAP alignment of the unified classifier (crct_epochs)
    align_lr: float = Field(5e-3, gt=0)
    # sgd: the code's TAP, from the second task on: SGD (momentum 0.9, no weight decay, cosine), 5·batch
    # Gaussian samples per class, as many 5·batch mini-batches an epoch as there are old classes
    # (crct_num); adam: Adam from the first task, samples_per_class per class, every sample in 4·batch batches
    tap_optimizer: Literal["sgd", "adam"] = "sgd"


class CtirdConfig(StrictModel):
    k: PositiveInt = 5  # old tasks per sample (min(t, K))
    weight: float = Field(0.1, ge=0)  # λ_CT (`con`)
    temperature: float = Field(1.0, gt=0)


class CrmConfig(StrictModel):
    """GEN(p) = −Σ_{top M} p^γ(1−p)^γ; a sample is mismatched when GEN < τ_C, where τ_C rescales τ
    (set for `tau_classes` classes) by the uniform distribution's score at the seen class count
    (spec (f): the official τ = −10 is 0.79 of the uniform score at 100 classes, M = 20)."""

    gamma: float = Field(0.1, gt=0)
    top_m: PositiveInt = 20
    tau: float = Field(-10.0, lt=0)
    tau_classes: Annotated[int, Field(ge=2)] = 100
    recalibrate: bool = True
    candidates: Annotated[int, Field(ge=2)] = 2  # N


class HrmPetConfig(MethodConfig):
    variants: list[Variant] = Field(list(VARIANTS), min_length=1)
    sequences: list[SequenceConfig] = Field(min_length=1)
    # `seeds` (MethodConfig's): every (sequence, variant) runs once per seed
    tii: TiiConfig = TiiConfig()
    lora: LoraConfig = LoraConfig()
    ctird: CtirdConfig = CtirdConfig()
    crm: CrmConfig = CrmConfig()
    # The frozen backbone by path (this module's checkpoint, e.g. ViT-B/16 converted with
    # `python -m paperline.nn.vit`; its head dropped, images resized to its input), instead of the
    # vit-source stage's classifier: the paper's ImageNet backbone is not a 10-class source model.
    backbone: ProjectPath | None = None
    samples_per_class: PositiveInt = 64  # Gaussian samples per class per alignment epoch
    covariance_eps: float = Field(1e-4, gt=0)  # added to each class covariance's diagonal
    threads: PositiveInt = 1

    @model_validator(mode="after")
    def _check(self):
        if not {"frozen_head", "hide_lora", "hrm_pet"} <= set(self.variants):
            raise ValueError("variants must include 'frozen_head' (the trivial baseline), 'hide_lora' (the "
                             "baseline) and 'hrm_pet' (the method)")
        if len(set(self.variants)) != len(self.variants):
            raise ValueError(f"variants repeat a name: {self.variants}")
        names = [s.name for s in self.sequences]
        if len(set(names)) != len(names):
            raise ValueError(f"sequences repeat a name: {names}")
        return self

    def learners(self) -> list[str]:
        """The learners the variants need (the switch table also needs ctird_code when hrm_pet runs)."""
        need = {VARIANT_SPECS[v][0] for v in self.variants} | {"ctird", "ctird_code"}
        return [learner for learner in Learner.__args__ if learner in need]  # type: ignore[attr-defined]
