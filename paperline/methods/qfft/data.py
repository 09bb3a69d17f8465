"""QFFT's data: arithmetic problems from `reasoning-gym` (chain_sum), the base model's terse
short-CoT solutions, the long-CoT "teacher" responses with a reflective recheck, S1K/LIMO-style
JSONL by path, the noise-level-IV shuffle, and the encoding of an example for each variant:

    base / SFT:  <bos> question "\\n" response <eos>   loss on response + <eos>
    QFFT:        <bos> response                        loss on the response (no question, no template,
                                                       no end token: the official `qwen_qfft`)
    QFFT, `qfft_end: eos`: <bos> response <eos>        loss on the response + <eos>

Prompts at inference are `<bos> question "\\n"` for every model (the spec's pitfall: QFFT trains
without the question but is asked with it).
"""
from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from paperline.data.local_tokenizer import read_tokenizer_json
from paperline.io import DataError

IGNORE = -100


class QFFTDataError(DataError):
    """A malformed JSONL line; the message names the file, the line and the field."""


@dataclass(frozen=True)
class Problem:
    question: str  # what the model is asked, e.g. "37+45-12"
    answer: str  # the final answer, e.g. "70"
    terms: tuple[int, ...] = ()  # signed terms of a chain sum (empty for a real-data problem)


@dataclass(frozen=True)
class Example:
    """One fine-tuning pair: a question and the (long-CoT) response to train on."""

    question: str
    response: str
    answer: str = ""


# ---------------------------------------------------------------------------------------------
# the char-level tokenizer of the smoke models


class CharTokenizer:
    """Characters of arithmetic CoT text, plus <pad>=0, <bos>=1, <eos>=2. Unknown characters are
    an error (a model of this vocabulary could not read them)."""

    ALPHABET = string.digits + "+-=:,.!?() \n" + string.ascii_letters
    pad_id, bos_id, eos_id = 0, 1, 2

    def __init__(self):
        self.index = {c: i + 3 for i, c in enumerate(self.ALPHABET)}

    @property
    def vocab_size(self) -> int:
        return len(self.ALPHABET) + 3

    def encode(self, text: str) -> list[int]:
        try:
            return [self.index[c] for c in text]
        except KeyError as err:
            raise ValueError(f"character {err.args[0]!r} is not in the char tokenizer's alphabet") from None

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.ALPHABET[i - 3] for i in ids if i >= 3)

    def save(self, folder: str | Path) -> None:
        Path(folder, "char_tokenizer.json").write_text(json.dumps({"alphabet": self.ALPHABET}))


class HFTokenizer:
    """A `transformers` tokenizer (paper profile: the base model's own, from its directory)."""

    def __init__(self, path: str | Path):
        from transformers import AutoTokenizer

        from paperline.seeds import load_pretrained

        self.tok = load_pretrained(AutoTokenizer, path, local_files_only=True)
        self.eos_id = self.tok.eos_token_id
        self.bos_id = self.tok.bos_token_id
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.eos_id
        self.vocab_size = len(self.tok)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def save(self, folder: str | Path) -> None:
        self.tok.save_pretrained(folder)


class BPETokenizer:
    """The shared LM's byte-level BPE (a `tokenizers` tokenizer.json without special tokens) with
    <pad>, <bos>, <eos> appended after its vocabulary: `base_init: lm_base`. Any text encodes
    (byte-level); decoding drops the special tokens."""

    def __init__(self, path: str | Path):
        self.tok = read_tokenizer_json(path, error=QFFTDataError)
        self.bpe_size = self.tok.get_vocab_size()
        self.pad_id, self.bos_id, self.eos_id = self.bpe_size, self.bpe_size + 1, self.bpe_size + 2
        self.path = Path(path)

    @property
    def vocab_size(self) -> int:
        return self.bpe_size + 3

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode([i for i in ids if i < self.bpe_size])

    def save(self, folder: str | Path) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        self.tok.save(str(Path(folder) / "tokenizer.json"))
        Path(folder, "bpe_specials.json").write_text(json.dumps({"pad": self.pad_id, "bos": self.bos_id,
                                                                 "eos": self.eos_id}))


# ---------------------------------------------------------------------------------------------
# problems and responses (spec §e)


def chain_sum_problems(n: int, seed: int, min_terms: int, max_terms: int, max_digits: int) -> list[Problem]:
    """Seeded add/sub chains from reasoning-gym's `chain_sum` generator (its answer checked)."""
    import reasoning_gym as rg

    ds = rg.create_dataset("chain_sum", size=n, seed=seed, min_terms=min_terms, max_terms=max_terms,
                           min_digits=1, max_digits=max_digits)
    out = []
    for item in ds:
        parts = item["metadata"]["expression"].split()
        terms = [int(parts[0])] + [int(v) * (1 if op == "+" else -1) for op, v in zip(parts[1::2], parts[2::2])]
        if str(sum(terms)) != item["answer"]:
            raise ValueError(f"chain_sum: {item['metadata']['expression']} = {item['answer']} does not add up")
        out.append(Problem("".join(parts), item["answer"], tuple(terms)))
    return out


