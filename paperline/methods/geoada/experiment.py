"""The GeoAda experiment's steps as plain functions (tasks/geoada.py wraps them): read the nbody
stage's splits as the tasks' windows, pretrain the base on frame-conditioned forecasting, then
fine-tune one variant on one control type at one seed and measure it (new task, original task,
trainable parameters, equivariance error, training time) from the saved base, at the rate the first
seed's sweep chose."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import cast

import torch

from paperline.data.nbody import FINETUNE_SPLIT, SUFFIXES, NBodyError, load_split
from paperline.methods.geoada.adapters import Variant, build_variant, equivariance_error
from paperline.methods.geoada.config import ACTS_ON_ORIGINAL, CHANGES_BASE, Control, GeoAdaConfig, fits
from paperline.methods.geoada.egtn import EGTN, Schedule
from paperline.methods.geoada.train import (
    TrainResult,
    Windows,
    evaluate,
    split_validation,
    train,
    validation_loss,
    windows,
)
from paperline.seeds import seeded_init
from paperline.sweep import best_rate, loss_rank, sweep


def task_windows(folder: str | Path, cfg: GeoAdaConfig) -> dict[str, Windows]:
    """The windows every task reads from cfg.dataset's sets, checked (NBodyError names the file and
    field): original_train/original_test (pretraining, cond_frames → horizon), frame_train/frame_test
    (frame control: frame_control_frames given, on the frame-control set, a shifted regime none of
    which pretraining saw — faster particles; MD17: later time blocks), global_train/global_test
    (global control: other interaction strengths, the strength given), subgraph_train/subgraph_test
    (subgraph control: the fine-tuning set's trajectories, the original regime, and the original
    test's, cond_frames given for all and the future of the first subgraph_nodes particles as the
    control)."""
    need, n = cfg.frames_needed, cfg.eval_trajectories
    suffix = SUFFIXES[cfg.dataset]  # the sets of cfg.dataset (charged or MD17)
    train_set = load_split(folder, "train", suffix["original"], need)
    test_set = load_split(folder, "test", suffix["original"], need)
    out = {"original_train": windows(train_set, cfg.cond_frames, cfg.horizon),
           "original_test": windows(test_set, cfg.cond_frames, cfg.horizon, n)}
    if "frame" in cfg.controls:
        out["frame_train"] = windows(load_split(folder, "train", suffix["frame"], need), cfg.frame_control_frames,
                                     cfg.horizon)
        out["frame_test"] = windows(load_split(folder, "test", suffix["frame"], need), cfg.frame_control_frames,
                                    cfg.horizon, n)
    if "global" in cfg.controls:
        out["global_train"] = windows(load_split(folder, "train", suffix["global"], need, control=True),
                                      cfg.cond_frames, cfg.horizon)
        out["global_test"] = windows(load_split(folder, "test", suffix["global"], need, control=True),
                                     cfg.cond_frames, cfg.horizon, n)
    if "subgraph" in cfg.controls:
        particles = test_set.loc.shape[2]
        if cfg.subgraph_nodes >= particles:
            raise NBodyError(f"{folder}: loc: {particles} particles; subgraph_nodes {cfg.subgraph_nodes} "
                             f"leaves none to generate")
        for split, source in (("train", load_split(folder, FINETUNE_SPLIT, suffix["original"], need)),
                              ("test", test_set)):
            w = windows(source, cfg.cond_frames, cfg.horizon, None if split == "train" else n)
            w.control = w.target[:, :, :cfg.subgraph_nodes].clone()  # the given subgraph's future
            out[f"subgraph_{split}"] = w
    return out


def make_base(cfg: GeoAdaConfig) -> EGTN:
    return EGTN(cfg.shape.hidden, cfg.shape.blocks, cfg.shape.time_dim, cfg.diffusion_steps, cfg.displacement_scale)


def pretrain_base(cfg: GeoAdaConfig, data: dict[str, Windows], checkpoint: Path | None, fingerprint: str,
                  progress: bool = False, device="cpu") -> tuple[EGTN, TrainResult]:
    """The base trained on `device` (the gpu slot's: CUDA where there is one)."""
    with seeded_init(cfg.seed):
        base = make_base(cfg)
        model = build_variant("full_ft", base, "frame", cfg.cond_frames).to(device)  # the base's own window, no control
    result = train(model, data["original_train"].to(device), Schedule.linear(cfg.diffusion_steps), cfg.pretrain.steps,
                   cfg.pretrain.batch_size, cfg.pretrain.lr, cfg.seed, checkpoint, fingerprint,
                   cfg.checkpoint_every, progress=progress, scale=cfg.displacement_scale)
    return model.base, result


@dataclass
class VariantResult:
    control: str
    variant: str
    seed: int
    new_task: dict[str, float]
    original_task: dict[str, float] | None  # additions off; None: the model is then the base itself
    # additions on; None: the same model as with them off (no addition acts without the control)
    original_task_on: dict[str, float] | None
    trainable: int
    train_seconds: float  # at the chosen rate
    equivariance_error: float
    lr: float | None  # the chosen fine-tuning rate (None: the frozen base, nothing trained)
    validation_loss: float  # the ε-prediction loss on the held-out validation set, at the end
    sweep: dict[str, float] = field(default_factory=dict)  # rate -> its validation loss, where several were tried
    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    validation_curve: list[float] = field(default_factory=list)  # the validation loss at `steps`
    # the largest |value| the zero-initialised trainable parameters (GeoAda's ϕ, gates, prompts, the
    # control embedding's last layer) reached: how far the variant left its start at the base; None
    # where it has none
    zero_init_max: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def final_metrics(self) -> dict[str, float]:
        """The seed's figures as its run records them: new task, equivariance error, training time,
        validation loss, the chosen rate and each swept rate's validation loss, both original-task
        scores where they differ from the base's."""
        return ({**self.new_task, "equivariance_error": self.equivariance_error, "train_seconds": self.train_seconds,
                 "validation_loss": self.validation_loss}
                | ({"lr": self.lr} if self.lr is not None else {})
                | {f"sweep/lr{lr}": v for lr, v in self.sweep.items()}
                | {f"original_{k}": v for k, v in (self.original_task or {}).items()}
                | {f"original_on_{k}": v for k, v in (self.original_task_on or {}).items()})


def control_variants(cfg: GeoAdaConfig, control: str) -> list[str]:
    """cfg.variants that fit `control` (config.fits), in their order."""
    return [v for v in cfg.variants if fits(v, control)]


def swept_rates(swept: list[dict] | None, variant: str) -> list[float] | None:
    """The rate `variant` trains at on a later seed: the one the first seed's sweep (`swept`, its
    results on this control) chose; None where there is none (the sweep itself, or the frozen base)."""
    chosen = {r["variant"]: r["lr"] for r in swept or [] if r["lr"] is not None}
    return [chosen[variant]] if variant in chosen else None


def finetune_variant(cfg: GeoAdaConfig, base: EGTN, control: str, variant: str, data: dict[str, Windows],
                     checkpoint: Path | None, fingerprint: str, seed: int | None = None, progress: bool = False,
                     device="cpu", lrs: list[float] | None = None) -> VariantResult:
    """Fine-tune `variant` on `control`'s training set (less its validation windows) at fine-tuning
    seed `seed` (default cfg.seed: its new modules' init from seed + 1, batches and diffusion noise
    from seed + 1) at each rate of `lrs` (default cfg.learning_rates, extended past an edge by
    paperline.sweep.sweep up to cfg.lr_sweep_extend times; given `lrs` are tried as they are), keeping the one
    whose ε-prediction loss on the validation set is lowest (the same draws for every rate and
    variant at that seed); its new-task ADE/FDE with sampling seed seed + 2, the same for every variant at that
    seed (the same noise, so rows differ by the model only). The original task is scored the same
    two ways for every variant: with its additions off (config.CHANGES_BASE: only full fine-tuning
    and PARTIAL-k differ from the base there; every other variant is then the base exactly and
    reports None, the summary filling in the base's figures at the same seed) and with them on
    (config.ACTS_ON_ORIGINAL: None where that is the same model as with them off)."""
    seed = cfg.seed if seed is None else seed
    rates = list(lrs or cfg.learning_rates)
    schedule = Schedule.linear(cfg.diffusion_steps)
    train_set, validation = split_validation(data[f"{control}_train"].to(device), cfg.validation_trajectories)
    test_set = data[f"{control}_test"].to(device)

    def fit(lr: float | None) -> tuple[float, Variant, TrainResult, float | None]:
        with seeded_init(seed + 1):
            model = build_variant(variant, base, cast(Control, control), cfg.cond_frames, cfg.adapter_every,
                                  cfg.partial_k, cfg.head_blocks, cfg.adapter_x, cfg.gpf_plus_basis,
                                  cfg.gpf_head_blocks, cfg.copied_blocks).to(device)
        zeros = [p for p in model.parameters() if p.requires_grad and not p.detach().any()]
        path = checkpoint if checkpoint is None or lr is None or len(rates) == 1 \
            else checkpoint.parent / f"lr{lr:g}" / checkpoint.name
        result = train(model, train_set, schedule, 0 if lr is None else cfg.finetune.steps, cfg.finetune.batch_size,
                       lr or cfg.finetune.lr, seed + 1, path, f"{fingerprint}/{lr}", cfg.checkpoint_every,
                       progress=progress, scale=cfg.displacement_scale, validation=validation)
        score = validation_loss(model, validation, schedule, seed + 3, scale=cfg.displacement_scale) \
            if validation is not None else float("nan")
        moved = max((float(p.detach().abs().max()) for p in zeros), default=None)
        return score, model, result, moved

    tried: dict[float | None, tuple[float, Variant, TrainResult, float | None]]
    chosen: float | None
    if variant == "frozen":
        tried, chosen = {None: fit(None)}, None  # the frozen base's one entry
    else:
        def rank(fitted: tuple[float, Variant, TrainResult, float | None]) -> float:
            return loss_rank(fitted[0])

        extensions = cfg.lr_sweep_extend if lrs is None else 0  # a later seed trains at the chosen rate only
        swept = sweep(rates, fit, rank, extensions)
        tried, chosen = {lr: fitted for lr, fitted in swept.items()}, best_rate(swept, rank)
    score, model, result, moved = tried[chosen]
    # subgraph control: scored on the generated particles only (the given ones are the control)
    new_task = evaluate(model, test_set, schedule, cfg.samples, seed + 2, scale=cfg.displacement_scale,
                        given_nodes=cfg.subgraph_nodes if control == "subgraph" else 0)
    original_test = data["original_test"].to(device)
    original_on = None
    if variant in ACTS_ON_ORIGINAL:
        original_on = evaluate(model, original_test, schedule, cfg.samples, seed + 2, original=True,
                               scale=cfg.displacement_scale)
    original = None
    if variant in CHANGES_BASE:
        model.additions = False
        original = evaluate(model, original_test, schedule, cfg.samples, seed + 2, original=True,
                            scale=cfg.displacement_scale)
        model.additions = True
    probe = test_set.take(slice(0, 4))
    t = torch.arange(len(probe)) * (cfg.diffusion_steps // 4)
    error = equivariance_error(model, probe.cond, (probe.target - probe.cond[:, -1:]) * cfg.displacement_scale, t,
                               probe.charges, probe.edges, probe.control, seed=seed)
    scores = {f"{lr:g}": v[0] for lr, v in tried.items() if lr is not None} if len(tried) > 1 else {}
    return VariantResult(control, variant, seed, new_task, original, original_on, result.trainable, result.seconds,
                         error, chosen, score, scores, result.steps, result.loss, result.validation_loss, moved)


def finetune_from_base(cfg: GeoAdaConfig, base_path: str | Path, control: str, variant: str,
                       data: dict[str, Windows], checkpoint: Path | None, fingerprint: str, seed: int,
                       swept: list[dict] | None = None, progress: bool = False, device="cpu") -> VariantResult:
    """finetune_variant on a fresh copy of the saved base (pretrain's state dict at `base_path`): at
    the rate the first seed's sweep `swept` chose for `variant`, or, None, sweeping."""
    model = make_base(cfg)
    model.load_state_dict(torch.load(base_path, map_location="cpu", weights_only=True))
    return finetune_variant(cfg, model, control, variant, data, checkpoint, fingerprint, seed, progress=progress,
                            device=device, lrs=swept_rates(swept, variant))


def evaluate_base(cfg: GeoAdaConfig, base: EGTN, data: dict[str, Windows], seed: int | None = None,
                  device="cpu") -> dict[str, float]:
    """The base on the original task, with the sampling seed every variant uses at fine-tuning seed
    `seed` (default cfg.seed)."""
    seed = cfg.seed if seed is None else seed
    model = build_variant("frozen", base, "frame", cfg.cond_frames).to(device)
    return evaluate(model, data["original_test"].to(device), Schedule.linear(cfg.diffusion_steps), cfg.samples,
                    seed + 2, original=True, scale=cfg.displacement_scale)
