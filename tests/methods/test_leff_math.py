"""LEFF's math, exactly: Taylor importance, block scores and probabilities, the block rules,
attention probabilities, the distillation objective, the client model, layer-wise aggregation,
the baselines' trainable sets, and the Dirichlet split."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperline.methods.leff.data import cut_windows, dirichlet_split
from paperline.methods.leff.leff import (
    add_lora,
    add_zero_biases,
    aggregate,
    attention_probs,
    block_importance,
    block_probabilities,
    build_model,
    choose_block,
    classify,
    context_layers,
    distil_context,
    distillation_loss,
    head_state_keys,
    layer_importance,
    leff_client_model,
    student_map,
    trainable_keys,
)
from paperline.nn.causal_lm import CausalLM, CausalLMConfig


def tiny_lm(layers: int = 4, seed: int = 0) -> CausalLM:
    config = CausalLMConfig(vocab_size=64, hidden_size=16, num_layers=layers, num_heads=2, head_dim=8, num_kv_heads=1,
                            attention="gqa", max_position_embeddings=32)
    return CausalLM.seeded(config, torch.Generator().manual_seed(seed))


def batch(n: int = 3, T: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(64, (n, T), generator=g), torch.randint(64, (n, T), generator=g)


def test_layer_importance_is_the_summed_squared_taylor_term():
    model, (x, y) = tiny_lm(), batch()
    scores = layer_importance(model, x, y)
    assert all(p.grad is None for p in model.parameters())  # left clean for training
    model(x, labels=y).loss.backward()
    for l, layer in enumerate(model.layers):
        expected = sum(float(((p.grad * p.detach()) ** 2).sum()) for p in layer.parameters())
        assert scores[l].item() == pytest.approx(expected, rel=1e-5)


def test_block_scores_probabilities_and_rules():
    scores = torch.tensor([1.0, 4.0, 2.0, 0.5])
    assert block_importance(scores, 2).tolist() == [5.0, 6.0, 2.5]
    assert block_importance(scores, 4).tolist() == [7.5]
    s = torch.tensor([5.0, 6.0, 2.5], dtype=torch.float64)
    assert block_probabilities(scores, 2).tolist() == pytest.approx(torch.softmax(s / s.std(), 0).tolist(), rel=1e-6)
    assert block_probabilities(torch.ones(5), 2).tolist() == pytest.approx([0.25] * 4)  # equal: uniform
    assert block_probabilities(scores, 4).tolist() == [1.0]
    with pytest.raises(ValueError, match="block of 5 layers in a model of 4"):
        block_importance(scores, 5)
    g = torch.Generator().manual_seed(0)
    # a dominant block is sampled (almost) always; every start keeps the block inside the model
    peaked = torch.tensor([0.0, 0.0, 100.0, 100.0, 0.0, 0.0])
    starts = [choose_block("importance", peaked, 2, 6, 1, 0, g) for _ in range(200)]
    assert np.mean([s == 2 for s in starts]) > 0.5 and max(starts) <= 4
    assert all(0 <= choose_block("random", None, 3, 6, r, 0, g) <= 3 for r in range(50))
    assert [choose_block("round_robin", None, 2, 4, r, 1, g) for r in range(1, 5)] == [1, 2, 0, 1]


def test_context_sizes_and_student_map():
    assert [context_layers(n, 0.5) for n in range(5)] == [0, 1, 1, 2, 2]
    assert context_layers(3, 1.0) == 3
    assert student_map(4, 2) == [1, 3] and student_map(3, 3) == [0, 1, 2] and student_map(5, 1) == [4]


def test_attention_probs_reproduce_the_layer_attention():
    model = tiny_lm()
    attn = model.layers[0].attn
    x = torch.randn(2, 6, 16)
    probs = attention_probs(attn, x)
    assert probs.shape == (2, 2, 6, 6) and torch.allclose(probs.sum(-1), torch.ones(2, 2, 6))
    assert torch.all(probs.triu(1) == 0)  # causal
    v = attn.v_proj(x).view(2, 6, 1, 8).transpose(1, 2).repeat_interleave(2, dim=1)
    manual = attn.o_proj((probs @ v).transpose(1, 2).reshape(2, 6, -1))
    assert torch.allclose(manual, attn(x)[0], atol=1e-5)


def test_distillation_objective_is_zero_on_a_copy_and_training_lowers_it():
    model = tiny_lm()
    x = torch.randn(4, 8, 16)
    assert distillation_loss(model.layers, model.layers, x, 1.0).item() == pytest.approx(0.0, abs=1e-6)
    g = torch.Generator().manual_seed(0)
    student, losses = distil_context(model.layers, x, 0.5, 30, 1e-2, 1.0, 4, g)
    assert len(student) == 2 and len(losses) == 30 and losses[-1] < losses[0]
    assert not any(p.requires_grad for p in student.parameters())  # sent frozen
    # started from the mapped teacher layers (3 = the last), not from fresh weights
    untrained, _ = distil_context(model.layers, x, 0.5, 0, 1e-2, 1.0, 4, g)
    assert torch.equal(untrained[1].mlp.up_proj.weight, model.layers[3].mlp.up_proj.weight)



def test_teacher_outputs_of_the_whole_proxy_set_equal_a_batch_forward():
    """distil_context runs the teacher once on every proxy window and indexes each step's batch out
    of it: the rows must be those of a forward on the batch alone, bit for bit (the LEFF run's
    block draws and figures stay those of a per-batch teacher)."""
    from paperline.methods.leff.leff import run_stack

    model = tiny_lm()
    x = torch.randn(32, 32, 16)
    idx = torch.tensor([5, 17, 3, 30, 3, 11, 0, 22])
    with torch.no_grad():
        whole, alone = run_stack(model.layers, x), run_stack(model.layers, x[idx])
    for w, a in zip(whole[0] + whole[1], alone[0] + alone[1]):
        assert torch.equal(w[idx], a)
    assert torch.equal(distillation_loss(model.layers, model.layers[:2], x[idx], 1.0),
                       distillation_loss(model.layers, model.layers[:2], x[idx], 1.0,
                                         ([h[idx] for h in whole[0]], [a[idx] for a in whole[1]])))

def test_client_model_without_compression_is_the_global_model():
    model, (x, _) = tiny_lm(), batch()
    g = torch.Generator().manual_seed(0)
    client, first, _ = leff_client_model(model, 1, 2, x, ratio=1.0, steps=0, lr=1e-3, kl_weight=1.0, batch_size=2,
                                         generator=g)
    assert first == 1 and client.config.num_layers == 4
    assert torch.allclose(client(x).logits, model(x).logits, atol=1e-5)
    small, first, _ = leff_client_model(model, 1, 2, x, ratio=0.5, steps=0, lr=1e-3, kl_weight=1.0, batch_size=2,
                                        generator=g)
    assert first == 1 and small.config.num_layers == 4  # 1 → ⌈0.5⌉ = 1 below, 1 → 1 above
    edge, first, _ = leff_client_model(tiny_lm(6), 0, 2, x, ratio=0.5, steps=0, lr=1e-3, kl_weight=1.0, batch_size=2,
                                       generator=g)
    assert first == 0 and edge.config.num_layers == 2 + 2  # nothing below; 4 above → 2
    # a classifier rides along: the client's head is the global one
    with_head = build_model("leff_importance", model, 2, 4.0, classes=3)
    torch.nn.init.normal_(with_head.classifier[1].weight, generator=g)
    with_head.classifier[0].mean.fill_(0.5)
    client, _, _ = leff_client_model(with_head, 1, 2, x, ratio=1.0, steps=0, lr=1e-3, kl_weight=1.0, batch_size=2,
                                     generator=g)
    assert torch.equal(client.classifier[1].weight, with_head.classifier[1].weight)
    assert torch.equal(client.classifier[0].mean, with_head.classifier[0].mean)
    assert torch.allclose(classify(client, x), classify(with_head, x), atol=1e-5)


def test_aggregation_is_layerwise_weighted_and_keeps_untrained_keys():
    glob = {"layers.0.w": torch.zeros(2), "layers.1.w": torch.ones(2), "embed_tokens.weight": torch.full((2,), 5.0)}
    updates = [(1.0, {"layers.0.w": torch.tensor([1.0, 2.0])}),
               (3.0, {"layers.0.w": torch.tensor([5.0, 6.0]), "layers.1.w": torch.tensor([9.0, 9.0])})]
    out = aggregate(glob, updates)
    assert out["layers.0.w"].tolist() == [4.0, 5.0]  # (1·1 + 3·5)/4, (1·2 + 3·6)/4
    assert out["layers.1.w"].tolist() == [9.0, 9.0]  # only the second client trained it
    assert out["embed_tokens.weight"].tolist() == [5.0, 5.0]  # nobody trained it
    assert aggregate(glob, []) == glob


def test_baseline_models_start_as_the_base_and_train_their_own_keys():
    base, (x, _) = tiny_lm(), batch()
    for method in ("fedavg", "fedlora", "fedbitfit", "leff_importance"):
        model = build_model(method, base, 2, 4.0)
        assert torch.allclose(model(x).logits, base(x).logits, atol=1e-6), method  # zero-started additions
    names = [n for n, _ in add_lora(tiny_lm(), 2, 4.0).named_parameters()]
    lora = trainable_keys("fedlora", names)
    assert lora and all("lora_" in k for k in lora) and len(lora) == 4 * 4 * 2  # q,k,v,o × 4 layers × A,B
    bitfit = trainable_keys("fedbitfit", [n for n, _ in add_zero_biases(tiny_lm()).named_parameters()])
    assert len(bitfit) == 4 * 7 and all(k.endswith(".bias") for k in bitfit)  # 4 attn + 3 mlp Linears per layer
    names = [n for n, _ in base.named_parameters()]
    block = trainable_keys("leff_random", names, range(1, 3))
    assert block and {k.split(".")[1] for k in block} == {"1", "2"}
    assert "embed_tokens.weight" in trainable_keys("fedavg", names)
    # with a classification head every method trains it too; fedhead trains it alone
    for method in ("fedavg", "fedlora", "fedbitfit", "leff_importance", "fedhead"):
        model = build_model(method, base, 2, 4.0, classes=3)
        assert model.classifier[1].weight.shape == (3, 16) and not model.classifier[1].weight.any()
        keys = trainable_keys(method, [n for n, _ in model.named_parameters()], range(1, 2))
        assert {"classifier.1.weight", "classifier.1.bias"} <= set(keys), method
    assert trainable_keys("fedhead", [n for n, _ in build_model("fedavg", base, 2, 4.0, classes=3).named_parameters()]) \
        == ["classifier.1.weight", "classifier.1.bias"]


def test_dirichlet_split_covers_every_window_once_and_skews_with_small_alpha():
    families = np.repeat(np.arange(4), 50)
    for alpha in (0.05, 100.0):
        shards = dirichlet_split(families, 5, alpha, seed=0)
        assert sorted(np.concatenate(shards).tolist()) == list(range(200)) and all(len(s) for s in shards)
    skew = lambda shards: np.mean([np.bincount(families[s], minlength=4).max() / len(s) for s in shards])
    assert skew(dirichlet_split(families, 5, 0.05, 0)) > skew(dirichlet_split(families, 5, 100.0, 0)) + 0.2
    w = cut_windows(np.arange(21, dtype=np.uint16), 5)
    assert len(w) == 4 and w.x[1].tolist() == [5, 6, 7, 8, 9] and w.y[1].tolist() == [6, 7, 8, 9, 10]


def test_the_task_is_play_attribution_on_held_out_documents_and_the_proxy_the_other_corpus(tmp_path):
    """Every window is labelled with the play its tokens come from: the training windows from the
    corpus's training documents, the test windows from its held-out ones; the importance scores' and
    distillation's proxy windows are the proxy text's (the King James slice), in the corpus's
    tokenizer, never the task's text."""
    import shutil

    from tokenizers import Tokenizer

    from paperline.data.text_corpus import CorpusError, encode, prepare_corpus, read_slice
    from paperline.methods.leff.data import federated_data, play_windows, proxy_set
    from tests.conftest import CHECKOUT

    raw = CHECKOUT / "data" / "raw" / "shakespeare"
    corpus = tmp_path / "corpus"
    meta = prepare_corpus(read_slice(raw, 12), corpus, kind="byte", vocab_size=256, val_fraction=0.1, seed=0,
                          source={})
    kjv = tmp_path / "kjv"
    shutil.copytree(CHECKOUT / "data" / "raw" / "kjv", kjv)
    task = play_windows(str(corpus), str(raw), 12, 16)
    assert task.classes == tuple(sorted(p.stem for p in raw.glob("*.txt")))
    tokenizer = Tokenizer.from_file(str(corpus / "tokenizer.json"))
    docs = {d.name: d for d in read_slice(raw, 12)}
    for windows, split in ((task.train, "train_documents"), (task.test, "val_documents")):
        for label, play in enumerate(task.classes):
            tokens = encode(tokenizer, [docs[n] for n in meta[split] if n.startswith(f"{play}#")])
            mine = windows.x[windows.y == label]
            assert len(mine) == len(tokens) // 16 and mine.flatten().tolist() == tokens[:len(mine) * 16].tolist()
    data = federated_data(str(corpus), 16, 3, 0.5, 0, 5, 7, str(kjv), str(raw), 12)
    stream = cut_windows(encode(tokenizer, read_slice(kjv, 1)), 16)
    assert len(data.proxy) == 5 and data.proxy.x[0].tolist() == stream.x[0].tolist()
    assert data.proxy.x[-1].tolist() == stream.x[-1].tolist()  # spread over the whole text
    assert data.proxy.y.shape == data.proxy.x.shape  # unlabelled: next-token targets
    assert len(data.test) == 7 and data.test.y.shape == (7,)
    assert data.test.x[0].tolist() == task.test.x[0].tolist() and data.test.x[-1].tolist() == task.test.x[-1].tolist()
    assert data.test.y[0] == 0 and data.test.y[-1] == 7  # spread over the plays, stored play by play
    task_rows = {tuple(r) for r in torch.cat([task.train.x, task.test.x]).tolist()}
    assert not any(tuple(r) in task_rows for r in data.proxy.x.tolist())
    assert len(data.val) == 1  # federated_data's default: one validation window
    # every training window on one client or in the validation split
    assert sum(len(c) for c in data.clients) + len(data.val) == len(task.train)
    held = federated_data(str(corpus), 16, 3, 0.5, 0, 5, 7, str(kjv), str(raw), 12, 1.0, 9)
    assert len(held.val) == 9 and held.val.y[0] == 0 and held.val.y[-1] == 7  # spread over the plays
    rows = lambda w: {tuple(r) for r in w.x.tolist()}  # noqa: E731
    client_rows = set().union(*(rows(c) for c in held.clients))
    assert not rows(held.val) & client_rows and not rows(held.val) & rows(task.test)  # held out; test is other documents
    assert sum(len(c) for c in held.clients) + 9 == len(task.train)
    assert [f.tolist() for f in data.families] == [torch.bincount(c.y, minlength=8).tolist() for c in data.clients]
    with pytest.raises(CorpusError, match="lacks the corpus's documents"):  # a cut with fewer documents
        play_windows(str(corpus), str(raw), 24, 16)
    with pytest.raises(CorpusError, match="not 6 speeches a document"):  # the same names, other texts
        play_windows(str(corpus), str(raw), 6, 16)
    proxy_set.cache_clear()
    (kjv / "ruth.txt").write_text("edited\n")
    with pytest.raises(CorpusError, match="ruth.txt: sha256"):
        federated_data(str(corpus), 16, 3, 0.5, 1, 5, 7, str(kjv), str(raw), 12)


