"""One variant end to end, as plain functions (the Prefect tasks wrap these): train the generic
model on the training users' windows, evaluate zero-shot CER on each held-out user's test
sessions, fine-tune a copy per held-out user on that user's other sessions and evaluate again;
and the parameter / FLOP table at the paper configuration.

Checkpoints: Lightning writes `last.ckpt` every `checkpoint_every` steps beside a fingerprint of
the settings; a killed run resumes from it, a run of other settings starts afresh. A finished
stage's weights are a finished-unit record (`finished_unit`, fingerprinted the same way), reused on
a resume."""
from __future__ import annotations

import dataclasses
import functools
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader

from paperline.io import atomic_path, json_digest
from paperline.methods.splashnet.config import VARIANT_CHANGES, VARIANT_SIZE, SplashNetConfig
from paperline.methods.splashnet.data import ACM_AUGMENT, BASELINE_AUGMENT, Augment, WindowDataset, collate
from paperline.methods.splashnet.features import SessionFeatures
from paperline.methods.splashnet.lightning_module import CTCModule, session_cer
from paperline.methods.splashnet.modules import ModelSpec, TDSConvCTC, count_flops, count_parameters
from paperline.methods.splashnet.transforms import HOP
from paperline.seeds import seeded_init
from paperline.train.distributed import DistributedConfig
from paperline.train.records import finished_unit


def load_split(cfg: SplashNetConfig, features: Path, six_bands: bool):
    """(training sessions, {held-out user: fine-tuning sessions}, {held-out user: test sessions},
    validation sessions) of the prepared features, split by user as the config says."""
    from paperline.data.emg2qwerty import SessionRef, user_split
    from paperline.methods.splashnet.features import INDEX, read_index

    index = read_index(features)
    entries = {e["name"]: e for e in index["sessions"]}
    refs = [SessionRef(name, e["user"], name) for name, e in entries.items()]
    split = user_split(refs, cfg.data.test_users, cfg.data.val_users, cfg.data.test_sessions_per_user)
    sessions = _read_sessions(str(features), six_bands, json_digest(index), (features / INDEX).stat().st_mtime_ns)

    def load(rs):
        return [sessions[r.path] for r in rs]

    return (load(split.train), {u: load(s) for u, s in split.finetune.items()},
            {u: load(s) for u, s in split.test.items()}, load(split.val))


@functools.lru_cache(maxsize=2)  # the 33-bin and the six-band sets: read once a run, not once a variant and seed
def _read_sessions(features: str, six_bands: bool, index_digest: str, index_mtime: int) -> dict[str, SessionFeatures]:
    """Every session of the feature set (decompressing the .npz files cost ~1.5 s a task on 2 cores,
    21 tasks a smoke run), keyed by name; the index's digest and time key a rebuilt feature set (its
    index is written last) apart. Shared by the tasks: read only (the augmentations copy the windows)."""
    from paperline.methods.splashnet.features import load_session_features, read_index

    return {e["name"]: load_session_features(Path(features), e, six_bands) for e in read_index(Path(features))["sessions"]}


def model_spec(cfg: SplashNetConfig, variant: str) -> ModelSpec:
    changes = VARIANT_CHANGES[variant]
    size = cfg.sizes[VARIANT_SIZE.get(variant, "baseline")]
    return ModelSpec(mlp_features=tuple(size.mlp_features), block_channels=tuple(size.block_channels),
                     kernel_width=cfg.kernel_width, six_bands=changes.get("six_bands", False),
                     rtn=changes.get("rtn", False), share_hand_weights=changes.get("share", False),
                     rtn_warmup=cfg.rtn_warmup_frames, rtn_eps=cfg.rtn_eps)


def augmentation(cfg: SplashNetConfig, variant: str) -> Augment:
    """The variant's train-time SpecAugment: ACM's, or the baseline's with `time_mask_frames`."""
    if VARIANT_CHANGES[variant].get("acm"):
        return ACM_AUGMENT
    return dataclasses.replace(BASELINE_AUGMENT, time_mask_param=cfg.time_mask_frames)


def window_frames(cfg: SplashNetConfig, variant: str) -> tuple[int, int, int]:
    samples = cfg.window_samples
    if variant in VARIANT_SIZE and cfg.splashnet_window_samples:
        samples = cfg.splashnet_window_samples  # SplashNet's config trains on 16 s windows
    return samples // HOP, cfg.left_padding // HOP, cfg.right_padding // HOP


