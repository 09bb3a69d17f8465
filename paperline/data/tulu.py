"""The Tulu V2 SFT mixture format (open-instruct, HF `allenai/tulu-v2-sft-mixture`): JSONL, one
object per line,

    {"dataset": "flan_v2", "id": "flan_v2_12", "messages": [{"role": "user", "content": "..."},
                                                          {"role": "assistant", "content": "..."}]}

- `iter_tulu_jsonl` streams a file line by line (a 5.8M-line pool never sits in memory) and
  validates every line; a malformed one raises `TuluFormatError` naming the file, the line and the
  field, or with `skip_invalid` is counted in a `SkipStats` and skipped.
- `encode_tulu` is open-instruct's `encode_with_messages_format` as it was when Tulu V2 was
  trained (`open_instruct/finetune.py` at 98ccfb4, 2023-10-16, the last change before the Tulu V2
  release; rederived from it, not copied):

      <bos><|system|>\\n{system}\\n<|user|>\\n{user}\\n<|assistant|>\\n{assistant}</s>\\n ... {last}</s>

  the concatenation stripped (nothing follows the last `</s>`), tokenized whole with the
  tokenizer's special tokens (a Llama tokenizer's BOS; the byte tokenizer has none). The loss
  mask is open-instruct's labels: each non-assistant message is masked from its start through the
  `<|assistant|>\\n` header of a reply that follows it, the bounds counted as the tokens of the
  unstripped prefixes (so a merge across a boundary lands where open-instruct puts it);
  everything else is trained: each reply, its `</s>` and the newline after it, and the header of
  a reply that no user or system turn precedes (the first message, or a reply after a reply).
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

    reason: str = "bad_json"  # the failed check's short name; a line that is no JSON sets none


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
                stats.add(err, err.reason)


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
    eos_token: str
    pad_id: int
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...  # the text alone (no special tokens added)

    def encode_example(self, text: str) -> list[int]: ...  # as open-instruct's `tokenizer(text)`


class ByteTokenizer:
    """UTF-8 bytes (ids 0–255), then `</s>` (256) and pad (257). No BOS (it has none)."""

    eos_token = "</s>"
    eos_id = 256
    pad_id = 257
    vocab_size = 258

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_example(self, text: str) -> list[int]:
        """The text with each `</s>` as the eos id, as a transformers tokenizer reads its special
        tokens out of the text (open-instruct writes `tokenizer.eos_token` into the string)."""
        ids: list[int] = []
        for i, part in enumerate(text.split(self.eos_token)):
            ids += ([self.eos_id] if i else []) + self.encode(part)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """A transformers tokenizer (the paper profile's model, by local path), seen through the same
    interface. `encode_example` is open-instruct's call, special tokens on (a Llama tokenizer's BOS)."""

    def __init__(self, tokenizer: Any):
        self.tok = tokenizer
        self.eos_token = tokenizer.eos_token
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.vocab_size = len(tokenizer)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    def encode_example(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=True)


def _concat(messages: Sequence[dict[str, str]], eos: str) -> str:
    """open-instruct's `_concat_messages`: role header, stripped content, a newline (`eos` + newline
    after a reply); not stripped itself (the caller strips the whole example, not its prefixes)."""
    return "".join(HEADERS[m["role"]] + m["content"].strip() + (eos if m["role"] == "assistant" else "") + "\n"
                   for m in messages)


def tulu_text(messages: Sequence[dict[str, str]], eos: str = "</s>") -> str:
    """The templated example, as open-instruct builds it: stripped, so nothing follows the last `</s>`."""
    return _concat(messages, eos).strip()


def encode_tulu(messages: Sequence[dict[str, str]], tokenizer: Tokenizer,
                max_length: int | None = None) -> tuple[list[int], list[bool]]:
    """(token ids, loss mask) as open-instruct's `encode_with_messages_format` at the Tulu V2
    release (open_instruct/finetune.py, 2023-10): the stripped example tokenized whole, special
    tokens on; then each non-assistant message masked over [its start, its end), both counted as
    the tokens of the *unstripped* concatenation up to it, the end taken through the
    `<|assistant|>\\n` header when a reply follows. Everything else is trained: replies, their `</s>`,
    the newline after an inner `</s>`, the header of a reply no user/system turn precedes, and the
    tokenizer's BOS only when a reply comes first. Truncated on the right to max_length."""
    eos = tokenizer.eos_token
    ids = tokenizer.encode_example(tulu_text(messages, eos))
    trained = [True] * len(ids)
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            continue
        start = 0 if i == 0 else len(tokenizer.encode_example(_concat(messages[:i], eos)))
        so_far = _concat(messages[:i + 1], eos)
        if i + 1 < len(messages) and messages[i + 1]["role"] == "assistant":
            so_far += HEADERS["assistant"]
        end = len(tokenizer.encode_example(so_far))
        trained[start:end] = [False] * len(trained[start:end])
    if max_length is not None:
        ids, trained = ids[:max_length], trained[:max_length]
    return ids, trained
