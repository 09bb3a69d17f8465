"""C4 (Raffel et al. 2020) as the GaLore / SUMO pretraining protocol reads it, from files on disk.

Format: the `allenai/c4` "en" release — shards `c4-train.NNNNN-of-01024.json.gz` and
`c4-validation.NNNNN-of-00008.json.gz` (plain `.json` also read), one JSON object a line with
"text", "timestamp" and "url". Point `c4_dir` at the folder holding them (any subset of shards).

Tokenization as GaLore's: each document on its own, truncated to `max_length` tokens (special
tokens the tokenizer's post-processor adds, e.g. T5's closing </s>, included) and right-padded to
`max_length`; pad targets are ignored by the loss. The tokenizer is a `tokenizer.json` file read by
the `tokenizers` library (GaLore uses t5-base's; its tokenizer.json works as it is).

Training order: shard order and a shuffle buffer drawn from a seed (as GaLore's streaming
`shuffle(seed=42)`), so a resumed run replays the same stream and skips what it already used.
"""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Iterator

import torch

from paperline.io import DataError

C4_SPLITS = ("train", "validation")


def c4_shards(c4_dir: str | Path, split: str) -> list[Path]:
    if split not in C4_SPLITS:
        raise ValueError(f"C4 split {split!r}: expected one of {C4_SPLITS}")
    c4_dir = Path(c4_dir)
    if not c4_dir.is_dir():
        raise FileNotFoundError(f"{c4_dir}: no such C4 folder (expected c4-{split}.*.json.gz shards in it)")
    shards = sorted(p for p in c4_dir.iterdir()
                    if p.name.startswith(f"c4-{split}.") and p.name.endswith((".json.gz", ".json")))
    if not shards:
        raise FileNotFoundError(f"{c4_dir}: no c4-{split}.*.json.gz shards (the allenai/c4 'en' layout)")
    return shards


def read_documents(shard: Path) -> Iterator[str]:
    """The "text" of each line of one shard; a malformed line is an error naming file and line."""
    opener = gzip.open if shard.name.endswith(".gz") else open
    lineno = 0
    try:
        with opener(shard, "rt", encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    text = json.loads(line)["text"]
                except (json.JSONDecodeError, KeyError, TypeError) as err:
                    raise DataError(f"{shard}: line {lineno}: expected a JSON object with a \"text\" field "
                                    f"({type(err).__name__}: {err})") from None
                if not isinstance(text, str):
                    raise DataError(f"{shard}: line {lineno}: \"text\" is not a string")
                yield text
    except (OSError, EOFError, UnicodeDecodeError) as err:  # not gzip, cut short, or not UTF-8 text
        raise DataError(f"{shard}: line {lineno + 1}: not a readable C4 shard ({type(err).__name__}: {err})") from None


def check_shards(shards: list[Path]) -> None:
    """Read the first document of each shard: a file that is not a C4 shard fails before any training
    (a multi-GB shard cut short at its end is only found when the stream reaches it)."""
    for shard in shards:
        if next(read_documents(shard), None) is None:
            raise DataError(f"{shard}: holds no documents")


def shuffled_documents(shards: list[Path], seed: int, buffer_size: int) -> Iterator[str]:
    """Documents in a seeded order: shards shuffled, then a buffer shuffle (reservoir-style)."""
    rng = random.Random(seed)
    order = list(shards)
    rng.shuffle(order)
    buffer: list[str] = []
    for shard in order:
        for text in read_documents(shard):
            if len(buffer) < buffer_size:
                buffer.append(text)
                continue
            i = rng.randrange(buffer_size)
            yield buffer[i]
            buffer[i] = text
    rng.shuffle(buffer)
    yield from buffer


class C4Tokenizer:
    """A tokenizer.json file, set to truncate and right-pad to max_length."""

    def __init__(self, path: str | Path, max_length: int, pad_token: str = "<pad>", vocab_size: int | None = None):
        from tokenizers import Tokenizer

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such tokenizer file (a tokenizer.json, e.g. t5-base's)")
        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except Exception as err:
            raise DataError(f"{path}: not a tokenizer.json the tokenizers library reads ({err})") from None
        pad_id = self.tokenizer.token_to_id(pad_token)
        if pad_id is None:
            raise DataError(f"{path}: has no pad token {pad_token!r}")
        self.pad_id: int = pad_id
        if vocab_size is not None and self.pad_id >= vocab_size:
            raise DataError(f"{path}: pad id {self.pad_id} is outside the model's vocabulary of {vocab_size}")
        self.path, self.max_length, self.vocab_size = path, max_length, vocab_size
        self.tokenizer.enable_truncation(max_length)
        self.tokenizer.enable_padding(length=max_length, pad_id=self.pad_id, pad_token=pad_token)

    def __call__(self, texts: list[str]) -> torch.Tensor:
        """(len(texts), max_length) int64 token ids."""
        ids = torch.tensor([e.ids for e in self.tokenizer.encode_batch(texts)], dtype=torch.int64)
        if self.vocab_size is not None and ids.numel() and int(ids.max()) >= self.vocab_size:
            raise DataError(f"{self.path}: produced token id {int(ids.max())}, outside the model's vocabulary "
                            f"of {self.vocab_size}")
        return ids


def train_batches(c4_dir: str | Path, tokenizer: C4Tokenizer, batch_size: int, seed: int, buffer_size: int,
                  skip_batches: int = 0) -> Iterator[torch.Tensor]:
    """Endless (batch_size, max_length) batches from the training shards (a new pass over them,
    with a new order, when they run out); the first `skip_batches` are skipped untokenized."""
    shards = c4_shards(c4_dir, "train")
    to_skip = skip_batches * batch_size
    epoch = 0
    while True:
        batch: list[str] = []
        empty = True
        for text in shuffled_documents(shards, seed + epoch, buffer_size):
            empty = False
            if to_skip:
                to_skip -= 1
                continue
            batch.append(text)
            if len(batch) == batch_size:
                yield tokenizer(batch)
                batch = []
        if empty:
            raise DataError(f"{c4_dir}: the training shards hold no documents")
        epoch += 1


def validation_batches(c4_dir: str | Path, tokenizer: C4Tokenizer, batch_size: int, max_tokens: int,
                       seed: int = 42) -> Iterator[torch.Tensor]:
    """Validation batches until `max_tokens` non-pad tokens were given (GaLore: 10M, shuffle seed 42)."""
    seen = 0
    batch: list[str] = []
    for text in shuffled_documents(c4_shards(c4_dir, "validation"), seed, buffer_size=1000):
        batch.append(text)
        if len(batch) == batch_size:
            tokens = tokenizer(batch)
            yield tokens
            seen += int((tokens != tokenizer.pad_id).sum())
            batch = []
            if seen >= max_tokens:
                return
    if batch:
        yield tokenizer(batch)


def write_c4_shard(path: str | Path, texts: list[str]) -> Path:
    """Write texts in the C4 shard format (tests; a sample of one's own text for a try-out)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for i, text in enumerate(texts):
            fh.write(json.dumps({"text": text, "timestamp": "2019-04-25T12:57:54Z",
                                 "url": f"https://example.org/{i}"}) + "\n")
    return path


def write_word_level_tokenizer(path: str | Path, texts: list[str]) -> Path:
    """A word-level tokenizer.json trained on `texts`, with T5's specials (<pad> 0, </s> 1,
    <unk> 2) and </s> appended to every document (tests; a try-out without t5-base's file)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["<pad>", "</s>", "<unk>"]))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path
