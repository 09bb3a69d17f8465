"""The memory plans of the paper profiles: the accounting on hand-computed cases, and the method
pages hold what benchmarks/memory_plans.py computes from today's params files (a changed paper
profile or model makes this fail until `python benchmarks/memory_plans.py --write` is run)."""
from __future__ import annotations

import pytest

from paperline.memory_plan import GIB, Workload, plan, transformer_activation_bytes


def test_states_activations_and_strategy_by_hand():
    one_b = plan(Workload("1B", trainable=10**9, global_batch=8, micro_batch=8))
    assert one_b.states_gib * GIB == pytest.approx(16e9)  # 4 + 4 + 8 bytes a trainable parameter
    assert (one_b.strategy, one_b.devices, one_b.micro_batch, one_b.accumulation) == ("single", 1, 8, 1)
    frozen = plan(Workload("frozen", trainable=10, frozen=10**9))
    assert frozen.weights_gib * GIB == pytest.approx(40 + 2e9) and frozen.optimizer_gib * GIB == pytest.approx(80)
    # 20B under AdamW: 320 GB of states; 126.9 GB usable a device less 10 GB of activations -> 3 shards
    big = plan(Workload("20B", trainable=20 * 10**9, activation_bytes_per_sample=10e9, micro_batch=4, global_batch=64))
    assert (big.strategy, big.devices, big.micro_batch, big.accumulation) == ("fsdp", 3, 1, 22)
    # activations that only fit at a smaller micro-batch: halved until they do, the rest accumulated
    halved = plan(Workload("act", trainable=10**6, activation_bytes_per_sample=30e9, micro_batch=16, global_batch=16))
    assert (halved.strategy, halved.micro_batch, halved.accumulation) == ("single", 4, 4)
    assert plan(Workload("huge", trainable=1, activation_bytes_per_sample=200e9)).strategy == "infeasible"
    own_state = plan(Workload("sumo-like", trainable=1000, optimizer_state_floats=300))
    assert own_state.optimizer_gib * GIB == pytest.approx(1200)
    # an int-4 base with fp16 scale and zero per 64 weights: 4 + 32/64 bits = 0.5625 B a weight
    int4 = plan(Workload("int4", trainable=100, frozen=1000, quantized=6400, quantized_bits=4 + 32 / 64))
    assert int4.weights_gib * GIB == pytest.approx(400 + 2000 + 3600) and int4.parameters == 7500
    assert int4.gradients_gib * GIB == pytest.approx(400)


def test_transformer_activation_formula():
    # Korthikanti et al.: 34·s·b·h bytes a layer with fused attention; the head's logits 10·s·V
    assert transformer_activation_bytes(1024, 768, 12, 50304) == 12 * 34 * 1024 * 768 + 10 * 1024 * 50304
    assert transformer_activation_bytes(8, 4, 3, 5, checkpointing=True) == 3 * 2 * 8 * 4 + 34 * 8 * 4 + 10 * 8 * 5


def test_saved_activations_leave_out_the_parameters():
    import torch

    from benchmarks.memory_plans import saved_activation_bytes

    with torch.device("meta"):
        layer = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        # the first layer's input (2·8) for its weight's gradient, the ReLU's output (2·16) for its own
        # and the second weight's gradient, held once; both weights (saved too, for the inputs'
        # gradients) are not counted
        assert saved_activation_bytes(layer, torch.empty(2, 8)) == 4 * (2 * 8 + 2 * 16)


def test_the_method_pages_hold_the_computed_plans():
    from benchmarks.memory_plans import PLANS, page_block
    from tests.conftest import CHECKOUT

    for method in PLANS:
        page = (CHECKOUT / "docs" / "methods" / f"{method}.md").read_text()
        assert page_block(method) in page, f"docs/methods/{method}.md: run python benchmarks/memory_plans.py --write"


def test_gpu_check_rehearses_on_cpu_and_refuses_a_missing_gpu(tmp_path, capsys):
    """The GPU check's code path at toy scale on CPU (the real run needs a GPU: its figures are
    committed under benchmarks/results/ when a session had one)."""
    import json

    import torch

    from benchmarks.gpu_check import main

    assert main(["--device", "cpu", "--scale", "0.02", "--steps", "1", "--warmup", "0",
                 "--only", "model_shapley", "star", "--out", str(tmp_path)]) == 0
    [result] = [json.loads(p.read_text()) for p in tmp_path.glob("gpu_check_*.json")]
    assert set(result["workloads"]) == {"model_shapley/lm", "star/sac_update"}
    for row in result["workloads"].values():
        assert row["flops_per_step"] > 0 and row["step_s"] > 0 and row["mfu"] is None  # no peak known for a CPU
    assert "| model_shapley/lm |" in next(tmp_path.glob("gpu_check_*.md")).read_text()
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            main(["--device", "cuda", "--out", str(tmp_path)])
        assert "no CUDA device is visible" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--device", "cpu", "--only", "no_such_method", "--out", str(tmp_path)])


def test_gpu_check_rehearses_the_adapter_workloads(tmp_path):
    """FVAE-LoRA's ViT, LoTA-QAF's quantised Llama with ternary adapters and GeoAda's EGTN run their
    paper step's code path at toy scale on CPU: the adapters alone train, FLOPs are counted."""
    import json

    from benchmarks.gpu_check import main

    assert main(["--device", "cpu", "--scale", "0.02", "--steps", "1", "--warmup", "0",
                 "--only", "fvae_lora", "lota_qaf", "geoada", "--out", str(tmp_path)]) == 0
    [result] = [json.loads(p.read_text()) for p in tmp_path.glob("gpu_check_*.json")]
    rows = result["workloads"]
    assert set(rows) == {"fvae_lora/vit_b16", "lota_qaf/llama-3.1-8b", "geoada/egtn"}
    for row in rows.values():
        assert row["flops_per_step"] > 0 and row["step_s"] > 0 and 0 < row["trainable"] < row["parameters"]
    assert rows["fvae_lora/vit_b16"]["rank"] == 16 and rows["fvae_lora/vit_b16"]["batch"] == 1
    assert (rows["lota_qaf/llama-3.1-8b"]["bits"], rows["lota_qaf/llama-3.1-8b"]["lota_rank"]) == (4, 64)
    assert rows["lota_qaf/llama-3.1-8b"]["omega"] == 48 and rows["lota_qaf/llama-3.1-8b"]["global_batch"] == 64
    assert rows["geoada/egtn"]["copied_blocks"] == 1  # the toy's 2 blocks, every 2nd copied

def test_gpu_check_names_every_method():
    """Each registered method is timed by the GPU check or listed as not GPU-bound (so a new method
    is not left out unsaid)."""
    from benchmarks.gpu_check import NOT_GPU_BOUND, workloads
    from flows import METHODS

    timed = {w.method for w in workloads(4)}
    named = timed | set(NOT_GPU_BOUND)
    assert set(METHODS) <= named, sorted(set(METHODS) - named)
    assert not timed & set(NOT_GPU_BOUND)
