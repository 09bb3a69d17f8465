"""The federated data: non-IID client shards of the corpus's training stream, the global test
windows (the validation stream, never seen by a client) and the server's public proxy set, from
another corpus (`proxy_text`, a hash-checked folder of *.txt: the King James slice by default) in
the corpus's own tokenizer, so the importance scores and the distilled contexts never see the test
distribution (the paper's proxy is a separate public data set, WebNLG)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from paperline.data.text_corpus import encode, load_corpus, read_slice


@dataclass(frozen=True)
class Windows:
    x: torch.Tensor  # (N, T) int64 inputs
    y: torch.Tensor  # (N, T) int64 next-token targets

    def __len__(self) -> int:
        return len(self.x)


def cut_windows(tokens: np.ndarray, block_size: int) -> Windows:
    """Consecutive non-overlapping windows (the stream's order kept)."""
    n = (len(tokens) - 1) // block_size
    if n < 1:
        raise ValueError(f"{len(tokens)} tokens: fewer than one window of {block_size}")
    idx = np.arange(n)[:, None] * block_size + np.arange(block_size + 1)[None, :]
    w = torch.from_numpy(np.asarray(tokens, dtype=np.int64)[idx])
    return Windows(w[:, :-1].contiguous(), w[:, 1:].contiguous())


def dirichlet_split(families: np.ndarray, clients: int, alpha: float, seed: int) -> list[np.ndarray]:
    """Indices per client: each family's members shared among the clients by proportions drawn
    from Dirichlet(α) (the usual label-skew split); a client left empty takes one item from the
    largest client, so every client trains."""
    rng = np.random.default_rng(seed)
    shards: list[list[int]] = [[] for _ in range(clients)]
    for f in np.unique(families):
        members = rng.permutation(np.flatnonzero(families == f))
        cuts = (np.cumsum(rng.dirichlet(np.full(clients, alpha))) * len(members)).astype(int)[:-1]
        for c, part in enumerate(np.split(members, cuts)):
            shards[c] += part.tolist()
    for c in range(clients):
        if not shards[c]:
            donor = max(range(clients), key=lambda i: len(shards[i]))
            shards[c].append(shards[donor].pop())
    return [np.sort(np.asarray(s, dtype=np.int64)) for s in shards]


def subsample_shards(shards: list[np.ndarray], fraction: float, seed: int) -> list[np.ndarray]:
    """Each shard's seeded share `fraction` of its indices (rounded, at least one), sorted: the
    shards' sizes keep their proportions, so their skew and weights D_i stay the split's."""
    rng = np.random.default_rng([seed, 41])
    return [np.sort(rng.choice(s, size=max(1, round(fraction * len(s))), replace=False)) for s in shards]


@dataclass(frozen=True)
class FederatedData:
    clients: list[Windows]
    families: list[np.ndarray]  # per client: how many of its windows come from each family
    proxy: Windows
    test: Windows
    vocab_size: int


@lru_cache(maxsize=2)  # every seed's and α's data share it; a ClientApp process encodes it once
def proxy_set(folder: str, tokenizer_path: str, block_size: int, windows: int) -> Windows:
    """`windows` windows spread evenly over the whole text of `folder` (read_slice: every file its
    SHA256SUMS lists, hash-checked), encoded with the tokenizer file; the same for every seed."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_path)
    stream = cut_windows(encode(tokenizer, read_slice(folder, speeches_per_document=1)), block_size)
    idx = np.unique(np.linspace(0, len(stream) - 1, num=min(windows, len(stream))).astype(np.int64))
    return Windows(stream.x[idx], stream.y[idx])


@lru_cache(maxsize=4)  # a ClientApp process reads its shard once per (corpus, split), not per message
def federated_data(corpus: str, block_size: int, clients: int, alpha: float, families: int, seed: int,
                   proxy_windows: int, eval_windows: int, proxy_text: str, shard_fraction: float = 1.0) -> FederatedData:
    c = load_corpus(corpus, block_size)
    train = cut_windows(c.train, block_size)
    if len(train) < clients:
        raise ValueError(f"{corpus}: {len(train)} training windows of {block_size} tokens for {clients} clients")
    # The training documents are stored play by play (corpus.json's train_documents, order kept),
    # so equal contiguous segments of the stream are mostly one play each: the non-IID "families".
    family = (np.arange(len(train)) * families) // len(train)
    shards = dirichlet_split(family, clients, alpha, seed)
    if shard_fraction < 1:
        shards = subsample_shards(shards, shard_fraction, seed)
    val = cut_windows(c.val, block_size)
    proxy = proxy_set(proxy_text, str(c.tokenizer_path), block_size, proxy_windows)
    test_idx = np.unique(np.linspace(0, len(val) - 1, num=min(eval_windows, len(val))).astype(np.int64))
    return FederatedData(
        clients=[Windows(train.x[s], train.y[s]) for s in shards],
        families=[np.bincount(family[s], minlength=families) for s in shards],
        proxy=proxy,
        test=Windows(val.x[test_idx], val.y[test_idx]),
        vocab_size=c.vocab_size)
