"""The two corpora of one tokenizer (spec §e): the general one is the prepared Shakespeare corpus
(the text-corpus stage: its train split pretrains the base LMs, its val split measures general
perplexity); the domain one is encoded with that corpus's tokenizer and is either

- generated (the default): a seeded set of long-tail facts "<entity> <relation> <value>" — names
  made of random syllables, so no base LM can know them — each stated `train_repeats` times in
  varied Shakespeare-flavoured carrier sentences, the held-out text stating the same facts in other
  random contexts (a reconstruction of the spec's "entity_i rel_j → value_ij" design), or
- a UTF-8 text file by path (the `paper` profile's real domain corpus), split by position.

Each split is a flat uint16 token array (nanoGPT format) with a same-length mask of the value
tokens of facts (the tokens only retrieval can predict), empty for a text file."""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paperline.data.text_corpus import CorpusError, decode_text
from paperline.io import atomic_dir
from paperline.methods.memory_decoder.config import DomainConfig

SYLLABLES = ["bel", "mor", "qua", "dri", "sen", "tho", "vax", "lum", "cor", "pen", "zul", "ram", "ithe", "gar",
             "ost", "fen", "wyn", "kal", "dor", "mip", "sar", "tev", "ulm", "bro"]
RELATIONS = ["was born in", "keeps the keys of", "owes his fortune to", "is sworn to"]
CARRIERS = ["It is written in the chronicles that {fact}.", "Hear me, good friend: {fact}.",
            "Ask any man in the market and he will say {fact}.", "My lord, I swear by my troth {fact}.",
            "And so, as all the town doth know, {fact}.", "The old servant told me once that {fact}.",
            "Mark this, for it is true: {fact}.", "Even the children sing that {fact}."]
DOMAIN_FILES = ("train.bin", "val.bin", "train_facts.bin", "val_facts.bin")


@dataclass(frozen=True)
class Fact:
    entity: str
    relation: str
    value: str


@dataclass
class DomainSplit:
    tokens: np.ndarray  # uint16 token ids
    fact_mask: np.ndarray  # bool, True at the value tokens of a fact (all False for a text file)


def _name(rng: random.Random, used: set[str]) -> str:
    while True:
        name = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
        if name not in used:
            used.add(name)
            return name


def make_facts(cfg: DomainConfig) -> list[Fact]:
    """`entities × relations` facts, each with its own random value name."""
    rng = random.Random(cfg.seed)
    used: set[str] = set()
    relations = (RELATIONS * (cfg.relations // len(RELATIONS) + 1))[:cfg.relations]
    entities = [_name(rng, used) for _ in range(cfg.entities)]
    return [Fact(e, r, _name(rng, used)) for e in entities for r in relations]


def _encode_statements(tokenizer, facts: list[Fact], repeats: int, rng: random.Random) -> DomainSplit:
    """Each fact `repeats` times in shuffled order, each in a random carrier. The value is encoded
    as its own segment " <value>": the byte-level pre-tokenizer splits at that space, so the ids
    equal encoding the whole sentence, and the value's tokens are known exactly."""
    order = [f for f in facts for _ in range(repeats)]
    rng.shuffle(order)
    ids: list[int] = []
    mask: list[bool] = []
    for fact in order:
        before, after = rng.choice(CARRIERS).split("{fact}")
        for text, is_value in ((f"{before}{fact.entity} {fact.relation}", False), (f" {fact.value}", True),
                               (f"{after}\n", False)):
            piece = tokenizer.encode(text).ids
            ids += piece
            mask += [is_value] * len(piece)
    return DomainSplit(np.asarray(ids, dtype=np.uint16), np.asarray(mask, dtype=bool))


def generate_domain(cfg: DomainConfig, tokenizer) -> tuple[DomainSplit, DomainSplit, list[Fact]]:
    facts = make_facts(cfg)
    rng = random.Random(cfg.seed + 1)
    return (_encode_statements(tokenizer, facts, cfg.train_repeats, rng),
            _encode_statements(tokenizer, facts, cfg.val_repeats, rng), facts)


def read_domain_text(path: str | Path, tokenizer, val_fraction: float) -> tuple[DomainSplit, DomainSplit]:
    """A real domain corpus: one UTF-8 text file, the last `val_fraction` of its lines held out."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: no such domain text file")
    text = decode_text(path.read_bytes(), str(path))
    lines = text.splitlines(keepends=True)
    if len([ln for ln in lines if ln.strip()]) < 2:
        raise CorpusError(f"{path}: needs at least 2 non-empty lines of text (got {len(lines)})")
    cut = min(len(lines) - 1, max(1, round(len(lines) * (1 - val_fraction))))
    splits = []
    for part in (lines[:cut], lines[cut:]):
        ids = tokenizer.encode("".join(part)).ids
        if max(ids, default=0) >= 2 ** 16:
            raise CorpusError(f"{path}: token id {max(ids)} does not fit uint16 token files")
        splits.append(DomainSplit(np.asarray(ids, dtype=np.uint16), np.zeros(len(ids), dtype=bool)))
    return splits[0], splits[1]


def write_domain(out_dir: str | Path, train: DomainSplit, val: DomainSplit) -> Path:
    with atomic_dir(out_dir) as tmp:
        for name, split in (("train", train), ("val", val)):
            split.tokens.tofile(tmp / f"{name}.bin")
            split.fact_mask.astype(np.uint8).tofile(tmp / f"{name}_facts.bin")
    return Path(out_dir)


def load_domain(folder: str | Path, vocab_size: int, block_size: int) -> tuple[DomainSplit, DomainSplit]:
    from paperline.data.tokens import open_tokens

    folder = Path(folder)
    out = []
    for name in ("train", "val"):
        try:
            tokens = np.asarray(open_tokens(folder / f"{name}.bin", vocab_size, block_size))
        except (ValueError, FileNotFoundError) as err:
            raise CorpusError(str(err)) from None
        mask_path = folder / f"{name}_facts.bin"
        mask = np.fromfile(mask_path, dtype=np.uint8).astype(bool) if mask_path.is_file() else None
        if mask is None or len(mask) != len(tokens):
            raise CorpusError(f"{mask_path}: missing or not one flag per token of {folder / (name + '.bin')}")
        out.append(DomainSplit(tokens, mask))
    return out[0], out[1]
