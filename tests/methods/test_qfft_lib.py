"""QFFT's pieces: the chain-sum problems and the two response styles, the noise-level-IV shuffle,
the SFT / question-free encodings, the S1K/LIMO JSONL loader and its errors, RAK and AES against
hand-computed values, batched decoding, and the HF-model wrapper's loss."""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest
import torch

from paperline.methods.qfft import data as D
from paperline.methods.qfft import metrics as M


def test_chain_sums_come_from_reasoning_gym_and_both_response_styles_reach_the_answer():
    problems = D.chain_sum_problems(50, seed=3, min_terms=2, max_terms=5, max_digits=2)
    rng = random.Random(0)
    slipped = 0
    for p in problems:
        assert eval(p.question) == int(p.answer) == sum(p.terms)  # noqa: S307 - digits and +/- only
        short = D.short_response(p)
        assert M.extract_answer(short) == p.answer and not M.is_long_cot(short)
        assert short.count("=") == len(p.terms) - 1  # one step per operation
        long = D.long_response(p, rng, slip_rate=0.5)
        assert M.is_long_cot(long) and M.extract_answer(long) == p.answer
        first, recheck = long.split(" Wait, recheck: ")
        assert recheck.startswith(short.rsplit(" A:", 1)[0])  # the recheck is the correct pass
        slipped += first != short.rsplit(" A:", 1)[0]
    assert 10 < slipped < 40  # about half the first passes carry a slip


def test_noise_iv_pairs_every_question_with_another_response_and_leaves_qfft_data_unchanged():
    examples = D.teacher_examples(D.chain_sum_problems(40, 1, 2, 4, 2), seed=0, slip_rate=0.5)
    assert len({e.response for e in examples}) == len(examples)
    noisy = D.shuffle_pairs(examples, seed=5)
    assert [e.question for e in noisy] == [e.question for e in examples]
    assert all(n.response != e.response for n, e in zip(noisy, examples))  # a derangement
    tok = D.CharTokenizer()
    # spec §f: without the question the level-IV data is the clean data (as a multiset)
    clean = Counter(tuple(x) for x, _ in D.encode_examples(tok, examples, False, 200))
    assert Counter(tuple(x) for x, _ in D.encode_examples(tok, noisy, False, 200)) == clean
    assert Counter(tuple(x) for x, _ in D.encode_examples(tok, noisy, True, 200)) != Counter(
        tuple(x) for x, _ in D.encode_examples(tok, examples, True, 200))


def test_sft_loss_covers_the_response_only_and_qfft_never_sees_the_question():
    tok = D.CharTokenizer()
    x, y = D.encode_example(tok, "3+4", "3+4=7 A:7", cutoff=100)
    prompt = [tok.bos_id] + tok.encode("3+4\n")
    assert x[:len(prompt)] == prompt
    targets = [t for t in y if t != D.IGNORE]
    assert targets == tok.encode("3+4=7 A:7") + [tok.eos_id]
    assert y[:len(prompt) - 1] == [D.IGNORE] * (len(prompt) - 1)
    xq, yq = D.encode_example(tok, None, "3+4=7 A:7", cutoff=100)
    assert xq == [tok.bos_id] + tok.encode("3+4=7 A:7") and D.IGNORE not in yq
    xc, yc = D.encode_example(tok, "3+4", "3+4=7 A:7", cutoff=6)
    assert len(xc) == len(yc) == 6
    with pytest.raises(ValueError, match="no response token"):
        D.encode_example(tok, "3+4+5+6", "x", cutoff=4)
    with pytest.raises(ValueError, match="not in the char tokenizer"):
        tok.encode("3×4")
    bx, by = D.pad_batch([(x, y), (xq, yq)], tok.pad_id)
    assert bx.shape == by.shape and (by[1, len(yq):] == D.IGNORE).all()


def _write(path, lines):
    path.write_text("".join((json.dumps(x) if not isinstance(x, str) else x) + "\n" for x in lines))
    return path


