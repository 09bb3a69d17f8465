"""The LoTA-QAF run, as plain functions the tasks call: open and check the inputs (before any
training), the float models (the digits MLP trained here, the shared LM loaded by path), and one
(task, bit width) group: quantise, then recover with each method and merge."""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from paperline.data.local_tokenizer import encode_documents, read_tokenizer_json
from paperline.methods.lota_qaf.config import LotaQafConfig
from paperline.methods.lota_qaf.quant import QuantError
from paperline.seeds import mean_over_seeds


@dataclass(frozen=True)
class LotaData:
    digits: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None  # x_train, y_train, x_test, y_test
    lm_dir: str | None
    corpus_dir: str | None
    version: str = ""
    inputs: tuple[str, ...] = field(default_factory=tuple)  # the files the version hashes


def check_targets(model: nn.Module, targets: list[str], cfg: LotaQafConfig, section: str) -> list[str]:
    """The target layers exist and every adapter rank fits their width (errors name the key)."""
    from paperline.methods.lota_qaf.layers import QuantLinear, select_targets

    names = select_targets(model, targets, key=f"{section}.target_modules")
    for name in names:
        layer = model.get_submodule(name)
        assert isinstance(layer, (nn.Linear, QuantLinear))  # what select_targets selects
        width = min(layer.in_features, layer.out_features)
        for method in cfg.methods:
            rank = getattr(cfg, method).rank
            if method != "qalora" and rank > width:  # QA-LoRA's rank is capped per layer (layers.py)
                raise QuantError(f"{method}.rank: rank {rank} above the width {width} of {section} layer {name} "
                                 f"({layer.in_features} → {layer.out_features})")
    return names


def open_data(cfg: LotaQafConfig, lm_dir: str | None) -> LotaData:
    """Every input read and checked: digits split; the LM directory (a ModelDirError naming the path
    when it is not a causal LM), its corpus (tokenizer must fit the model), the target layers and
    ranks. `lm_dir`: the resolved model directory (cfg.lm.model_dir or the lm-base stage's)."""
    digest = hashlib.sha256(cfg.model_dump_json().encode())
    inputs: list[str] = []
    digits = None
    if "digits" in cfg.tasks:
        from paperline.data.digits import digits_file, split_digits

        rows = split_digits(cfg.seed, cfg.digits.test_fraction)
        digits = rows.x[rows.train], rows.y[rows.train], rows.x[rows.test], rows.y[rows.test]
        inputs.append(str(digits_file()))
        mlp = make_float_mlp(cfg)
        check_targets(mlp, cfg.digits.target_modules, cfg, "digits")
    if "lm" in cfg.tasks:
        from paperline.train.lm_base import load_causal_lm

        if lm_dir is None:
            raise QuantError("the lm task needs its model: lm.model_dir or the lm-base stage's folder")
        model = load_causal_lm(lm_dir)
        _, _, text_files = lm_tokens(cfg, lm_dir, model.config.vocab_size)
        check_targets(model, cfg.lm.target_modules, cfg, "lm")
        inputs += [str(p) for p in sorted(Path(lm_dir).glob("*")) if p.is_file()]
        inputs += text_files
    for path in inputs:
        digest.update(Path(path).read_bytes())
    return LotaData(digits, lm_dir if "lm" in cfg.tasks else None,
                    cfg.lm.corpus_dir if "lm" in cfg.tasks else None, "sha256:" + digest.hexdigest(), tuple(inputs))


