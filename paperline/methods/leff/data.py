"""The federated data of the downstream task, play attribution: each window of `block_size`
tokens of the Shakespeare slice labelled with the play it comes from (a sequence-classification
task the pretrained LM never saw labels of; the paper fine-tunes on GLUE with a classification
head). Training windows come from the documents the corpus trained the LM on, test windows from
its held-out validation documents; the clients' shards are a Dirichlet(α) label skew over the
plays. The server's public proxy set is another corpus (`proxy_text`, a hash-checked folder of
*.txt: the King James slice by default), unlabelled, in the corpus's own tokenizer, so the
importance scores and the distilled contexts never see the task's text (the paper's proxy is a
separate public data set, WebNLG)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from paperline.data.text_corpus import encode, load_corpus, read_slice


@dataclass(frozen=True)
class Windows:
    x: torch.Tensor  # (N, T) int64 inputs
    y: torch.Tensor  # int64 targets: (N, T) next tokens (the proxy set) or (N,) class labels (the task)

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


def spread(n: int, k: int) -> np.ndarray:
    """At most `k` indices of range(n) spread evenly, the first and the last included (once each)."""
    return np.unique(np.linspace(0, n - 1, num=min(k, n)).astype(np.int64))


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
    clients: list[Windows]  # labelled windows
    families: list[np.ndarray]  # per client: how many of its windows come from each class (play)
    proxy: Windows  # unlabelled: next-token targets
    test: Windows  # labelled windows
    # labelled training windows held out from every client: the body lr's choice (lr_grid) is
    # scored on them, never on the test windows (those come from other documents)
    val: Windows
    vocab_size: int
    classes: tuple[str, ...]  # the plays, label i = classes[i]


@dataclass(frozen=True)
class LabelledSplit:
    train: Windows
    test: Windows
    classes: tuple[str, ...]


@lru_cache(maxsize=2)
def play_windows(corpus: str, task_text: str, speeches_per_document: int, block_size: int) -> LabelledSplit:
    """Play attribution: the documents of `task_text` (read_slice, cut `speeches_per_document`
    speeches a document, as the corpus stage cut them), each play's training documents (the
    corpus's `train_documents`) concatenated in the corpus's order and cut into windows labelled by
    the play, and its validation documents likewise for the test set, in the corpus's tokenizer.
    A document name the corpus lists but the text lacks (another cut, another slice) is an error."""
    from tokenizers import Tokenizer

    from paperline.data.text_corpus import CorpusError

    c = load_corpus(corpus, block_size)
    docs = {d.name: d for d in read_slice(task_text, speeches_per_document)}
    names = {split: c.meta[f"{split}_documents"] for split in ("train", "val")}
    missing = [n for split in names.values() for n in split if n not in docs]
    if missing:
        raise CorpusError(f"{task_text}: lacks the corpus's documents {missing[:3]} ({len(missing)} in all): not the "
                          f"text {corpus} was cut from, or not {speeches_per_document} speeches a document")
    classes = tuple(sorted({n.split("#")[0] for split in names.values() for n in split}))
    tokenizer = Tokenizer.from_file(str(c.tokenizer_path))

    def labelled(split: str) -> Windows:
        xs, ys, total = [], [], 0
        for label, play in enumerate(classes):
            played = [docs[n] for n in names[split] if n.split("#")[0] == play]
            tokens = encode(tokenizer, played) if played else np.zeros(0, dtype=np.uint16)
            total += len(tokens)
            n = len(tokens) // block_size
            if n:
                xs.append(torch.from_numpy(tokens[:n * block_size].astype(np.int64)).view(n, block_size))
                ys.append(torch.full((n,), label, dtype=torch.int64))
        if total != c.meta[f"{split}_tokens"]:  # the same names, cut otherwise
            raise CorpusError(f"{task_text}: its {split} documents hold {total} tokens, the corpus's "
                              f"{c.meta[f'{split}_tokens']}: not {speeches_per_document} speeches a document")
        if not xs:
            raise CorpusError(f"{corpus}: no document of {block_size} tokens")
        return Windows(torch.cat(xs), torch.cat(ys))

    return LabelledSplit(labelled("train"), labelled("val"), classes)


@lru_cache(maxsize=2)  # every seed's and α's data share it; a ClientApp process encodes it once
def proxy_set(folder: str, tokenizer_path: str, block_size: int, windows: int) -> Windows:
    """`windows` windows spread evenly over the whole text of `folder` (read_slice: every file its
    SHA256SUMS lists, hash-checked), encoded with the tokenizer file; the same for every seed."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_path)
    stream = cut_windows(encode(tokenizer, read_slice(folder, speeches_per_document=1)), block_size)
    idx = spread(len(stream), windows)
    return Windows(stream.x[idx], stream.y[idx])


@lru_cache(maxsize=4)  # a ClientApp process reads its shard once per (corpus, split), not per message
def federated_data(corpus: str, block_size: int, clients: int, alpha: float, seed: int, proxy_windows: int,
                   eval_windows: int, proxy_text: str, task_text: str, speeches_per_document: int,
                   shard_fraction: float = 1.0, val_windows: int = 1) -> FederatedData:
    task = play_windows(corpus, task_text, speeches_per_document, block_size)
    train = task.train
    # the validation windows spread over the training windows (stored play by play: each play keeps
    # its share), the same for every seed and α; the clients share the rest
    val_idx = spread(len(train), val_windows)
    pool = np.setdiff1d(np.arange(len(train)), val_idx)
    if len(pool) < clients:
        raise ValueError(f"{corpus}: {len(pool)} training windows of {block_size} tokens (besides {len(val_idx)} "
                         f"validation windows) for {clients} clients")
    labels = train.y.numpy()
    # label skew: each play's windows by Dirichlet(α), indices into the pool mapped back to train's
    shards = [pool[s] for s in dirichlet_split(labels[pool], clients, alpha, seed)]
    if shard_fraction < 1:
        shards = subsample_shards(shards, shard_fraction, seed)
    c = load_corpus(corpus, block_size)
    proxy = proxy_set(proxy_text, str(c.tokenizer_path), block_size, proxy_windows)
    test_idx = spread(len(task.test), eval_windows)  # the windows are play by play: every play keeps its share
    return FederatedData(
        clients=[Windows(train.x[s], train.y[s]) for s in shards],
        families=[np.bincount(labels[s], minlength=len(task.classes)) for s in shards],
        proxy=proxy,
        test=Windows(task.test.x[test_idx], task.test.y[test_idx]),
        val=Windows(train.x[val_idx], train.y[val_idx]),
        vocab_size=c.vocab_size,
        classes=task.classes)
