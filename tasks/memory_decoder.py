"""Tasks of the Memory Decoder flow: the two corpora (the Shakespeare corpus, built when missing,
and the domain corpus in its tokenizer), the two base LMs pretrained on the general corpus, the
kNN-LM datastore of the large base over the domain training set with the MemDec's kNN targets,
the MemDec's training, then the evaluation (λ sweeps, datastore size, inference time per token)
and publishing the comparison."""
from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import read_params
from paperline.io import write_json
from paperline.methods.memory_decoder import plots
from paperline.methods.memory_decoder.config import MemoryDecoderConfig, ShapeConfig, TrainConfig
from tasks import track
from tasks.paths import (metrics_path, models_dir, params_path, plots_dir, project_path,
                         run_pointer_path)
from tasks.runners import GPU_TAG, gpu_slot

METHOD = "memory_decoder"
BASES = ("small", "large")


@dataclass(frozen=True)
class MemDecData:
    """Where the two corpora are (picklable, passed to the tasks)."""

    general_dir: str
    domain_dir: str
    vocab_size: int
    version: str


def prepare_data(cfg: MemoryDecoderConfig) -> MemDecData:
    """The general corpus (built by the text-corpus stage, or here when missing) and the domain
    corpus encoded with its tokenizer into models/memory_decoder/domain. Fails here, before any
    training, on a missing, corrupt or mismatched corpus."""
    from paperline.data.text_corpus import load_corpus
    from paperline.methods.memory_decoder.corpora import generate_domain, load_domain, read_domain_text, write_domain
    from tasks import text_corpus

    corpus_cfg = text_corpus.resolve(read_params(params_path()))
    folder = project_path(cfg.general_corpus_dir)
    if folder == text_corpus.corpus_dir(corpus_cfg):
        text_corpus.ensure(corpus_cfg)
    general = load_corpus(folder, cfg.block_size)
    tokenizer = general.tokenizer()
    if cfg.domain.text:
        train, val = read_domain_text(project_path(cfg.domain.text), tokenizer, cfg.domain.val_fraction)
        sources = [project_path(cfg.domain.text)]
    else:
        train, val, _ = generate_domain(cfg.domain, tokenizer)
        sources = []
    domain_dir = models_dir(METHOD) / "domain"
    write_domain(domain_dir, train, val)
    load_domain(domain_dir, general.vocab_size, cfg.block_size)  # too short for a window fails here
    version = track.data_version([folder / "train.bin", folder / "val.bin", folder / "tokenizer.json",
                                  domain_dir / "train.bin", domain_dir / "val.bin", *sources])
    return MemDecData(str(folder), str(domain_dir), general.vocab_size, version)


def lm_config(shape: ShapeConfig, vocab_size: int, block_size: int):
    from paperline.nn.causal_lm import CausalLMConfig

    return CausalLMConfig(vocab_size=vocab_size, hidden_size=shape.hidden_size, num_layers=shape.num_layers,
                          attention="mha", num_heads=shape.num_heads, head_dim=shape.head_dim,
                          max_position_embeddings=block_size)


def settings(t: TrainConfig, block_size: int, seed: int):
    from paperline.train.lm import LMTrainSettings

    return LMTrainSettings.from_config(t, block_size, seed)


def _hf_dir(name: str) -> Path:
    return models_dir(METHOD) / name / "hf"


def _load_lm(name: str):
    from paperline.nn.causal_lm import CausalLM

    return CausalLM.from_pretrained(_hf_dir(name)).eval()


