"""The lm-base prep stage and its loader: the tiny DAG's folder is a transformers model directory
whose weights are the trained ones (its recorded validation loss is what the reloaded model
scores), and `load_causal_lm` refuses a folder that is not a causal LM, naming the path."""
from __future__ import annotations

import json

import pytest
import torch

from paperline.config import read_params
from paperline.data.text_corpus import load_corpus
from paperline.nn.causal_lm import CausalLM, CausalLMConfig
from paperline.train.lm import evaluate, validation_windows
from paperline.train.lm_base import ModelDirError, load_causal_lm, read_lm_base


@pytest.mark.dag_stage("lm-base")
def test_the_dag_base_reloads_with_its_recorded_validation_loss(dag_stage):
    params = read_params(dag_stage / "params")
    tiny = params["lm_base"]["profiles"]["tiny"]
    model, record = read_lm_base(dag_stage / "data" / "lm_base")
    assert isinstance(model, CausalLM) and record["steps"] == tiny["train"]["steps"]
    assert model.config.hidden_size == tiny["shape"]["hidden_size"] and model.config.vocab_size == record["vocab_size"]
    assert not (dag_stage / "data" / "lm_base" / "train.pt").exists()  # finished: no resume state left
    corpus = load_corpus(dag_stage / "data" / "text" / "shakespeare", record["block_size"])
    windows = validation_windows(corpus.val, record["block_size"], tiny["train"]["eval_windows"])
    loss = evaluate(model, windows, tiny["train"]["batch_size"], "cpu")
    assert loss == pytest.approx(record["val_loss"], abs=1e-5)
    # the record's fingerprint is what a method compares its params with
    with pytest.raises(Exception, match="other lm_base parameters"):
        read_lm_base(dag_stage / "data" / "lm_base", fingerprint="not-this-one")


def test_load_causal_lm_round_trips_and_refuses_what_is_not_a_causal_lm(tmp_path):
    from transformers import ViTConfig

    model = CausalLM.seeded(CausalLMConfig(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2, head_dim=8),
                            torch.Generator().manual_seed(0))
    model.save_pretrained(tmp_path / "lm")
    x = torch.randint(0, 40, (2, 7))
    assert torch.equal(load_causal_lm(tmp_path / "lm")(x).logits, model(x).logits)

    with pytest.raises(ModelDirError, match=f"{tmp_path / 'empty'}: not a transformers model directory"):
        (tmp_path / "empty").mkdir()
        load_causal_lm(tmp_path / "empty")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "config.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(ModelDirError, match="junk/config.json: not a transformers config"):
        load_causal_lm(tmp_path / "junk")
    ViTConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8).save_pretrained(tmp_path / "vit")
    with pytest.raises(ModelDirError, match="'vit' is not a causal LM"):
        load_causal_lm(tmp_path / "vit")
    (tmp_path / "lm" / "model.safetensors").unlink()
    with pytest.raises(ModelDirError, match="no loadable weights"):
        load_causal_lm(tmp_path / "lm")


@pytest.mark.dag_stage("lm-base")
def test_the_base_spread_over_two_ddp_processes_is_the_dag_base(dag_stage, tmp_path):
    """params/runtime.yaml runtime.distributed reaches the base's pretraining: two CPU processes (gloo) at
    the same global batch write the folder the one-process stage wrote, to float-reduction
    tolerance (the all-reduce sums in another order)."""
    from paperline.train.distributed import DistributedConfig
    from paperline.train.lm_base import build_lm_base
    from tasks.lm_base import resolve

    torch.set_num_threads(1)
    params = read_params(dag_stage / "params")
    _, cfg = resolve(params, "tiny")
    record = build_lm_base(cfg, dag_stage / cfg.corpus, tmp_path / "base",
                           distributed=DistributedConfig(strategy="ddp", accelerator="cpu", devices=2))
    single, single_record = read_lm_base(dag_stage / "data" / "lm_base")
    spread, _ = read_lm_base(tmp_path / "base", fingerprint=single_record["fingerprint"])
    assert record["steps"] == single_record["steps"] and (record["processes"], single_record["processes"]) == (2, 1)
    assert record["val_loss"] == pytest.approx(single_record["val_loss"], rel=1e-4)
    for name, weight in single.state_dict().items():
        torch.testing.assert_close(spread.state_dict()[name], weight, rtol=1e-3, atol=1e-4)
