"""The `tulu-pool` stage: a selection pool and target sets, all in the Tulu V2 format.

Layout written (atomically, one folder):

    <out>/pool.jsonl                    the source pool S
    <out>/targets/<name>.target.jsonl   each target set T (what influence is computed against)
    <out>/targets/<name>.eval.jsonl     its held-out evaluation split
    <out>/manifest.json                 counts per `dataset`, skip statistics, the config

Two sources:

- ``embedded`` (offline default, a few thousand samples). A pool mixing several `reasoning-gym`
  task families (each its own `dataset` value; gsm_symbolic is the GSM8K-like one), human
  conversations from `chitchat-dataset`, generated span-extraction and multiple-choice samples
  (spec §e's SQuAD-like and MMLU-like sub-datasets) and off-topic prose. The targets are
  GSM8K-like (gsm_symbolic under another seed, chain-of-thought answers ending `#### N`),
  SQuAD-like (answer = a span of the context) and MMLU-like (four options, answer = a letter),
  drawn from the same generators with other seeds. Only about a fifth of the pool matches any one
  target: that is what makes selection matter.
- ``tulu_file``: the real Tulu V2 mixture by path, streamed twice (count the valid lines, then
  write a uniform sample of `pool_size` of them: the paper's 200k of 5.8M) and target sets from
  `target_dir` (<name>.target.jsonl and <name>.eval.jsonl, validated and copied).
"""
from __future__ import annotations

import random
import shutil
from bisect import bisect_left
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from paperline.config import StrictModel
from paperline.data.chunks import ChunkMap, map_serially
from paperline.data.tulu import (
    LineRange,
    SkipStats,
    TuluRecord,
    iter_tulu_jsonl,
    line_ranges,
    read_tulu_jsonl,
    write_tulu_jsonl,
)
from paperline.io import DataError, atomic_dir, write_json

PositiveInt = Annotated[int, Field(ge=1)]
TARGETS = ("gsm8k_like", "squad_like", "mmlu_like")
# reasoning-gym families in the embedded pool besides gsm_symbolic (all answer with a string)
RG_FAMILIES = ("basic_arithmetic", "chain_sum", "leg_counting", "letter_counting", "spell_backward",
               "family_relationships")
# share of the embedded pool per sub-dataset (normalised); the three target-like ones are 1/2 of it
POOL_MIX = {"gsm_symbolic": 2.0, "span_extraction": 2.0, "multiple_choice_facts": 2.0,
            **{name: 0.5 for name in RG_FAMILIES}, "chitchat": 1.5, "off_topic": 1.5}


class TuluPoolConfig(StrictModel):
    source: Literal["embedded", "tulu_file"] = "embedded"
    tulu_path: str | None = None  # tulu_file: the Tulu V2 JSONL (e.g. tulu_v2_unfiltered.jsonl)
    target_dir: str | None = None  # tulu_file: <name>.target.jsonl / <name>.eval.jsonl per target
    targets: list[str] = Field(default=list(TARGETS), min_length=1)
    pool_size: PositiveInt = 3000
    target_size: PositiveInt = 32  # examples per target set
    eval_size: PositiveInt = 64  # held-out examples per target
    skip_invalid: bool = False
    seed: int = 0

    @model_validator(mode="after")
    def _consistent(self) -> "TuluPoolConfig":
        if self.source == "tulu_file" and not (self.tulu_path and self.target_dir):
            raise ValueError("source tulu_file needs tulu_path and target_dir")
        if self.source == "embedded":
            unknown = sorted(set(self.targets) - set(TARGETS))
            if unknown:
                raise ValueError(f"targets {unknown}: the embedded pool has {', '.join(TARGETS)}")
        return self


# ----------------------------------------------------------------------------- generators
def _chat(dataset: str, index: int, user: str, assistant: str) -> TuluRecord:
    return TuluRecord(dataset, f"{dataset}_{index}", ({"role": "user", "content": user},
                                                      {"role": "assistant", "content": assistant}))


def reasoning_gym_records(family: str, n: int, seed: int) -> list[TuluRecord]:
    import reasoning_gym as rg

    out = []
    for i, item in enumerate(rg.create_dataset(family, size=n, seed=seed)):
        answer = item["metadata"].get("answer_cot") if family == "gsm_symbolic" else item["answer"]
        out.append(_chat(family, i, item["question"], str(answer)))
    return out


