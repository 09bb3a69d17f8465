"""The paper profile's model path: a transformers causal LM read from a local folder (a tiny LLaMA
and a byte-level BPE tokenizer written here; nothing is downloaded) through warm-up, selection and
fine-tuning, with the Tulu template tokenized by its tokenizer."""
from __future__ import annotations

import pytest
import torch

from paperline.data.tulu_pool import TuluPoolConfig, write_pool
from paperline.methods.influence_distillation import pipeline
from paperline.methods.influence_distillation.config import InfluenceDistillationConfig
from paperline.methods.influence_distillation.finetune import clone_state


def _write_tiny_hf_model(folder):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(["<|user|>\nWhat is 2 times 3?\n<|assistant|>\nThe answer is 6."] * 5,
                           trainers.BpeTrainer(vocab_size=300, special_tokens=["</s>", "<pad>"],
                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="</s>", pad_token="<pad>")
    fast.save_pretrained(folder)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                      eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(folder)


def test_a_local_transformers_model_runs_the_pipeline(tmp_path):
    pytest.importorskip("transformers")
    _write_tiny_hf_model(tmp_path / "model")
    write_pool(TuluPoolConfig(pool_size=40, target_size=2, eval_size=3), tmp_path / "tulu")
    cfg = InfluenceDistillationConfig(model="hf", hf_model_path=str(tmp_path / "model"), max_length=64,
                                      warmup_samples=16, warmup_steps=3, batch_size=4, num_landmarks=8,
                                      grad_proj_dim=256, select_k=10, jvp_blocks=1)
    prep = pipeline.prepare(cfg, tmp_path / "tulu")
    assert prep.model.down_proj_names() == ["net.model.layers.0.mlp.down_proj.weight",
                                            "net.model.layers.1.mlp.down_proj.weight"]
    cut = [n for n, _ in prep.model.truncated(1).named_parameters()]
    assert cut[0] == "net.model.embed_tokens.weight" and cut[-1] == "net.model.norm.weight"
    assert {n.split(".")[3] for n in cut if ".layers." in n} == {"0"} and len(prep.model.net.model.layers) == 2
    assert prep.pool.tokens.max() < prep.tokenizer.vocab_size and prep.pool.mask.any(1).all()
    optimizer, history = pipeline.warm_up(cfg, prep, None)
    assert len(history["train_loss"]) == 3
    out = pipeline.select_all(cfg, prep, optimizer)
    assert out["selections"]["influence_distillation"]["gradient_evaluations"] == 8 + len(prep.targets)
    assert -1 <= out["comparison"]["id_vs_exact_spearman_of_target_mean"] <= 1
    model_state, opt_state = clone_state(prep.model, optimizer)
    warm = {"state": {"model": model_state, "optimizer": opt_state}, "fingerprint": 0}  # as the warm-up saves it
    result = pipeline.finetune_and_evaluate(cfg, prep, warm, out["selections"]["influence_distillation"]["indices"],
                                            None, "id")
    assert set(result["eval"]) == {"gsm8k_like", "mmlu_like", "squad_like"}
    assert 0 <= result["eval"]["mmlu_like"]["choice_accuracy"] <= 1


def _write_mini_lm_base(tmp_path):
    """A miniature of data/lm_base: the corpus's kind of BPE (no special tokens) and a 2-layer
    CausalLM of its vocabulary with 32 positions (the pipeline raises it to max_length)."""
    from paperline.data.text_corpus import train_tokenizer
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig

    bpe = train_tokenizer(["<|user|>\nWhat is 2 times 3?\n<|assistant|>\nThe answer is 6."] * 4, "bpe", 280)
    bpe.save(str(tmp_path / "tokenizer.json"))
    torch.manual_seed(0)
    CausalLM(CausalLMConfig(vocab_size=bpe.get_vocab_size(), hidden_size=16, num_layers=2, num_heads=2,
                            head_dim=8, max_position_embeddings=32)).save_pretrained(tmp_path / "lm_base")
    return tmp_path / "lm_base", tmp_path / "tokenizer.json", bpe.get_vocab_size()


def test_the_shared_lm_base_runs_the_pipeline_through_its_bpe_with_eos_and_pad_appended(tmp_path):
    folder, bpe_path, bpe_size = _write_mini_lm_base(tmp_path)
    write_pool(TuluPoolConfig(pool_size=40, target_size=2, eval_size=3), tmp_path / "tulu")
    cfg = InfluenceDistillationConfig(model="lm_base", lm_base_path=str(folder), lm_base_tokenizer=str(bpe_path),
                                      max_length=256, warmup_samples=16, warmup_steps=2, batch_size=4,
                                      num_landmarks=8, grad_proj_dim=256, jvp_proj_dim=64, select_k=10)
    prep = pipeline.prepare(cfg, tmp_path / "tulu")
    tok = prep.tokenizer
    assert (tok.eos_id, tok.pad_id, tok.vocab_size) == (bpe_size, bpe_size + 1, bpe_size + 2)
    assert prep.model.net.config.vocab_size == bpe_size + 2 and prep.model.net.config.max_position_embeddings == 256
    # every sample not cut to max_length ends on the eos read out of `</s>`; the BPE's ids, no BOS, first
    whole = prep.pool.lengths < 256
    ends = prep.pool.tokens[torch.arange(len(prep.pool)), prep.pool.lengths - 1]
    assert whole.sum() >= 10 and (ends[whole] == tok.eos_id).all() and (prep.pool.tokens[:, 0] < bpe_size).all()
    assert prep.pool.tokens.max() == tok.pad_id and prep.pool.mask.any(1).all()
    again = pipeline.prepare(cfg, tmp_path / "tulu").model.net.lm_head.weight
    assert torch.equal(again, prep.model.net.lm_head.weight)  # the appended rows are seeded
    optimizer, _ = pipeline.warm_up(cfg, prep, None)
    out = pipeline.select_all(cfg, prep, optimizer)
    assert out["selections"]["influence_distillation"]["gradient_evaluations"] == 8 + len(prep.targets)
    assert pipeline.selection_fingerprint(cfg)["lm_base_path"] == str(folder)
    assert "lm_base_path" not in pipeline.selection_fingerprint(InfluenceDistillationConfig())


def test_an_lm_base_that_is_missing_or_not_the_tokenizers_is_named(tmp_path):
    from paperline.io import DataError

    folder, bpe_path, bpe_size = _write_mini_lm_base(tmp_path)
    missing = InfluenceDistillationConfig(model="lm_base", lm_base_path=str(tmp_path / "nowhere"),
                                          lm_base_tokenizer=str(bpe_path))
    with pytest.raises(DataError, match=r"nowhere/config.json missing \(run the lm-base stage"):
        pipeline.build_model(missing, 0)
    from paperline.data.text_corpus import train_tokenizer

    train_tokenizer(["something else entirely"] * 4, "bpe", 262).save(str(tmp_path / "other.json"))
    other = InfluenceDistillationConfig(model="lm_base", lm_base_path=str(folder),
                                        lm_base_tokenizer=str(tmp_path / "other.json"))
    with pytest.raises(DataError, match=rf"vocab_size {bpe_size} but .*other.json .*lm_base_tokenizer"):
        pipeline.build_model(other, 0)
    deep = InfluenceDistillationConfig(model="lm_base", lm_base_path=str(folder), lm_base_tokenizer=str(bpe_path),
                                       jvp_blocks=3)
    with pytest.raises(DataError, match="jvp_blocks 3 exceeds the 2 layers"):
        pipeline.build_model(deep, 0)
