"""CTC decoding and the character error rate (spec §b "Optimisation and decoding"): greedy, and
prefix beam search with an optional character n-gram LM (shallow fusion, as emg2qwerty's beam
decoder: log p_CTC + lm_weight · log p_LM + insertion_bonus per emitted label).

CER = (insertions + deletions + substitutions) / reference length × 100, summed over the test set
(edits and reference lengths are summed first, then divided)."""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import torch

from paperline.data.emg2qwerty import BLANK


def greedy_decode(log_probs: torch.Tensor, blank: int = BLANK) -> list[int]:
    """(T, C) emissions -> labels: argmax per frame, collapse repeats, drop blanks."""
    best = log_probs.argmax(dim=-1).tolist()
    out, previous = [], None
    for label in best:
        if label != previous and label != blank:
            out.append(label)
        previous = label
    return out


def _logaddexp(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    high = max(a, b)
    return high + math.log1p(math.exp(-abs(a - b)))


def beam_decode(log_probs: torch.Tensor, lm=None, beam_size: int = 16, lm_weight: float = 0.5,
                insertion_bonus: float = 0.0, prune_below: float = -8.0, max_candidates: int = 8,
                blank: int = BLANK) -> list[int]:
    """(T, C) emissions -> the best labelling by CTC prefix beam search. Each prefix keeps the
    probability of its paths ending in blank and in its last label; a frame extends the prefixes
    only by its `max_candidates` likeliest labels within `prune_below` (log) of its best. With `lm`
    (a CharNgramLM), every emitted label adds lm_weight · log p_LM(label | prefix) +
    insertion_bonus to the prefix's score."""
    import numpy as np

    frames = log_probs.detach().float().cpu().numpy()
    minus_inf = -math.inf
    beams: dict[tuple[int, ...], tuple[float, float, float]] = {(): (0.0, minus_inf, 0.0)}  # (blank, label, lm)
    for row in frames:
        labels = row.copy()
        labels[blank] = minus_inf
        top = np.argpartition(-labels, max_candidates)[:max_candidates] if len(row) > max_candidates + 1 else \
            np.arange(len(row))
        candidates = [int(c) for c in top if c != blank and row[c] > row.max() + prune_below]
        p_blank = float(row[blank])
        extended: dict[tuple[int, ...], list[float]] = {}

        def add(prefix, blank_score, label_score, lm_score):
            entry = extended.setdefault(prefix, [minus_inf, minus_inf, lm_score])
            entry[0] = _logaddexp(entry[0], blank_score)
            entry[1] = _logaddexp(entry[1], label_score)

        for prefix, (pb, pl, lm_score) in beams.items():
            total = _logaddexp(pb, pl)
            add(prefix, total + p_blank, minus_inf, lm_score)  # a blank ends the frame
            last = prefix[-1] if prefix else None
            for c in candidates:
                p = float(row[c])
                if c == last:
                    add(prefix, minus_inf, pl + p, lm_score)  # the repeat collapses into the last label
                    from_blank = pb + p  # only a blank in between makes it a new label
                else:
                    from_blank = total + p
                bonus = insertion_bonus + (lm_weight * lm.log_prob(prefix, c) if lm is not None else 0.0)
                add(prefix + (c,), minus_inf, from_blank, lm_score + bonus)
        ranked = sorted(extended.items(), key=lambda kv: _logaddexp(kv[1][0], kv[1][1]) + kv[1][2], reverse=True)
        beams = {prefix: (e[0], e[1], e[2]) for prefix, e in ranked[:beam_size]}
    best = max(beams.items(), key=lambda kv: _logaddexp(kv[1][0], kv[1][1]) + kv[1][2])
    return list(best[0])


def levenshtein(reference: Sequence, hypothesis: Sequence) -> int:
    """Edit distance (unit-cost insertions, deletions, substitutions), one DP row at a time."""
    previous = list(range(len(hypothesis) + 1))
    for i, r in enumerate(reference, 1):
        current = [i] + [0] * len(hypothesis)
        for j, h in enumerate(hypothesis, 1):
            current[j] = min(previous[j] + 1,  # deletion of r
                             current[j - 1] + 1,  # insertion of h
                             previous[j - 1] + (r != h))  # substitution (or match)
        previous = current
    return previous[-1]


def character_error_rate(pairs: Iterable[tuple[Sequence, Sequence]]) -> float:
    """CER in % over (reference, hypothesis) pairs: total edits / total reference length × 100."""
    edits = length = 0
    for reference, hypothesis in pairs:
        edits += levenshtein(reference, hypothesis)
        length += len(reference)
    if length == 0:
        raise ValueError("CER of an empty reference set")
    return 100.0 * edits / length