def chitchat_records(n: int, seed: int, max_turns: int = 4) -> list[TuluRecord]:
    """chitchat-dataset conversations: a sender's consecutive messages are one turn; turns alternate
    user / assistant from the first speaker; cut after `max_turns` turns, ending on an assistant."""
    import chitchat_dataset as ccc

    data = ccc.Dataset()
    keys = sorted(data)
    random.Random(seed).shuffle(keys)
    out = []
    for key in keys:
        turns = [" ".join(m["text"].strip() for m in group if m["text"].strip()) for group in data[key]["messages"]]
        turns = [t for t in turns if t][:max_turns]
        if len(turns) % 2:
            turns = turns[:-1]
        if len(turns) < 2:
            continue
        messages = tuple({"role": "user" if j % 2 == 0 else "assistant", "content": t} for j, t in enumerate(turns))
        out.append(TuluRecord("chitchat", f"chitchat_{key}", messages))
        if len(out) == n:
            break
    return out


_FIRST = "Mara Tomas Ines Oskar Lena Ravi Yuki Amara Pavel Sofia Idris Nora Kofi Elif Bruno Hana".split()
_LAST = "Lindqvist Okafor Moreau Tanaka Petrov Silva Haddad Novak Brennan Castillo Varga Osei".split()
_CITIES = "Oslo Lagos Lyon Kyoto Porto Cairo Quito Hanoi Perth Tartu Accra Leeds Cusco Turku".split()
_JOBS = ["a chemist", "a baker", "a pilot", "a violinist", "an architect", "a nurse", "a geologist",
         "a teacher", "a carpenter", "a lawyer", "a sculptor", "an engineer"]


def span_extraction_records(dataset: str, n: int, seed: int) -> list[TuluRecord]:
    """SQuAD-like: a context of 2–3 biographical sentences, a question, the answer a span of it."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        people = []
        for _ in range(rng.randint(2, 3)):
            people.append((f"{rng.choice(_FIRST)} {rng.choice(_LAST)}", rng.choice(_CITIES),
                           str(rng.randint(1900, 2005)), rng.choice(_JOBS)))
        context = " ".join(f"{name} was born in {city} in {year} and worked as {job}."
                           for name, city, year, job in people)
        name, city, year, job = rng.choice(people)
        question, answer = rng.choice([(f"Where was {name} born?", city),
                                       (f"In which year was {name} born?", year),
                                       (f"What did {name} work as?", job)])
        user = f"Read the passage and answer with a span from it.\n\nPassage: {context}\n\nQuestion: {question}"
        out.append(_chat(dataset, i, user, answer))
    return out


_FACTS = [  # (question, correct answer, pool of distractors)
    *[(f"What is the capital of {c}?", cap, "Paris Madrid Rome Berlin Vienna Lisbon Athens Oslo Cairo Lima".split())
      for c, cap in [("France", "Paris"), ("Spain", "Madrid"), ("Italy", "Rome"), ("Germany", "Berlin"),
                     ("Austria", "Vienna"), ("Portugal", "Lisbon"), ("Greece", "Athens"), ("Norway", "Oslo"),
                     ("Egypt", "Cairo"), ("Peru", "Lima")]],
    *[(f"What is the chemical symbol of {e}?", s, "O H C N Fe Na K Au Ag Cu".split())
      for e, s in [("oxygen", "O"), ("hydrogen", "H"), ("carbon", "C"), ("nitrogen", "N"), ("iron", "Fe"),
                   ("sodium", "Na"), ("potassium", "K"), ("gold", "Au"), ("silver", "Ag"), ("copper", "Cu")]],
    *[(f"How many legs does a {a} have?", str(k), ["0", "2", "4", "6", "8"])
      for a, k in [("spider", 8), ("ant", 6), ("dog", 4), ("bird", 2), ("snake", 0), ("cat", 4),
                   ("beetle", 6), ("duck", 2)]],
]


def multiple_choice_records(dataset: str, n: int, seed: int) -> list[TuluRecord]:
    """MMLU-like: a question, four lettered options (one correct), the answer a single letter."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if rng.random() < 0.4:  # arithmetic items: unbounded, so targets are not all seen in the pool
            a, b = rng.randint(2, 12), rng.randint(2, 12)
            question, correct = f"What is {a} times {b}?", str(a * b)
            distractors = [str(a * b + d) for d in (-b, b, -1, 1, a, -a) if a * b + d != a * b]
        else:
            question, correct, pool = rng.choice(_FACTS)
            distractors = [d for d in pool if d != correct]
        options = rng.sample(sorted(set(distractors)), 3) + [correct]
        rng.shuffle(options)
        letter = "ABCD"[options.index(correct)]
        user = (f"Question: {question}\n" + "\n".join(f"{l}. {o}" for l, o in zip("ABCD", options))
                + "\nAnswer with the letter of the correct option.")
        out.append(_chat(dataset, i, user, letter))
    return out


