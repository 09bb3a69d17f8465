"""QFFT's encoding against the official template (issue 44): `qwen_qfft` in
LWL-cpu/Question-Free-Fine-Tuning formats the assistant turn as `{{content}}` alone, so the
question-free example is the response and only its tokens carry labels (no end token); SFT's
`qwen` template ends the turn with a trained end token. Hand-built on the char tokenizer:
digits d -> d + 3, '+' 13, '=' 15, '\\n' 24; <bos> 1, <eos> 2."""
from __future__ import annotations

import pytest
import torch

from paperline.methods.qfft import data as D

X = D.IGNORE  # no label
EXAMPLE = D.Example("1+2", "1+2=3", "3")
RESPONSE = [4, 13, 5, 15, 6]  # "1+2=3"


def test_the_char_tokenizer_gives_the_hand_written_ids():
    tok = D.CharTokenizer()
    assert tok.encode("1+2=3") == RESPONSE and tok.encode("\n") == [24] and (tok.bos_id, tok.eos_id) == (1, 2)


def test_qfft_by_default_labels_the_response_tokens_and_no_end_token():
    [(x, y)] = D.encode_examples(D.CharTokenizer(), [EXAMPLE], with_question=False, cutoff=100)
    assert x == [1, 4, 13, 5, 15]  # <bos> "1+2=" : the last response token is never an input
    assert y == [4, 13, 5, 15, 6]  # every response token labelled, <eos> nowhere


def test_qfft_with_the_named_eos_option_also_trains_the_end_token():
    [(x, y)] = D.encode_examples(D.CharTokenizer(), [EXAMPLE], False, 100, qfft_end="eos")
    assert x == [1, 4, 13, 5, 15, 6] and y == [4, 13, 5, 15, 6, 2]


def test_sft_masks_the_question_and_trains_the_end_token_whatever_qfft_end_says():
    for end in D.QFFT_ENDS:
        [(x, y)] = D.encode_examples(D.CharTokenizer(), [EXAMPLE], True, 100, qfft_end=end)
        assert x == [1, 4, 13, 5, 24, 4, 13, 5, 15, 6]
        assert y == [X, X, X, X, 4, 13, 5, 15, 6, 2]


class _NoBos(D.CharTokenizer):
    bos_id = None  # Qwen's tokenizers: no <bos>, and the qwen_qfft template adds no prefix


def test_without_a_bos_the_example_is_the_official_one_labels_shifted_by_one():
    # LLaMA-Factory: input_ids = labels = the response; the model shifts them, so the first
    # response token (nothing before it) carries no loss
    [(x, y)] = D.encode_examples(_NoBos(), [EXAMPLE], False, 100)
    assert x == RESPONSE[:-1] and y == RESPONSE[1:]


def test_an_unknown_end_is_refused_in_the_encoding_and_the_config():
    from pydantic import ValidationError

    from paperline.methods.qfft.config import QFFTConfig

    with pytest.raises(ValueError, match="qfft_end 'im_end'"):
        D.encode_examples(D.CharTokenizer(), [EXAMPLE], False, 100, qfft_end="im_end")
    assert QFFTConfig().qfft_end == "none"
    with pytest.raises(ValidationError):
        QFFTConfig(qfft_end="im_end")


def test_a_model_that_never_ends_stops_at_max_new_tokens():
    """Without a trained end token a QFFT model may never emit <eos>: decoding still stops."""
    from paperline.methods.qfft.generate import generate_responses

    class NeverEnds(torch.nn.Module):
        def forward(self, x, past_key_values=None, use_cache=True):
            logits = torch.zeros(x.shape[0], x.shape[1], 8)
            logits[..., 5] = 1.0  # always token 5, never <eos> (2)
            return type("Out", (), {"logits": logits, "past_key_values": None})()

    out = generate_responses(NeverEnds(), [[1, 4], [1, 4, 13]], max_new_tokens=7, eos_id=2)
    assert out == [[5] * 7, [5] * 7]


def test_the_paper_budget_follows_llama_factorys_trainer():
    """train_limo_qfft.yaml: 6 epochs of LIMO's 871 at batch 8 = 654 steps, warmup_ratio 0.1
    rounded up (the HF Trainer's ceil: 66, not 65), AdamW beta2 the Trainer's 0.999."""
    from paperline.config import load_method_config, read_params
    from paperline.methods.qfft.config import QFFTConfig
    from paperline.methods.qfft.pipeline import train_settings

    _, cfg = load_method_config(QFFTConfig, read_params("params"), "qfft", "paper",
                                overrides=["base_model_path=/m", "real_data.finetune_jsonl=/a.jsonl",
                                           "real_data.eval_jsonl=/b.jsonl"])
    s = train_settings(cfg.finetune, cfg, 871)
    assert (s.steps, s.warmup_steps, s.beta2, s.batch_size, s.lr) == (654, 66, 0.999, 8, 1e-5)
    _, smoke = load_method_config(QFFTConfig, read_params("params"), "qfft", "smoke")
    assert train_settings(smoke.finetune, smoke, 1000).beta2 == 0.95  # the smoke keeps the shared loop's
