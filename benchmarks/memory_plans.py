"""Memory plans of each method's `paper` profile (paperline/memory_plan.py), written into the
method pages between `<!-- memory-plan -->` markers.

    python benchmarks/memory_plans.py            # print the tables
    python benchmarks/memory_plans.py --write    # update docs/methods/<method>.md

Parameter counts come from the models themselves, built on the meta device (no memory, no
weights) at the paper profile's shapes read from params.yaml; transformer activations from the
formula in paperline/memory_plan.py; other models' activations from what autograd saves in one
fp32 forward on meta tensors (an upper bound under bf16 autocast). tests/test_memory_plans.py
checks that the pages hold what this computes."""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu_check import paper_config, public_config  # noqa: E402  the paper profiles, validated
from paperline.memory_plan import Plan, Workload, markdown, plan, transformer_activation_bytes  # noqa: E402

START, END = "<!-- memory-plan:start -->", "<!-- memory-plan:end -->"


def count(model: torch.nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def saved_activation_bytes(model: torch.nn.Module, *inputs: torch.Tensor) -> int:
    """Bytes autograd saves for backward in one forward (meta tensors: nothing is computed)."""
    total = 0

    def pack(t: torch.Tensor):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(*inputs)
    return total


def causal_lm_workload(name: str, *, hidden, layers, heads, head_dim, vocab, seq, global_batch, note="",
                       attention="mha", checkpointing=False, optimizer_state_floats=None, **extra) -> Workload:
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig

    with torch.device("meta"):
        model = CausalLM(CausalLMConfig(vocab_size=vocab, hidden_size=hidden, num_layers=layers, attention=attention,
                                        num_heads=heads, head_dim=head_dim, max_position_embeddings=seq, **extra))
    return Workload(name, count(model), optimizer_state_floats=optimizer_state_floats,
                    activation_bytes_per_sample=transformer_activation_bytes(seq, hidden, layers, vocab, checkpointing),
                    micro_batch=global_batch, global_batch=global_batch, note=note)


def tpa() -> list[Workload]:
    from paperline.methods.tpa.models import build_model

    cfg = paper_config("tpa")
    out = []
    for variant in cfg.variants:
        with torch.device("meta"):
            model = build_model(variant, cfg.shape, cfg.data.vocab_size, cfg.train.block_size, seed=0)
        act = transformer_activation_bytes(cfg.train.block_size, cfg.shape.d_model, cfg.shape.num_layers,
                                           cfg.data.vocab_size)
        out.append(Workload(f"T6-small {variant}", count(model), activation_bytes_per_sample=act,
                            micro_batch=cfg.train.batch_size, global_batch=cfg.train.batch_size,
                            note=f"{cfg.train.block_size} tokens, global batch {cfg.train.batch_size}"))
    return out


def sumo() -> list[Workload]:
    from paperline.methods.sumo.lm import model_config
    from paperline.methods.sumo.optimizers import state_formula
    from paperline.nn.causal_lm import CausalLM

    cfg = paper_config("sumo")
    with torch.device("meta"):
        model = CausalLM(model_config(cfg))
    act = transformer_activation_bytes(cfg.lm.max_length, model.config.hidden_size, model.config.num_layers,
                                       model.config.vocab_size)
    return [Workload(f"LLaMA-{cfg.lm.model_size} {name}", count(model),
                     optimizer_state_floats=state_formula(name, model, cfg.rank), activation_bytes_per_sample=act,
                     micro_batch=cfg.batch_size, global_batch=cfg.batch_size,
                     note=f"rank {cfg.rank}; state by the spec's formula")
            for name in cfg.optimizers]


def memory_decoder() -> list[Workload]:
    cfg = paper_config("memory_decoder")
    return [causal_lm_workload(f"{part} ({getattr(cfg, part).hidden_size}×{getattr(cfg, part).num_layers})",
                               hidden=getattr(cfg, part).hidden_size, layers=getattr(cfg, part).num_layers,
                               heads=getattr(cfg, part).num_heads, head_dim=getattr(cfg, part).head_dim,
                               vocab=50304, seq=cfg.block_size, global_batch=train.batch_size,
                               note="trained from scratch; the memory's kNN targets are precomputed")
            for part, train in (("base_large", cfg.base_train), ("memdec", cfg.memdec_train))]


def hf_model(kind: str):
    config, cls = public_config(kind)
    with torch.device("meta"):
        return cls(config)


def qfft() -> list[Workload]:
    cfg = paper_config("qfft")
    model = hf_model("qwen2.5-7b")
    c = model.config
    act = transformer_activation_bytes(cfg.cutoff, c.hidden_size, c.num_hidden_layers, c.vocab_size, checkpointing=True)
    return [Workload("Qwen2.5-7B full fine-tuning", count(model), activation_bytes_per_sample=act,
                     micro_batch=cfg.finetune.batch_size, global_batch=cfg.finetune.batch_size,
                     note=f"{cfg.cutoff} tokens, activation checkpointing")]


def influence_distillation() -> list[Workload]:
    cfg = paper_config("influence_distillation")
    model = hf_model("llama-3.2-3b")
    c = model.config
    act = transformer_activation_bytes(cfg.max_length, c.hidden_size, c.num_hidden_layers, c.vocab_size,
                                       checkpointing=True)
    return [Workload("Llama-3.2-3B warm-up / fine-tuning", count(model), activation_bytes_per_sample=act,
                     micro_batch=cfg.micro_batch_size, global_batch=cfg.batch_size,
                     note=f"{cfg.max_length} tokens, activation checkpointing")]


def hrm_pet() -> list[Workload]:
    from peft import LoraConfig, get_peft_model

    from paperline.nn.vit import ViT

    cfg = paper_config("hrm_pet")
    with torch.device("meta"):
        vit = ViT(image_size=224, patch_size=16, channels=3, dim=768, depth=12, heads=12, mlp_ratio=4, num_classes=10)
        model = get_peft_model(vit, LoraConfig(r=cfg.lora.rank, lora_alpha=cfg.lora.alpha, target_modules=["qkv"],
                                               modules_to_save=["head"]))
        act = saved_activation_bytes(model, torch.empty(1, 3, 224, 224))
    trainable = count(model, trainable_only=True)
    return [Workload(f"ViT-B/16 LoRA r={cfg.lora.rank}", trainable, frozen=count(model) - trainable,
                     activation_bytes_per_sample=act, micro_batch=cfg.lora.batch_size,
                     global_batch=cfg.lora.batch_size, note="224² images; backbone frozen (bf16)")]


def splashnet() -> list[Workload]:
    from paperline.methods.splashnet.modules import ELECTRODES, HANDS, TDSConvCTC
    from paperline.methods.splashnet.pipeline import model_spec
    from paperline.methods.splashnet.transforms import HOP

    cfg = paper_config("splashnet")
    out = []
    for variant in ("baseline", "splashnet"):
        spec = model_spec(cfg, variant)
        window = cfg.splashnet_window_samples if variant == "splashnet" else cfg.window_samples
        frames = (window + cfg.left_padding + cfg.right_padding) // HOP
        with torch.device("meta"):
            model = TDSConvCTC(spec)
            act = saved_activation_bytes(model, torch.empty(frames, 1, HANDS, ELECTRODES, spec.freq_features))
        out.append(Workload(variant, count(model), activation_bytes_per_sample=act, micro_batch=cfg.batch_size,
                            global_batch=cfg.batch_size, note=f"{window} samples a window ({frames} frames)"))
    return out


def ngn_m() -> list[Workload]:
    from paperline.methods.ngn_m.resnet import CifarResNet

    problem = paper_config("ngn_m").problems["cifar100_resnet110"]
    with torch.device("meta"):
        model = CifarResNet(problem.depth, 100)
        act = saved_activation_bytes(model, torch.empty(1, 3, 32, 32))
    return [Workload(f"ResNet-{problem.depth} CIFAR-100", count(model), optimizer_state_floats=count(model),
                     activation_bytes_per_sample=act, micro_batch=problem.batch_size,
                     global_batch=problem.batch_size, note="NGN-M keeps one momentum buffer")]


def model_shapley() -> list[Workload]:
    lm = paper_config("model_shapley").lm
    return [causal_lm_workload("LM", hidden=lm.shape.hidden_size, layers=lm.shape.num_layers,
                               heads=lm.shape.num_heads, head_dim=lm.shape.head_dim, vocab=512,
                               seq=lm.block_size, global_batch=lm.train.batch_size)]


def star() -> list[Workload]:
    import numpy as np

    from paperline.rl.sac import SAC, SACSettings

    cfg = paper_config("star")
    settings = SACSettings(**{k: v for k, v in cfg.sac.model_dump().items() if k in SACSettings.model_fields})
    obs, act = 78, 12  # quadruped-walk, the largest of the paper's tasks
    with torch.device("meta"):
        agent = SAC(obs, act, -np.ones(act, np.float32), np.ones(act, np.float32), settings)
    params = sum(p.numel() for n, p in agent.named_parameters() if not n.startswith("critic_target"))
    per_sample = 4 * 2 * settings.layers * settings.hidden * 3  # actor + twin critic hidden activations, fp32
    return [Workload("SAC (actor + twin critic)", params, activation_bytes_per_sample=per_sample,
                     micro_batch=settings.batch, global_batch=settings.batch, note="quadruped-walk sizes")]


PLANS = {"tpa": tpa, "sumo": sumo, "memory_decoder": memory_decoder, "qfft": qfft,
         "influence_distillation": influence_distillation, "hrm_pet": hrm_pet, "splashnet": splashnet,
         "ngn_m": ngn_m, "model_shapley": model_shapley, "star": star}


def method_plans(method: str) -> list[Plan]:
    return [plan(w) for w in PLANS[method]()]


def page_block(method: str) -> str:
    return (f"{START}\n## Memory plan (paper profile)\n\nComputed by `python benchmarks/memory_plans.py` from "
            f"params.yaml's `{method}.profiles.paper` (see paperline/memory_plan.py for the accounting: bf16 "
            "mixed precision, fp32 master weights and AdamW moments unless the method's optimizer says "
            "otherwise); the micro-batch is the largest ≤ the paper's that fits beside the states.\n\n"
            f"{markdown(method_plans(method))}\n{END}")


def write_page(method: str, docs: Path = ROOT / "docs" / "methods") -> Path:
    page = docs / f"{method}.md"
    text, block = page.read_text(), page_block(method)
    if START in text:
        text = re.sub(re.escape(START) + r".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    page.write_text(text)
    return page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="update the method pages")
    parser.add_argument("methods", nargs="*", default=list(PLANS))
    args = parser.parse_args(argv)
    for method in args.methods:
        if args.write:
            print(f"-> {write_page(method)}")
        else:
            print(f"## {method}\n{markdown(method_plans(method))}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
