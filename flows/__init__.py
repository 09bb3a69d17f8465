"""The flow registry: the one list of methods. `dvc.yaml` has a stage per entry (a test keeps
them in step). Entries name their config model and flow by import path, so listing methods or
validating parameters imports neither Prefect nor torch."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MethodSpec:
    name: str
    title: str
    config: str  # "module:Class" of the pydantic config model
    flow: str  # "module:function" of the Prefect flow
    status: str

    def load_config_model(self) -> type:
        return _load(self.config)

    def load_flow(self) -> Any:
        return _load(self.flow)


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
    ]
}


def get_method(name: str) -> MethodSpec:
    try:
        return METHODS[name]
    except KeyError:
        raise SystemExit(f"unknown method {name!r}; known: {', '.join(METHODS)}") from None