def test_reasoning_jsonl_reads_limo_s1k_and_alpaca_lines(tmp_path):
    limo = _write(tmp_path / "limo.jsonl", [{"question": "What is 2+2?", "solution": "2+2=4. \\boxed{4}", "answer": "4"}])
    s1k = _write(tmp_path / "s1k.jsonl", [{"question": "q", "deepseek_thinking_trajectory": "think", "deepseek_attempt": "att",
                                           "solution": "7"}])
    qfft = _write(tmp_path / "s1_qfft.jsonl", [{"instruction": "", "input": "", "output": "Wait, resp"}])
    [e] = D.iter_reasoning_jsonl(limo, "limo")
    assert (e.question, e.answer) == ("What is 2+2?", "4") and M.extract_answer(e.response) == "4"
    [e] = D.iter_reasoning_jsonl(s1k, "s1k")
    assert e.response == "think\n\natt" and e.answer == "7"
    [e] = D.iter_reasoning_jsonl(qfft, "alpaca")
    assert e.question == "" and e.response == "Wait, resp"


@pytest.mark.parametrize("line, message", [
    ('{"question": "q", "solution": ', r"line 2: not valid JSON"),
    ('["a list"]', r"line 2: expected a JSON object"),
    ('{"question": "q", "answer": "1"}', r"line 2: missing field 'solution'"),
    ('{"question": "  ", "solution": "s", "answer": "1"}', r"line 2: field 'question' must be a non-empty string"),
])
def test_a_malformed_jsonl_line_names_the_file_line_and_field(tmp_path, line, message):
    bad = _write(tmp_path / "bad.jsonl", [{"question": "q", "solution": "s", "answer": "1"}, line])
    with pytest.raises(D.QFFTDataError, match=r"bad.jsonl: " + message):
        list(D.iter_reasoning_jsonl(bad, "limo"))


def test_rak_matches_the_hand_computed_kappa_and_sklearn():
    from sklearn.metrics import cohen_kappa_score

    solvable = [True] * 6 + [False] * 4
    long_cot = [False, False, False, False, True, True, True, True, True, False]
    # TP=4 FN=2 FP=1 TN=3: p_o = 0.7, p_e = (5·6 + 5·4)/100 = 0.5, κ = 0.4
    assert M.rak(solvable, long_cot) == pytest.approx(0.4)
    assert M.rak(solvable, long_cot) == pytest.approx(cohen_kappa_score(solvable, [not x for x in long_cot]))
    assert M.rak([True, False], [True, True]) == 0.0  # always long: no agreement beyond chance
    assert M.rak([True, True], [False, False]) == 0.0  # p_e = 1


def test_aes_both_branches():
    # shorter and more accurate: 0.1·0.5 + 0.1·0.25
    assert M.aes(length=50, accuracy=0.5, base_length=100, base_accuracy=0.4) == pytest.approx(0.075)
    # shorter but less accurate: 0.1·0.5 − 1.0·0.25
    assert M.aes(length=50, accuracy=0.3, base_length=100, base_accuracy=0.4) == pytest.approx(-0.2)
    assert M.aes(10, 0.5, 100, 0.0) is None


def test_answer_extraction_and_long_cot_label():
    assert M.extract_answer("so \\boxed{12} ... \\boxed{13}") == "13"
    assert M.extract_answer("1+2=3 A:3 Wait, recheck: A:-4") == "-4"
    assert M.extract_answer("no answer") is None
    assert M.is_long_cot("Hmm, wait.") and not M.is_long_cot("awaited 3")


def _tiny_lm(vocab: int):
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig

    torch.manual_seed(0)
    return CausalLM(CausalLMConfig(vocab_size=vocab, hidden_size=16, num_layers=1, num_heads=2, head_dim=8,
                                   max_position_embeddings=64)).eval()


def test_batched_greedy_decoding_equals_one_prompt_at_a_time():
    from paperline.methods.qfft.generate import generate_responses

    tok = D.CharTokenizer()
    model = _tiny_lm(tok.vocab_size)
    prompts = [D.prompt_ids(tok, q) for q in ("1+2", "3-4+5", "7+8", "9-1-1-1")]
    batched = generate_responses(model, prompts, 12, tok.eos_id, batch_size=8)
    single = [generate_responses(model, [p], 12, tok.eos_id)[0] for p in prompts]
    assert batched == single and all(len(r) <= 12 for r in batched)
    with torch.no_grad():  # greedy: teacher-forcing the output reproduces it token by token
        out = batched[1]
        logits = model(torch.tensor([prompts[1] + out])).logits[0]
        n = len(prompts[1])
        predicted = logits[n - 1:].argmax(-1).tolist()
        assert predicted[:len(out)] == out


