"""The Tulu V2 SFT mixture format (open-instruct, HF `allenai/tulu-v2-sft-mixture`): JSONL, one
object per line,

    {"dataset": "flan_v2", "id": "flan_v2_12", "messages": [{"role": "user", "content": "..."},
                                                          {"role": "assistant", "content": "..."}]}

- `iter_tulu_jsonl` streams a file line by line (a 5.8M-line pool never sits in memory) and
  validates every line; a malformed one raises `TuluFormatError` naming the file, the line and the
  field, or with `skip_invalid` is counted in a `SkipStats` and skipped.
- `encode_tulu` applies open-instruct's Tulu chat template as it was when Tulu V2 was trained
  (`open_instruct/finetune.py: _concat_messages / encode_with_messages_format`):

      <bos><|system|>\\n{system}\\n<|user|>\\n{user}\\n<|assistant|>\\n{assistant}</s>\\n ... {last}</s>

  the concatenation stripped (nothing follows the last `</s>`), the tokenizer's own leading special
  tokens first (a Llama tokenizer's BOS; none for the byte tokenizer). The loss mask is
  open-instruct's labels: each non-assistant message is masked from its start through the
  `<|assistant|>\\n` header of a reply that follows it; everything else is trained, so each
  assistant reply, its `</s>` and the newline after it, and the header of a reply that no user or
  system turn precedes (the conversation's first message, or a reply after a reply).
- `ByteTokenizer`: bytes 0–255, then `</s>` and a pad id (no downloads; the small LM's vocabulary).
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Protocol, Sequence

from paperline.io import DataError

ROLES = ("system", "user", "assistant")
HEADERS = {"system": "<|system|>\n", "user": "<|user|>\n", "assistant": "<|assistant|>\n"}


class TuluFormatError(DataError):
    """A malformed line; the message names the file, the line number and the field."""


@dataclass(frozen=True)
class TuluRecord:
    dataset: str
    id: str
    messages: tuple[dict[str, str], ...]

    def to_json(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "id": self.id, "messages": [dict(m) for m in self.messages]}


SKIP_EXAMPLES = 5  # error messages kept in the skip statistics


@dataclass
class SkipStats:
    """What `skip_invalid` skipped: counts by reason and the first few error messages."""

    read: int = 0
    skipped: int = 0
    reasons: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def add(self, err: "TuluFormatError", reason: str) -> None:
        self.skipped += 1
        self.reasons[reason] += 1
        if len(self.examples) < SKIP_EXAMPLES:
            self.examples.append(str(err))

    @classmethod
    def merged(cls, parts: Iterable["SkipStats"]) -> "SkipStats":
        """The stats of consecutive parts of one file, as one pass over it would have counted."""
        out = cls()
        for part in parts:
            out.read += part.read
            out.skipped += part.skipped
            out.reasons.update(part.reasons)
            out.examples = (out.examples + part.examples)[:SKIP_EXAMPLES]
        return out

    def summary(self) -> dict[str, Any]:
        return {"read": self.read, "kept": self.read - self.skipped, "skipped": self.skipped,
                "reasons": dict(self.reasons), "examples": list(self.examples)}


class _Invalid(Exception):
    def __init__(self, field_name: str, message: str, reason: str):
        super().__init__(message)
        self.field_name, self.message, self.reason = field_name, message, reason


def _check(obj: Any) -> TuluRecord:
    if not isinstance(obj, dict):
        raise _Invalid("<line>", f"expected a JSON object, got {type(obj).__name__}", "not_an_object")
    for key in ("dataset", "id"):
        if key not in obj:
            raise _Invalid(key, "missing", f"missing_{key}")
        if not isinstance(obj[key], (str, int)) or isinstance(obj[key], bool) or str(obj[key]) == "":
            raise _Invalid(key, f"expected a non-empty string, got {obj[key]!r}", f"bad_{key}")
    if "messages" not in obj:
        raise _Invalid("messages", "missing", "missing_messages")
    messages = obj["messages"]
    if not isinstance(messages, list) or not messages:
        raise _Invalid("messages", f"expected a non-empty list of {{role, content}}, got {messages!r:.60}",
                       "bad_messages")
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise _Invalid(where, f"expected an object, got {type(msg).__name__}", "bad_message")
        if "role" not in msg:
            raise _Invalid(f"{where}.role", "missing", "missing_role")
        if msg["role"] not in ROLES:
            raise _Invalid(f"{where}.role", f"unknown role {msg['role']!r} (expected one of {', '.join(ROLES)})",
                           "unknown_role")
        if "content" not in msg:
            raise _Invalid(f"{where}.content", "missing", "missing_content")
        if not isinstance(msg["content"], str):
            raise _Invalid(f"{where}.content", f"expected a string, got {type(msg['content']).__name__}",
                           "bad_content")
        if not msg["content"].strip():
            raise _Invalid(f"{where}.content", "empty content", "empty_content")
    if not any(m["role"] == "assistant" for m in messages):
        raise _Invalid("messages", "no assistant message (nothing to train on)", "no_assistant")
    return TuluRecord(str(obj["dataset"]), str(obj["id"]),
                      tuple({"role": m["role"], "content": m["content"]} for m in messages))


def parse_tulu_line(line: str, path: str | os.PathLike = "<string>", lineno: int = 1) -> TuluRecord:
    """One validated record from one JSONL line."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise TuluFormatError(f"{path}: line {lineno}: not valid JSON ({err.msg} at column {err.colno})") from None
    try:
        return _check(obj)
    except _Invalid as bad:
        error = TuluFormatError(f"{path}: line {lineno}: field '{bad.field_name}': {bad.message}")
        error.reason = bad.reason
        raise error from None


