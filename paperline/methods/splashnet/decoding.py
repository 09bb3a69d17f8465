"""Greedy CTC decoding and the character error rate (spec §b "Optimisation and decoding").

CER = (insertions + deletions + substitutions) / reference length × 100, summed over the test set
(edits and reference lengths are summed first, then divided). The beam search with a character
n-gram LM is not implemented here (see the report)."""
from __future__ import annotations

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
