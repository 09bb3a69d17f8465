"""The Tulu V2 format: streaming validation with errors naming file, line and field; skip_invalid
counting; open-instruct's chat template and its assistant-only loss mask; the embedded pool writer
and the real-file path of the tulu-pool stage (its flow: tests/test_prep_flows.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from paperline.data.tulu import (
    ByteTokenizer,
    SkipStats,
    TuluFormatError,
    encode_tulu,
    iter_tulu_jsonl,
    parse_tulu_line,
    read_tulu_jsonl,
    tulu_text,
    write_tulu_jsonl,
)
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


def _open_instruct_labels(messages, tokenizer) -> tuple[list[int], list[bool]]:
    """encode_with_messages_format of open-instruct at the Tulu V2 release (open_instruct/finetune.py
    at 98ccfb4, 2023-10-16), rewritten here from that source for a transformers `tokenizer`: the
    stripped concatenation tokenized whole (special tokens on, as `tokenizer(text)` does), then each
    non-assistant message's label range set to -100, from the token count of the unstripped
    concatenation before it to that through it (plus the `<|assistant|>\n` header when a reply
    follows). Returns (ids, trained)."""
    def concat(msgs):
        text = ""
        for m in msgs:
            if m["role"] == "assistant":
                text += "<|assistant|>\n" + m["content"].strip() + tokenizer.eos_token + "\n"
            else:
                text += f"<|{m['role']}|>\n" + m["content"].strip() + "\n"
        return text

    ids = tokenizer(concat(messages).strip())["input_ids"]
    labels = list(ids)
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            continue
        start = 0 if i == 0 else len(tokenizer(concat(messages[:i]))["input_ids"])
        so_far = concat(messages[:i + 1])
        if i < len(messages) - 1 and messages[i + 1]["role"] == "assistant":
            so_far += "<|assistant|>\n"
        end = len(tokenizer(so_far)["input_ids"])
        labels[start:end] = [-100] * len(labels[start:end])
    return ids, [label != -100 for label in labels]


@pytest.fixture(scope="module")
def llama_like_tokenizer():
    """A byte-level BPE tokenizer that puts a BOS first (as Llama's does), trained on Tulu text so
    that merges cross the template's boundaries ("?\n<|", "</s>\n<|"...): tokenizing piece by
    piece would give other ids than open-instruct's whole-string call."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    corpus = ["<|system|>\nBe brief.\n<|user|>\nHi?\n<|assistant|>\nHello.</s>\n<|user|>\nuser says 1\n"
              "<|assistant|>\nassistant says 2</s>\n<|assistant|>\n</s>"] * 20
    tk.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=420, special_tokens=["<s>", "</s>", "<pad>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


# every shape the format allows (the reader rejects no assistant turn; the template takes any)
_SHAPES = {
    "user, assistant": ["user", "assistant"],
    "system, user, assistant": ["system", "user", "assistant"],
    "multi-turn": ["system", "user", "assistant", "user", "assistant", "user", "assistant"],
    "assistant first": ["assistant", "user", "assistant"],
    "assistant only": ["assistant"],
    "two replies in a row": ["user", "assistant", "assistant"],
    "ends on a user turn": ["system", "user", "assistant", "user"],
    "system then assistant": ["system", "assistant"],
    "two user turns in a row": ["user", "user", "assistant"],
    "user only": ["user"],
}


def _conversation(shape, empty=()):
    return [{"role": role, "content": "" if i in empty else f" {role} says {i}?\n"}
            for i, role in enumerate(_SHAPES[shape])]


_CASES = [(shape, ()) for shape in _SHAPES] + [
    ("user, assistant", (1,)), ("user, assistant", (0,)), ("assistant only", (0,)),
    ("ends on a user turn", (3,)), ("multi-turn", (0, 4))]  # empty contents (the template takes them)


@pytest.mark.parametrize("shape, empty", _CASES)
def test_hf_path_is_open_instructs_ids_and_labels(llama_like_tokenizer, shape, empty):
    from paperline.data.tulu import HFTokenizer

    messages = _conversation(shape, empty)
    expected_ids, expected_trained = _open_instruct_labels(messages, llama_like_tokenizer)
    ids, mask = encode_tulu(messages, HFTokenizer(llama_like_tokenizer))
    assert ids == expected_ids and ids[0] == llama_like_tokenizer.bos_token_id
    assert mask == expected_trained
    assert mask[0] == (messages[0]["role"] == "assistant")  # the BOS is labelled as open-instruct does
    assert llama_like_tokenizer.decode(ids[1:]) == tulu_text(messages)
    cut_ids, cut_mask = encode_tulu(messages, HFTokenizer(llama_like_tokenizer), max_length=7)
    assert (cut_ids, cut_mask) == (ids[:7], mask[:7])  # open-instruct truncates on the right


def test_the_tokenizer_merges_across_the_template_boundaries(llama_like_tokenizer):
    """What makes the test above strict: tokenized piece by piece, the same text gives other ids."""
    pieces = ["<|user|>\n", "Hi?", "\n", "<|assistant|>\n", "Hello."]
    whole = llama_like_tokenizer.encode("".join(pieces), add_special_tokens=False)
    assert whole != sum((llama_like_tokenizer.encode(p, add_special_tokens=False) for p in pieces), [])


class _ByteAsHF:
    """The byte tokenizer behind a transformers-like call, for the reimplementation."""

    eos_token = "</s>"

    def __call__(self, text):
        return {"input_ids": ByteTokenizer().encode_example(text)}


# trained text of each shape on the byte path (no BOS), written out by hand from the source's rules
_TRAINED = {
    "user, assistant": "assistant says 1?</s>",
    "system, user, assistant": "assistant says 2?</s>",
    "multi-turn": "assistant says 2?</s>\nassistant says 4?</s>\nassistant says 6?</s>",
    "assistant first": "<|assistant|>\nassistant says 0?</s>\nassistant says 2?</s>",
    "assistant only": "<|assistant|>\nassistant says 0?</s>",
    "two replies in a row": "assistant says 1?</s>\n<|assistant|>\nassistant says 2?</s>",
    "ends on a user turn": "assistant says 2?</s>\n",
    "system then assistant": "assistant says 1?</s>",
    "two user turns in a row": "assistant says 2?</s>",
    "user only": "",
}


@pytest.mark.parametrize("shape, empty", _CASES)
def test_byte_path_is_open_instructs_text_and_labels(shape, empty):
    messages = _conversation(shape, empty)
    tok = ByteTokenizer()
    ids, mask = encode_tulu(messages, tok)
    assert (ids, mask) == _open_instruct_labels(messages, _ByteAsHF())
    text = "".join("</s>" if i == tok.eos_id else tok.decode([i]) for i in ids)
    assert text == tulu_text(messages) and text == text.strip()  # nothing after the last </s>
    if not empty:
        trained = "".join("</s>" if i == tok.eos_id else tok.decode([i]) for i, m in zip(ids, mask) if m)
        assert trained == _TRAINED[shape]


def test_a_literal_eos_in_a_content_is_the_eos_token_as_in_open_instruct():
    ids, _ = encode_tulu([{"role": "user", "content": "a</s>b"}, {"role": "assistant", "content": "c"}],
                         ByteTokenizer())
    assert ids.count(ByteTokenizer.eos_id) == 2