def test_the_clients_label_skew_grows_as_alpha_falls():
    """The non-IID split of the task: at α = 0.1 a client's windows are mostly one or two plays, at
    α = 100 near the plays' mix."""
    labels = np.repeat(np.arange(8), 120)

    def top_share(alpha: float) -> float:
        shards = dirichlet_split(labels, 8, alpha, seed=0)
        return float(np.mean([np.bincount(labels[s], minlength=8).max() / len(s) for s in shards]))

    assert top_share(0.1) > 0.6 and top_share(100.0) < 0.3


def test_the_head_learns_a_separable_task_above_chance():
    """A tiny LM with a zero-started head predicts uniformly (loss ln 2); trained on windows whose
    class decides their token range, the head alone and full fine-tuning both classify held-out
    windows well above chance, and only the keys each trains move."""
    from paperline.methods.leff.data import Windows
    from paperline.methods.leff.fed import evaluate, local_train

    g = torch.Generator().manual_seed(0)
    y = torch.arange(96) % 2
    x = torch.randint(32, (96, 8), generator=g) + 32 * y[:, None]
    train, test = Windows(x[:64], y[:64]), Windows(x[64:], y[64:])
    for method in ("fedhead", "fedavg"):
        model = build_model(method, tiny_lm(), 2, 4.0, classes=2)
        loss, _ = evaluate(model, test)
        assert loss == pytest.approx(float(np.log(2)), abs=1e-6)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        keys = trainable_keys(method, [n for n, _ in model.named_parameters()])
        batches = [torch.randperm(64, generator=g)[:16] for _ in range(60)]
        local_train(model, keys, train, batches, lr=1e-3, head_lr=3e-2)
        loss, accuracy = evaluate(model, test)
        assert accuracy >= 0.75 and loss < 0.8 * float(np.log(2)), method  # chance: 0.5, ln 2
        moved = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
        statistics = set(head_state_keys(model))
        assert statistics == {"classifier.0.mean", "classifier.0.second_moment", "classifier.0.count"}
        assert moved <= set(keys) | {"lm_head.weight"} | statistics, method
        assert {"classifier.1.weight", "classifier.1.bias"} | statistics <= moved, method


