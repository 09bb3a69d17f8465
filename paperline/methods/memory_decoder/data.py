"""The Memory Decoder flow's two corpora in one tokenizer: the general corpus (a folder the
text-corpus stage wrote) and the domain corpus (generated long-tail facts, or a UTF-8 text file),
encoded with the general corpus's tokenizer. `check_corpora` reads both (a missing, corrupt or
mismatched corpus, or a domain too short for a window, fails there, naming the file) before the
run starts; `write_domain_corpus` writes the domain token files into the run's folder."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paperline.methods.memory_decoder.config import MemoryDecoderConfig


@dataclass(frozen=True)
class MemDecData:
    """Where the two corpora are (picklable, passed to the tasks): the general corpus folder, the
    folder the domain token files go to, the vocabulary; `sources`: the domain text file read, if
    any. `version` is set by the flow from the inputs' contents."""

    general_dir: str
    domain_dir: str
    vocab_size: int
    sources: tuple[str, ...] = ()
    version: str = ""

    def files(self) -> list[Path]:
        """The inputs the corpora are made from (what their version hashes); a generated domain is
        made from the parameters and the general corpus's tokenizer."""
        general = Path(self.general_dir)
        return [general / "train.bin", general / "val.bin", general / "tokenizer.json", *map(Path, self.sources)]


def _domain_splits(cfg: MemoryDecoderConfig, tokenizer):
    """(train, val) of the domain in the general tokenizer: generated facts, or the text file."""
    from paperline.data.text_corpus import CorpusError
    from paperline.methods.memory_decoder.corpora import generate_domain, read_domain_text

    if cfg.domain.text:
        train, val = read_domain_text(cfg.domain.text, tokenizer, cfg.domain.val_fraction)
    else:
        train, val, _ = generate_domain(cfg.domain, tokenizer)
    for name, split in (("training", train), ("held-out", val)):
        if len(split.tokens) <= cfg.block_size + 1:
            raise CorpusError(f"{cfg.domain.text or 'the generated domain'}: its {name} part has {len(split.tokens)} "
                              f"tokens, fewer than block_size + 2 = {cfg.block_size + 2}")
    return train, val


def check_corpora(cfg: MemoryDecoderConfig, domain_dir: str | Path) -> MemDecData:
    """Both corpora read and checked; nothing written."""
    from paperline.data.text_corpus import load_corpus

    general = load_corpus(cfg.general_corpus_dir, cfg.block_size)
    _domain_splits(cfg, general.tokenizer())
    return MemDecData(cfg.general_corpus_dir, str(domain_dir), general.vocab_size,
                      (cfg.domain.text,) if cfg.domain.text else ())


def write_domain_corpus(cfg: MemoryDecoderConfig, data: MemDecData) -> Path:
    """The domain corpus encoded with the general tokenizer into `data.domain_dir` (token files and
    the fact masks), read back as the tasks read it."""
    from paperline.data.text_corpus import load_corpus
    from paperline.methods.memory_decoder.corpora import load_domain, write_domain

    train, val = _domain_splits(cfg, load_corpus(data.general_dir, cfg.block_size).tokenizer())
    write_domain(data.domain_dir, train, val)
    load_domain(data.domain_dir, data.vocab_size, cfg.block_size)
    return Path(data.domain_dir)
