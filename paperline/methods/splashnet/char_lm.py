"""A character n-gram language model over emg2qwerty's labels, for CTC beam search.

emg2qwerty decodes with a 6-gram character KenLM trained on WikiText-103; KenLM has no offline
wheel, so this is the same kind of model written out: interpolated absolute discounting
(Kneser-Ney's discount without its continuation counts), backing off to a uniform distribution
over the charset, so every label has a probability. It is trained on a text other than the one
the typed prompts come from (the report says which), so it never saw the test prompts.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Sequence

from paperline.data.emg2qwerty import NUM_CLASSES, labels_of_text
from paperline.io import atomic_path


def read_lm_text(path: str | Path, vocabulary: str | None = None) -> str:
    """The LM's training text: a file, or every *.txt of a folder in name order. With
    `vocabulary` (generated sessions type only those characters) it is lower-cased and filtered
    as the generator filters its corpus."""
    path = Path(path)
    files = sorted(path.glob("*.txt")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise FileNotFoundError(f"{path}: no LM corpus (a text file or a folder of .txt files)")
    if vocabulary is not None:
        from paperline.data.semg_synth import load_corpus

        return " ".join(load_corpus(f, vocabulary, check_hash=False) for f in files)
    return " ".join(" ".join(f.read_text(encoding="utf-8").split()) for f in files)


class CharNgramLM:
    def __init__(self, order: int, discount: float, counts: dict[tuple[int, ...], Counter]):
        if order < 1:
            raise ValueError(f"n-gram order {order}: must be at least 1")
        if not 0 < discount < 1:
            raise ValueError(f"discount {discount}: must be in (0, 1)")
        self.order, self.discount, self.counts = order, discount, counts
        self._totals = {h: sum(c.values()) for h, c in counts.items()}
        self._cache: dict[tuple[tuple[int, ...], int], float] = {}

    @classmethod
    def train(cls, text: str, order: int = 4, discount: float = 0.75) -> "CharNgramLM":
        """Counts of every context of length 0..order−1 followed by a label, over `text`."""
        labels = labels_of_text(text)
        counts: dict[tuple[int, ...], Counter] = {}
        for n in range(order):  # n-grams of length n + 1, counted in C by zip over shifted copies
            for gram, count in Counter(zip(*(labels[k:] for k in range(n + 1)))).items():
                counts.setdefault(gram[:-1], Counter())[gram[-1]] = count
        return cls(order, discount, counts)

    def prob(self, context: Sequence[int], label: int) -> float:
        """P(label | the last order−1 labels of context)."""
        context = tuple(context[len(context) - (self.order - 1):]) if self.order > 1 else ()
        key = (context, label)
        if key not in self._cache:
            self._cache[key] = self._interpolated(context, label)
        return self._cache[key]

    def log_prob(self, context: Sequence[int], label: int) -> float:
        return math.log(self.prob(context, label))

    def _interpolated(self, context: tuple[int, ...], label: int) -> float:
        lower = 1.0 / NUM_CLASSES if not context else self.prob(context[1:], label)
        counts = self.counts.get(context)
        if not counts:
            return lower
        total = self._totals[context]
        seen = max(counts.get(label, 0) - self.discount, 0.0) / total
        return seen + self.discount * len(counts) / total * lower  # the discounted mass, spread by the lower order

    def save(self, path: str | Path) -> Path:
        rows = [[list(h), dict(c)] for h, c in self.counts.items()]
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps({"order": self.order, "discount": self.discount, "counts": rows}))
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> "CharNgramLM":
        data = json.loads(Path(path).read_text())
        counts = {tuple(h): Counter({int(k): v for k, v in c.items()}) for h, c in data["counts"]}
        return cls(data["order"], data["discount"], counts)
