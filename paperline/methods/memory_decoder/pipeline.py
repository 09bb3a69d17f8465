"""The Memory Decoder flow's steps as plain functions: the models' configuration and files, the two
base LMs' pretraining and each seed's MemDec training, the kNN-LM datastore with the MemDec's kNN targets, and the evaluation — perplexity of base, base + kNN-LM and
base + each seed's MemDec over the λ sweep per base size and split, and the inference time per token."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from paperline.io import atomic_dir, atomic_path
from paperline.methods.memory_decoder.config import MemoryDecoderConfig, ShapeConfig
from paperline.methods.memory_decoder.data import MemDecData
from paperline.train.distributed import DistributedConfig

BASES = ("small", "large")
VARIANTS = ("base", "knn_lm", "memdec")


def lm_config(shape: ShapeConfig, vocab_size: int, block_size: int):
    from paperline.nn.causal_lm import CausalLMConfig

    return CausalLMConfig(vocab_size=vocab_size, hidden_size=shape.hidden_size, num_layers=shape.num_layers,
                          attention="mha", num_heads=shape.num_heads, head_dim=shape.head_dim,
                          max_position_embeddings=block_size)


def load_lm(folder: str | Path):
    """A saved LM (the bases, a MemDec) in eval mode, by the one LM loader."""
    from paperline.train.lm_base import load_causal_lm

    return load_causal_lm(folder).eval()


def save_lm(model, folder: str | Path, data: MemDecData) -> Path:
    """The model with the general corpus's tokenizer beside it: a complete HF model folder, written
    whole or not at all (the datastore and MemDec tasks load it)."""
    import shutil

    folder = Path(folder)
    with atomic_dir(folder) as tmp:
        model.save_pretrained(tmp)
        shutil.copy(Path(data.general_dir) / "tokenizer.json", tmp / "tokenizer.json")
    return folder


def train_base(cfg: MemoryDecoderConfig, size: str, data: MemDecData, distributed: DistributedConfig, device,
               device_indices: list, checkpoint_path: Path, on_log: Callable[[int, dict], None],
               progress: bool = False) -> tuple[torch.nn.Module, dict, dict]:
    """A base LM of `size` (fresh weights drawn from `cfg.seed`) pretrained on the general corpus,
    spread over devices by `distributed`: (the model, the loop's result, its row)."""
    from paperline.data.tokens import open_tokens
    from paperline.nn.causal_lm import CausalLM
    from paperline.seeds import seeded_init
    from paperline.train.lm import LMTrainSettings, train_lm_spread

    shape = cfg.base_small if size == "small" else cfg.base_large
    with seeded_init(cfg.seed):
        model = CausalLM(lm_config(shape, data.vocab_size, cfg.block_size))
    general = Path(data.general_dir)
    train = open_tokens(general / "train.bin", data.vocab_size, cfg.block_size)
    val = open_tokens(general / "val.bin", data.vocab_size, cfg.block_size)
    result = train_lm_spread(distributed, model, train, val, LMTrainSettings.from_config(cfg.base_train, cfg.block_size, cfg.seed),
                             device, device_indices=device_indices, checkpoint_path=checkpoint_path,
                             fingerprint={"data": data.version}, progress=progress, description=f"base_{size}",
                             on_log=on_log)
    row = {"general_val_loss": result["val_loss"], "general_val_perplexity": result["val_perplexity"],
           "train_time_s": result["train_time_s"], "params": sum(p.numel() for p in model.parameters())}
    return model, result, row


def train_memdec_seed(cfg: MemoryDecoderConfig, data: MemDecData, seed: int, small_base: Path, datastore: Path,
                      device, checkpoint_path: Path, on_log: Callable[[int, dict], None]) -> tuple[torch.nn.Module, dict]:
    """The MemDec of one seed: a copy of the small base in `small_base` (or fresh weights drawn from
    the seed) trained on the domain training set, in the seed's batch order, with
    α·KL(p_kNN ‖ p_MemDec) + (1 − α)·CE toward the kNN targets in `datastore`: (the model, its row)."""
    from paperline.methods.memory_decoder.corpora import load_domain
    from paperline.methods.memory_decoder.memdec import train_memdec
    from paperline.nn.causal_lm import CausalLM
    from paperline.seeds import seeded_init
    from paperline.train.lm import LMTrainSettings

    t = cfg.memdec_train
    if t.init_from_small_base:
        model = load_lm(small_base).train()
    else:
        with seeded_init(seed):
            model = CausalLM(lm_config(cfg.memdec, data.vocab_size, cfg.block_size))
    train, _ = load_domain(data.domain_dir, data.vocab_size, cfg.block_size)
    targets = np.load(datastore / "knn_targets.npz")
    result = train_memdec(model, train.tokens, targets["values"], targets["weights"],
                          LMTrainSettings.from_config(t, cfg.block_size, seed), t.alpha, device, checkpoint_path=checkpoint_path,
                          fingerprint={"data": data.version, "init": t.init_from_small_base}, on_log=on_log)
    h = result["history"]
    return model, {"final_loss": h["loss"][-1], "final_kl": h["kl"][-1], "final_ce": h["ce"][-1],
                   "train_time_s": result["train_time_s"], "params": sum(p.numel() for p in model.parameters())}


def build_datastore(cfg: MemoryDecoderConfig, data: MemDecData, model_dir: str | Path, device,
                    folder: str | Path) -> dict:
    """The last-FFN-input keys of the model in `model_dir` (the large base) over the domain
    training set, a faiss index of them,
    and the MemDec's kNN targets: per position its k neighbours (own entry dropped) as values and
    softmax(−d/τ) weights (fp16, as the official code stores its sparse distributions), saved in
    `folder` (knn_targets.npz beside the datastore). Returns the store's sizes and timings."""
    from paperline.methods.memory_decoder.corpora import load_domain
    from paperline.methods.memory_decoder.datastore import Datastore, build_index, extract_keys, save_datastore
    from paperline.methods.memory_decoder.knn import drop_self, neighbour_weights

    folder = Path(folder)
    t0 = time.perf_counter()
    model = load_lm(model_dir)
    train, _ = load_domain(data.domain_dir, data.vocab_size, cfg.block_size)
    keys, values = extract_keys(model, train.tokens, cfg.block_size, device)
    store = Datastore(keys, values, build_index(keys, cfg.datastore, cfg.seed))
    build_s = time.perf_counter() - t0
    distances, ids = store.search(keys, cfg.knn.k + 1)
    distances, ids = drop_self(distances, ids, np.arange(len(keys)), cfg.knn.k)
    weights = neighbour_weights(distances, cfg.knn.temperature).numpy().astype(np.float16)
    save_datastore(store, folder, {"index": cfg.datastore.index, "key_dim": int(keys.shape[1])})
    with atomic_path(folder / "knn_targets.npz") as tmp, open(tmp, "wb") as fh:  # np.savez on a path adds .npz
        np.savez(fh, values=values[ids].astype(np.int32), weights=weights)
    # how often the kNN target puts mass on the true next token: a sanity figure of the store
    hit = float((values[ids] == values[:, None]).any(1).mean())
    return store.size_bytes() | {"build_s": build_s, "search_s": time.perf_counter() - t0 - build_s,
                                 "target_in_neighbours": hit, "mean_distance_nearest": float(distances[:, 0].mean())}


def eval_splits(cfg: MemoryDecoderConfig, data: MemDecData) -> dict:
    """Evaluation windows (x, y, fact mask of y): the domain held-out text's first half (domain_dev,
    where λ is chosen) and second half (domain, where it is reported), and the general held-out text."""
    from paperline.data.tokens import open_tokens
    from paperline.methods.memory_decoder.corpora import load_domain
    from paperline.methods.memory_decoder.memdec import eval_windows

    _, dom = load_domain(data.domain_dir, data.vocab_size, cfg.block_size)
    general = np.asarray(open_tokens(Path(data.general_dir) / "val.bin", data.vocab_size, cfg.block_size))
    domain = np.asarray(dom.tokens, dtype=np.int64)
    half = len(domain) // 2
    out = {}
    for name, tokens, mask in (("domain_dev", domain[:half], dom.fact_mask[:half]),
                               ("domain", domain[half:], dom.fact_mask[half:]), ("general", general, None)):
        starts = eval_windows(tokens, cfg.block_size, cfg.eval_windows)
        pos = starts[:, None] + np.arange(cfg.block_size)
        x = torch.as_tensor(np.asarray(tokens, dtype=np.int64)[pos])
        y = torch.as_tensor(np.asarray(tokens, dtype=np.int64)[pos + 1])
        m = torch.as_tensor(mask[pos + 1]) if mask is not None else None
        out[name] = (x, y, m)
    return out


def split_log_probs(cfg: MemoryDecoderConfig, bases: dict, memdecs: dict, store, splits: dict, device) -> dict:
    """Per split: (log p of the targets under each base, each seed's MemDec (`memdec/seed<s>`, from
    `memdecs`: {seed: model}) and the kNN distribution, mask). The kNN-LM queries always come from
    the large base (the model that defines the datastore, spec §f)."""
    from paperline.methods.memory_decoder.datastore import logits_and_keys
    from paperline.methods.memory_decoder.knn import knn_target_probability
    from paperline.methods.memory_decoder.memdec import target_log_probs

    log_p: dict = {}
    for split, (x, y, mask) in splits.items():
        x, y = x.to(device), y.to(device)
        row = {size: target_log_probs(m, x, y).cpu() for size, m in bases.items()}
        row |= {f"memdec/seed{seed}": target_log_probs(m, x, y).cpu() for seed, m in memdecs.items()}
        _, keys = logits_and_keys(bases["large"], x)
        dist, ids = store.search(keys.reshape(-1, keys.shape[-1]).cpu().numpy(), cfg.knn.k)
        p = knn_target_probability(dist, store.values[ids], y.reshape(-1).cpu().numpy(), cfg.knn.temperature)
        row["knn"] = torch.log(p).reshape(y.shape)  # −inf where no neighbour has the target
        log_p[split] = (row, mask)
    return log_p


def perplexity_sweeps(log_p: dict, lambdas, seed: int) -> dict:
    """{"<size>/<variant>": {split: {λ: perplexity}}} with the MemDec of `seed`: base alone (λ = 0
    only), base + kNN-LM and base + MemDec over the λ sweep, on every split and on the fact tokens
    of the domain splits."""
    from paperline.methods.memory_decoder.memdec import perplexity_sweep

    results: dict = {}
    for size in BASES:
        for variant in VARIANTS:
            other = {"base": size, "knn_lm": "knn", "memdec": f"memdec/seed{seed}"}[variant]
            sweep_lambdas = [0.0] if variant == "base" else lambdas
            entry: dict = {}
            for split, (row, mask) in log_p.items():
                entry[split] = perplexity_sweep(row[size], row[other], sweep_lambdas)
                if mask is not None and mask.any():
                    entry[f"{split}_facts"] = perplexity_sweep(row[size], row[other], sweep_lambdas, mask)
            results[f"{size}/{variant}"] = entry
    return results


def best_of(fn: Callable[[], object], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@torch.no_grad()
def inference_times(bases: dict, memdec, store, x: torch.Tensor, vocab: int, k: int, tau: float) -> dict:
    """Per base size: ms per token of the base, base + kNN-LM (the large base's keys searched) and
    base + MemDec at λ = 0.25 on the windows `x`, best of 3, and their ratios."""
    from paperline.methods.memory_decoder.datastore import logits_and_keys
    from paperline.methods.memory_decoder.knn import knn_distribution
    from paperline.methods.memory_decoder.memdec import mix_log_probs

    n_tokens = x.numel()

    def with_knn(size):
        def run():
            logits = bases[size](x).logits if size != "large" else None
            big_logits, keys = logits_and_keys(bases["large"], x)
            logits = big_logits if logits is None else logits
            dist, ids = store.search(keys.reshape(-1, keys.shape[-1]).cpu().numpy(), k)
            p_knn = knn_distribution(dist, store.values[ids], vocab, tau)
            mix_log_probs(torch.log_softmax(logits.reshape(-1, vocab).float(), -1).cpu(), torch.log(p_knn), 0.25)
        return run

    def with_memdec(size):
        def run():
            a = torch.log_softmax(bases[size](x).logits.float(), -1)
            b = torch.log_softmax(memdec(x).logits.float(), -1)
            mix_log_probs(a, b, 0.25)
        return run

    timing: dict = {}
    for size in BASES:
        base_s = best_of(lambda: bases[size](x))
        knn_s, mem_s = best_of(with_knn(size)), best_of(with_memdec(size))
        timing[size] = {"base_ms_per_token": 1e3 * base_s / n_tokens,
                        "knn_lm_ms_per_token": 1e3 * knn_s / n_tokens,
                        "memdec_ms_per_token": 1e3 * mem_s / n_tokens,
                        "knn_lm_vs_base": knn_s / base_s, "memdec_vs_base": mem_s / base_s,
                        "knn_lm_over_memdec": knn_s / mem_s}
    return timing
