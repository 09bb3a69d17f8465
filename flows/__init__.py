"""The flow registries: the one list of methods and the one list of shared data-prep stages.
`dvc.yaml` has a stage per entry of each (a test keeps them in step). Entries name their config
model and flow by import path, so listing them or validating parameters imports neither Prefect
nor torch."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FlowSpec:
    name: str
    title: str
    config: str  # "module:Class" of the pydantic config model
    flow: str  # "module:function" of the Prefect flow

    def load_config_model(self) -> type:
        return _load(self.config)

    def load_flow(self) -> Any:
        return _load(self.flow)


@dataclass(frozen=True)
class MethodSpec(FlowSpec):
    status: str


def _load(path: str) -> Any:
    module, attr = path.split(":")
    return getattr(importlib.import_module(module), attr)


METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in [
        MethodSpec("dnc", "Deep neural collapse under cross-entropy (deep UFM low-rank bias)",
                   "paperline.methods.dnc.config:DNCConfig", "flows.dnc:dnc_flow", "pipeline"),
        MethodSpec("ngn_m", "NGN-M: momentum for the NGN step size (robustness to the step size c)",
                   "paperline.methods.ngn_m.config:NGNMConfig", "flows.ngn_m:ngn_m_flow", "pipeline"),
        MethodSpec("sumo", "SUMO: exact-SVD moment orthogonalization in a low-rank subspace, vs AdamW, GaLore, Muon",
                   "paperline.methods.sumo.config:SumoConfig", "flows.sumo:sumo_flow", "pipeline"),
        MethodSpec("influence_distillation", "Influence Distillation: landmark-propagated influence for Tulu-format data selection",
                   "paperline.methods.influence_distillation.config:InfluenceDistillationConfig",
                   "flows.influence_distillation:influence_distillation_flow", "pipeline"),
        MethodSpec("splashnet", "SplashNet: RTN, aggressive channel masking, split-and-share and 6 bands vs the emg2qwerty baseline",
                   "paperline.methods.splashnet.config:SplashNetConfig", "flows.splashnet:splashnet_flow", "pipeline"),
        MethodSpec("ztsurv", "ZTSurv: zero-shot TME segmentation, heterogeneous graph, Cox survival from 50x WSIs",
                   "paperline.methods.ztsurv.config:ZTSurvConfig", "flows.ztsurv:ztsurv_flow", "pipeline"),
        MethodSpec("tpa", "TPA / T6: tensor product attention vs MHA, MQA, GQA, MLA at equal attention parameters",
                   "paperline.methods.tpa.config:TPAConfig", "flows.tpa:tpa_flow", "pipeline"),
        MethodSpec("memory_decoder", "Memory Decoder: a small LM trained to imitate a kNN-LM datastore, mixed with base LMs of two sizes",
                   "paperline.methods.memory_decoder.config:MemoryDecoderConfig",
                   "flows.memory_decoder:memory_decoder_flow", "pipeline"),
        MethodSpec("qfft", "QFFT: question-free fine-tuning on long-CoT responses vs SFT, with RAK, AES and noise level IV",
                   "paperline.methods.qfft.config:QFFTConfig", "flows.qfft:qfft_flow", "pipeline"),
        MethodSpec("codemerge", "CodeMerge: test-time merging of a checkpoint bank by fingerprints and ridge leverage scores",
                   "paperline.methods.codemerge.config:CodeMergeConfig", "flows.codemerge:codemerge_flow", "pipeline"),
    ]
}


def get_method(name: str) -> MethodSpec:
    try:
        return METHODS[name]
    except KeyError:
        raise SystemExit(f"unknown method {name!r}; known: {', '.join(METHODS)}") from None


@dataclass(frozen=True)
class PrepSpec(FlowSpec):
    """A shared data-prep stage (`name`: its dvc.yaml stage) and the params.yaml `section` it reads:
    with `follows` None, one configuration for every profile; `follows` == `section`, a method's
    own section; else a data section at the profile the method `follows` names."""

    section: str
    follows: str | None = None


PREP_STAGES: dict[str, PrepSpec] = {
    spec.name: spec
    for spec in [
        PrepSpec("text-corpus", "Shakespeare token files and byte-level BPE tokenizer (TPA, Memory Decoder)",
                 "paperline.data.text_corpus:TextCorpusConfig", "flows.prep_text:text_corpus_flow", "text_corpus"),
        PrepSpec("semg-sessions", "emg2qwerty-format sEMG sessions: generated users, or a folder of real ones",
                 "paperline.methods.splashnet.config:SplashNetConfig", "flows.prep_semg:semg_sessions_flow",
                 "splashnet", "splashnet"),
        PrepSpec("semg-normalize", "sEMG log-spectrogram features (33 bins, 6 bands) and per-user channel statistics",
                 "paperline.methods.splashnet.config:SplashNetConfig", "flows.prep_semg:semg_normalize_flow",
                 "splashnet", "splashnet"),
        PrepSpec("wsi-cohort", "WSI cohort: GBSG2 survival with generated pyramidal slides, or a cohort CSV",
                 "paperline.data.wsi_prep:WSIPrepConfig", "flows.prep_wsi:wsi_cohort_flow", "wsi", "ztsurv"),
        PrepSpec("wsi-downsample", "50x slide thumbnails with Otsu tissue masks",
                 "paperline.data.wsi_prep:WSIPrepConfig", "flows.prep_wsi:wsi_downsample_flow", "wsi", "ztsurv"),
        PrepSpec("til-maps", "TIL maps registered to the thumbnails (a stand-in where a slide has none)",
                 "paperline.data.wsi_prep:WSIPrepConfig", "flows.prep_wsi:til_maps_flow", "wsi", "ztsurv"),
        PrepSpec("tulu-pool", "Tulu V2-format selection pool and target sets (embedded, or the real file)",
                 "paperline.data.tulu_pool:TuluPoolConfig", "flows.prep_tulu:tulu_pool_flow", "tulu",
                 "influence_distillation"),
        PrepSpec("tulu-select", "Influence Distillation's selections and its baselines' on the Tulu pool (GPU tasks)",
                 "paperline.methods.influence_distillation.config:InfluenceDistillationConfig",
                 "flows.prep_tulu:tulu_select_flow", "influence_distillation", "influence_distillation"),
        PrepSpec("vit-source", "Source ViT of the vision methods, pretrained on clean offline images (or a checkpoint by path)",
                 "paperline.data.vit_source:VitSourceConfig", "flows.prep_vision:vit_source_flow", "vit_source",
                 "codemerge"),
    ]
}


def get_prep_stage(name: str) -> PrepSpec:
    try:
        return PREP_STAGES[name]
    except KeyError:
        raise SystemExit(f"unknown prep stage {name!r}; known: {', '.join(PREP_STAGES)}") from None
