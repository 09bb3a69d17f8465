"""A local model's own tokenizer: a `tokenizers` tokenizer.json opened with an error naming the file,
and checked against the model's vocabulary.

Two uses: a paper profile's model folder that carries its tokenizer.json (a Llama, say: the
adaptation methods read their text through it), and the shared lm-base model, whose tokenizer is
the text-corpus folder's byte-level BPE (no special tokens of its own: a method that needs an eos or
a pad appends them after its vocabulary and grows the model's embedding to match).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import numpy as np

from paperline.io import DataError


def read_tokenizer_json(path: str | Path, *, max_vocab: int | None = None, where: str = "",
                        error: type[Exception] = DataError):
    """The `tokenizers.Tokenizer` in `path`; `error` names the file when it is missing or malformed,
    and (with `max_vocab`) when it has more tokens than the model's vocabulary (`where`: the key)."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception on a missing or malformed file
        raise error(f"{path}: not a tokenizers tokenizer.json ({err})") from None
    size = tokenizer.get_vocab_size()
    if max_vocab is not None and size > max_vocab:
        raise error(f"{path}: {size} tokens, more than the model's vocab_size {max_vocab}"
                    + (f" ({where})" if where else ""))
    return tokenizer


def encode_documents(tokenizer, texts: Iterable[str]) -> np.ndarray:
    """The texts' token ids, one stream, as int32: a real model's vocabulary (128k for Llama 3) does
    not fit the text-corpus folder's uint16 files."""
    return np.asarray([i for text in texts for i in tokenizer.encode(text).ids], dtype=np.int32)


def model_vocab_size(model_dir: str | Path, *, hint: str = "", where: str = "",
                     error: type[Exception] = DataError) -> int:
    """`vocab_size` of the transformers model folder `model_dir` (its config.json), without loading it;
    `error` names the file (`hint`: what makes it, `where`: the key)."""
    config = Path(model_dir) / "config.json"
    key = f" ({where})" if where else ""
    if not config.is_file():
        raise error(f"{config} missing" + (f" ({hint})" if hint else "") + key)
    try:
        return int(json.loads(config.read_text())["vocab_size"])
    except (ValueError, KeyError, TypeError) as err:
        raise error(f"{config}: no integer vocab_size ({err})" + key) from None


def shared_lm_tokenizer(model_dir: str | Path, tokenizer_path: str | Path, *, where: str = "",
                        error: type[Exception] = DataError):
    """The tokenizer of a model trained on it (the shared lm-base and the corpus's BPE): the model's
    vocabulary must be exactly the tokenizer's, else `error` names both files (`where`: the keys)."""
    vocab = model_vocab_size(model_dir, hint="run the lm-base stage: dvc repro lm-base", where=where, error=error)
    tokenizer = read_tokenizer_json(tokenizer_path, error=error)
    if tokenizer.get_vocab_size() != vocab:
        raise error(f"{Path(model_dir) / 'config.json'} has vocab_size {vocab} but {tokenizer_path} "
                    f"{tokenizer.get_vocab_size()} tokens: not this model's tokenizer"
                    + (f" ({where})" if where else ""))
    return tokenizer