@dataclass(frozen=True)
class LineRange:
    """Whole lines of a file: bytes [start, stop), the first of them line number `first_line` (1-based).
    A large file is read as several ranges, one task each, with the file's own line numbers."""

    start: int
    stop: int
    first_line: int


def line_ranges(path: str | os.PathLike, range_bytes: int) -> list[LineRange]:
    """`path` cut into ranges of about `range_bytes` at line starts (one pass counting newlines)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such Tulu JSONL file")
    size = path.stat().st_size
    cuts = [0]
    with path.open("rb") as fh:
        while cuts[-1] < size:
            fh.seek(min(size, cuts[-1] + range_bytes) - 1)
            fh.readline()  # to the start of the next line
            cuts.append(min(size, fh.tell()))
        ranges, line = [], 1
        for start, stop in zip(cuts, cuts[1:]):
            ranges.append(LineRange(start, stop, line))
            fh.seek(start)
            line += fh.read(stop - start).count(b"\n")
    return ranges or [LineRange(0, 0, 1)]


def iter_tulu_jsonl(path: str | os.PathLike, skip_invalid: bool = False,
                    stats: SkipStats | None = None, lines: LineRange | None = None) -> Iterator[TuluRecord]:
    """Stream validated records from a Tulu JSONL file, or from its `lines` (blank lines are ignored)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such Tulu JSONL file")
    stats = stats if stats is not None else SkipStats()
    lines = lines or LineRange(0, path.stat().st_size, 1)
    with path.open("rb") as fh:
        fh.seek(lines.start)
        lineno = lines.first_line
        while fh.tell() < lines.stop and (raw := fh.readline()):
            number, lineno = lineno, lineno + 1
            if not raw.strip():
                continue
            stats.read += 1
            try:
                yield parse_tulu_line(_decode(raw, path, number), path, number)
            except TuluFormatError as err:
                if not skip_invalid:
                    raise
                stats.add(err, getattr(err, "reason", "bad_json"))


