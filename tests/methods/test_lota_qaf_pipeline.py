"""The LoTA-QAF pipeline end to end at tiny size: on a CausalLM and on a transformers Llama folder the
test writes (the paper profile's real format), digits; the inputs checked before any training."""
import json

import numpy as np
import pytest
import torch

from paperline.config import ParamsError, validate
from paperline.methods.lota_qaf.config import LotaQafConfig
from paperline.methods.lota_qaf.pipeline import open_data, run_group
from paperline.methods.lota_qaf.quant import QuantError
from paperline.methods.lota_qaf.summary import method_metrics

VOCAB = 64


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A corpus folder in the text-corpus stage's format (flat uint16 tokens, a BPE tokenizer file)."""
    folder = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    for split, n in (("train", 4000), ("val", 1000)):
        # a learnable stream: each token mostly follows its predecessor + 1
        tokens = np.cumsum(rng.integers(0, 2, n)) % VOCAB
        tokens.astype(np.uint16).tofile(folder / f"{split}.bin")
    vocab = {f"t{i}": i for i in range(VOCAB)}
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": []}}))
    (folder / "corpus.json").write_text(json.dumps({"vocab_size": VOCAB, "fingerprint": "test"}))
    return folder


def _causal_lm(folder):
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig

    config = CausalLMConfig(vocab_size=VOCAB, hidden_size=32, num_layers=1, num_heads=2, head_dim=16,
                            max_position_embeddings=32)
    CausalLM.seeded(config, torch.Generator().manual_seed(0)).save_pretrained(folder)
    return folder


def _llama(folder):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2,
                                 max_position_embeddings=32)).save_pretrained(folder)
    return folder


def _cfg(corpus, model_dir, **extra):
    values = {"tasks": ["lm"], "bits": [2], "lota": {"rank": 4}, "lora": {"rank": 4}, "qalora": {"rank": 2},
              "lm": {"model_dir": str(model_dir), "corpus_dir": str(corpus), "block_size": 16, "batch_size": 4,
                     "steps": 4, "group_size": 16, "eval_windows": 4, "calibration_windows": 4}} | extra
    return validate(LotaQafConfig, values, "lota_qaf.profiles.test")


@pytest.mark.parametrize("make", [_causal_lm, _llama], ids=["causal_lm", "llama"])
def test_lm_group_on_a_model_folder(make, corpus, tmp_path):
    cfg = _cfg(corpus, make(tmp_path / "model"))
    data = open_data(cfg, cfg.lm.model_dir)
    result = run_group(cfg, "lm", 2, data, tmp_path / "unused.pt")
    rows = result["rows"]
    assert set(rows) == {"lm_w2_quantized", "lm_w2_lota", "lm_w2_lora", "lm_w2_qalora"}
    lota = rows["lm_w2_lota"]
    assert lota["bit_identical"] and lota["codes_on_grid"] and lota["merge_gap"] == 0
    assert lota["model_bytes"] < lota["lora16_bytes"]
    assert rows["lm_w2_qalora"]["changed_share"] == 0  # QA-LoRA moves zero points only
    assert all(np.isfinite(r["perplexity"]) for r in rows.values())
    assert len(result["histories"]["lm_w2_lora"]) == 4


def test_digits_to_metrics(tmp_path):
    cfg = validate(LotaQafConfig, {"tasks": ["digits"], "bits": [3], "quantizer": "rtn",
                                   "digits": {"hidden": 32, "epochs": 2, "steps": 3}}, "lota_qaf")
    data = open_data(cfg, None)
    from paperline.methods.lota_qaf.pipeline import build_task, float_model, score_row

    model, record = float_model(cfg, "digits", data, tmp_path / "mlp.pt")
    assert record and (tmp_path / "mlp.pt").is_file()
    rows = {"digits_float": score_row(build_task(cfg, "digits", data), model)}
    one = run_group(cfg, "digits", 3, data, tmp_path / "mlp.pt")
    two = run_group(cfg.model_copy(update={"seeds": [0, 7]}), "digits", 3, data, tmp_path / "mlp.pt")
    # seed 0's recoveries are the one-seed run's, figure for figure; the rows the mean over seeds
    assert all(two["seed_rows"][v][0] | {"train_seconds": 0} == row | {"train_seconds": 0}
               for v, (row,) in one["seed_rows"].items())
    assert two["histories"]["digits_w3_lota"] == one["histories"]["digits_w3_lota"]
    assert two["rows"]["digits_w3_lora"]["seeds"] == 2 and "digits_w3_lora/seed1" in two["histories"]
    assert two["rows"]["digits_w3_lora"]["accuracy"] == pytest.approx(
        sum(r["accuracy"] for r in two["seed_rows"]["digits_w3_lora"]) / 2)
    rows |= two["rows"]
    metrics = method_metrics(cfg, rows, two["seed_rows"], two["histories"], "tiny")
    claims = {c.name: c for c in metrics.claims}
    assert claims["lota_merge_bit_identical"].verdict == claims["lota_codes_on_grid"].verdict == "exact"
    assert claims["digits_w3_lota_beats_quantized"].trivial and claims["digits_w3_lota_beats_quantized"].seeds == 2
    assert metrics.headline["lota_max_merge_loss"] == 0
    assert set(metrics.tables["digits_accuracy"]["w3"]) >= {"float", "quantized", "lota_merged", "lora_unmerged"}


