"""Tasks of the FVAE-LoRA flow: the data (the clean images, split once, and the backbone's inputs
checked: a missing target module or a rank above a layer's width fails here, before any
training), the clean backbone (trained once, or a local model by path), one task per variant
training every seed (each seed's result kept under models/fvae_lora/<variant>/ so a killed run
resumes at the next seed), the text modality's variants likewise (a frozen causal LM, the lm-base
stage's, as the backbone; results under models/fvae_lora/text/<variant>/), then the report."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.io import json_digest
from paperline.methods.fvae_lora import plots
from paperline.methods.fvae_lora.config import FvaeLoraConfig
from paperline.methods.fvae_lora.data import CleanSplit
from paperline.methods.fvae_lora.summary import method_metrics
from paperline.methods.fvae_lora.text import TextData
from tasks import track
from tasks.paths import models_dir, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import set_threads, unit

METHOD = "fvae_lora"
BACKBONE_FILE = "backbone.pt"


@dataclass(frozen=True)
class FvaeLoraData:
    split: CleanSplit
    model: str | None  # the local image model by path (None: the backbone is trained here)
    version: str
    text: TextData | None = None  # the second modality's tokens (None: no text block)


def data(cfg: FvaeLoraConfig) -> FvaeLoraData:
    """The clean split of the configured images and the backbone's checks, versioned by content."""
    import numpy as np

    from paperline.methods.fvae_lora.adapter import check_targets
    from paperline.methods.fvae_lora.data import clean_split, load_source, spurious_task, threshold
    from paperline.methods.fvae_lora.train import DigitsMLP, image_size_of, load_backbone

    model = load_backbone(cfg.backbone.model) if cfg.backbone.model else None
    x, y, source = load_source(cfg.task, image_size_of(model) if model is not None else None)
    if model is not None and x.shape[1] != image_size_of(model):
        raise ValueError(f"task: {source} images are {x.shape[1]}×{x.shape[2]} but backbone.model "
                         f"{cfg.backbone.model} takes {image_size_of(model)}×{image_size_of(model)}")
    split = clean_split(x, y, cfg.task, cfg.seed, source)
    threshold(cfg.task, split.classes)
    spurious_task(split, cfg.task, cfg.run_seeds()[0])  # a test pool too small for four groups fails here
    skeleton = model if model is not None else DigitsMLP(x.shape[1], cfg.backbone.hidden, split.classes)
    check_targets(skeleton, cfg.adapter.target_modules, cfg.adapter.rank, where="fvae_lora.adapter.target_modules")
    digest = hashlib.sha256()
    for a in (split.train_x, split.train_y, split.test_x, split.test_y):
        digest.update(np.ascontiguousarray(a).tobytes())
    if cfg.backbone.model:
        digest.update(Path(cfg.backbone.model).read_bytes())
    text = None
    if cfg.text is not None:
        from paperline.methods.fvae_lora.text import prepare_text, text_task

        text = prepare_text(cfg.text, cfg.seed)
        t = cfg.text
        text_task(text.tokens, text.y, text.spurious_token, t.agreement, t.train_fraction, t.seeds[0])
    return FvaeLoraData(split, cfg.backbone.model, "sha256:" + digest.hexdigest(), text)


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="fvae_lora-backbone", tags=[GPU_TAG], cache_policy=NO_CACHE)
def backbone(cfg: FvaeLoraConfig, source: FvaeLoraData, ctx: track.RunContext) -> dict:
    """The frozen backbone's file and record: the local model by path, or the MLP trained on the
    clean training images (kept in models/fvae_lora/backbone.pt, reused by a resumed run)."""
    import torch

    from paperline.methods.fvae_lora.train import load_backbone, save_backbone, train_backbone

    if source.model:
        return {"path": source.model, "trained_here": False}
    path = models_dir(METHOD) / BACKBONE_FILE
    fingerprint = json_digest([cfg.backbone.model_dump(), cfg.seed, source.version])
    if path.is_file():
        saved = torch.load(path, map_location="cpu", weights_only=True)
        if saved.get("fingerprint") == fingerprint:
            load_backbone(path)
            return {"path": str(path), "trained_here": True, **saved["record"]}
    with unit(ctx, "backbone", {"backbone": cfg.backbone.model_dump()}, threads=cfg.threads, log_device=False) as u:
        model, record = train_backbone(source.split, cfg.backbone, cfg.seed)
        save_backbone(path, model, fingerprint=fingerprint, record=record)
        u.run.log_metrics(record)
        u.run.log_artifact(path, "checkpoints")
    return {"path": str(path), "trained_here": True, **record}


@task(name="fvae_lora-variant", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_variant(cfg: FvaeLoraConfig, variant: str, source: FvaeLoraData, backbone_info: dict,
                  ctx: track.RunContext, parent: track.Run) -> dict[int, dict]:
    """Every seed of one variant (`paperline.methods.fvae_lora.variant`), each on its MLflow run
    `<variant>/seed<s>` nested under the variant's (its figures and loss curves), each seed's result
    saved as models/fvae_lora/[text/]<variant>/seed<s>.json. Returns seed -> result."""
    from paperline.methods.fvae_lora.variant import variant_run

    set_threads(cfg.threads)  # before the model is built (outside the slot), not by the unit below
    job = variant_run(cfg, variant, source.split, source.text, backbone_info["path"],
                      backbone_info.get("clean_test_accuracy"), source.version, models_dir(METHOD))
    out = {}
    with unit(ctx) as u:  # one slot for every seed; a run per seed below
        for seed in job.config.run_seeds():
            # the seed's own run, nested under the variant's (a seed a killed run finished is read
            # back, and recorded under this run too)
            with ctx.child(f"{variant}/seed{seed}", params={"seed": seed}, parent=parent) as run:
                out[seed] = result = job.seed_result(seed, u.device)
                run.log_final(result["metrics"])
                for name, curve in result["history"].items():
                    run.log_history(name, range(1, len(curve) + 1), curve)
    parent.log_params(job.params(u.device))
    return out


@task(name="fvae_lora-report", cache_policy=NO_CACHE)
def report(cfg: FvaeLoraConfig, results: dict[str, dict[int, dict]], backbone_info: dict, source: FvaeLoraData,
           ctx: track.RunContext) -> Report:
    text = source.text and {"speeches": source.text.speeches, "rows": len(source.text.y),
                            "positive_share": source.text.positive_share, "spurious_token": source.text.spurious_token}
    metrics = method_metrics(cfg, results, backbone_info, source.split.source, ctx.profile, text)
    return Report(metrics, plots.write_all(cfg, results, metrics.rows, plots_dir(METHOD)))