def _steps(terms: Sequence[int], slip: tuple[int, int] | None = None) -> tuple[str, int]:
    """'a+b=c c-d=e' left to right; `slip` = (step, offset) adds an error at that step that the
    following steps carry on (a consistent but wrong pass). Returns the text and its result."""
    total, parts = terms[0], []
    for i, t in enumerate(terms[1:]):
        new = total + t
        if slip is not None and slip[0] == i:
            new += slip[1]
        parts.append(f"{total}{'+' if t >= 0 else '-'}{abs(t)}={new}")
        total = new
    return " ".join(parts), total


def short_response(p: Problem) -> str:
    """The base model's terse step-by-step solution."""
    text, total = _steps(p.terms)
    return f"{text} A:{total}"


def long_response(p: Problem, rng: random.Random, slip_rate: float) -> str:
    """The long-CoT teacher's response. [I] reconstructed from spec §e: a first pass (with an
    injected slip at `slip_rate`), then "Wait, recheck:" and a correct step-by-step recheck that
    catches the slip, then the final answer — the R1 habit of reflecting before answering."""
    slip = None
    if rng.random() < slip_rate:
        slip = (rng.randrange(len(p.terms) - 1), rng.choice([-10, -2, -1, 1, 2, 10]))
    first, first_total = _steps(p.terms, slip)
    check, total = _steps(p.terms)
    verdict = "so the answer changes." if first_total != total else "it holds."
    return f"{first} Wait, recheck: {check} {verdict} A:{total}"


def first_pass_response(p: Problem, first_pass: str) -> str:
    """A long-CoT response whose first pass is the base model's own short-CoT answer `first_pass`
    (e.g. "3+4=7 7-2=5 A:5"): kept as it is where its final answer is right, else its steps (any
    "A:" part cut), then "Wait, recheck:", a correct step-by-step pass and the right answer. [I] the
    issue's reading of how R1-distilled data relate to a short-CoT base: the reflection appears
    where the base's own pass would go wrong."""
    first = first_pass.strip()
    steps, _, stated = first.partition(" A:")
    if stated.strip() == p.answer and steps:
        return first
    check, total = _steps(p.terms)
    return " ".join(filter(None, [steps.strip() or first, f"Wait, recheck: {check} so the answer changes. A:{total}"]))


def base_first_pass_examples(problems: Sequence[Problem], first_passes: Sequence[str]) -> list[Example]:
    if len(problems) != len(first_passes):
        raise ValueError(f"{len(first_passes)} first passes for {len(problems)} problems")
    return [Example(p.question, first_pass_response(p, f), p.answer) for p, f in zip(problems, first_passes)]


def teacher_examples(problems: Sequence[Problem], seed: int, slip_rate: float) -> list[Example]:
    rng = random.Random(seed)
    return [Example(p.question, long_response(p, rng, slip_rate), p.answer) for p in problems]


def base_examples(problems: Sequence[Problem]) -> list[Example]:
    return [Example(p.question, short_response(p), p.answer) for p in problems]


def shuffle_pairs(examples: Sequence[Example], seed: int) -> list[Example]:
    """Noise level IV: each question paired with another question's response (a derangement)."""
    n = len(examples)
    if n < 2:
        raise ValueError("noise level IV needs at least 2 examples to shuffle")
    perm = np.random.default_rng(seed).permutation(n)
    perm = np.where(perm == np.arange(n), np.roll(perm, 1), perm)  # no example keeps its own response
    return [Example(examples[i].question, examples[j].response, examples[j].answer) for i, j in zip(range(n), perm)]


# ---------------------------------------------------------------------------------------------
# real data: S1K / LIMO-style JSONL

# field names of the released files: LIMO (question/solution/answer), s1K-1.1
# (question/deepseek_thinking_trajectory + deepseek_attempt), LLaMA-Factory's S1_QFFT/LIMO_QFFT
# (instruction/input/output, the question left empty in the QFFT copies)
JSONL_FORMATS: dict[str, dict[str, Any]] = {
    "limo": {"question": "question", "response": ("solution",), "answer": "answer"},
    "s1k": {"question": "question", "response": ("deepseek_thinking_trajectory", "deepseek_attempt"),
            "answer": "solution"},
    "alpaca": {"question": "instruction", "response": ("output",), "answer": None},
}