def lm_tokens(cfg: LotaQafConfig, lm_dir: str, vocab_size: int | None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(train, held-out) tokens of the LM task in the model's vocabulary, and the files they come
    from. The shared lm-base has no tokenizer of its own: it reads the text-corpus folder's token
    files (whose vocabulary must be the model's). A local model folder with its own tokenizer.json
    (the paper profile's Llama, say) reads the committed Shakespeare slice (`lm.source_text`)
    encoded with that tokenizer, whole documents held out with the run's seed."""
    from paperline.data.text_corpus import CorpusError, load_corpus, read_slice, split_documents

    own = Path(lm_dir) / "tokenizer.json"
    if own.is_file():
        tokenizer = read_tokenizer_json(own, max_vocab=vocab_size, where="lm.model_dir", error=CorpusError)
        train_docs, val_docs = split_documents(read_slice(cfg.lm.source_text), cfg.lm.val_fraction, cfg.seed)
        train, val = (encode_documents(tokenizer, (d.text for d in docs)) for docs in (train_docs, val_docs))
        for name, tokens in (("training", train), ("held-out", val)):
            if len(tokens) <= cfg.lm.block_size + 1:
                raise CorpusError(f"{cfg.lm.source_text}: {len(tokens)} {name} tokens, too few for lm.block_size "
                                  f"{cfg.lm.block_size}")
        return train, val, [str(own), str(Path(cfg.lm.source_text) / "SHA256SUMS")]
    try:
        corpus = load_corpus(cfg.lm.corpus_dir, cfg.lm.block_size, vocab_size)
    except CorpusError as err:
        raise CorpusError(f"{err} (lm.corpus_dir; a model with its own vocabulary needs its tokenizer.json in "
                          f"{lm_dir})") from None
    return corpus.train, corpus.val, [str(Path(cfg.lm.corpus_dir) / n) for n in ("train.bin", "val.bin",
                                                                                  "tokenizer.json")]


def make_float_mlp(cfg: LotaQafConfig) -> nn.Module:
    from paperline.methods.lota_qaf.experiment import make_mlp

    return make_mlp(cfg.digits.hidden, torch.Generator().manual_seed(cfg.seed))


def build_task(cfg: LotaQafConfig, name: str, data: LotaData):
    from paperline.methods.lota_qaf.experiment import digits_task, lm_task

    if name == "digits":
        assert data.digits is not None  # open_data's, for the digits task
        return digits_task(*data.digits, cfg.digits.batch_size)
    assert data.lm_dir is not None  # open_data's, for the lm task
    train, val, _ = lm_tokens(cfg, data.lm_dir, None)  # checked against the model in open_data
    return lm_task(train, val, cfg.lm.block_size, cfg.lm.batch_size, cfg.lm.eval_windows,
                   cfg.lm.calibration_windows)


def float_model(cfg: LotaQafConfig, name: str, data: LotaData, checkpoint: Path) -> tuple[nn.Module, dict]:
    """The float model (the ceiling) and its training record; the digits MLP is trained once, a
    finished-unit record at `checkpoint` (its weights, fingerprinted by what trains it) read back by
    every group and by a resumed run. The record is empty unless the MLP was trained by this call."""
    from paperline.train.classifier import train_classifier
    from paperline.train.records import finished_unit

    if name == "lm":
        from paperline.train.lm_base import load_causal_lm

        assert data.lm_dir is not None  # open_data's, for the lm task
        return load_causal_lm(data.lm_dir, dtype=torch.float32).eval(), {}
    model = make_float_mlp(cfg)
    record: dict = {}

    def train() -> dict[str, torch.Tensor]:
        assert data.digits is not None  # open_data's, for the digits task
        # Adam over full batches of a seeded permutation each epoch (the rows past the last full
        # batch sit the epoch out)
        x, y = torch.as_tensor(data.digits[0], dtype=torch.float32), torch.as_tensor(data.digits[1])
        trained = train_classifier(model, x, y, torch.optim.Adam(model.parameters(), lr=cfg.digits.lr),
                                   torch.Generator().manual_seed(cfg.seed), epochs=cfg.digits.epochs,
                                   batch_size=cfg.digits.batch_size, drop_last=True)
        record.update(epoch_loss=trained["train_loss"], train_seconds=trained["train_seconds"])
        return model.state_dict()

    settings = {"digits": cfg.digits.model_dump(mode="json"), "seed": cfg.seed, "data": data.version}
    model.load_state_dict(finished_unit(checkpoint, settings, train))
    return model.eval(), record


def score_row(task, model: nn.Module, bits: int | None = None) -> dict:
    from paperline.methods.lota_qaf.experiment import model_bytes

    scores = task.score(model)
    return {task.metric: scores[task.metric], "loss": scores["loss"], "bits": bits or 16,
            "model_bytes": model_bytes(model)}


def run_group(cfg: LotaQafConfig, name: str, bits: int, data: LotaData, checkpoint: Path,
              on_method=None) -> dict:
    """One (task, bit width): the quantised model, then each method recovered for the step budget
    from that same quantised model at each seed of `cfg.run_seeds()` (the adapter's initialisation
    and batches). Returns {"rows": variant -> row (a method's: the mean over seeds), "seed_rows":
    method variant -> [its row at each seed], "histories": variant (seed 0), variant/seed<s> -> loss
    per step}. `on_method(variant, s, history)` is called after each recovery (for its MLflow run)."""
    from paperline.methods.lota_qaf.experiment import quantize_model, recover

    task = build_task(cfg, name, data)
    model, _ = float_model(cfg, name, data, checkpoint)
    section = getattr(cfg, name)
    started = time.perf_counter()
    quantized = quantize_model(model, section.target_modules, bits, section.group_size, cfg.quantizer,
                               task.calibration, cfg.gptq_damp)
    quant_seconds = time.perf_counter() - started
    prefix = f"{name}_w{bits}"
    rows = {f"{prefix}_quantized": score_row(task, quantized, bits) | {"quantize_seconds": quant_seconds}}
    if cfg.quantizer == "gptq":  # RTN on the same grid rule, scored beside it: what GPTQ's error feedback buys
        rtn = task.score(quantize_model(model, section.target_modules, bits, section.group_size, "rtn"))
        rows[f"{prefix}_quantized"] |= {f"{task.metric}_rtn": rtn[task.metric], "loss_rtn": rtn["loss"]}
    histories: dict[str, list[float]] = {}
    seed_rows: dict[str, list[dict]] = {f"{prefix}_{method}": [] for method in cfg.methods}
    float_params = sum(p.numel() for p in model.parameters())
    for s, seed in enumerate(cfg.run_seeds()):  # seed 0 first: its runs are the one-seed run's
        for method in cfg.methods:
            settings = cfg.lora if method == "lora" else cfg.qalora
            result = recover(quantized, task, method, section.steps, cfg.lota, settings, seed)
            variant = f"{prefix}_{method}"
            seed_rows[variant].append({
                task.metric: result["after"][task.metric], f"{task.metric}_unmerged": result["before"][task.metric],
                "loss": result["after"]["loss"], "loss_unmerged": result["before"]["loss"], "bits": bits,
                "merge_gap": result["merge_gap"], "bit_identical": result["bit_identical"],
                "max_output_diff": result["max_output_diff"], "codes_on_grid": result["codes_on_grid"],
                "changed_share": result["changed_share"], "model_bytes": result["merged_bytes"],
                # the same model served as 16-bit weights with its 16-bit adapter unmerged
                "lora16_bytes": 2 * (float_params + result["trainable_params"]),
                "trainable_params": result["trainable_params"], "train_seconds": result["train_seconds"]})
            histories[variant if s == 0 else f"{variant}/seed{s}"] = result["history"]
            if on_method:
                on_method(variant, s, result["history"])
    rows |= {variant: over_seeds(per_seed, task.metric) for variant, per_seed in seed_rows.items()}
    return {"rows": rows, "seed_rows": seed_rows, "histories": histories}


def over_seeds(rows: list[dict], metric: str) -> dict:
    """A method's row from its row at each seed: figures the mean (the metric and loss with their
    sample std), a figure every seed shares (bits, bytes, parameters) as it is, a check (bit
    identical, on the grid) true only at every seed, the output difference the largest."""
    figures = [{k: v for k, v in row.items() if not isinstance(v, bool)} for row in rows]
    out = mean_over_seeds(figures, spread=lambda k: k in (metric, "loss"), keep_shared=True)
    checks = {k: all(row[k] for row in rows) for k, v in rows[0].items() if isinstance(v, bool)}
    return ({k: checks.get(k, out.get(k)) for k in rows[0]} | {"max_output_diff": max(r["max_output_diff"] for r in rows)}
            | {k: v for k, v in out.items() if k not in rows[0]} | {"seeds": len(rows)})
