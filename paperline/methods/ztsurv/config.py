"""Parameters of ZTSurv and its baselines (`ztsurv.profiles.<profile>` in params/ztsurv.yaml). The data
(slides, 50x thumbnails, TIL maps) come from the WSI prep stages; their parameters are `wsi`."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from paperline.config import MethodConfig

# random_risk: the trivial baseline (a seeded random risk per slide, scored the same way)
Method = Literal["random_risk", "composition_cox", "mean_pool", "abmil", "gcn", "ztsurv"]
METHODS: tuple[Method, ...] = ("random_risk", "composition_cox", "mean_pool", "abmil", "gcn", "ztsurv")

class ZTSurvConfig(MethodConfig):
    max_patients: Annotated[int, Field(ge=4)] | None = None  # first N of the cohort (tests)
    # zero-shot segmentation (spec §b2)
    til_threshold: float = Field(0.5, gt=0, lt=1)  # lymphocyte where the registered TIL map exceeds it
    kmeans_texture_px: Annotated[int, Field(ge=1)] = 3  # window of the local-std texture feature
    # graph (spec §b3): square cells of the thumbnail; a cell with enough tissue gives one node per
    # component covering enough of it
    cell_px: Annotated[int, Field(ge=2)] = 5
    min_tissue_fraction: float = Field(0.3, gt=0, le=1)
    min_component_fraction: float = Field(0.2, gt=0, le=1)
    # model (spec §b4)
    gnn: Literal["rgcn", "hgt"] = "rgcn"
    layers: Annotated[int, Field(ge=1, le=4)] = 2
    hidden: Annotated[int, Field(ge=2)] = 32
    heads: Annotated[int, Field(ge=1)] = 2  # HGT only
    dropout: float = Field(0.1, ge=0, lt=1)
    # training: full-batch Cox over the training fold (whole-cohort batches, spec §f)
    epochs: Annotated[int, Field(ge=1)] = 150
    lr: float = Field(3e-3, gt=0)
    weight_decay: float = Field(1e-4, ge=0)
    folds: Annotated[int, Field(ge=2)] = 5
    # `seeds` (MethodConfig's): the seeds every method runs with (each seed its own stratified folds
    # and model inits: repeated cross-validation on the same prepared slides); empty: `seed` alone
    methods: list[Method] = Field(default_factory=lambda: list(METHODS), min_length=1)
    threads: Annotated[int, Field(ge=1)] = 2  # torch intra-op threads per training task
    # compute accounting: the 50x pipeline against 20x patch tiling on the same slides
    compute_slides: Annotated[int, Field(ge=0)] = 3
    patch_magnification: float = Field(20.0, gt=0)
    patch_px: Annotated[int, Field(ge=16)] = 256
    # plots
    overlay_slides: Annotated[int, Field(ge=1)] = 4

    @field_validator("methods")
    @classmethod
    def _unique(cls, v, info):
        if len(set(v)) != len(v):
            raise ValueError(f"{info.field_name} repeat")
        return v