def paper_model_table(frames: int = 497) -> dict[str, dict[str, float]]:
    """Parameters and FLOPs (one 4 s window, 497 frames, batch 1) of the paper's three models."""
    paper = SplashNetConfig(sizes={"baseline": {"mlp_features": [384], "block_channels": [24, 24, 24, 24]},
                                   "splashnet_mini": {"mlp_features": [384], "block_channels": [24, 24, 24, 24]},
                                   "splashnet": {"mlp_features": [528], "block_channels": [24, 24, 48, 48]}})
    rows: dict[str, dict[str, float]] = {}
    for variant in ("baseline", "splashnet_mini", "splashnet"):
        model = TDSConvCTC(model_spec(paper, variant))
        rows[variant] = {"params": count_parameters(model), "flops": count_flops(model, frames)}
    for row in rows.values():
        row["params_vs_baseline"] = row["params"] / rows["baseline"]["params"]
        row["flops_vs_baseline"] = row["flops"] / rows["baseline"]["flops"]
    return rows


def fingerprint(cfg: SplashNetConfig, variant: str, stage: str, data: str) -> str:
    # the stage names the seed; the list of seeds run beside it is no part of this training
    settings = {"cfg": cfg.model_dump(exclude={"seeds"}), "variant": variant, "stage": stage, "data": data}
    return json_digest(settings)


def _fit(module: CTCModule, dataset: WindowDataset, cfg: SplashNetConfig, max_steps: int, device: torch.device,
         ckpt_dir: Path, fp: str, seed: int, val: list[SessionFeatures] | None = None,
         distributed: DistributedConfig | None = None, device_indices: list[int] | None = None) -> None:
    """Lightning fit for `max_steps`, resuming from ckpt_dir/last.ckpt when it was written for `fp`.
    With validation sessions, validates every `cfg.val_every` steps and ends with the weights of
    the best validation CER (emg2qwerty's checkpoint choice). `distributed` (params/runtime.yaml
    runtime.distributed): the Trainer's strategy and devices; under DDP `batch_size` is per device
    (Lightning's convention and emg2qwerty's), each process reading its share of the windows."""
    import logging

    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from paperline.train.distributed import trainer_arguments, world_size

    for name in ("lightning.pytorch", "lightning.fabric"):  # no banners per fit
        logging.getLogger(name).setLevel(logging.WARNING)

    spawned = distributed is not None and world_size(distributed) > 1
    # Spawned DDP processes draw their shares through Lightning's DistributedSampler (seeded); a
    # torch.Generator cannot cross into them (its state fails to unpickle in a spawned process)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, collate_fn=collate, num_workers=0,
                        drop_last=len(dataset) > cfg.batch_size,
                        generator=None if spawned else torch.Generator().manual_seed(seed))
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    marker = ckpt_dir / "fingerprint.txt"
    last = ckpt_dir / "last.ckpt"
    resume = last if last.exists() and marker.exists() and marker.read_text() == fp else None
    if last.exists() and resume is None:
        warnings.warn(f"{last}: checkpoint is for another configuration; starting afresh")
        last.unlink()
        for stale in ckpt_dir.glob("best*.ckpt"):
            stale.unlink()
    with atomic_path(marker) as tmp:  # decides whether a later run resumes from last.ckpt
        tmp.write_text(fp)
    histories = ckpt_dir / "histories.pt"
    last_checkpoint = ModelCheckpoint(dirpath=ckpt_dir, save_last=True, save_top_k=0,
                                      every_n_train_steps=cfg.checkpoint_every)
    callbacks: list[Callback] = [last_checkpoint] + ([_SaveHistories(histories)] if spawned else [])
    val_loader, best_checkpoint = None, None
    if val:
        val_loader = DataLoader(_WholeSessions(val), batch_size=1, collate_fn=collate)
        best_checkpoint = ModelCheckpoint(dirpath=ckpt_dir, filename="best", monitor="val_cer", mode="min",
                                          save_top_k=1, save_last=False)
        callbacks.append(best_checkpoint)
    hardware: dict[str, Any]
    if distributed is None:  # this process's device, as the task holds it
        hardware = {"accelerator": "gpu" if device.type == "cuda" else "cpu",
                    "devices": [device.index or 0] if device.type == "cuda" else 1}
    else:
        hardware = trainer_arguments(distributed, device_indices)
    trainer = L.Trainer(
        max_steps=max_steps, max_epochs=-1, logger=False, enable_progress_bar=False, enable_model_summary=False,
        **hardware, callbacks=callbacks, default_root_dir=str(ckpt_dir), num_sanity_val_steps=0, gradient_clip_val=None,
        val_check_interval=min(cfg.val_every, max_steps) if val else None, check_val_every_n_epoch=None if val else 1)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        warnings.filterwarnings("ignore", ".*number of training batches.*")
        warnings.filterwarnings("ignore", ".*LeafSpec.*")
        warnings.filterwarnings("ignore", ".*no `val_dataloader`.*")  # fine-tuning: no validation users
        warnings.filterwarnings("ignore", ".*exists and is not empty.*")  # our fingerprint file lives there
        trainer.fit(module, loader, val_loader, ckpt_path=resume)
    if spawned:  # the fit ran in spawned processes: Lightning brought the weights back, the curves
        module.on_load_checkpoint(torch.load(histories, weights_only=False))  # rank 0's file
    if val:
        assert best_checkpoint is not None  # made above when there is a validation set
        best = best_checkpoint.best_model_path
        if best:
            module.load_state_dict(torch.load(best, map_location="cpu", weights_only=False)["state_dict"])


