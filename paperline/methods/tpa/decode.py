"""Decode-time measurement: per variant and context length, the time of one cached single-token
decode step (of `batch` sequences) after a prefill of that many tokens, and the cache it holds. Variants are
timed round-robin within each context length (best of `repeats`), so machine noise hits them alike;
ratios against MHA measured in the same call are what compare across machines. `batch` sequences
decode side by side (batch 1 is launch-bound on a GPU; a larger batch lets the cache's reads show)."""
from __future__ import annotations

import time

import torch

from paperline.nn.causal_lm import LayerCaches


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _copy(cache: LayerCaches) -> LayerCaches:
    return LayerCaches({k: v.clone() for k, v in layer.items()} for layer in cache)


@torch.no_grad()
def decode_step_times(models: dict[str, torch.nn.Module], contexts: list[int], tokens: int, repeats: int,
                      device, seed: int = 0, batch: int = 1) -> dict[str, dict[int, dict]]:
    """{variant: {context: {ms_per_token (one decode step of the whole batch),
    cache_elements_per_token_per_layer, cache_bytes_per_token (one sequence's token),
    peak_cache_mb (the batch's cache at context+tokens), peak_memory_mb (CUDA only)}}}."""
    generator = torch.Generator().manual_seed(seed)
    out: dict[str, dict[int, dict]] = {name: {} for name in models}
    for context in contexts:
        vocab: int = next(iter(models.values())).config.vocab_size  # type: ignore[union-attr,assignment]  # Module.__getattr__
        prompt = torch.randint(vocab, (batch, context), generator=generator).to(device)
        steps = torch.randint(vocab, (batch, tokens), generator=generator).to(device)
        prefilled = {}
        for name, model in models.items():
            model.to(device).eval()
            prefilled[name] = model(prompt, use_cache=True).cache
        for name, model in models.items():  # warm-up, untimed: allocation, kernel choice, GPU clocks
            cache = _copy(prefilled[name])
            for i in range(tokens):
                cache = model(steps[:, i:i + 1], cache=cache, use_cache=True).cache
        best = {name: float("inf") for name in models}
        peak = {}
        for _ in range(repeats):
            for name, model in models.items():
                cache = _copy(prefilled[name])
                if torch.device(device).type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                _sync(device)
                t0 = time.perf_counter()
                for i in range(tokens):
                    cache = model(steps[:, i:i + 1], cache=cache, use_cache=True).cache
                _sync(device)
                best[name] = min(best[name], (time.perf_counter() - t0) / tokens)
                if torch.device(device).type == "cuda":
                    peak[name] = torch.cuda.max_memory_allocated(device) / 2 ** 20
        for name, model in models.items():
            cache = _copy(prefilled[name])
            element_bytes = next(iter(cache[0].values())).element_size()
            per_layer = cache.elements_per_token()
            layers = len(cache)
            row = {"ms_per_token": 1000 * best[name], "cache_elements_per_token_per_layer": per_layer,
                   "cache_bytes_per_token": per_layer * layers * element_bytes,
                   "peak_cache_mb": per_layer * layers * element_bytes * (context + tokens) * batch / 2 ** 20}
            if name in peak:
                row["peak_memory_mb"] = peak[name]
            out[name][context] = row
        del prefilled
    return out


def ratios_vs(times: dict[str, dict[int, dict]], baseline: str = "mha") -> dict[str, dict[int, dict]]:
    """Each variant's decode time and cache bytes over the baseline's at the same context."""
    if baseline not in times:
        return {}
    return {name: {c: {"time_vs_" + baseline: row["ms_per_token"] / times[baseline][c]["ms_per_token"],
                       "cache_vs_" + baseline: row["cache_bytes_per_token"] / times[baseline][c]["cache_bytes_per_token"]}
                   for c, row in rows.items()} for name, rows in times.items()}
