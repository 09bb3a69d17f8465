"""LM adaptation (issue 21): the shared Shakespeare base (`lm-base`, or a paper profile's local
transformers causal LM by path) adapted to a second public-domain text, by peft's LoRA on the
attention projections (r = 8 on q/k/v/o) under each optimizer, or by full fine-tuning.

The second text is a committed slice of the King James Bible (data/raw/kjv, hash-checked like the
Shakespeare slice; SOURCE.md says how it was made): the `bible-kjv` Debian package is not
installable here without root, its .debs were on disk. Chapters are documents; a seeded share of
them is held out. It is tokenized with the base's own tokenizer (the corpus folder's byte-level BPE,
or a paper model's tokenizer.json in its folder: texts.py), so the base reads it unchanged. Training
is the one LM loop (paperline/train/lm.py: warm-up then cosine, gradient clipping, a resumable
checkpoint) with the optimizer swapped in, on one device or data-parallel over the devices of
params/runtime.yaml `runtime.distributed` (`train_lm_spread`, DDP; not FSDP, which would split the factor
matrices the optimizers precondition); reported: the
held-out loss on the target text (the adaptation), on the base's held-out Shakespeare (what was
forgotten), and both for the base before adaptation."""
from __future__ import annotations

from pathlib import Path

from paperline.io import json_digest, read_json, sha256_file
from paperline.methods.altlora.adapters import (
    OptimizerFactory,
    add_lora,
    check_targets,
    expected_state_floats,
    trainable,
)
from paperline.methods.altlora.config import AltLoRAConfig, LMAdaptConfig, OptimizerName
from paperline.methods.altlora.texts import lm_texts
from paperline.optim.altlora import lora_pairs
from paperline.seeds import seeded_init
from paperline.train.distributed import DistributedConfig, DistributedError, runs_in_process
from paperline.train.lm import LMTrainSettings, evaluate, train_lm_spread, validation_windows


def check_base(lm: LMAdaptConfig) -> dict:
    """The base is a local transformers causal LM whose q/k/v/o-style targets exist and fit the rank,
    checked on an empty (meta-device) copy built from its config: no weights are read here. Returns
    its config as a dict. ModelDirError / AdapterError name the path or the key."""
    from paperline.train.lm_base import causal_lm_skeleton

    skeleton = causal_lm_skeleton(lm.base)
    check_targets(skeleton, lm.target_modules, lm.rank, where="lm.target_modules")
    return skeleton.config.to_dict()


def lm_data_version(lm: LMAdaptConfig) -> str:
    """Every input checked before training (base, corpus, target text); the version names them."""
    config = check_base(lm)
    texts = lm_texts(lm, config.get("vocab_size"), 0)  # the texts read and encoded (≥ 2 documents each)
    base = Path(lm.base)
    record = base / "lm_base.json"
    return "sha256:" + json_digest({
        "base": read_json(record)["fingerprint"] if record.is_file() else sha256_file(base / "config.json"),
        **texts.fingerprint, "target": sha256_file(Path(lm.target_text) / "SHA256SUMS")})


def adapt_lm(cfg: AltLoRAConfig, name: OptimizerName, lr: float, device, checkpoint_path: str | Path | None = None,
             progress: bool = False, distributed: DistributedConfig | None = None,
             device_indices: list[int] | None = None, seed: int | None = None) -> dict:
    """Adapt the base with optimizer `name` at `lr`; a non-finite loss ends the run as diverged.
    `seed` (default cfg.seed) draws the LoRA initialisation, the batches and the dropout; the
    held-out text is split by cfg.seed at every seed, so the base scores one figure.
    `distributed` (params/runtime.yaml runtime.distributed) spreads the training over devices
    (`device_indices`: the CUDA devices the task holds)."""
    from paperline.train.lm_base import load_causal_lm

    distributed = distributed or DistributedConfig()
    if distributed.strategy == "fsdp":
        raise DistributedError("runtime.distributed.strategy: fsdp shards the LoRA factors that AltLoRA's "
                               "optimizers precondition whole; use ddp")
    lm = cfg.lm
    assert lm is not None  # the LM adaptation runs only with an lm section
    seed = cfg.seed if seed is None else seed
    model = load_causal_lm(lm.base)
    texts = lm_texts(lm, model.config.vocab_size, cfg.seed)  # in the model's vocabulary (texts.py)
    train = texts.target_train
    target_windows = validation_windows(texts.target_val, lm.block_size, lm.eval_windows)
    source_windows = validation_windows(texts.source_val, lm.block_size, lm.eval_windows)
    model.to(device)
    base_target, base_source = (evaluate(model, w, lm.batch_size, device) for w in (target_windows, source_windows))
    if name == "full_ft":
        model.requires_grad_(True)
    else:
        model.requires_grad_(False)
        with seeded_init(seed):  # peft's A draws from the global RNG
            model = add_lora(model, lm.target_modules, lm.rank, lm.alpha, lm.dropout, where="lm.target_modules")
    settings = LMTrainSettings(
        steps=lm.steps, batch_size=lm.batch_size, block_size=lm.block_size, lr=lr, min_lr=lm.min_lr_ratio * lr,
        warmup_steps=lm.warmup_steps, weight_decay=cfg.settings.weight_decay, beta1=cfg.settings.betas[0],
        beta2=cfg.settings.betas[1], grad_clip=lm.grad_clip, eval_every=lm.eval_every, eval_windows=lm.eval_windows,
        log_every=lm.log_every, checkpoint_every=lm.checkpoint_every, seed=seed)
    if not runs_in_process(distributed):
        model.to("cpu")  # each spawned process moves its copy to its own device
    # LoRA dropout draws from the global RNG: the factory seeds it in each training process, so a
    # run repeats (the model tasks run one at a time in their gpu slot); a resumed run continues
    # from another RNG state (not bit-exact)
    result = train_lm_spread(distributed, model, train, None, settings, device, device_indices=device_indices,
                             checkpoint_path=checkpoint_path,
                             fingerprint={"optimizer": name, "settings": cfg.settings.model_dump(),
                                          "lm": lm.model_dump()},
                             progress=progress, description=f"{name} lr {lr:g}", val_batches=target_windows,
                             optimizer_factory=OptimizerFactory(name, lr, cfg.settings, seed),
                             stop_on_divergence=True)
    source = None if result["diverged"] else evaluate(model, source_windows, lm.batch_size, device)
    return result | {"optimizer": name, "lr": lr, "source_val_loss": source, "base_target_val_loss": base_target,
                     "base_source_val_loss": base_source, "state_floats": expected_state_floats(name, model),
                     # both factors (the alternation freezes one at a time)
                     "trainable_params": sum(p.numel() for p in trainable(model)) if name == "full_ft" else
                     sum(p.A.numel() + p.B.numel() for p in lora_pairs(model))}