def test_a_local_epoch_passes_over_the_shard_once_and_fixed_steps_draw_with_replacement():
    from paperline.methods.leff.fed import local_batches

    g = torch.Generator().manual_seed(0)
    epoch = local_batches(21, 8, steps=99, epochs=1, generator=g)
    assert [len(b) for b in epoch] == [8, 8, 5] and sorted(torch.cat(epoch).tolist()) == list(range(21))
    two = local_batches(21, 8, steps=99, epochs=2, generator=g)
    assert len(two) == 6 and sorted(torch.cat(two).tolist()) == sorted(list(range(21)) * 2)
    assert torch.cat(two[:3]).tolist() != torch.cat(two[3:]).tolist()  # each pass in a fresh order
    fixed = local_batches(21, 8, steps=5, epochs=None, generator=torch.Generator().manual_seed(0))
    assert [len(b) for b in fixed] == [8] * 5 and all(0 <= i < 21 for b in fixed for i in b.tolist())
    assert local_batches(3, 8, steps=2, epochs=None, generator=g)[0].numel() == 3  # a shard under a batch


def test_local_train_counts_flops_per_window_of_every_batch():
    from paperline.methods.leff.data import Windows
    from paperline.methods.leff.fed import local_train

    x, _ = batch(n=6, T=8)
    shard = Windows(x, torch.tensor([0, 1, 2, 0, 1, 2]))
    keys = [n for n, _ in build_model("fedavg", tiny_lm(), 2, 4.0, classes=3).named_parameters()]
    one = local_train(build_model("fedavg", tiny_lm(), 2, 4.0, classes=3), keys, shard, [torch.arange(4)], lr=1e-3)
    ragged = local_train(build_model("fedavg", tiny_lm(), 2, 4.0, classes=3), keys, shard,
                         [torch.arange(4), torch.arange(4, 6)], lr=1e-3)
    assert one["steps"] == 1 and ragged["steps"] == 2
    assert ragged["flops"] == pytest.approx(one["flops"] * 6 / 4)


