"""Memory Decoder library: the kNN distribution against a hand-computed example, self-match
dropping, the α·KL + (1−α)·CE loss, λ mixing, the datastore round trip, IVF-PQ against exact search,
the key hook, the generated domain corpus and the real-text loader's errors."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperline.data.text_corpus import CorpusError
from paperline.methods.memory_decoder.config import DatastoreConfig, DomainConfig, MemoryDecoderConfig
from paperline.methods.memory_decoder.corpora import generate_domain, read_domain_text
from paperline.methods.memory_decoder.datastore import (
    Datastore,
    build_index,
    extract_keys,
    load_datastore,
    logits_and_keys,
    save_datastore,
)
from paperline.methods.memory_decoder.knn import drop_self, knn_distribution, knn_target_probability
from paperline.methods.memory_decoder.memdec import memdec_loss, mix_log_probs, perplexity_sweep


def test_knn_distribution_matches_a_hand_computed_example():
    # distances 0, 2, 4 with τ = 2: weights ∝ e^0, e^-1, e^-2; values 3, 1, 3 → p(3) = (1 + e^-2)/Z
    d = np.array([[0.0, 2.0, 4.0]], dtype=np.float32)
    v = np.array([[3, 1, 3]])
    z = 1 + math.exp(-1) + math.exp(-2)
    p = knn_distribution(d, v, vocab_size=5, temperature=2.0)
    expected = torch.tensor([[0, math.exp(-1) / z, 0, (1 + math.exp(-2)) / z, 0]])
    torch.testing.assert_close(p, expected.float())
    torch.testing.assert_close(knn_target_probability(d, v, np.array([3]), 2.0), expected[:, 3].float())


def test_drop_self_removes_the_own_entry_by_id_else_the_farthest():
    d = np.array([[0.0, 1.0, 2.0], [0.5, 1.0, 3.0]], dtype=np.float32)
    ids = np.array([[7, 4, 9], [2, 3, 8]])
    kept_d, kept_ids = drop_self(d, ids, self_ids=np.array([4, 5]), k=2)
    np.testing.assert_array_equal(kept_ids, [[7, 9], [2, 3]])
    np.testing.assert_array_equal(kept_d, [[0.0, 2.0], [0.5, 1.0]])


def test_memdec_loss_is_alpha_kl_plus_one_minus_alpha_ce():
    torch.manual_seed(0)
    logits, labels = torch.randn(6, 5), torch.randint(5, (6,))
    p = torch.softmax(torch.randn(6, 5), -1)
    q = torch.softmax(logits, -1)
    kl = (p * (p.log() - q.log())).sum(-1).mean()
    ce = -q.log()[torch.arange(6), labels].mean()
    out = memdec_loss(logits, labels, p * 3.0, alpha=0.3)  # unnormalized targets are renormalized
    torch.testing.assert_close(out["kl"], kl)
    torch.testing.assert_close(out["loss"], 0.3 * kl + 0.7 * ce)
    assert memdec_loss(logits, labels, q, 1.0)["loss"].abs() < 1e-6  # KL of a distribution to itself


def test_mixing_is_linear_in_probability_and_lambda_zero_is_the_base():
    a, b = torch.log(torch.tensor([0.2, 0.5])), torch.log(torch.tensor([0.6, 0.0]))
    torch.testing.assert_close(mix_log_probs(a, b, 0.25).exp(), torch.tensor([0.75 * 0.2 + 0.25 * 0.6, 0.375]))
    torch.testing.assert_close(mix_log_probs(a, b, 0.0), a)
    ppl = perplexity_sweep(a, b, [0.0, 0.25])
    assert ppl[0.0] == pytest.approx(math.exp(-(math.log(0.2) + math.log(0.5)) / 2))
    with pytest.raises(ValueError, match="λ"):
        mix_log_probs(a, b, 1.5)


def _keys(n=600, d=16, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(12, d)) * 4
    return (centres[rng.integers(12, size=n)] + rng.normal(size=(n, d))).astype(np.float32)


def test_datastore_round_trip_keeps_keys_values_and_search(tmp_path):
    keys = _keys()
    values = np.arange(len(keys)) % 7
    store = Datastore(keys, values, build_index(keys, DatastoreConfig(index="flat")))
    save_datastore(store, tmp_path / "ds", {"k": 1})
    loaded, meta = load_datastore(tmp_path / "ds")
    np.testing.assert_array_equal(loaded.values, values)
    d0, i0 = store.search(keys[:20], 5)
    d1, i1 = loaded.search(keys[:20], 5)
    np.testing.assert_array_equal(i0, i1)
    assert (i1[:, 0] == np.arange(20)).all() and np.allclose(d1[:, 0], 0, atol=1e-4)
    assert meta["entries"] == len(keys) and meta["index_bytes"] > keys.nbytes
    (tmp_path / "ds" / "values.npy").unlink()
    with pytest.raises(FileNotFoundError, match="values.npy"):
        load_datastore(tmp_path / "ds")


def test_ivfpq_recalls_most_exact_neighbours_with_smaller_codes():
    keys = _keys(n=2000)
    exact = Datastore(keys, np.zeros(len(keys)), build_index(keys, DatastoreConfig(index="flat")))
    ivfpq = Datastore(keys, np.zeros(len(keys)),
                      build_index(keys, DatastoreConfig(index="ivfpq", nlist=16, code_size=8, nprobe=16)))
    queries = _keys(n=50, seed=1)
    _, exact_ids = exact.search(queries, 10)
    _, approx_ids = ivfpq.search(queries, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact_ids, approx_ids)])
    assert recall > 0.4, recall
    # 8-byte codes (+ 8-byte ids, + the PQ codebooks) vs 64-byte float keys
    assert ivfpq.index_bytes() < exact.index_bytes() / 2
    with pytest.raises(ValueError, match="code_size"):
        build_index(keys, DatastoreConfig(index="ivfpq", code_size=5))


def _tiny_model(vocab=40, layers=2):
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig

    torch.manual_seed(0)
    model = CausalLM(CausalLMConfig(vocab_size=vocab, hidden_size=16, num_layers=layers, num_heads=2,
                                    head_dim=8, max_position_embeddings=64))
    for p in model.parameters():  # non-zero residual outputs so the key depends on the context
        torch.nn.init.normal_(p, std=0.2)
    return model


def test_keys_are_the_last_ffn_input_and_line_up_with_next_tokens():
    model = _tiny_model()
    tokens = np.random.default_rng(0).integers(40, size=50).astype(np.uint16)
    x = torch.as_tensor(tokens[None, :16].astype(np.int64))
    logits, k = logits_and_keys(model, x)
    # recompute the last block's FFN input by hand: RMSNorm(h + attn(RMSNorm(h)))
    h = model.embed_tokens(x)
    for block in model.layers[:-1]:
        h, _ = block(h, 0, None)
    last = model.layers[-1]
    a, _ = last.attn(F.rms_norm(h, (16,), eps=model.config.rms_norm_eps), 0, None)
    torch.testing.assert_close(k, F.rms_norm(h + a, (16,), eps=model.config.rms_norm_eps))
    keys, values = extract_keys(model, tokens, block_size=16, device="cpu")
    assert keys.shape == (49, 16) and (values == tokens[1:]).all()
    torch.testing.assert_close(torch.as_tensor(keys[:16]), k[0])


def test_generated_domain_marks_value_tokens_and_repeats_facts():
    from paperline.data.text_corpus import train_tokenizer

    tok = train_tokenizer(["hello world, my lord, it is written"], "byte", 256)
    cfg = DomainConfig(entities=5, relations=2, train_repeats=3, val_repeats=1)
    train, val, facts = generate_domain(cfg, tok)
    assert len(facts) == 10 and len({f.value for f in facts}) == 10
    text = tok.decode(train.tokens.tolist())
    assert all(text.count(f" {f.value}") >= 3 for f in facts)
    assert tok.decode(train.tokens[train.fact_mask].tolist()).strip()[:1].isupper()
    assert len(val.tokens) == len(val.fact_mask) and val.fact_mask.any()
    assert generate_domain(cfg, tok)[0].tokens.tobytes() == train.tokens.tobytes()  # seeded


def test_domain_text_loader_splits_and_names_bad_files(tmp_path):
    from paperline.data.text_corpus import train_tokenizer

    tok = train_tokenizer(["abc"], "byte", 256)
    good = tmp_path / "domain.txt"
    good.write_text("".join(f"line {i} of the domain\n" for i in range(20)))
    train, val = read_domain_text(good, tok, 0.1)
    assert tok.decode(val.tokens.tolist()).startswith("line 18")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nalso fine\n\xff\xfe broken\n")
    with pytest.raises(CorpusError, match=r"bad.txt: line 3: not UTF-8"):
        read_domain_text(bad, tok, 0.1)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(CorpusError, match="empty.txt"):
        read_domain_text(tmp_path / "empty.txt", tok, 0.1)


def test_config_rejects_inconsistent_settings():
    with pytest.raises(ValueError, match="base_small"):
        MemoryDecoderConfig(memdec={"hidden_size": 32})
    with pytest.raises(ValueError, match="0.0"):
        MemoryDecoderConfig(lambdas=[0.5])
    with pytest.raises(ValueError):
        MemoryDecoderConfig(lambdas=[0.0, 1.0])
