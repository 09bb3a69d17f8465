"""The second modality (issue 21): text classification on a frozen causal LM with a spurious
token. Speeches of the committed Shakespeare slice, y = [the speech's play is one of `positive`]
(the slice's comedies by default), the first `length` tokens of each speech long enough; the
spurious attribute a is a fixed token written over position 0, agreeing with y in `agreement` of
the training rows; the test rows balanced over the four (y, a) groups. The features are the LM's
last hidden states averaged over positions; the adapters go on its attention projections.

[I] The paper's text experiments are commonsense-reasoning and other suites without a spurious
attribute; this task is the image task's construction carried over to tokens."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from paperline.data.local_tokenizer import read_tokenizer_json
from paperline.data.text_corpus import load_corpus, read_slice
from paperline.io import DataError, json_digest, read_json, sha256_file
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


def balanced_subsample(y: np.ndarray, max_rows: int | None, seed: int) -> np.ndarray:
    """Sorted row indices: up to max_rows // 2 of each side of y (all of a smaller side), seeded;
    every row when max_rows is None."""
    if max_rows is None:
        return np.arange(len(y))
    rng = np.random.default_rng(seed)
    return np.sort(np.concatenate([rng.permutation(np.flatnonzero(y == c))[: max_rows // 2] for c in (0, 1)]))


def pick_spurious_token(tokens: np.ndarray, vocab_size: int, token: int | None) -> int:
    """The configured token, or the highest id no row starts with (so a = 1 is visible only where
    the task wrote it); DataError when it is outside the vocabulary or already starts a row."""
    starts = set(tokens[:, 0].tolist())
    if token is None:
        token = max(set(range(vocab_size)) - starts)
    if not 0 <= token < vocab_size:
        raise DataError(f"text.spurious_token: {token} is outside the model's vocabulary (0..{vocab_size - 1})")
    if token in starts:
        raise DataError(f"text.spurious_token: {token} already starts {int((tokens[:, 0] == token).sum())} speeches")
    return token


@dataclass(frozen=True)
class TextData:
    tokens: np.ndarray  # (N, length) the kept speeches' first tokens (subsampled)
    y: np.ndarray
    spurious_token: int
    positive_share: float  # of all the speeches long enough, before the subsample
    speeches: int  # long enough, before the subsample
    version: str


def prepare_text(cfg, seed: int) -> TextData:
    """Every input of the text task checked before training (cfg: a TextConfig): the base is a
    causal LM (paperline.train.lm_base.load_causal_lm's ModelDirError names the path), its q/v
    targets exist and fit the rank, the corpus tokenizer fits its vocabulary, the speeches fit
    its context (the speeches read with the model folder's own tokenizer.json when it has one, else
    with the corpus's); the tokens subsampled (balanced_subsample with `seed`) and versioned."""
    from paperline.methods.fvae_lora.adapter import check_targets
    from paperline.train.lm_base import load_causal_lm

    lm = load_causal_lm(cfg.base)
    vocab, context = lm.config.vocab_size, getattr(lm.config, "max_position_embeddings", None)
    check_targets(lm, cfg.adapter.target_modules, cfg.adapter.rank, where="fvae_lora.text.adapter.target_modules")
    if context is not None and cfg.length > context:
        raise DataError(f"text.length: {cfg.length} tokens exceed {cfg.base}'s context of {context}")
    own = Path(cfg.base) / "tokenizer.json"
    if own.is_file():  # a local model with its own vocabulary (a paper profile's): its tokenizer reads the speeches
        tokenizer = read_tokenizer_json(own, max_vocab=vocab, where="text.base", error=DataError)
        tokens_of: dict[str, str | None] = {"tokenizer": sha256_file(own)}
    else:
        corpus = load_corpus(cfg.corpus, 2, vocab)
        tokenizer, tokens_of = corpus.tokenizer(), {"corpus": corpus.meta.get("fingerprint")}
    tokens, y, _ = read_speeches(cfg.speeches, tokenizer, cfg.length, list(cfg.positive))
    keep = balanced_subsample(y, cfg.max_rows, seed)
    token = pick_spurious_token(tokens[keep], vocab, cfg.spurious_token)
    base = Path(cfg.base)
    record = base / "lm_base.json"
    version = "sha256:" + json_digest({
        "base": read_json(record)["fingerprint"] if record.is_file() else sha256_file(base / "config.json"),
        **tokens_of, "speeches": sha256_file(Path(cfg.speeches) / "SHA256SUMS"),
        "rows": keep.tolist(), "token": token, "length": cfg.length, "positive": sorted(cfg.positive)})
    return TextData(tokens[keep], y[keep], token, float(y.mean()), len(y), version)


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
        self.lm: Any = lm  # a paperline CausalLM or any transformers causal LM (duck-typed below)
        self.dim = getattr(lm, "config").hidden_size
        self.head = nn.Identity()

    def features(self, ids: torch.Tensor) -> torch.Tensor:
        if hasattr(self.lm, "hidden_states"):  # paperline.nn.causal_lm.CausalLM
            h = self.lm.hidden_states(ids)
        else:  # any transformers causal LM
            h = self.lm(input_ids=ids, output_hidden_states=True).hidden_states[-1]
        return h.mean(1)