def test_subsampled_shards_keep_their_proportions_and_every_client():
    from paperline.methods.leff.data import subsample_shards

    shards = dirichlet_split(np.repeat(np.arange(4), 250), 5, 0.1, seed=0)
    kept = subsample_shards(shards, 0.05, seed=0)
    for full, part in zip(shards, kept):
        assert len(part) == max(1, round(0.05 * len(full))) and set(part.tolist()) <= set(full.tolist())
        assert part.tolist() == sorted(part.tolist())
    assert [p.tolist() for p in subsample_shards(shards, 0.05, seed=0)] == [p.tolist() for p in kept]
    assert [p.tolist() for p in subsample_shards(shards, 0.05, seed=1)] != [p.tolist() for p in kept]


def test_a_round_lasts_as_long_as_its_slowest_client_at_its_compute_rate():
    """simulated_round_s = max over the round's clients of FLOPs / (rate · 1e9), rates cycled over
    the partitions; a dropped client does not count."""
    from types import SimpleNamespace

    from flwr.app import ArrayRecord, MetricRecord

    from paperline.methods.leff.config import LEFFConfig
    from paperline.methods.leff.data import FederatedData, Windows
    from paperline.methods.leff.fed import FederatedFineTuning, evaluate, model_state

    x, y = batch(n=2, T=8)
    data = FederatedData(clients=[], families=[], proxy=Windows(x, y), test=Windows(x, torch.tensor([0, 1])),
                         val=Windows(x, torch.tensor([0, 1])), vocab_size=64, classes=("a", "b"))
    cfg = LEFFConfig(clients=3, capacities=[1], client_rates=[1.0, 4.0])
    strategy = FederatedFineTuning(cfg, "fedavg", 0.1, tiny_lm(), data, log=lambda _: None)
    strategy.nodes = {10 + p: {"partition": p, "capacity": 1, "num-examples": 4} for p in range(3)}
    strategy.plans, strategy.scores = {10 + p: {"bytes_down": 0} for p in range(3)}, None

    def reply(partition: int, gflops: float, error: bool = False):
        metrics = MetricRecord({"partition": partition, "num-examples": 4, "train_loss": 1.0, "flops": gflops * 1e9,
                                "steps": 1, "trained_params": 1, "held_params": 1, "wall_s": 0.1, "bytes_up": 0})
        return SimpleNamespace(metadata=SimpleNamespace(src_node_id=10 + partition), has_error=lambda: error,
                               error=SimpleNamespace(reason="died"),
                               content={"arrays": ArrayRecord(model_state(strategy.model)), "metrics": metrics})

    # partition 0 at 1 GFLOP/s: 3 s; partition 1 at 4: 2 s; partition 2 (rate 1 again) dropped
    strategy.aggregate_train(1, [reply(1, 8.0), reply(0, 3.0), reply(2, 50.0, error=True)])
    record = strategy.run.rounds[-1]
    assert [c["simulated_s"] for c in record["clients"]] == pytest.approx([3.0, 2.0])
    assert record["simulated_round_s"] == pytest.approx(3.0) and len(record["dropped"]) == 1
    # a tuning run scores its last round's model on the validation windows (only the last round's)
    assert strategy.run.validation is None
    strategy.validate = True
    strategy.aggregate_train(2, [reply(0, 1.0)])
    assert strategy.run.validation is None
    strategy.aggregate_train(cfg.rounds, [reply(0, 1.0)])
    loss, acc = evaluate(strategy.model, data.val)
    assert strategy.run.validation == {"lr": cfg.lr, "val_loss": loss, "val_accuracy": acc}