def test_bad_inputs_fail_before_training(corpus, tmp_path):
    with pytest.raises(ParamsError, match=r"lota_qaf\.bits: .*bit width 5 is not one of 2, 3, 4, 8"):
        validate(LotaQafConfig, {"bits": [4, 5]}, "lota_qaf")
    from paperline.train.lm_base import ModelDirError

    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelDirError, match="empty"):
        open_data(_cfg(corpus, tmp_path / "empty"), str(tmp_path / "empty"))
    model = _causal_lm(tmp_path / "model")
    with pytest.raises(QuantError, match="lm.target_modules: 'c_attn'"):
        open_data(_cfg(corpus, model, lm={"model_dir": str(model), "corpus_dir": str(corpus),
                                          "target_modules": ["c_attn"]}), str(model))
    with pytest.raises(QuantError, match="lota.rank: rank 64 above the width 32"):
        open_data(_cfg(corpus, model, lota={"rank": 64}), str(model))


def test_a_llama_folder_with_its_own_tokenizer_reads_the_slice_in_its_vocabulary(corpus, tmp_path):
    """The paper profile's format with a vocabulary (300) that is not the corpus's (64): refused
    without the model's tokenizer.json, naming it; with it, the committed Shakespeare slice (two
    plays copied here) is encoded by that tokenizer and the group runs."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from paperline.data.text_corpus import CorpusError, read_slice, train_tokenizer
    from tests.conftest import two_play_slice

    plays = two_play_slice(tmp_path / "plays")
    folder = tmp_path / "llama"
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2,
                                 max_position_embeddings=32)).save_pretrained(folder)
    cfg = _cfg(corpus, folder, lm={"model_dir": str(folder), "corpus_dir": str(corpus), "source_text": str(plays),
                                   "block_size": 16, "batch_size": 4, "steps": 2, "group_size": 16,
                                   "eval_windows": 4, "calibration_windows": 4}, methods=["lota"])
    with pytest.raises(CorpusError, match=r"vocab_size 300 .*tokenizer.json in"):
        open_data(cfg, str(folder))
    train_tokenizer([d.text for d in read_slice(plays)], "bpe", 300).save(str(folder / "tokenizer.json"))
    data = open_data(cfg, str(folder))
    assert str(folder / "tokenizer.json") in data.inputs
    rows = run_group(cfg, "lm", 2, data, tmp_path / "unused.pt")["rows"]
    assert rows["lm_w2_lota"]["bit_identical"] and np.isfinite(rows["lm_w2_quantized"]["perplexity_rtn"])


def test_the_float_mlp_is_a_record_read_back_for_its_settings_only(tmp_path):
    from paperline.methods.lota_qaf.pipeline import float_model

    cfg = validate(LotaQafConfig, {"tasks": ["digits"], "bits": [3], "quantizer": "rtn",
                                   "digits": {"hidden": 16, "epochs": 1}}, "lota_qaf")
    data, path = open_data(cfg, None), tmp_path / "mlp.pt"
    trained, record = float_model(cfg, "digits", data, path)
    assert record["epoch_loss"] and path.is_file()
    read, again = float_model(cfg, "digits", data, path)
    assert again == {}  # read back, not trained: the flow logs the training once
    assert all(torch.equal(a, b) for a, b in zip(trained.state_dict().values(), read.state_dict().values()))
    retrained, record = float_model(cfg.model_copy(update={"seed": 1}), "digits", data, path)
    assert record  # another seed trains anew over the record
    assert not torch.equal(retrained.state_dict()["0.weight"], trained.state_dict()["0.weight"])