def _save_lm(model, name: str, data: MemDecData) -> Path:
    out = _hf_dir(name)
    model.save_pretrained(out)
    shutil.copy(Path(data.general_dir) / "tokenizer.json", out / "tokenizer.json")
    return out


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="memory_decoder-train-base", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_base(cfg: MemoryDecoderConfig, size: str, data: MemDecData, parent: track.Run, profile: str) -> dict:
    """A base LM pretrained on the general (Shakespeare train) corpus."""
    import torch

    from paperline.data.tokens import open_tokens
    from paperline.nn.causal_lm import CausalLM
    from paperline.train.lm import train_lm

    torch.set_num_threads(cfg.threads)
    shape = cfg.base_small if size == "small" else cfg.base_large
    name = f"base_{size}"
    with gpu_slot() as device, track.child_run(parent, METHOD, name, profile, data.version,
                                               params={"shape": shape.model_dump(), "train": cfg.base_train.model_dump(),
                                                       "device": str(device)}) as run:
        torch.manual_seed(cfg.seed)
        model = CausalLM(lm_config(shape, data.vocab_size, cfg.block_size))
        general = Path(data.general_dir)
        train = open_tokens(general / "train.bin", data.vocab_size, cfg.block_size)
        val = open_tokens(general / "val.bin", data.vocab_size, cfg.block_size)
        result = train_lm(model, train, val, settings(cfg.base_train, cfg.block_size, cfg.seed), device,
                          checkpoint_path=models_dir(METHOD) / name / "checkpoint.pt",
                          fingerprint={"data": data.version}, progress=sys.stderr.isatty(), description=name,
                          on_log=lambda step, m: run.log_metrics(m, step) if "val_loss" in m else None)
        run.log_history("train_loss", result["history"]["step"], result["history"]["train_loss"])
        _save_lm(model.cpu(), name, data)
        row = {"general_val_loss": result["val_loss"], "general_val_perplexity": result["val_perplexity"],
               "train_time_s": result["train_time_s"], "params": sum(p.numel() for p in model.parameters())}
        run.log_metrics(row, step=cfg.base_train.steps)
    return row


@task(name="memory_decoder-datastore", tags=[GPU_TAG], cache_policy=NO_CACHE)
def build_datastore(cfg: MemoryDecoderConfig, data: MemDecData, parent: track.Run, profile: str) -> dict:
    """The large base's last-FFN-input keys over the domain training set, a faiss index of them,
    and the MemDec's kNN targets: per position its k neighbours (own entry dropped) as values and
    softmax(−d/τ) weights (fp16, as the official code stores its sparse distributions)."""
    import numpy as np
    import torch

    from paperline.methods.memory_decoder.corpora import load_domain
    from paperline.methods.memory_decoder.datastore import Datastore, build_index, extract_keys, save_datastore
    from paperline.methods.memory_decoder.knn import drop_self, neighbour_weights

    torch.set_num_threads(cfg.threads)
    with gpu_slot() as device, track.child_run(parent, METHOD, "knn_datastore", profile, data.version,
                                               params={"datastore": cfg.datastore.model_dump(),
                                                       "knn": cfg.knn.model_dump(), "keys_from": "base_large"}) as run:
        t0 = time.perf_counter()
        model = _load_lm("base_large")
        train, _ = load_domain(data.domain_dir, data.vocab_size, cfg.block_size)
        keys, values = extract_keys(model, train.tokens, cfg.block_size, device)
        store = Datastore(keys, values, build_index(keys, cfg.datastore, cfg.seed))
        build_s = time.perf_counter() - t0
        distances, ids = store.search(keys, cfg.knn.k + 1)
        distances, ids = drop_self(distances, ids, np.arange(len(keys)), cfg.knn.k)
        weights = neighbour_weights(distances, cfg.knn.temperature).numpy().astype(np.float16)
        folder = models_dir(METHOD) / "datastore"
        save_datastore(store, folder, {"index": cfg.datastore.index, "key_dim": int(keys.shape[1])})
        np.savez(folder / "knn_targets.npz", values=values[ids].astype(np.int32), weights=weights)
        # how often the kNN target puts mass on the true next token: a sanity figure of the store
        hit = float((values[ids] == values[:, None]).any(1).mean())
        row = store.size_bytes() | {"build_s": build_s, "search_s": time.perf_counter() - t0 - build_s,
                                    "target_in_neighbours": hit,
                                    "mean_distance_nearest": float(distances[:, 0].mean())}
        run.log_metrics(row)
    return row