def test_the_hf_wrapper_gives_the_hf_models_own_loss_on_shifted_targets():
    from transformers import LlamaConfig, LlamaForCausalLM

    from paperline.methods.qfft.hf import trainable, unwrap

    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2)).eval()
    ids = torch.randint(3, 40, (2, 10))
    labels = ids.clone()
    labels[:, :4] = -100  # a question masked out, as in SFT
    expected = hf(ids, labels=labels).loss
    wrapped = trainable(hf)
    shifted = labels[:, 1:]
    assert wrapped(ids[:, :-1], labels=shifted).loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert unwrap(wrapped) is hf


def test_train_lm_on_masked_examples_learns_and_a_killed_run_resumes_exactly(tmp_path):
    from paperline.train.lm import LMTrainSettings, train_lm

    tok = D.CharTokenizer()
    encoded = D.encode_examples(tok, D.base_examples(D.chain_sum_problems(32, 0, 2, 2, 1)), True, 40)
    s = LMTrainSettings(steps=6, batch_size=4, block_size=40, lr=3e-3, min_lr=3e-4, warmup_steps=1, eval_every=3,
                        log_every=1, checkpoint_every=3)
    val = D.pad_batch(encoded[:8], tok.pad_id)

    def run(ckpt, on_log=None):
        model = _tiny_lm(tok.vocab_size).train()
        result = train_lm(model, None, None, s, "cpu", checkpoint_path=ckpt, on_log=on_log,
                          sample_batch=D.ExampleSampler(encoded, 4, tok.pad_id), val_batches=val)
        return model, result

    full, r = run(tmp_path / "a.pt")
    assert r["eval_history"]["val_loss"][-1] < r["eval_history"]["val_loss"][0]

    def die_at_step_4(step, metrics):
        if step == 4:
            raise KeyboardInterrupt  # a kill after the step-3 checkpoint

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "b.pt", die_at_step_4)
    resumed, r2 = run(tmp_path / "b.pt")
    assert r2["history"]["train_loss"] == r["history"]["train_loss"]
    assert all(torch.equal(a, b) for a, b in zip(full.state_dict().values(), resumed.state_dict().values()))


def test_the_paper_prompt_goes_through_the_tokenizers_chat_template_with_the_boxed_system_prompt(tmp_path):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set("".join(chr(c) for c in range(32, 127)) + "\n"))
    vocab = {"<unk>": 0, "<eos>": 1} | {c: i + 2 for i, c in enumerate(chars)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    hf = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", unk_token="<unk>")
    hf.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                        "{% if add_generation_prompt %}<assistant>{% endif %}")
    hf.save_pretrained(tmp_path)
    tok = D.HFTokenizer(tmp_path)
    ids = D.prompt_ids(tok, "What is 2+2?", chat_template=True)
    rendered = "".join(chars[i - 2] for i in ids)
    assert rendered == f"<system>{D.EVAL_SYSTEM_PROMPT}\n<user>What is 2+2?\n<assistant>"
    assert "\\boxed{}" in D.EVAL_SYSTEM_PROMPT
    assert D.prompt_ids(tok, "What is 2+2?") == tok.encode("What is 2+2?\n")  # no bos token: none prepended
    with pytest.raises(ValueError, match="no chat template"):
        D.prompt_ids(D.CharTokenizer(), "1+1", chat_template=True)


def test_the_example_sampler_crosses_into_spawned_processes():
    """DDP's processes are spawned (runtime.distributed): the sampler must pickle and draw alike."""
    import pickle

    tok = D.CharTokenizer()
    encoded = D.encode_examples(tok, D.base_examples(D.chain_sum_problems(16, 0, 2, 2, 1)), True, 40)
    sampler = D.ExampleSampler(encoded, 4, tok.pad_id)
    copy = pickle.loads(pickle.dumps(sampler))
    for a, b in zip(sampler(torch.Generator().manual_seed(3)), copy(torch.Generator().manual_seed(3))):
        assert torch.equal(a, b)


