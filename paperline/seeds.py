"""Seeds, once: building a model from a seed (`seeded_init`), loading a saved one (`load_pretrained`),
both under the one process-wide lock, and a row over training seeds (`mean_over_seeds`): the mean
of each figure and its spread, the one way every summary states "mean ± std over seeds".

Variants and seeds train in threads. `nn.Module` init draws from torch's global RNG and
transformers' `from_pretrained` is not thread-safe, so every seeded build and every load holds
`INIT_LOCK`: a build in one thread never consumes the draws of another's."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import torch

# Reentrant: a seeded build may load a saved model inside it (and a load may build one).
INIT_LOCK = threading.RLock()


@contextmanager
def seeded_init(seed: int | None = None, cuda: bool = False) -> Iterator[None]:
    """Inside: INIT_LOCK held and torch's global RNG forked, seeded with `seed` (None: left where it
    was, only fenced off from other threads); on exit the outer RNG is as it was before. `cuda`:
    fork the CUDA generators too (what `torch.random.fork_rng()` does by default); otherwise only
    the CPU generator is forked (`torch.manual_seed` still seeds CUDA's: a seeded init never reads
    them)."""
    with INIT_LOCK, torch.random.fork_rng(devices=None if cuda else []):
        if seed is not None:
            torch.manual_seed(seed)
        yield


def load_pretrained(cls: Any, path: str | Path, **kwargs: Any) -> Any:
    """`cls.from_pretrained(path, **kwargs)` (a transformers model, config or tokenizer class, or a
    peft one) under INIT_LOCK."""
    with INIT_LOCK:
        return cls.from_pretrained(path, **kwargs)


def sample_std(values: Any, axis: int | None = None) -> Any:
    """The sample standard deviation over seeds (ddof 1, an unbiased variance from a few seeds; 0
    for one seed), along `axis` (None: all of `values`, as a float)."""
    values = np.asarray(values, dtype=float)
    n = values.size if axis is None else values.shape[axis]
    if n > 1:
        spread = np.std(values, axis=axis, ddof=1)
    else:
        spread = np.zeros_like(values.mean(axis=axis))
    return float(spread) if axis is None else spread


def mean_over_seeds(rows: Sequence[Mapping[str, Any]], spread: Callable[[str], bool] = lambda key: True,
                    keep_shared: bool = False) -> dict[str, Any]:
    """One row from one row per seed: every figure (in the order the seeds first name them) the mean
    over the seeds that have it, then `<figure>_std` for each figure `spread` selects: the SAMPLE
    standard deviation over those seeds (ddof 1, an unbiased variance from a few seeds; 0 for one
    seed). `keep_shared`: a figure every seed has with one value (parameters, steps) is kept as it
    is (an int stays an int) instead of averaged."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    values = {k: [row[k] for row in rows if k in row] for k in keys}
    out: dict[str, Any] = {}
    for k, vs in values.items():
        shared = keep_shared and len(vs) == len(rows) and all(v == vs[0] for v in vs)
        out[k] = vs[0] if shared else float(np.mean(vs))
    out |= {f"{k}_std": sample_std(vs) for k, vs in values.items() if spread(k)}
    return out
