"""The TPA flow's data: the prepared Shakespeare corpus (a folder the text-corpus stage wrote) or a
real corpus as nanoGPT token files (`data.train_bin` + `data.val_bin` + `data.vocab_size`), checked
before any training: a missing, corrupt or mismatched file fails here, naming it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paperline.methods.tpa.config import TPAConfig


@dataclass(frozen=True)
class TokenData:
    """Where the token files are and their vocabulary (picklable, passed to the tasks). `version`
    is set by the flow from the files' contents."""

    train: str
    val: str
    vocab_size: int
    corpus_dir: str | None = None
    version: str = ""

    def files(self) -> list[Path]:
        """The inputs that make the data (what its version hashes)."""
        files = [Path(self.train), Path(self.val)]
        return files + ([Path(self.corpus_dir) / "tokenizer.json"] if self.corpus_dir else [])

    def tokens(self, block: int):
        """(train, val) token memmaps."""
        from paperline.data.tokens import open_tokens

        return open_tokens(self.train, self.vocab_size, block), open_tokens(self.val, self.vocab_size, block)


def open_data(cfg: TPAConfig) -> TokenData:
    """The token files `cfg.data` names, checked (size, length, ids against the vocabulary; a
    corpus folder's tokenizer against its metadata)."""
    block = cfg.train.block_size
    if cfg.data.train_bin:
        assert cfg.data.val_bin is not None and cfg.data.vocab_size is not None  # given together (validator)
        data = TokenData(cfg.data.train_bin, cfg.data.val_bin, cfg.data.vocab_size)
        data.tokens(block)
        return data
    from paperline.data.text_corpus import load_corpus

    folder = Path(cfg.data.corpus_dir)
    corpus = load_corpus(folder, block)
    return TokenData(str(folder / "train.bin"), str(folder / "val.bin"), corpus.vocab_size, str(folder))
