"""Held-out perplexity of the shared lm-base quantised at 4/3/2 bits, no recovery training: RTN,
GPTQ calibrated from one float pass (every layer's Hessian from the float model's inputs) and
LoTA-QAF's sequential GPTQ (each layer calibrated on inputs through the layers already quantised),
with the quantisation time of each, measured in this one process.

    python benchmarks/lota_gptq.py                      # data/lm_base, the seven projections, g = 32

Needs the `lm-base` and `text-corpus` stages' folders (`dvc repro lm-base`).
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from anywhere in the checkout

import torch  # noqa: E402

from paperline.data.text_corpus import load_corpus  # noqa: E402
from paperline.methods.lota_qaf import experiment  # noqa: E402
from paperline.methods.lota_qaf.layers import QuantLinear, replace_module, select_targets  # noqa: E402
from paperline.methods.lota_qaf.quant import quantize_gptq  # noqa: E402
from paperline.train.lm_base import load_causal_lm  # noqa: E402

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def gptq_one_float_pass(model, task, bits: int, group: int):
    """GPTQ with every layer's Hessian taken from the float model (the former code path)."""
    quantized = copy.deepcopy(model)
    for name in select_targets(model, TARGETS):
        hessian = experiment.layer_hessian(model, name, task.calibration)
        layer = model.get_submodule(name)
        replace_module(quantized, name, QuantLinear(quantize_gptq(layer.weight, hessian, bits, group), layer.bias))
    return quantized


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / "data" / "lm_base"))
    parser.add_argument("--corpus", default=str(ROOT / "data" / "text" / "shakespeare"))
    parser.add_argument("--block", type=int, default=128)
    parser.add_argument("--calibration-windows", type=int, default=32)
    parser.add_argument("--eval-windows", type=int, default=48)
    parser.add_argument("--group", type=int, default=32)
    parser.add_argument("--bits", type=int, nargs="+", default=[4, 3, 2])
    args = parser.parse_args()
    torch.set_num_threads(1)
    corpus = load_corpus(args.corpus, args.block)
    task = experiment.lm_task(corpus.train, corpus.val, args.block, 8, args.eval_windows, args.calibration_windows)
    model = load_causal_lm(args.base, dtype=torch.float32).eval()
    print(f"float perplexity {task.score(model)['perplexity']:.3f}")
    print("| bits | RTN | GPTQ, one float pass | GPTQ, sequential | seconds, one pass / sequential |")
    print("| --- | --- | --- | --- | --- |")
    for bits in args.bits:
        makers = {"rtn": lambda: experiment.quantize_model(model, TARGETS, bits, args.group, "rtn"),
                  "one_pass": lambda: gptq_one_float_pass(model, task, bits, args.group),
                  "sequential": lambda: experiment.quantize_model(model, TARGETS, bits, args.group, "gptq",
                                                                  task.calibration)}
        perplexity, seconds = {}, {}
        for name, make in makers.items():
            start = time.perf_counter()
            quantized = make()
            seconds[name] = time.perf_counter() - start
            perplexity[name] = task.score(quantized)["perplexity"]
        print(f"| {bits} | {perplexity['rtn']:.3f} | {perplexity['one_pass']:.3f} | {perplexity['sequential']:.3f} "
              f"| {seconds['one_pass']:.1f} / {seconds['sequential']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
