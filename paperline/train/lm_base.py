"""The shared base causal LM of the adaptation methods: a `paperline.nn.causal_lm.CausalLM`
pretrained with the one LM loop (paperline/train/lm.py) on a text-corpus folder, saved as a plain
transformers model directory (config.json + model.safetensors) with lm_base.json beside it (the
record: fingerprint, shape, validation loss; written last, so its presence means the folder is
complete). A killed training resumes from out/train.pt.

`load_causal_lm` is how every adaptation method opens its base, the embedded one or a paper
profile's local transformers model directory by path."""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from paperline.data.lm_base import RECORD_FILE, TRAIN_STATE_FILE, LMBaseConfig
from paperline.data.text_corpus import load_corpus
from paperline.io import DataError, json_digest, one_line, read_json, write_json
from paperline.nn.causal_lm import CausalLM, CausalLMConfig
from paperline.seeds import load_pretrained
from paperline.train.lm import LMTrainSettings, train_lm_spread

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class ModelDirError(DataError):
    """A path given as a model directory is not a local transformers causal LM."""


def lm_base_fingerprint(cfg: LMBaseConfig, corpus_fingerprint: str | None) -> str:
    """What the stage's outputs are made from (out excluded: moving them changes nothing)."""
    return json_digest({"config": cfg.model_dump(exclude={"out", "threads"}), "corpus": corpus_fingerprint})


def causal_lm_skeleton(path: str | Path) -> PreTrainedModel:
    """An empty (meta-device) copy of a local transformers causal-LM directory's model, built from
    its config.json alone: what to check target modules and shapes on before any weight is read.
    ModelDirError naming the path when the folder is not a causal LM."""
    from transformers import AutoConfig, AutoModelForCausalLM

    import paperline.nn.causal_lm  # noqa: F401  registers CausalLM with the Auto classes

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ModelDirError(f"{path}: not a transformers model directory (no config.json)")
    try:
        config = load_pretrained(AutoConfig, path, local_files_only=True)
    except (ValueError, OSError, KeyError) as err:
        raise ModelDirError(f"{path}/config.json: not a transformers config ({err})") from None
    try:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config)
    except ValueError as err:  # an architecture with no causal-LM head (a ViT, an encoder)
        raise ModelDirError(f"{path}: {config.model_type!r} is not a causal LM ({err})") from None