def test_lora_finetune_leaves_the_base_weights_untouched_and_trains_only_the_adapters():
    from paperline.methods.qfft.config import LoraConfig
    from paperline.methods.qfft.hf import add_lora, merged, trainable
    from paperline.train.lm import LMTrainSettings, train_lm

    tok = D.CharTokenizer()
    encoded = D.encode_examples(tok, D.teacher_examples(D.chain_sum_problems(16, 0, 2, 2, 1), 0, 0.5), False, 60)
    torch.manual_seed(0)
    base = _tiny_lm(tok.vocab_size)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    model = trainable(add_lora(base, LoraConfig(rank=2, alpha=4, target_modules=["q_proj", "v_proj"]), seed=0))
    assert model is not base and type(model).__name__ == "PeftModel"  # our CausalLM under peft, not re-wrapped
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n and (".q_proj." in n or ".v_proj." in n) for n in names)
    adapters = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    s = LMTrainSettings(steps=3, batch_size=4, block_size=60, lr=1e-2, min_lr=1e-3, warmup_steps=1, eval_every=3,
                        log_every=1, checkpoint_every=3)
    train_lm(model, None, None, s, "cpu", sample_batch=D.ExampleSampler(encoded, 4, tok.pad_id),
             val_batches=D.pad_batch(encoded[:4], tok.pad_id))
    # every base weight as it was (the wrapped layers' own weights included); the adapters moved
    frozen = {n.replace("base_model.model.", "").replace(".base_layer", ""): p
              for n, p in model.state_dict().items() if "lora_" not in n}
    assert sorted(frozen) == sorted(before)
    assert all(torch.equal(frozen[k], before[k]) for k in before)
    assert any(not torch.equal(p, adapters[n]) for n, p in model.named_parameters() if p.requires_grad)
    # merged for saving and decoding: a plain CausalLM whose adapted layers changed, the rest not
    plain = merged(model)
    assert type(plain).__name__ == "CausalLM"
    after = plain.state_dict()
    assert sorted(after) == sorted(before)
    changed = {k for k in before if not torch.equal(after[k], before[k])}
    assert changed and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in changed)


def test_a_lora_target_that_names_no_linear_layer_is_an_error():
    from paperline.methods.qfft.config import LoraConfig
    from paperline.methods.qfft.hf import add_lora

    with pytest.raises(ValueError, match=r"finetune.lora.target_modules: 'c_attn' matches no linear layer.*q_proj"):
        add_lora(_tiny_lm(D.CharTokenizer().vocab_size), LoraConfig(target_modules=["c_attn"]))


def test_first_pass_responses_keep_a_right_base_answer_and_recheck_a_wrong_one():
    p = D.Problem("3+4-2+6", "11", (3, 4, -2, 6))
    right = "3+4=7 7-2=5 5+6=11 A:11"
    assert D.first_pass_response(p, right) == right  # short CoT, no reflection
    wrong = "3+4=7 7-2=4 4+6=10 A:10"  # the base's own slip
    assert D.first_pass_response(p, wrong) == ("3+4=7 7-2=4 4+6=10 Wait, recheck: 3+4=7 7-2=5 5+6=11 "
                                               "so the answer changes. A:11")
    assert D.first_pass_response(p, "3+4=7 7-2=5") == ("3+4=7 7-2=5 Wait, recheck: 3+4=7 7-2=5 5+6=11 "
                                                       "so the answer changes. A:11")  # no answer stated: wrong
    assert D.first_pass_response(p, "") == "Wait, recheck: 3+4=7 7-2=5 5+6=11 so the answer changes. A:11"
    examples = D.base_first_pass_examples([p, p], [right, wrong])
    assert [e.answer for e in examples] == ["11", "11"] and "Wait" not in examples[0].response
    assert M.extract_answer(examples[1].response) == "11"
    with pytest.raises(ValueError, match="1 first passes for 2 problems"):
        D.base_first_pass_examples([p, p], [right])


