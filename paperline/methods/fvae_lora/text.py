"""The second modality (issue 21): text classification on a frozen causal LM with a spurious
token. Speeches of the committed Shakespeare slice, y = [the speech's play is one of `positive`]
(the slice's comedies by default), the first `length` tokens of each speech long enough; the
spurious attribute a is a fixed token written over position 0, agreeing with y in `agreement` of
the training rows; the test rows balanced over the four (y, a) groups. The features are the LM's
last hidden states averaged over positions; the adapters go on its attention projections.

[I] The paper's text experiments are commonsense-reasoning and other suites without a spurious
attribute; this task is the image task's construction carried over to tokens."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from paperline.data.text_corpus import read_slice
from paperline.io import DataError
from paperline.methods.fvae_lora.data import SpuriousTask, spurious_groups


def read_speeches(folder: str | Path, tokenizer, length: int,
                  positive: list[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(tokens (N, length) int64: each speech's first `length` tokens, the speeches shorter
    left out; y (N,): [play in `positive`]; the play of each row). A positive play the slice
    lacks, or a side of y left empty, raises DataError naming it."""
    docs = read_slice(folder, speeches_per_document=1)
    plays = sorted({d.name.split("#")[0] for d in docs})
    missing = sorted(set(positive) - set(plays))
    if missing:
        raise DataError(f"text.positive: {missing} not among the plays of {folder} ({', '.join(plays)})")
    rows, labels, names = [], [], []
    for d in docs:
        ids = tokenizer.encode(d.text).ids
        if len(ids) >= length:
            play = d.name.split("#")[0]
            rows.append(ids[:length])
            labels.append(int(play in positive))
            names.append(play)
    y = np.asarray(labels, dtype=np.int64)
    if len(rows) == 0 or y.min() == y.max():
        raise DataError(f"{folder}: speeches of ≥ {length} tokens leave one side of y empty "
                        f"({int(y.sum()) if len(y) else 0} positive of {len(y)})")
    return np.asarray(rows, dtype=np.int64), y, names


def text_task(tokens: np.ndarray, y: np.ndarray, spurious_token: int, agreement: float, train_fraction: float,
              seed: int) -> SpuriousTask:
    """A seeded split of the rows, then spurious_groups; `spurious_token` over position 0 where a = 1."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(tokens))
    n_train = int(round(train_fraction * len(order)))
    tr, pool = order[:n_train], order[n_train:]
    a_tr, idx, a_te = spurious_groups(y[tr], y[pool], agreement, rng)
    te = pool[idx]

    def mark(rows: np.ndarray, a: np.ndarray) -> np.ndarray:
        out = rows.copy()
        out[a.astype(bool), 0] = spurious_token
        return out

    return SpuriousTask(mark(tokens[tr], a_tr), y[tr], a_tr, mark(tokens[te], a_te), y[te], a_te)


class LMFeatures(nn.Module):
    """A causal LM as a backbone of train.TaskModel: `features(ids)` is its last hidden state
    averaged over positions; `head` is a placeholder TaskModel drops (the LM head is never used)."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm
        self.dim = lm.config.hidden_size
        self.head = nn.Identity()

    def features(self, ids: torch.Tensor) -> torch.Tensor:
        if hasattr(self.lm, "hidden_states"):  # paperline.nn.causal_lm.CausalLM
            h = self.lm.hidden_states(ids)
        else:  # any transformers causal LM
            h = self.lm(input_ids=ids, output_hidden_states=True).hidden_states[-1]
        return h.mean(1)