_TOPICS = {
    "gardening": "soil compost tomatoes seedlings watering mulch roses pruning spring sunlight".split(),
    "weather": "clouds rain wind forecast humidity storm breeze frost sunshine temperature".split(),
    "cooking": "onions garlic simmer oven butter flour spices sauce roast pepper".split(),
    "travel": "train luggage museum harbour passport hostel map ferry market mountains".split(),
}


def off_topic_records(n: int, seed: int) -> list[TuluRecord]:
    """Off-topic prose: a request about a topic and a few loosely connected sentences about it."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        topic = rng.choice(sorted(_TOPICS))
        words = _TOPICS[topic]
        sentences = [f"The {rng.choice(words)} and the {rng.choice(words)} are {rng.choice(['nice', 'early', 'quiet', 'busy', 'late'])} "
                     f"this {rng.choice(['morning', 'week', 'season', 'evening'])}." for _ in range(rng.randint(2, 4))]
        out.append(_chat("off_topic", i, f"Tell me something about {topic}.", " ".join(sentences)))
    return out


def embedded_pool(cfg: TuluPoolConfig, map_chunks: ChunkMap = map_serially) -> list[TuluRecord]:
    """The embedded pool: each sub-dataset drawn from its own generator and seed (a chunk of
    sub-datasets per `map_chunks` call), then shuffled together."""
    total = sum(POOL_MIX.values())
    counts = {name: max(1, round(cfg.pool_size * share / total)) for name, share in POOL_MIX.items()}
    counts["off_topic"] += cfg.pool_size - sum(counts.values())  # rounding remainder
    order = ("gsm_symbolic", *RG_FAMILIES, "span_extraction", "multiple_choice_facts", "chitchat", "off_topic")
    records = map_chunks(sub_dataset_records, [(name, counts[name]) for name in order], seed=cfg.seed)
    random.Random(cfg.seed).shuffle(records)
    return records


def sub_dataset_records(parts: list[tuple[str, int]], seed: int) -> list[TuluRecord]:
    """The records of each (sub-dataset, count) of the embedded pool, in order."""
    records: list[TuluRecord] = []
    for name, n in parts:
        if name == "span_extraction":
            records += span_extraction_records(name, n, seed)
        elif name == "multiple_choice_facts":
            records += multiple_choice_records(name, n, seed)
        elif name == "chitchat":
            records += chitchat_records(n, seed)
        elif name == "off_topic":
            records += off_topic_records(n, seed)
        else:
            records += reasoning_gym_records(name, n, seed)
    return records


def embedded_target(name: str, n: int, seed: int) -> list[TuluRecord]:
    if name == "gsm8k_like":
        # other seeds than the pool's: the same templates with other numbers and names
        recs = reasoning_gym_records("gsm_symbolic", n, seed)
        return [TuluRecord(name, f"{name}_{i}", r.messages) for i, r in enumerate(recs)]
    if name == "squad_like":
        return span_extraction_records(name, n, seed)
    return multiple_choice_records(name, n, seed)


# ----------------------------------------------------------------------------- the real file
RANGE_BYTES = 64 << 20  # the Tulu file is read in ranges of whole lines this long, a chunk item each


def count_valid_lines(ranges: list[LineRange], path: str, skip_invalid: bool) -> list[int]:
    """Pass 1: the valid records of each range (strict: the first bad line raises, naming it)."""
    return [sum(1 for _ in iter_tulu_jsonl(path, skip_invalid, SkipStats(), lines)) for lines in ranges]


def write_sampled_lines(jobs: list[tuple[LineRange, list[int], str]], path: str,
                        skip_invalid: bool) -> list[tuple[int, SkipStats]]:
    """Pass 2: per (range, the range's chosen valid-record indices, part file), those records
    written to the part file (validated again on writing); the count and the range's skip stats."""
    out = []
    for lines, chosen, part in jobs:
        stats, wanted = SkipStats(), set(chosen)
        records = (r for i, r in enumerate(iter_tulu_jsonl(path, skip_invalid, stats, lines)) if i in wanted)
        out.append((write_tulu_jsonl(part, records), stats))
    return out


def sample_tulu_file(path: str | Path, size: int, seed: int, skip_invalid: bool, out: Path,
                     map_chunks: ChunkMap = map_serially) -> tuple[int, SkipStats]:
    """A uniform sample of `size` valid lines, in file order, into `out`: two streaming passes over
    the file's line ranges (never the whole file in memory), each range's work a chunk item."""
    path = str(path)
    ranges = line_ranges(path, RANGE_BYTES)
    valid = map_chunks(count_valid_lines, ranges, path=path, skip_invalid=skip_invalid)
    if sum(valid) < size:
        raise DataError(f"{path}: {sum(valid)} valid records, fewer than pool_size {size}")
    chosen = sorted(random.Random(seed).sample(range(sum(valid)), size))
    parts, jobs, offset = out.parent / f".{out.name}.parts", [], 0
    parts.mkdir()
    for i, (lines, count) in enumerate(zip(ranges, valid)):
        mine = [c - offset for c in chosen[bisect_left(chosen, offset):bisect_left(chosen, offset + count)]]
        jobs.append((lines, mine, str(parts / f"{i:05d}.jsonl")))
        offset += count
    written = map_chunks(write_sampled_lines, jobs, path=path, skip_invalid=skip_invalid)
    with out.open("wb") as fh:
        for _, _, part in jobs:
            with open(part, "rb") as src:
                shutil.copyfileobj(src, fh)
    shutil.rmtree(parts)
    return sum(n for n, _ in written), SkipStats.merged(stats for _, stats in written)


def write_pool(cfg: TuluPoolConfig, out_dir: str | Path, root: str | Path = ".",
               map_chunks: ChunkMap = map_serially) -> dict[str, Any]:
    """Write the pool, the target sets and the manifest into `out_dir` (atomically); return the
    manifest. The pool's work is split into chunk items (sub-datasets, or ranges of the Tulu file)."""
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        (tmp / "targets").mkdir()
        if cfg.source == "embedded":
            pool = embedded_pool(cfg, map_chunks)
            stats = SkipStats(read=len(pool))
            n_pool = write_tulu_jsonl(tmp / "pool.jsonl", pool)
            for j, name in enumerate(cfg.targets):
                records = embedded_target(name, cfg.target_size + cfg.eval_size, cfg.seed + 1000 * (j + 1))
                write_tulu_jsonl(tmp / "targets" / f"{name}.target.jsonl", records[:cfg.target_size])
                write_tulu_jsonl(tmp / "targets" / f"{name}.eval.jsonl", records[cfg.target_size:])
        else:
            tulu = _resolve(cfg.tulu_path, root)
            n_pool, stats = sample_tulu_file(tulu, cfg.pool_size, cfg.seed, cfg.skip_invalid, tmp / "pool.jsonl",
                                             map_chunks)
            target_dir = _resolve(cfg.target_dir, root)
            for name in cfg.targets:
                for split in ("target", "eval"):
                    source = target_dir / f"{name}.{split}.jsonl"
                    read_tulu_jsonl(source)  # validate: a bad line names file, line and field
                    shutil.copyfile(source, tmp / "targets" / source.name)
        pool_counts = Counter(r.dataset for r in iter_tulu_jsonl(tmp / "pool.jsonl"))
        manifest = {"source": cfg.source, "pool_size": n_pool, "pool_datasets": dict(sorted(pool_counts.items())),
                    "targets": {name: {split: sum(1 for _ in iter_tulu_jsonl(tmp / "targets" / f"{name}.{split}.jsonl"))
                                       for split in ("target", "eval")} for name in cfg.targets},
                    "skipped": stats.summary(), "config": cfg.model_dump()}
        write_json(tmp / "manifest.json", manifest)
    return manifest


def _resolve(path: str | None, root: str | Path) -> Path:
    assert path is not None  # the config's validator requires tulu_path and target_dir for tulu_file
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(root) / p


def load_pool_dir(pool_dir: str | Path, targets: list[str] | None = None
                  ) -> tuple[list[TuluRecord], dict[str, list[TuluRecord]], dict[str, list[TuluRecord]]]:
    """(pool, target sets, eval splits) from a folder `write_pool` wrote."""
    pool_dir = Path(pool_dir)
    if not (pool_dir / "pool.jsonl").is_file():
        raise FileNotFoundError(f"{pool_dir}/pool.jsonl: no pool (run the tulu-pool stage: python -m flows run tulu-pool)")
    names = targets or sorted(p.name[:-len(".target.jsonl")] for p in (pool_dir / "targets").glob("*.target.jsonl"))
    pool = read_tulu_jsonl(pool_dir / "pool.jsonl")
    target_sets = {n: read_tulu_jsonl(pool_dir / "targets" / f"{n}.target.jsonl") for n in names}
    eval_sets = {n: read_tulu_jsonl(pool_dir / "targets" / f"{n}.eval.jsonl") for n in names}
    return pool, target_sets, eval_sets