class _SaveHistories(Callback):
    """Rank 0 writes the module's loss and validation curves at the end of the fit."""

    def __init__(self, path: Path):
        self.path = path

    def on_train_end(self, trainer, module) -> None:
        if trainer.is_global_zero:
            checkpoint: dict = {}
            module.on_save_checkpoint(checkpoint)
            with atomic_path(self.path) as tmp:
                torch.save(checkpoint, tmp)


class _WholeSessions(torch.utils.data.Dataset):
    """Validation items: a whole session's features and every keystroke label."""

    def __init__(self, sessions: list[SessionFeatures]):
        self.sessions = sessions

    def __len__(self) -> int:
        return len(self.sessions)

    def __getitem__(self, i: int):
        s = self.sessions[i]
        return torch.from_numpy(s.features), torch.from_numpy(s.key_label)


def _steps(cfg: SplashNetConfig, dataset: WindowDataset, epochs: int, cap: int | None) -> tuple[int, int]:
    per_epoch = max(1, len(dataset) // cfg.batch_size)
    total = epochs * per_epoch
    if cap is not None:
        total = min(total, cap)
    warmup = min(cfg.warmup_epochs * per_epoch, total // 2)
    return max(1, total), warmup


def schedule_horizon(cfg: SplashNetConfig, steps: int) -> int:
    """The steps the generic model's warm-up + cosine schedule spans: `schedule_steps` when that is
    longer than the `steps` trained (training stops early on a still-high lr), else `steps`."""
    return max(steps, cfg.schedule_steps or 0)


def beam_decoder(cfg: SplashNetConfig, lm_path: Path | None) -> Callable[[torch.Tensor], list[int]] | None:
    """emissions -> labels by beam search with the character LM saved at lm_path (None: greedy only)."""
    if not cfg.beam_search.enabled or lm_path is None:
        return None
    from functools import partial

    from paperline.methods.splashnet.char_lm import CharNgramLM
    from paperline.methods.splashnet.decoding import beam_decode

    b = cfg.beam_search
    return partial(beam_decode, lm=CharNgramLM.load(lm_path), beam_size=b.beam_size, lm_weight=b.lm_weight,
                   insertion_bonus=b.insertion_bonus, max_candidates=b.max_candidates)


def train_and_evaluate(cfg: SplashNetConfig, variant: str, train: list[SessionFeatures],
                       finetune: dict[str, list[SessionFeatures]], test: dict[str, list[SessionFeatures]],
                       device: torch.device, out_dir: Path, data: str,
                       log: Callable[[str, Any], None] = lambda *_: None,
                       beam: Callable[[torch.Tensor], list[int]] | None = None,
                       val: list[SessionFeatures] | None = None, distributed: DistributedConfig | None = None,
                       device_indices: list[int] | None = None, seed: int | None = None) -> dict[str, Any]:
    """Generic training (validated on `val`, the validation users' sessions, when given),
    zero-shot CER, per-user fine-tuning and fine-tuned CER for one variant and one `seed` (None:
    `cfg.seed`; it seeds the model's init, the windows' order and augmentation, the fine-tuning),
    greedy, and with `beam` also beam search with the character LM. `distributed` spreads the
    generic training (the long one) over devices; a user's fine-tuning stays on `device`."""
    seed = cfg.seed if seed is None else seed
    spec = model_spec(cfg, variant)
    frames, left, right = window_frames(cfg, variant)
    augment = augmentation(cfg, variant)
    fp = fingerprint(cfg, variant, f"generic/seed{seed}", data)
    with seeded_init(seed):  # model init reads the global RNG; variants train in threads
        dataset = WindowDataset(train, frames, left, right, augment, seed)
        total, warmup = _steps(cfg, dataset, cfg.epochs, cfg.max_steps)
        module = CTCModule(spec, cfg.lr, warmup, schedule_horizon(cfg, total), cfg.ctc_blank_bias)

    def fit() -> dict[str, Any]:
        _fit(module, dataset, cfg, total, device, out_dir / "lightning_generic", fp, seed, val, distributed,
             device_indices)
        return {"state_dict": module.model.state_dict(), "history": module.history,
                "val_history": module.val_history}

    done = finished_unit(out_dir / "generic.pt", fp, fit)
    module.model.load_state_dict(done["state_dict"])
    history, val_history = done["history"], done["val_history"]
    model = module.model.to(device)
    result: dict[str, Any] = {"variant": variant, "seed": seed, "params": count_parameters(model), "train_steps": total,
                              "train_windows": len(dataset), "history": history}
    if val_history:
        result |= {"val_history": val_history, "best_val_cer": min(cer for _, cer in val_history)}
    pairs: dict[str, list] = {"zero_shot_cer": [], "finetuned_cer": [], "zero_shot_beam_cer": [],
                              "finetuned_beam_cer": []}
    loss = {"zero": 0.0, "ft": 0.0}
    labels = 0
    for user in sorted(test):
        zero = session_cer(model, test[user], device, beam)
        loss["zero"] += zero["ctc_loss_sum"]
        labels += zero["labels"]
        ft_model = _finetune(cfg, variant, model, finetune[user], device, out_dir / f"finetune_{user}", data,
                             frames, left, right, augment, user, seed)
        ft = session_cer(ft_model, test[user], device, beam)
        loss["ft"] += ft["ctc_loss_sum"]
        per_user = {}
        for stage, scored in (("zero_shot", zero), ("finetuned", ft)):
            pairs[f"{stage}_cer"] += scored["pairs"]
            per_user[f"{stage}_cer"] = scored["cer"]
            if beam is not None:
                pairs[f"{stage}_beam_cer"] += scored["beam_pairs"]
                per_user[f"{stage}_beam_cer"] = scored["beam_cer"]
        result |= {f"{k}/{user}": v for k, v in per_user.items()}
        log(user, per_user)
    from paperline.methods.splashnet.decoding import character_error_rate

    result |= {k: character_error_rate(p) for k, p in pairs.items() if p}
    # the trivial baseline, scored by the same CER on the same test sessions: a decoder that types
    # nothing (every keystroke a deletion), what a model stuck in CTC's all-blank phase outputs
    result["blank_cer"] = character_error_rate([(reference, []) for reference, _ in pairs["zero_shot_cer"]])
    result["zero_shot_ctc_loss"] = loss["zero"] / labels  # per reference label, summed over users
    result["finetuned_ctc_loss"] = loss["ft"] / labels
    tail = [v for _, v in history[-10:]]
    result["final_train_ctc_loss"] = sum(tail) / len(tail) if tail else float("nan")
    return result


def _finetune(cfg: SplashNetConfig, variant: str, generic: TDSConvCTC, sessions: list[SessionFeatures],
              device: torch.device, out_dir: Path, data: str, frames: int, left: int, right: int, augment,
              user: str, seed: int) -> TDSConvCTC:
    """Personalisation: a copy of the generic model trained on one held-out user's other sessions."""
    fp = fingerprint(cfg, variant, f"finetune/{user}/seed{seed}", data)
    with seeded_init():  # its init (overwritten by the generic weights) kept off the other threads' draws
        dataset = WindowDataset(sessions, frames, left, right, augment, seed + 1)
        total, warmup = _steps(cfg, dataset, cfg.finetune_epochs, cfg.finetune_max_steps)
        module = CTCModule(generic.spec, cfg.finetune_lr or cfg.lr, warmup, total)
    module.model.load_state_dict(generic.state_dict())
    if cfg.finetune_epochs > 0:
        def fit() -> dict[str, torch.Tensor]:
            _fit(module, dataset, cfg, total, device, out_dir / "lightning", fp, seed + 1)
            return module.model.state_dict()

        module.model.load_state_dict(finished_unit(out_dir / "model.pt", fp, fit))
    return module.model.to(device)

