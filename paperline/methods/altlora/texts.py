"""The token streams of the LM adaptation, in the base model's own vocabulary.

The shared lm-base has no tokenizer of its own: it was trained on the text-corpus folder's, so the
target text is encoded with that tokenizer and the forgetting check reads the corpus's held-out
Shakespeare as it is. A paper profile's local transformers model (a Llama, say) has its own
vocabulary: when its folder holds a `tokenizer.json` (the file `tokenizers` and transformers save),
both texts are encoded with it instead, and the Shakespeare held out for the forgetting check is
a seeded share of the committed slice's speeches (`source_text`; the corpus folder, tokenized for
another vocabulary, is not read). A model folder without a tokenizer whose vocabulary differs
from the corpus's is refused, naming both paths."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paperline.data.local_tokenizer import encode_documents, read_tokenizer_json
from paperline.data.text_corpus import CorpusError, encode, load_corpus, read_slice, split_documents
from paperline.io import sha256_file
from paperline.methods.altlora.config import LMAdaptConfig

MODEL_TOKENIZER = "tokenizer.json"


@dataclass(frozen=True)
class LMTexts:
    target_train: np.ndarray
    target_val: np.ndarray
    source_val: np.ndarray  # held-out Shakespeare: what adaptation may make the model forget
    tokenizer: str  # the tokenizer.json that encoded them
    fingerprint: dict  # what the data version hashes


def lm_texts(lm: LMAdaptConfig, vocab_size: int | None, seed: int) -> LMTexts:
    """(target train, target held-out, Shakespeare held-out) in the model's vocabulary; whole
    chapters / speeches held out, seeded; `vocab_size` None (a config without one): no limit on the
    tokenizer. Errors name the file and the key."""
    target_train_docs, target_val_docs = split_documents(
        read_slice(lm.target_text, speeches_per_document=1), lm.val_fraction, seed)
    own = Path(lm.base) / MODEL_TOKENIZER
    if own.is_file():
        tokenizer = read_tokenizer_json(own, max_vocab=vocab_size, where="lm.base", error=CorpusError)
        _, source_val_docs = split_documents(read_slice(lm.source_text, speeches_per_document=1),
                                             lm.val_fraction, seed)
        train, val, source = (encode_documents(tokenizer, (d.text for d in docs))
                              for docs in (target_train_docs, target_val_docs, source_val_docs))
        return LMTexts(train, val, source, str(own),
                       {"tokenizer": sha256_file(own), "source": sha256_file(Path(lm.source_text) / "SHA256SUMS")})
    try:
        corpus = load_corpus(lm.corpus, lm.block_size, vocab_size)
    except CorpusError as err:
        raise CorpusError(f"{err} (lm.corpus; a model with its own vocabulary needs its {MODEL_TOKENIZER} in "
                          f"{lm.base})") from None
    tokenizer = corpus.tokenizer()
    return LMTexts(encode(tokenizer, target_train_docs), encode(tokenizer, target_val_docs), corpus.val,
                   str(corpus.tokenizer_path), {"corpus": corpus.meta.get("fingerprint")})