def _decode(raw: bytes, path: Path, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        error = TuluFormatError(f"{path}: line {lineno}: not UTF-8 text (byte {err.start} of the line: {err.reason})")
        error.reason = "not_utf8"
        raise error from None


def read_tulu_jsonl(path: str | os.PathLike, skip_invalid: bool = False,
                    stats: SkipStats | None = None) -> list[TuluRecord]:
    """All records of a small file (pools of a few thousand; stream big ones with iter_tulu_jsonl)."""
    return list(iter_tulu_jsonl(path, skip_invalid, stats))


def write_tulu_jsonl(path: str | os.PathLike, records: Iterable[TuluRecord | dict]) -> int:
    """Write records atomically, validating each (what we write must read back). Returns the count."""
    from paperline.io import atomic_path

    count = 0
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as fh:
        for record in records:
            obj = record.to_json() if isinstance(record, TuluRecord) else record
            line = json.dumps(obj, ensure_ascii=False)
            parse_tulu_line(line, path, count + 1)
            fh.write(line + "\n")
            count += 1
    return count


# ---------------------------------------------------------------- tokenizers and the chat template
class Tokenizer(Protocol):
    eos_id: int
    pad_id: int
    vocab_size: int
    prefix_ids: Sequence[int]  # what the tokenizer puts before a text (a BOS), open-instruct's first ids

    def encode(self, text: str) -> list[int]: ...


class ByteTokenizer:
    """UTF-8 bytes (ids 0–255), then `</s>` (256) and pad (257)."""

    eos_id = 256
    pad_id = 257
    vocab_size = 258
    prefix_ids: tuple[int, ...] = ()

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """A transformers tokenizer (the paper profile's model, by local path), seen through the same
    interface. Segments are tokenized one by one and concatenated: the same ids as open-instruct's
    whole-string tokenization up to merges across a segment boundary (headers end in a newline)."""

    def __init__(self, tokenizer: Any):
        self.tok = tokenizer
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.vocab_size = len(tokenizer)
        # open-instruct tokenizes with the special tokens on: those the tokenizer puts before a text
        with_special, plain = tokenizer.encode("a", add_special_tokens=True), self.encode("a")
        start = next((i for i in range(len(with_special) - len(plain) + 1)
                      if with_special[i:i + len(plain)] == plain), 0)
        self.prefix_ids = tuple(with_special[:start])

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)


def tulu_segments(messages: Sequence[dict[str, str]]) -> list[tuple[str | None, bool]]:
    """The template as (text, trained) segments; text None stands for the eos token (module doc)."""
    segments: list[tuple[str | None, bool]] = []
    for i, msg in enumerate(messages):
        role, content = msg["role"], msg["content"].strip()
        if role == "assistant":
            if i == 0 or messages[i - 1]["role"] == "assistant":
                segments.append((HEADERS["assistant"], True))  # no masked turn before it covers it
            segments += [(content, True), (None, True), ("\n", True)]
        else:
            segments.append((HEADERS[role] + content + "\n", False))
            if i + 1 < len(messages) and messages[i + 1]["role"] == "assistant":
                segments.append((HEADERS["assistant"], False))
    # open-instruct strips the concatenation: the last "\n" goes (contents are stripped already)
    text, trained = segments.pop()
    if text != "\n":
        segments.append((text[:-1], trained))
    return segments


def tulu_text(messages: Sequence[dict[str, str]], eos: str = "</s>") -> str:
    """The templated string, as open-instruct builds it."""
    return "".join(eos if text is None else text for text, _ in tulu_segments(messages))


def encode_tulu(messages: Sequence[dict[str, str]], tokenizer: Tokenizer,
                max_length: int | None = None) -> tuple[list[int], list[bool]]:
    """(token ids, loss mask) under the Tulu template; truncated on the right to max_length."""
    segments = tulu_segments(messages)
    ids: list[int] = list(tokenizer.prefix_ids)
    mask: list[bool] = [segments[0][1]] * len(ids)  # labelled as the first message's start
    for text, trained in segments:
        piece = [tokenizer.eos_id] if text is None else tokenizer.encode(text)
        ids += piece
        mask += [trained] * len(piece)
    if max_length is not None:
        ids, mask = ids[:max_length], mask[:max_length]
    return ids, mask