def test_rows_over_seeds_are_means_and_spreads_of_each_seeds_own_scoring():
    from paperline.methods.qfft.summary import method_metrics

    def result(correct, long_cot, length=10):
        return {"samples": [{"correct": correct, "long_cot": long_cot, "length": [length] * len(correct)}],
                "train": {"val_loss": 1.0}}

    # seed 0's base solves questions 0-1, seed 1's base questions 0-2: each seed's easy split is its own
    by_seed = {
        0: {"base": result([1, 1, 0, 0], [0, 0, 0, 0]),
            "variants": {"sft": result([1, 0, 0, 0], [1, 1, 1, 1], 20), "qfft": result([1, 1, 0, 0], [0, 0, 1, 1]),
                         "sft_noise_iv": result([0, 0, 0, 0], [1, 1, 1, 1]), "qfft_noise_iv": result([1, 1, 0, 0], [0, 0, 1, 1])}},
        1: {"base": result([1, 1, 1, 0], [0, 0, 0, 0]),
            "variants": {"sft": result([1, 1, 0, 0], [1, 1, 1, 1], 20), "qfft": result([0, 0, 0, 0], [0, 0, 0, 1]),
                         "sft_noise_iv": result([0, 0, 0, 0], [1, 1, 1, 1]), "qfft_noise_iv": result([0, 0, 0, 0], [0, 0, 0, 1])}},
    }
    m = method_metrics(by_seed, "tiny")
    seeds = m.tables["seeds"]
    assert seeds["base_s0"]["questions_easy"] == 2 and seeds["base_s1"]["questions_easy"] == 3
    assert seeds["qfft_s0"]["rak"] == pytest.approx(1.0) and seeds["qfft_s1"]["rak"] == pytest.approx(1.0)
    assert seeds["sft_s0"]["rak"] == 0.0  # always long: κ 0
    assert m.rows["sft"]["all_accuracy"] == pytest.approx(0.375)
    assert m.rows["sft"]["all_accuracy_std"] == pytest.approx(0.125 * 2 ** 0.5)  # the sample std of 0.25 and 0.5
    assert m.rows["base"]["all_accuracy"] == pytest.approx(0.625) and m.rows["base"]["seeds"] == 2
    assert m.rows["qfft"]["easy_accuracy"] == pytest.approx(0.5)  # (2/2 + 0/3) / 2
    # AES per seed against its own base, then averaged
    aes = [M.aes(seeds[f"sft_s{s}"]["all_mean_length"], seeds[f"sft_s{s}"]["all_accuracy"],
                 seeds[f"base_s{s}"]["all_mean_length"], seeds[f"base_s{s}"]["all_accuracy"]) for s in (0, 1)]
    assert m.rows["sft"]["aes"] == pytest.approx(sum(aes) / 2)
    h = m.headline
    assert h["seeds"] == 2 and h["questions"] == 4
    assert h["qfft_minus_sft_accuracy"] == pytest.approx(m.rows["qfft"]["all_accuracy"] - m.rows["sft"]["all_accuracy"])
    assert not any("seeds_qfft" in k for k in h)  # verdicts live in the claims, paired by seed
    by_name = {c.name: c for c in m.claims}
    rak = by_name["qfft_rak_above_sft"]  # qfft's RAK 1.0 against sft's 0.0 at both seeds
    assert rak.seeds == 2 and rak.effect == pytest.approx(1.0) and rak.verdict == "inconclusive"  # two seeds
    assert by_name["qfft_accuracy_above_base"].trivial


def test_seeds_default_to_the_seed_and_a_repeated_seed_is_refused():
    from pydantic import ValidationError

    from paperline.methods.qfft.config import QFFTConfig

    assert QFFTConfig(seed=7).run_seeds() == [7] and QFFTConfig(seeds=[3, 4]).run_seeds() == [3, 4]
    with pytest.raises(ValidationError, match=r"seeds: \[1\] listed more than once"):
        QFFTConfig(seeds=[1, 1])