def test_a_leff_clients_keys_map_to_the_global_layers_and_the_head_passes_through():
    from paperline.methods.leff.fed import global_layer_key

    assert global_layer_key("layers.1.mlp.up_proj.weight", start=2, first=1) == "layers.2.mlp.up_proj.weight"
    assert global_layer_key("classifier.1.bias", start=2, first=1) == "classifier.1.bias"
    assert global_layer_key("classifier.0.mean", start=2, first=1) == "classifier.0.mean"
    with pytest.raises(ValueError, match="not a layer's or the head's key"):
        global_layer_key("embed_tokens.weight", start=2, first=1)


def test_the_head_standardises_its_input_by_the_running_statistics_of_what_it_trained_on():
    """Identity before any training; in training mode each batch (one window too) updates the
    running mean and second moment to those of every window seen so far, and the output is the
    features standardised by them; evaluation reads the statistics without changing them."""
    from paperline.methods.leff.leff import FeatureStandardizer

    norm = FeatureStandardizer(3)
    f = torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0], [5.0, 8.0, 2.0]])
    norm.eval()
    assert torch.allclose(norm(f), f / (1 + 1e-5) ** 0.5) and norm.count == 0
    norm.train()
    norm(f[:1])
    norm(f[1:])
    assert norm.count == 3 and torch.allclose(norm.mean, f.mean(0))
    assert torch.allclose(norm.second_moment, (f * f).mean(0))
    norm.eval()
    out = norm(f)
    assert torch.allclose(out, (f - f.mean(0)) / torch.sqrt(f.var(0, unbiased=False) + 1e-5)) and norm.count == 3
