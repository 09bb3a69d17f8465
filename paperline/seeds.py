"""A row over training seeds: the mean of each figure and its spread, the one way every summary
states "mean ± std over seeds" (QFFT's and SplashNet's rows)."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np


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
    out |= {f"{k}_std": float(np.std(vs, ddof=1)) if len(vs) > 1 else 0.0 for k, vs in values.items() if spread(k)}
    return out