def check_causal_lm(path: str | Path) -> torch.nn.Module:
    """What a data step checks of a model folder before any work, without reading its weights: the
    config.json is a causal LM's (causal_lm_skeleton, returned) and every safetensors file it names
    opens with a header that covers the file (a copy cut short, or another file under the name, fails
    here, not after an hour of tokenizing). Missing or misshapen weights are load_causal_lm's check."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    skeleton = causal_lm_skeleton(path)
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelDirError(f"{index}: no 'weight_map' of tensor names to files")
        files = sorted({path / str(name) for name in weight_map.values()})
    else:
        files = [path / "model.safetensors"] if (path / "model.safetensors").exists() else []
    if not files and not any(path.glob("*.bin")):
        raise ModelDirError(f"{path}: no weights (model.safetensors, its index, or pytorch_model.bin)")
    for file in files:
        if not file.is_file():
            raise ModelDirError(f"{file}: missing (named by {index.name})")
        try:
            with safe_open(str(file), framework="pt") as weights:
                if not list(weights.keys()):
                    raise ModelDirError(f"{file}: holds no tensors")
        except SafetensorError as err:
            raise ModelDirError(f"{file}: not a readable safetensors file ({one_line(err)})") from None
    return skeleton


def load_causal_lm(path: str | Path, dtype: torch.dtype | str | None = None, **options: Any):
    """The one LM loader: a local transformers causal-LM directory (ours, CausalLM, or any
    AutoModelForCausalLM architecture), never downloaded, under the one init lock
    (paperline.seeds.load_pretrained); ModelDirError naming the path when it is not one.
    `dtype`: None or "auto", the saved dtype (transformers' default); `options` go to
    `from_pretrained`: config entries to replace (`max_position_embeddings`: a longer RoPE limit)
    or loading options (`attn_implementation="eager"`)."""
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    causal_lm_skeleton(path)
    try:
        model, info = load_pretrained(AutoModelForCausalLM, Path(path), local_files_only=True, dtype=dtype,
                                      output_loading_info=True, ignore_mismatched_sizes=True, **options)
    except torch.OutOfMemoryError:
        raise
    except OSError as err:  # config without weights
        raise ModelDirError(f"{path}: no loadable weights ({err})") from None
    except (SafetensorError, RuntimeError) as err:  # cut short, or not weights at all
        raise ModelDirError(f"{path}: weights that do not load ({type(err).__name__}: {one_line(err)})") from None
    # transformers re-initializes mismatched or absent weights at random and only warns: refuse instead
    if info["mismatched_keys"]:
        key, saved, expected = sorted(info["mismatched_keys"])[0]
        raise ModelDirError(f"{path}: weight {key!r} has shape {tuple(saved)}, but its config.json's model "
                            f"expects {tuple(expected)}")
    if info["missing_keys"]:
        missing = sorted(info["missing_keys"])
        raise ModelDirError(f"{path}: weights missing from its checkpoint: {', '.join(missing[:3])}"
                            + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""))
    return model


def build_lm_base(cfg: LMBaseConfig, corpus_dir: str | Path, out: str | Path, progress: bool = False,
                  distributed=None, device: str | torch.device = "cpu", device_indices: list[int] | None = None) -> dict:
    """Pretrain the base on the corpus and write the stage's folder `out`; returns the record.
    `distributed` (params/runtime.yaml `runtime.distributed`, a DistributedConfig) spreads the training over
    `device_indices` (the paper profile's larger base on several GPUs); None: one process on `device`."""
    from paperline.train.distributed import DistributedConfig

    torch.set_num_threads(cfg.threads)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = load_corpus(corpus_dir, cfg.block_size)
    config = CausalLMConfig(vocab_size=corpus.vocab_size, max_position_embeddings=cfg.block_size,
                            **cfg.shape.model_dump())
    model = CausalLM.seeded(config, torch.Generator().manual_seed(cfg.seed))
    settings = LMTrainSettings.from_config(cfg.train, cfg.block_size, cfg.seed)
    fingerprint = lm_base_fingerprint(cfg, corpus.meta.get("fingerprint"))
    result = train_lm_spread(distributed or DistributedConfig(), model, corpus.train, corpus.val, settings, device,
                             device_indices=device_indices, checkpoint_path=out / TRAIN_STATE_FILE,
                             fingerprint=fingerprint, progress=progress, description="lm-base")
    # transformers' functools.wraps on PreTrainedModel.to gives it the signature of a function of the model
    model.to("cpu")  # type: ignore[arg-type]  # saved from the CPU whatever device trained it
    for stale in ("config.json", "model.safetensors", RECORD_FILE):
        (out / stale).unlink(missing_ok=True)
    model.save_pretrained(out)
    record = {"fingerprint": fingerprint, "corpus": str(cfg.corpus), "vocab_size": corpus.vocab_size,
              "shape": cfg.shape.model_dump(), "block_size": cfg.block_size,
              "parameters": sum(p.numel() for p in model.parameters()),
              "steps": result["steps"], "tokens_seen": result["tokens_seen"],
              "val_loss": result["val_loss"], "val_perplexity": math.exp(result["val_loss"]),
              "train_seconds": result["train_time_s"], "processes": result["processes"],
              "eval_history": result["eval_history"]}
    (out / TRAIN_STATE_FILE).unlink(missing_ok=True)  # done: a rebuild starts afresh
    write_json(out / RECORD_FILE, record)  # last: its presence means the folder is complete
    return record


def read_lm_base(folder: str | Path, fingerprint: str | None = None) -> tuple[CausalLM, dict]:
    """(the model, the record) of a built folder; DataError naming what is missing or stale."""
    folder = Path(folder)
    if not (folder / RECORD_FILE).is_file():
        raise FileNotFoundError(f"{folder}: no {RECORD_FILE} (run `python -m flows run lm-base`)")
    record = read_json(folder / RECORD_FILE)
    if fingerprint is not None and record.get("fingerprint") != fingerprint:
        raise DataError(f"{folder}: built from other lm_base parameters than the params files'")
    return load_causal_lm(folder), record