def _lm_base_folder(tmp_path):
    """A miniature of data/lm_base: a byte-level BPE with no special tokens (the corpus's kind) and
    a CausalLM of its vocabulary with 32 positions."""
    from paperline.data.text_corpus import train_tokenizer
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig

    bpe = train_tokenizer(["To be, or not to be: that is the question."] * 4, "bpe", 270)
    bpe.save(str(tmp_path / "tokenizer.json"))
    model = CausalLM(CausalLMConfig(vocab_size=bpe.get_vocab_size(), hidden_size=16, num_layers=1, num_heads=2,
                                    head_dim=8, max_position_embeddings=32))
    model.save_pretrained(tmp_path / "lm_base")
    return tmp_path / "lm_base", tmp_path / "tokenizer.json", model


def test_an_lm_base_start_reads_chain_sums_through_its_bpe_with_three_special_tokens_added(tmp_path):
    from paperline.methods.qfft import pipeline
    from paperline.methods.qfft.config import QFFTConfig

    folder, tokenizer_json, lm = _lm_base_folder(tmp_path)
    cfg = QFFTConfig(base_init="lm_base", lm_base_path=str(folder), lm_base_tokenizer=str(tokenizer_json),
                     cutoff=40, decode={"max_new_tokens": 20})
    tok = pipeline.tokenizer(cfg)
    v = lm.config.vocab_size
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.vocab_size) == (v, v + 1, v + 2, v + 3)
    text = "3+4-2=5 7-2=5 A:5 Wait, recheck: 3+4=7"
    ids = tok.encode(text)
    assert max(ids) < v and tok.decode(ids) == text and tok.decode([tok.bos_id, *ids, tok.eos_id]) == text
    torch.manual_seed(0)
    model = pipeline.base_model(cfg, tok)
    # the pretrained rows kept, three new ones (tied: the output layer grows with them), positions raised
    assert model.get_input_embeddings().weight.shape[0] == v + 3 and model.lm_head.weight.shape[0] == v + 3
    assert torch.equal(model.get_input_embeddings().weight[:v], lm.get_input_embeddings().weight)
    assert model.config.max_position_embeddings == 40 + 20 + 64
    x = torch.tensor([[tok.bos_id, *ids, tok.eos_id]])
    assert x.shape[1] > 32 and model(x, labels=x).loss.isfinite()  # past the pretrained 32 positions


def test_an_lm_base_start_that_is_missing_or_mismatched_is_named_before_training(tmp_path):
    from pydantic import ValidationError

    from paperline.methods.qfft import pipeline
    from paperline.methods.qfft.config import QFFTConfig
    from paperline.methods.qfft.data import QFFTDataError

    folder, tokenizer_json, _ = _lm_base_folder(tmp_path)
    small = dict(problems={"base_train": 16, "finetune": 16, "eval": 8, "max_terms": 3, "max_digits": 1})
    missing = QFFTConfig(base_init="lm_base", lm_base_path=str(tmp_path / "nowhere"),
                         lm_base_tokenizer=str(tokenizer_json), **small)
    with pytest.raises(QFFTDataError, match=r"nowhere/config.json missing \(run the lm-base stage"):
        pipeline.check_example_sets(missing, tmp_path / "data")
    from paperline.data.text_corpus import train_tokenizer

    train_tokenizer(["other text entirely"], "byte", 256).save(str(tmp_path / "other.json"))
    mismatched = QFFTConfig(base_init="lm_base", lm_base_path=str(folder), lm_base_tokenizer=str(tmp_path / "other.json"),
                            **small)
    with pytest.raises(QFFTDataError, match="has vocab_size .* but .*other.json 256 tokens"):
        pipeline.check_example_sets(mismatched, tmp_path / "data")
    with pytest.raises(QFFTDataError, match="not a tokenizers tokenizer.json"):
        pipeline.tokenizer(QFFTConfig(base_init="lm_base", lm_base_tokenizer=str(tmp_path / "none.json")))
    with pytest.raises(ValidationError, match="base_init: 'lm_base' trains a base from the shared LM"):
        QFFTConfig(base_init="lm_base", base_model_path=str(folder))
