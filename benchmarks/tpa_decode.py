"""Decode latency and KV-cache memory per token against context length for MHA, MQA, GQA, MLA, TPA
and TPA-KVonly, as ratios against MHA measured in this same process (paperline.methods.tpa.decode:
round-robin per context, best of repeats, `--batch` sequences (default 1), one new token per step
against the cache).

    python benchmarks/tpa_decode.py                                   # CPU: the smoke shape
    python benchmarks/tpa_decode.py --shape small --device cuda       # T6-small on a GPU (bf16)
    python benchmarks/tpa_decode.py --shape small --contexts 1024 4096 16384 65536 --out bench.json
    python benchmarks/tpa_decode.py --shape small --batch 16 --contexts 1024 4096 16384   # memory-bound

Fresh random weights (decode time and cache size do not depend on them). TPA decodes with the
factor cache only (FlashTPA, plain torch einsums, an online softmax over blocks of cached tokens),
so its time is that of this reference implementation, not of the authors' Triton kernel; the cache
ratios are exact. "peak_cache_mb" is the cache held at context + tokens; on CUDA "peak_memory_mb"
is torch's peak allocation during a variant's timed steps, which includes the weights and every
variant's prefilled cache (they are held for the round-robin): compare its differences, not its totals.
Results measured on an H200 are in benchmarks/results/ (the README's TPA section).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the checkout

import torch  # noqa: E402

from paperline.methods.tpa.decode import decode_step_times, ratios_vs  # noqa: E402
from paperline.methods.tpa.formulas import PAPER_SHAPES, VARIANTS, ShapeConfig  # noqa: E402
from paperline.methods.tpa.models import build_model  # noqa: E402

SHAPES = {"smoke": ShapeConfig(d_model=128, num_layers=2, head_dim=32, mla_kv_latent=64, mla_q_latent=96,
                               mla_rope_dim=16), **PAPER_SHAPES}


def hardware(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default=None,
                        help="model shape (default: small on CUDA, smoke on CPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--contexts", type=int, nargs="+", default=None)
    parser.add_argument("--tokens", type=int, default=16, help="decode steps timed per context")
    parser.add_argument("--batch", type=int, default=1, help="sequences decoded side by side")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                        help="default: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads (1: single-token steps are small ops; more add noise on a shared CPU)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    shape_name = args.shape or ("small" if device.type == "cuda" else "smoke")
    shape = SHAPES[shape_name]
    contexts = args.contexts or ([1024, 4096, 16384] if device.type == "cuda" else [256, 1024, 4096])
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    if "mha" not in args.variants:
        args.variants.insert(0, "mha")  # the ratios' baseline
    positions = max(contexts) + args.tokens
    models = {v: build_model(v, shape, args.vocab, positions, seed=0).to(device=device, dtype=dtype).eval()
              for v in args.variants}
    times = decode_step_times(models, contexts, args.tokens, args.repeats, device, batch=args.batch)
    ratios = ratios_vs(times, "mha")
    print(f"# {shape_name} shape (L={shape.num_layers}, d={shape.d_model}, d_h={shape.head_dim}), {dtype}, "
          f"batch {args.batch}, on {hardware(device)}")
    header = f"{'variant':<11} {'context':>8} {'ms/token':>9} {'vs MHA':>7} {'cache B/token':>14} {'cache vs MHA':>13}"
    print(header)
    for v in args.variants:
        for c in contexts:
            row, ratio = times[v][c], ratios[v][c]
            print(f"{v:<11} {c:>8} {row['ms_per_token']:>9.3f} {ratio['time_vs_mha']:>7.2f} "
                  f"{row['cache_bytes_per_token']:>14.0f} {ratio['cache_vs_mha']:>13.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"shape": shape_name, "device": hardware(device), "dtype": str(dtype), "batch": args.batch,
                                        "contexts": contexts, "times": times, "ratios_vs_mha": ratios},
                                       indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