def iter_reasoning_jsonl(path: str | Path, fmt: str = "limo") -> Iterator[Example]:
    """Examples of a JSONL file, one object per line, streamed. A line that is not JSON, not an
    object, lacks a field or holds an empty or non-string value raises QFFTDataError naming the
    file, line and field. `alpaca` lines may leave the question empty (the QFFT copies do)."""
    if fmt not in JSONL_FORMATS:
        raise ValueError(f"format {fmt!r}: not one of {', '.join(JSONL_FORMATS)}")
    spec = JSONL_FORMATS[fmt]
    path = Path(path)
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            where = f"{path}: line {n}"
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise QFFTDataError(f"{where}: not valid JSON ({err})") from None
            if not isinstance(obj, dict):
                raise QFFTDataError(f"{where}: expected a JSON object, got {type(obj).__name__}")

            def field(name: str, allow_empty: bool = False) -> str:
                if name not in obj:
                    raise QFFTDataError(f"{where}: missing field {name!r}")
                value = obj[name]
                if not isinstance(value, str) or (not allow_empty and not value.strip()):
                    raise QFFTDataError(f"{where}: field {name!r} must be a non-empty string")
                return value

            question = field(spec["question"], allow_empty=fmt == "alpaca")
            if fmt == "alpaca" and isinstance(obj.get("input"), str) and obj["input"]:
                question = f"{question}\n{obj['input']}" if question else obj["input"]
            response = "\n\n".join(field(name) for name in spec["response"])
            answer = str(obj[spec["answer"]]) if spec["answer"] and spec["answer"] in obj else ""
            yield Example(question, response, answer)


# ---------------------------------------------------------------------------------------------
# encoding and batches


# How QFFT's question-free example ends. "none": the official `qwen_qfft` template
# (LWL-cpu/Question-Free-Fine-Tuning) formats the assistant turn as its content alone, so no end
# token is trained and stopping is left to the base; "eos": ours before issue 44, <eos> appended
# and trained, as SFT's template does.
QFFT_ENDS = ("none", "eos")


def encode_example(tok, question: str | None, response: str, cutoff: int,
                   end_token: bool = True) -> tuple[list[int], list[int]]:
    """(inputs, shifted targets) of one example; targets are IGNORE outside the response (and
    its <eos> where `end_token`). `question=None` is QFFT's question-free form. Truncated at
    `cutoff` tokens."""
    head = [tok.bos_id] if tok.bos_id is not None else []
    if question is not None:
        head = head + tok.encode(question + "\n")
    body = tok.encode(response) + ([tok.eos_id] if end_token else [])
    ids = (head + body)[:cutoff + 1]
    loss = ([False] * len(head) + [True] * len(body))[:cutoff + 1]
    if len(ids) < 2 or not any(loss[1:]):
        raise ValueError(f"example leaves no response token within cutoff {cutoff}: {response[:40]!r}")
    return ids[:-1], [t if keep else IGNORE for t, keep in zip(ids[1:], loss[1:])]


def encode_examples(tok, examples: Sequence[Example], with_question: bool, cutoff: int,
                    qfft_end: str = "none") -> list[tuple[list[int], list[int]]]:
    """[question; response <eos>] (base, SFT: as LLaMA-Factory's `qwen` template ends the assistant
    turn with a trained <|im_end|>), or the response alone ending as `qfft_end` says (QFFT_ENDS)."""
    if qfft_end not in QFFT_ENDS:
        raise ValueError(f"qfft_end {qfft_end!r}: not one of {', '.join(QFFT_ENDS)}")
    end_token = with_question or qfft_end == "eos"
    return [encode_example(tok, e.question if with_question else None, e.response, cutoff, end_token)
            for e in examples]


def pad_batch(encoded: Sequence[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (inputs, targets); padded targets are IGNORE."""
    width = max(len(x) for x, _ in encoded)
    x = torch.full((len(encoded), width), pad_id, dtype=torch.long)
    y = torch.full((len(encoded), width), IGNORE, dtype=torch.long)
    for i, (xi, yi) in enumerate(encoded):
        x[i, :len(xi)] = torch.tensor(xi)
        y[i, :len(yi)] = torch.tensor(yi)
    return x, y


class ExampleSampler:
    """`sample_batch(generator)` for `paperline.train.lm.train_lm`: examples drawn at random (a
    class, not a closure, so that it crosses into spawned DDP processes)."""

    def __init__(self, encoded: Sequence[tuple[list[int], list[int]]], batch_size: int, pad_id: int):
        self.encoded, self.batch_size, self.pad_id = encoded, batch_size, pad_id

    def __call__(self, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randint(len(self.encoded), (self.batch_size,), generator=generator).tolist()
        return pad_batch([self.encoded[i] for i in idx], self.pad_id)


# the paper's evaluation prompt (spec §b): its chat template with this system message
EVAL_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."


def prompt_ids(tok, question: str, chat_template: bool = False) -> list[int]:
    """What a model is asked: `<bos> question "\n"` (the smoke format, the one SFT trained on),
    or with `chat_template` the tokenizer's own chat template with the paper's system prompt and
    the generation prompt (an HF tokenizer that has one)."""
    if not chat_template:
        return ([tok.bos_id] if tok.bos_id is not None else []) + tok.encode(question + "\n")
    hf = getattr(tok, "tok", None)
    if hf is None or not getattr(hf, "chat_template", None):
        raise ValueError("decode.chat_template: this tokenizer has no chat template")
    messages = [{"role": "system", "content": EVAL_SYSTEM_PROMPT}, {"role": "user", "content": question}]
    return list(hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))