@task(name="memory_decoder-train-memdec", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_memdec_task(cfg: MemoryDecoderConfig, data: MemDecData, parent: track.Run, profile: str) -> dict:
    """The MemDec: a copy of the small base (or fresh weights) trained on the domain training set
    with α·KL(p_kNN ‖ p_MemDec) + (1 − α)·CE."""
    import numpy as np
    import torch

    from paperline.methods.memory_decoder.corpora import load_domain
    from paperline.methods.memory_decoder.memdec import train_memdec
    from paperline.nn.causal_lm import CausalLM

    torch.set_num_threads(cfg.threads)
    t = cfg.memdec_train
    with gpu_slot() as device, track.child_run(parent, METHOD, "memdec", profile, data.version,
                                               params={"shape": cfg.memdec.model_dump(), "train": t.model_dump(),
                                                       "device": str(device)}) as run:
        if t.init_from_small_base:
            model = _load_lm("base_small").train()
        else:
            torch.manual_seed(cfg.seed)
            model = CausalLM(lm_config(cfg.memdec, data.vocab_size, cfg.block_size))
        train, _ = load_domain(data.domain_dir, data.vocab_size, cfg.block_size)
        targets = np.load(models_dir(METHOD) / "datastore" / "knn_targets.npz")
        result = train_memdec(model, train.tokens, targets["values"], targets["weights"],
                              settings(t, cfg.block_size, cfg.seed), t.alpha, device,
                              checkpoint_path=models_dir(METHOD) / "memdec" / "checkpoint.pt",
                              fingerprint={"data": data.version, "init": t.init_from_small_base},
                              on_log=lambda step, m: run.log_metrics(m, step))
        _save_lm(model.cpu(), "memdec", data)
        h = result["history"]
        row = {"final_loss": h["loss"][-1], "final_kl": h["kl"][-1], "final_ce": h["ce"][-1],
               "train_time_s": result["train_time_s"], "params": sum(p.numel() for p in model.parameters())}
        run.log_metrics(row, step=t.steps)
    return row


def _splits(cfg: MemoryDecoderConfig, data: MemDecData) -> dict:
    """Evaluation windows (x, y, fact mask of y): the domain held-out text's first half (domain_dev,
    where λ is chosen) and second half (domain, where it is reported), and the general held-out text."""
    import numpy as np
    import torch

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


def _best_of(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@task(name="memory_decoder-evaluate", tags=[GPU_TAG], cache_policy=NO_CACHE)
def evaluate(cfg: MemoryDecoderConfig, data: MemDecData, parent: track.Run, profile: str) -> dict:
    """Per base size and split: perplexity of base, base + kNN-LM and base + MemDec over the λ
    sweep (and on the fact tokens of the domain text); then inference time per token. The kNN-LM
    queries always come from the large base (the model that defines the datastore, spec §f), so
    for the small base kNN-LM also runs the large model — MemDec needs neither."""
    import numpy as np
    import torch

    from paperline.methods.memory_decoder.datastore import load_datastore, logits_and_keys
    from paperline.methods.memory_decoder.knn import knn_distribution, knn_target_probability
    from paperline.methods.memory_decoder.memdec import mix_log_probs, perplexity_sweep, target_log_probs

    torch.set_num_threads(cfg.threads)
    lambdas, k, tau = cfg.lambdas, cfg.knn.k, cfg.knn.temperature
    with gpu_slot() as device:
        bases = {size: _load_lm(f"base_{size}").to(device) for size in BASES}
        memdec = _load_lm("memdec").to(device)
        store, _ = load_datastore(models_dir(METHOD) / "datastore")
        splits = _splits(cfg, data)
        log_p: dict = {}
        for split, (x, y, mask) in splits.items():
            x, y = x.to(device), y.to(device)
            row = {size: target_log_probs(m, x, y).cpu() for size, m in bases.items()}
            row["memdec"] = target_log_probs(memdec, x, y).cpu()
            _, keys = logits_and_keys(bases["large"], x)
            dist, ids = store.search(keys.reshape(-1, keys.shape[-1]).cpu().numpy(), k)
            p = knn_target_probability(dist, store.values[ids], y.reshape(-1).cpu().numpy(), tau)
            row["knn"] = torch.log(p).reshape(y.shape)  # −inf where no neighbour has the target
            log_p[split] = (row, mask)

        results: dict = {}
        for size in BASES:
            for variant in ("base", "knn_lm", "memdec"):
                other = {"base": size, "knn_lm": "knn", "memdec": "memdec"}[variant]
                sweep_lambdas = [0.0] if variant == "base" else lambdas
                entry: dict = {}
                for split, (row, mask) in log_p.items():
                    entry[split] = perplexity_sweep(row[size], row[other], sweep_lambdas)
                    if mask is not None and mask.any():
                        entry[f"{split}_facts"] = perplexity_sweep(row[size], row[other], sweep_lambdas, mask)
                results[f"{size}/{variant}"] = entry

        # inference time per token on the same windows, best of 3, all in this one task
        x = splits["domain"][0][:cfg.timing_windows].to(device)
        n_tokens = x.numel()
        vocab = data.vocab_size

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
        with torch.no_grad():
            for size in BASES:
                base_s = _best_of(lambda: bases[size](x))
                knn_s, mem_s = _best_of(with_knn(size)), _best_of(with_memdec(size))
                timing[size] = {"base_ms_per_token": 1e3 * base_s / n_tokens,
                                "knn_lm_ms_per_token": 1e3 * knn_s / n_tokens,
                                "memdec_ms_per_token": 1e3 * mem_s / n_tokens,
                                "knn_lm_vs_base": knn_s / base_s, "memdec_vs_base": mem_s / base_s,
                                "knn_lm_over_memdec": knn_s / mem_s}

    for name, entry in results.items():  # one MLflow child per evaluated variant, the sweep as steps
        size, variant = name.split("/")
        with track.child_run(parent, METHOD, f"{size}+{variant}", profile, data.version,
                             params={"base": size, "variant": variant, "lambdas": lambdas}) as run:
            for split, sweep in entry.items():
                run.log_history(f"{split}_perplexity_by_lambda_index", range(len(sweep)), list(sweep.values()))
                run.log_metrics({f"{split}_perplexity_best": min(sweep.values())})
            run.log_metrics({k2: v for k2, v in timing[size].items() if k2.startswith(variant) or variant == "base"})
    return {"results": results, "timing": timing}


def summarize(cfg: MemoryDecoderConfig, bases: dict, datastore: dict, memdec: dict, ev: dict) -> dict:
    """metrics/memory_decoder.json: per base size the perplexities (λ = 0 is the base), the λ of
    each method chosen on the domain dev half (the paper tunes λ per domain) and the domain test
    half's and general perplexity at that λ; sweeps; sizes; timing."""
    # headline scalars at the top level, one table row per base size (paperline.report's convention)
    out: dict = {"lambdas": list(cfg.lambdas)} | {f"datastore_{k}": v for k, v in datastore.items()} | {
        f"memdec_train_{k}": v for k, v in memdec.items()}
    for size in BASES:
        row: dict = {"general_val_perplexity_train_loop": bases[size]["general_val_perplexity"],
                     "params": bases[size]["params"]}
        base = ev["results"][f"{size}/base"]
        for split, sweep in base.items():
            row[f"base_{split}_ppl"] = sweep[0.0]
        for variant in ("knn_lm", "memdec"):
            entry = ev["results"][f"{size}/{variant}"]
            best = min(entry["domain_dev"], key=entry["domain_dev"].get)
            row[f"{variant}_best_lambda"] = best
            for split, sweep in entry.items():
                row[f"{variant}_{split}_ppl"] = sweep[best]
                row[f"{variant}_{split}_ppl_by_lambda"] = {str(lam): v for lam, v in sweep.items()}
        row["memdec_domain_ppl_over_knn_lm"] = row["memdec_domain_ppl"] / row["knn_lm_domain_ppl"]
        row |= ev["timing"][size]
        out[size] = row
    return out


@task(name="memory_decoder-publish", cache_policy=NO_CACHE)
def publish(cfg: MemoryDecoderConfig, bases: dict, datastore: dict, memdec: dict, ev: dict, parent: track.Run) -> dict:
    summary = summarize(cfg, bases, datastore, memdec, ev)
    out = plots_dir(METHOD)
    paths = [plots.plot_lambda_sweep(summary, BASES, out / "perplexity_vs_lambda.png")]
    paths += plots.write_tables(summary, BASES, out)
    for path in paths:
        parent.log_artifact(path, "plots")
    parent.log_metrics({f"{size}/{k}": v for size in BASES for k, v in summary[size].items()
                        if isinstance(v, (int, float))} | {f"datastore/{k}": v for k, v in datastore.items()})
    write_json(metrics_path(METHOD), summary)
    write_json(run_pointer_path(METHOD), track.run_pointer(parent, METHOD))
    return summary
