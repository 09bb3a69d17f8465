"""The Tulu V2 format: streaming validation with errors naming file, line and field; skip_invalid
counting; open-instruct's chat template and its assistant-only loss mask; the embedded pool writer
and the real-file path of the tulu-pool stage (its flow: tests/test_prep_flows.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from paperline.data.tulu import (ByteTokenizer, SkipStats, TuluFormatError, encode_tulu, iter_tulu_jsonl,
                                 parse_tulu_line, read_tulu_jsonl, tulu_text, write_tulu_jsonl)
from paperline.data.tulu_pool import TuluPoolConfig, load_pool_dir, write_pool

DATA = Path(__file__).resolve().parent.parent / "data" / "influence_distillation"
SAMPLE, MALFORMED = DATA / "tulu_v2_sample.jsonl", DATA / "tulu_v2_malformed.jsonl"


def test_reads_the_real_format_and_round_trips(tmp_path):
    records = read_tulu_jsonl(SAMPLE)
    assert [r.dataset for r in records][:3] == ["flan_v2", "oasst1", "sharegpt"]
    assert records[4].id == "42"  # an integer id is read as its string
    assert records[2].messages[0]["role"] == "system"
    out = tmp_path / "copy.jsonl"
    assert write_tulu_jsonl(out, records) == len(records)
    assert read_tulu_jsonl(out) == records


@pytest.mark.parametrize("line, expected", [
    (2, r"tulu_v2_malformed.jsonl: line 2: not valid JSON"),
    (3, r"tulu_v2_malformed.jsonl: line 3: field 'messages': missing"),
    (4, r"tulu_v2_malformed.jsonl: line 4: field 'messages\[1\].role': unknown role 'bot'"),
    (5, r"tulu_v2_malformed.jsonl: line 5: field 'messages\[1\].content': empty content"),
])
def test_each_malformed_line_is_named_by_file_line_and_field(tmp_path, line, expected):
    lines = MALFORMED.read_text().splitlines()
    path = tmp_path / MALFORMED.name
    path.write_text("\n".join([lines[0], lines[line - 1]]) + "\n")  # the bad line moves to line 2
    with pytest.raises(TuluFormatError, match=expected.replace(f"line {line}", "line 2")):
        read_tulu_jsonl(path)


def test_streaming_yields_before_reading_a_later_bad_line():
    stream = iter_tulu_jsonl(MALFORMED)
    assert next(stream).id == "flan_v2_0"  # line 1 is valid; the bad line 2 is not read yet
    with pytest.raises(TuluFormatError, match="line 2"):
        next(stream)


def test_skip_invalid_counts_what_it_skipped():
    stats = SkipStats()
    kept = list(iter_tulu_jsonl(MALFORMED, skip_invalid=True, stats=stats))
    assert [r.id for r in kept] == ["flan_v2_0", "oasst1_17"]
    summary = stats.summary()
    assert summary["read"] == 6 and summary["skipped"] == 4 and summary["kept"] == 2
    assert summary["reasons"] == {"bad_json": 1, "missing_messages": 1, "unknown_role": 1, "empty_content": 1}
    assert "line 4" in summary["examples"][2]


@pytest.mark.parametrize("obj, field", [
    ({"id": "a", "messages": [{"role": "assistant", "content": "x"}]}, "dataset"),
    ({"dataset": "d", "id": "a", "messages": []}, "messages"),
    ({"dataset": "d", "id": "a", "messages": [{"content": "x"}]}, r"messages\[0\].role"),
    ({"dataset": "d", "id": "a", "messages": [{"role": "user", "content": 3}]}, r"messages\[0\].content"),
    ({"dataset": "d", "id": "a", "messages": [{"role": "user", "content": "only a question"}]}, "messages"),
])
def test_other_invalid_records(obj, field):
    with pytest.raises(TuluFormatError, match=f"x.jsonl: line 7: field '{field}'"):
        parse_tulu_line(json.dumps(obj), "x.jsonl", 7)


def test_open_instruct_template_and_assistant_only_mask():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi? "},
                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"},
                {"role": "assistant", "content": "Bye!"}]
    assert tulu_text(messages) == ("<|system|>\nBe brief.\n<|user|>\nHi?\n<|assistant|>\nHello.</s>\n"
                                   "<|user|>\nBye\n<|assistant|>\nBye!</s>")  # stripped: nothing after the last eos
    tok = ByteTokenizer()
    ids, mask = encode_tulu(messages, tok)
    trained = [i for i, m in zip(ids, mask) if m]
    assert trained == tok.encode("Hello.") + [tok.eos_id] + tok.encode("\n") + tok.encode("Bye!") + [tok.eos_id]
    assert tok.decode([i for i, m in zip(ids, mask) if not m]) == (
        "<|system|>\nBe brief.\n<|user|>\nHi?\n<|assistant|>\n<|user|>\nBye\n<|assistant|>\n")
    short, short_mask = encode_tulu(messages, tok, max_length=10)
    assert short == ids[:10] and short_mask == mask[:10]


def test_embedded_pool_writer(tmp_path):
    cfg = TuluPoolConfig(pool_size=150, target_size=4, eval_size=6, seed=1)
    manifest = write_pool(cfg, tmp_path / "tulu")
    pool, targets, evals = load_pool_dir(tmp_path / "tulu")
    assert len(pool) == 150 == manifest["pool_size"] == sum(manifest["pool_datasets"].values())
    datasets = set(manifest["pool_datasets"])
    assert {"gsm_symbolic", "basic_arithmetic", "leg_counting", "chitchat", "off_topic",
            "span_extraction", "multiple_choice_facts"} <= datasets
    assert sorted(targets) == ["gsm8k_like", "mmlu_like", "squad_like"]
    for name in targets:
        assert len(targets[name]) == 4 and len(evals[name]) == 6
        assert {r.id for r in targets[name]}.isdisjoint(r.id for r in evals[name])
    assert len({r.id for r in pool}) == len(pool)
    assert targets["gsm8k_like"][0].messages[-1]["content"].splitlines()[-1].startswith("#### ")
    mmlu = evals["mmlu_like"][0].messages
    assert mmlu[-1]["content"] in "ABCD" and "\nD. " in mmlu[0]["content"]
    squad = targets["squad_like"][0].messages
    assert squad[-1]["content"] in squad[0]["content"]  # the answer is a span of the passage
    chat = next(r for r in pool if r.dataset == "chitchat")
    assert [m["role"] for m in chat.messages][:2] == ["user", "assistant"]
    again = write_pool(cfg, tmp_path / "again")
    assert (tmp_path / "tulu" / "pool.jsonl").read_bytes() == (tmp_path / "again" / "pool.jsonl").read_bytes()
    assert again["pool_datasets"] == manifest["pool_datasets"]


def test_real_file_path_samples_and_skips_invalid(tmp_path):
    target_dir = tmp_path / "targets"
    target_dir.mkdir()
    for split in ("target", "eval"):
        shutil.copy(SAMPLE, target_dir / f"mmlu.{split}.jsonl")
    cfg = TuluPoolConfig(source="tulu_file", tulu_path=str(MALFORMED), target_dir="targets", targets=["mmlu"],
                         pool_size=2, skip_invalid=True)
    manifest = write_pool(cfg, tmp_path / "out", root=tmp_path)
    assert manifest["pool_size"] == 2 and manifest["skipped"]["skipped"] == 4
    assert manifest["targets"] == {"mmlu": {"target": 6, "eval": 6}}
    strict = cfg.model_copy(update={"skip_invalid": False})
    with pytest.raises(TuluFormatError, match="line 2"):
        write_pool(strict, tmp_path / "strict", root=tmp_path)
    assert not (tmp_path / "strict").exists()  # nothing half-written
    too_many = cfg.model_copy(update={"pool_size": 3})
    with pytest.raises(ValueError, match="2 valid records, fewer than pool_size 3"):
        write_pool(too_many, tmp_path / "big", root=tmp_path)


class _CharTokenizer:
    """A stand-in for a transformers tokenizer: one id per character, `</s>` one special token, and
    a BOS put in front when asked for special tokens (as Llama's tokenizer does)."""

    eos_token, eos_token_id, bos_token_id, pad_token_id = "</s>", 1, 2, 0

    def __len__(self) -> int:
        return 300

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [self.bos_token_id] if add_special_tokens else []
        for i, part in enumerate(text.split(self.eos_token)):
            ids += ([self.eos_token_id] if i else []) + [3 + ord(c) for c in part]
        return ids


def _open_instruct_labels(messages, tokenizer) -> tuple[list[int], list[bool]]:
    """encode_with_messages_format of open-instruct at the Tulu V2 release, rewritten from its
    description: the whole stripped concatenation tokenized with special tokens, then each
    non-assistant message's token range (prefix lengths of the unstripped concatenation, through the
    `<|assistant|>\\n` header when a reply follows) labelled -100. Returns (ids, trained)."""
    def concat(msgs):
        return "".join(f"<|{m['role']}|>\n" + m["content"].strip()
                       + (tokenizer.eos_token + "\n" if m["role"] == "assistant" else "\n") for m in msgs)

    ids = tokenizer.encode(concat(messages).strip())
    trained = [True] * len(ids)
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            continue
        start = 0 if i == 0 else len(tokenizer.encode(concat(messages[:i])))
        so_far = concat(messages[:i + 1])
        if i + 1 < len(messages) and messages[i + 1]["role"] == "assistant":
            so_far += "<|assistant|>\n"
        end = len(tokenizer.encode(so_far))
        trained[start:end] = [False] * len(trained[start:end])
    return ids, trained


_SHAPES = {
    "user, assistant": ["user", "assistant"],
    "system first": ["system", "user", "assistant"],
    "multi-turn": ["user", "assistant", "user", "assistant", "user", "assistant"],
    "assistant first": ["assistant", "user", "assistant"],
    "assistant only": ["assistant"],
    "two replies in a row": ["user", "assistant", "assistant"],
    "ends on a user turn": ["system", "user", "assistant", "user"],
    "system then assistant": ["system", "assistant"],
    "two user turns in a row": ["user", "user", "assistant"],
}


@pytest.mark.parametrize("shape", list(_SHAPES))
def test_template_and_mask_are_open_instructs(shape):
    from paperline.data.tulu import HFTokenizer

    messages = [{"role": role, "content": f" {role} says {i} \n"} for i, role in enumerate(_SHAPES[shape])]
    hf = _CharTokenizer()
    expected_ids, expected_trained = _open_instruct_labels(messages, hf)
    ids, mask = encode_tulu(messages, HFTokenizer(hf))
    assert ids == expected_ids and ids[0] == hf.bos_token_id
    assert mask == expected_trained
    # the byte tokenizer has no BOS: the same text and labels without it
    tok = ByteTokenizer()
    ids, mask = encode_tulu(messages, tok)
    assert tok.decode(ids) == tulu_text(messages).replace("</s>", "") and ids[-1] != tok.encode("\n")[0]
    assert mask == expected_trained[1:]
