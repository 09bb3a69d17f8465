"""The GPU check: each method's `paper` profile compute, a few training steps on one device, bf16.

    python benchmarks/gpu_check.py                       # every workload, CUDA
    python benchmarks/gpu_check.py --only tpa sumo       # some methods
    python benchmarks/gpu_check.py --device cpu --scale 0.05 --steps 2   # the CPU rehearsal

Models at the paper profile's shapes (read from the params files through each method's config, so the
check follows the params file) with random weights, random inputs of the paper's shapes where the
real data is absent (it always is here: no data or weights are downloaded). Each workload is one
training step of the method's heaviest model (forward, backward, optimizer step; bf16 autocast on
CUDA with fp32 master weights, the usual mixed precision) at the paper's micro-batch. Measured per
workload: median step time over `--steps` timed steps after warm-up, samples and tokens (or frames)
per second, peak allocated memory, and the model FLOPs of one step counted by
torch.utils.flop_counter (matrix products, convolutions, attention), whose rate against the
device's dense bf16 peak is the MFU. Written to benchmarks/results/gpu_check_<device>.json and .md.

Models too large for one device at full depth (QFFT's Qwen2.5-7B, Influence Distillation's
Llama-3.2-3B with full fine-tuning states, AltLoRA's and LoTA-QAF's Llama-3.1-8B) run `--depth-cap`
of their layers at full width and say so: per-layer cost is what the memory plans
(benchmarks/memory_plans.py) scale. Methods whose paper profile is CPU-bound or tiny on a GPU
(DNC's UFMs, ZTSurv's graphs, PubSub-VFL's MLPs, CodeMerge's small ViT, STAR's environments) are
listed with the part that does run on the GPU where there is one (STAR's SAC update)."""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# dense bf16 tensor-core peaks (FLOP/s) of the boards this check is meant for (vendor figures,
# without sparsity); MFU is left out on any other device
PEAK_BF16 = {"H200": 989.4e12, "H100 80GB HBM3": 989.4e12, "H100 PCIe": 756.0e12, "H100": 989.4e12,
             "A100": 312.0e12, "L40S": 362.0e12}


@dataclass
class Workload:
    name: str
    method: str
    setup: Callable[[torch.device, float], "Prepared"]  # (device, scale) -> one step to time
    note: str = ""


@dataclass
class Prepared:
    step: Callable[[], None]
    samples: int  # per step
    tokens: int  # per step (tokens, frames or samples: `unit`)
    unit: str
    shape: dict = field(default_factory=dict)


def paper_config(method: str):
    """The method's validated `paper` profile from params/<method>.yaml."""
    import importlib

    from flows import METHODS
    from paperline.config import load_method_config, read_params

    spec = METHODS[method]
    module, attribute = spec.config.split(":")
    model = getattr(importlib.import_module(module), attribute)
    return load_method_config(model, read_params(ROOT / "params"), method, "paper", root=ROOT)[1]


def scaled(n: int, scale: float, floor: int = 1) -> int:
    return max(floor, int(round(n * scale)))


def autocast(device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


def lm_step(model, optimizer, batch: int, seq: int, vocab: int, device) -> Callable[[], None]:
    def step():
        x = torch.randint(0, vocab, (batch, seq + 1), device=device)
        with autocast(device):
            loss = model(x[:, :-1], labels=x[:, 1:]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def adamw(model, lr: float = 3e-4):
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr,
                             fused=next(model.parameters()).is_cuda)


def causal_lm(device, *, hidden, layers, heads, head_dim, vocab, seq, batch, attention="mha", **extra) -> Prepared:
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig

    config = CausalLMConfig(vocab_size=vocab, hidden_size=hidden, num_layers=layers, attention=attention,
                            num_heads=heads, head_dim=head_dim, max_position_embeddings=seq, **extra)
    model = CausalLM(config).to(device)
    return Prepared(lm_step(model, adamw(model), batch, seq, vocab, device), batch, batch * seq, "tokens",
                    {"parameters": sum(p.numel() for p in model.parameters()), "batch": batch, "seq": seq,
                     "layers": layers, "hidden": hidden})


def lm_shape_workload(device, scale, shape, *, vocab, seq, batch) -> Prepared:
    """A CausalLM of an LMShapeConfig-like `shape`; at scale < 1 the rehearsal's toy width."""
    if scale < 1:
        shape = shape.model_copy(update={"hidden_size": 64, "num_heads": 4, "head_dim": 16})
    return causal_lm(device, hidden=shape.hidden_size, layers=scaled(shape.num_layers, scale), heads=shape.num_heads,
                     head_dim=shape.head_dim, vocab=vocab, seq=scaled(seq, scale, 8), batch=scaled(batch, scale))


# --- the methods' workloads ----------------------------------------------------------------------

def tpa_variant(variant: str):
    def setup(device, scale):
        from paperline.methods.tpa.formulas import balanced_heads
        from paperline.methods.tpa.models import build_model

        cfg = paper_config("tpa")
        shape, micro = cfg.shape, 16  # 480 sequences a step in the paper: 30 micro-batches of 16
        vocab = cfg.data.vocab_size
        if scale < 1:  # the rehearsal: the code path at a toy width
            shape = shape.model_copy(update={"num_layers": 1, "d_model": 64, "head_dim": 16, "mla_kv_latent": 32,
                                             "mla_q_latent": 48, "mla_rope_dim": 8, "heads": None})
            vocab = 512
        model = build_model(variant, shape, vocab, cfg.train.block_size, seed=0).to(device)
        seq, batch = scaled(cfg.train.block_size, scale, 8), scaled(micro, scale)
        return Prepared(lm_step(model, adamw(model), batch, seq, vocab, device), batch, batch * seq,
                        "tokens", {"parameters": sum(p.numel() for p in model.parameters()), "batch": batch,
                                   "seq": seq, "heads": balanced_heads(variant, shape), "layers": shape.num_layers,
                                   "global_batch": cfg.train.batch_size})
    return setup


def sumo_optimizer(name: str):
    def setup(device, scale):
        from paperline.methods.sumo.lm import make_llama
        from paperline.methods.sumo.optimizers import build_optimizer

        cfg = paper_config("sumo")
        if scale < 1:
            cfg = cfg.model_copy(update={"lm": cfg.lm.model_copy(update={"model_size": "tiny"}), "rank": 8})
        model = make_llama(cfg, seed=0, device=device).float()  # bf16 autocast over fp32 masters
        optimizer = build_optimizer(name, model, cfg.lr_grid[name][0], cfg)
        seq, batch = scaled(cfg.lm.max_length, scale, 8), scaled(cfg.lm.micro_batch_size // 2, scale)
        return Prepared(lm_step(model, optimizer, batch, seq, model.config.vocab_size, device), batch, batch * seq,
                        "tokens", {"parameters": sum(p.numel() for p in model.parameters()), "batch": batch,
                                   "seq": seq, "optimizer": name, "rank": cfg.rank})
    return setup


def memory_decoder(part: str):
    def setup(device, scale):
        cfg = paper_config("memory_decoder")
        return lm_shape_workload(device, scale, getattr(cfg, part), vocab=50304, seq=cfg.block_size, batch=8)
    return setup


def lm_base(device, scale):
    from paperline.config import load_data_config, read_params
    from paperline.data.lm_base import LMBaseConfig

    _, cfg = load_data_config(LMBaseConfig, read_params(ROOT / "params"), "lm_base", "tpa", "paper", root=ROOT)
    return lm_shape_workload(device, scale, cfg.shape, vocab=512, seq=cfg.block_size, batch=cfg.train.batch_size)


def model_shapley_lm(device, scale):
    cfg = paper_config("model_shapley").lm
    return lm_shape_workload(device, scale, cfg.shape, vocab=512, seq=cfg.block_size, batch=cfg.train.batch_size)


def public_config(kind: str):
    """(transformers config, model class) of the public models the paper profiles name, from their
    published config.json (random weights here: nothing is downloaded)."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if kind == "qwen2.5-7b":  # QFFT's base, Qwen2.5-7B-Instruct
        return Qwen2Config(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                           num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
                           rope_theta=1e6, tie_word_embeddings=False), Qwen2ForCausalLM
    if kind == "llama-3.2-3b":  # Influence Distillation's
        return LlamaConfig(vocab_size=128256, hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                           num_attention_heads=24, num_key_value_heads=8, max_position_embeddings=131072,
                           rope_theta=5e5, tie_word_embeddings=True), LlamaForCausalLM
    if kind == "llama-3.1-8b":  # AltLoRA's and LoTA-QAF's (rope scaling left out: no memory in it)
        return LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                           num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                           rope_theta=5e5, tie_word_embeddings=False), LlamaForCausalLM
    if kind == "gpt2-medium":  # LEFF's E2E NLG model
        return GPT2Config(vocab_size=50257, n_positions=1024, n_embd=1024, n_layer=24, n_head=16), GPT2LMHeadModel
    raise KeyError(kind)


def hf_truncated(kind: str, depth_cap: int):
    """A public architecture at its published width, `depth_cap` layers, random weights."""
    def setup(device, scale):
        config, cls = public_config(kind)
        full_layers = config.num_hidden_layers
        if kind == "qwen2.5-7b":
            seq, batch = paper_config("qfft").cutoff, 1  # the paper's cutoff; batch 8 by accumulation
        else:
            cfg = paper_config("influence_distillation")
            seq, batch = cfg.max_length, cfg.micro_batch_size
        config.num_hidden_layers = max(1, min(depth_cap, full_layers))
        config._attn_implementation = "sdpa"
        if scale < 1:
            config.hidden_size, config.intermediate_size, config.vocab_size = 128, 256, 1024
            config.num_attention_heads, config.num_key_value_heads = 4, 2
        model = cls(config).to(device)
        model.gradient_checkpointing_enable()  # how such a model is fine-tuned at this length
        seq, batch = scaled(seq, scale, 8), scaled(batch, scale)
        return Prepared(lm_step(model, adamw(model, 1e-5), batch, seq, config.vocab_size, device), batch, batch * seq,
                        "tokens", {"parameters": sum(p.numel() for p in model.parameters()), "batch": batch,
                                   "seq": seq, "layers": f"{config.num_hidden_layers} of {full_layers}",
                                   "hidden": config.hidden_size})
    return setup


def public_truncated(kind: str, depth_cap: int, scale: float, device):
    """(model, layers run, full layers): `kind` at its published width, `depth_cap` layers, random
    weights; the rehearsal's toy width at scale < 1."""
    config, cls = public_config(kind)
    depth_key = "n_layer" if kind.startswith("gpt2") else "num_hidden_layers"
    full_layers = getattr(config, depth_key)
    setattr(config, depth_key, max(1, min(depth_cap, full_layers)))
    config._attn_implementation = "sdpa"
    if scale < 1 and kind.startswith("gpt2"):
        config.n_embd, config.n_head, config.vocab_size = 64, 4, 1024
    elif scale < 1:
        config.hidden_size, config.intermediate_size, config.vocab_size = 128, 256, 1024
        config.num_attention_heads, config.num_key_value_heads = 4, 2
    return cls(config).to(device), getattr(config, depth_key), full_layers


def altlora_llama(depth_cap: int):
    """AltLoRA's paper step: Llama-3.1-8B's width, LoRA on q/k/v/o at the profile's rank, the AltLoRA
    optimizer (its alternation included) at the profile's batch and block."""
    def setup(device, scale):
        from paperline.methods.altlora.adapters import add_lora, make_optimizer

        cfg = paper_config("altlora")
        lm = cfg.lm
        model, layers, full = public_truncated("llama-3.1-8b", depth_cap, scale, device)
        model.requires_grad_(False)
        model = add_lora(model, lm.target_modules, lm.rank, lm.alpha, lm.dropout, where="lm.target_modules")
        optimizer = make_optimizer("altlora", model, lm.lr_grid["altlora"][0], cfg.settings)
        seq, batch = scaled(lm.block_size, scale, 8), scaled(lm.batch_size, scale)
        return Prepared(lm_step(model, optimizer, batch, seq, model.config.vocab_size, device), batch, batch * seq,
                        "tokens", {"parameters": sum(p.numel() for p in model.parameters()),
                                   "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
                                   "batch": batch, "seq": seq, "layers": f"{layers} of {full}", "lora_rank": lm.rank})
    return setup


def leff_client(device, scale):
    """One FedAvg client's local step on LEFF's paper model (GPT-2 Medium, every layer trained: the
    heavier of the two client steps the memory plan lists) at the profile's batch and block."""
    cfg = paper_config("leff")
    model, layers, full = public_truncated("gpt2-medium", 24 if scale >= 1 else 2, scale, device)
    seq, batch = scaled(cfg.block_size, scale, 8), scaled(cfg.batch_size, scale)
    return Prepared(lm_step(model, adamw(model), batch, seq, model.config.vocab_size, device), batch, batch * seq,
                    "tokens", {"parameters": sum(p.numel() for p in model.parameters()), "batch": batch, "seq": seq,
                               "layers": f"{layers} of {full}"})


def fvae_lora_vit(device, scale):
    """FVAE-LoRA's paper image step: ViT-B/16 at 224×224 (the paper profile's backbone, random
    weights here), FVAE adapters (r = 16, the profile's encoder/decoder) on its fused qkv, a new
    2-way head, batch 64: cross-entropy × λ_down plus the adapters' ELBO terms, Adam (as `adapt`).
    The profile's text task adapts the shared lm-base (a small LM, its cost the lm_base row's order)."""
    from paperline.methods.fvae_lora.adapter import fvae_loss
    from paperline.methods.fvae_lora.train import build_model
    from paperline.nn.vit import ViT

    cfg = paper_config("fvae_lora")
    dim, depth, heads = (768, 12, 12) if scale >= 1 else (64, 2, 4)
    backbone = ViT(image_size=224, patch_size=16, channels=3, dim=dim, depth=depth, heads=heads, mlp_ratio=4,
                   num_classes=10)
    backbone.dim = dim  # what load_backbone sets on a loaded classifier (TaskModel reads it)
    model = build_model(cfg, "fvae_lora", backbone).to(device)
    model.train()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=cfg.train.lr)
    batch = scaled(cfg.train.batch_size, scale)

    def step():
        x, y = torch.randn(batch, 3, 224, 224, device=device), torch.randint(0, 2, (batch,), device=device)
        with autocast(device):
            loss = cfg.fvae.lambda_down * F.cross_entropy(model(x).float(), y) + fvae_loss(model)["loss"].float()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return Prepared(step, batch, batch, "images", {"parameters": sum(p.numel() for p in model.parameters()),
                                                  "trainable": trainable, "batch": batch, "image": 224,
                                                  "rank": cfg.adapter.rank,
                                                  "targets": ",".join(cfg.adapter.target_modules)})


def lota_qaf_llama(depth_cap: int, micro: int = 16):
    """LoTA-QAF's paper LM step: Llama-3.1-8B's width (the 8B setting; `depth_cap` of its layers),
    every block projection quantised to the profile's widest int-b grid (g = 64; RTN here: GPTQ's
    calibration is a one-off before training and leaves the step's shapes as they are), ternary
    adapters r = 64, ω = 48 on each, the lm task's loss, a t-SignSGD step. Micro-batch `micro` of the
    paper's 64 (block 512): the 128k-vocabulary logits of all 64 sequences are 17 GB in fp32 alone."""
    def setup(device, scale):
        from paperline.methods.lota_qaf.experiment import quantize_model, wrap

        cfg = paper_config("lota_qaf")
        lm = cfg.lm
        base, layers, full = public_truncated("llama-3.1-8b", depth_cap, scale, device)
        # the quantised layers build their group index with torch.arange (the default device): on
        # the model's device here, so the index meets the codes where they are
        with torch.device(device):
            quantized = quantize_model(base, lm.target_modules, max(cfg.bits), lm.group_size, "rtn")
        del base
        # A's ternary init draws from a CPU generator, so the adapters are built there, then moved
        model, make_optimizer = wrap(quantized, "lota", cfg.lota, cfg.lora, torch.Generator().manual_seed(0))
        del quantized
        model = model.to(device)
        if device.type == "cuda":  # the step's peak, not the float model's and its quantised copy's
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = make_optimizer(params, lm.steps)
        seq, batch = scaled(lm.block_size, scale, 8), scaled(micro, scale)
        vocab = model.config.vocab_size

        def step():
            x = torch.randint(0, vocab, (batch, seq + 1), device=device)
            with torch.device(device), autocast(device):
                logits = model(x[:, :-1]).logits  # the lm task's loss: targets already shifted
                loss = F.cross_entropy(logits.float().reshape(-1, vocab), x[:, 1:].reshape(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return Prepared(step, batch, batch * seq, "tokens",
                        {"parameters": sum(p.numel() for p in model.parameters()) + sum(
                            b.numel() for n, b in model.named_buffers() if n.endswith(".q")),
                         "trainable": sum(p.numel() for p in params), "batch": batch, "seq": seq,
                         "global_batch": lm.batch_size, "layers": f"{layers} of {full}", "bits": max(cfg.bits),
                         "lota_rank": cfg.lota.rank, "omega": cfg.lota.threshold()})
    return setup


def geoada_egtn(device, scale):
    """GeoAda's paper step: the paper-size EGTN (6 blocks, hidden 128, time embedding 32, T = 1000)
    with GeoAda's control stream (trainable copies of blocks 0, 2, 4 and their equivariant zero
    convolutions) on frame control (15 given frames → 20 predicted, the base pretrained on 10), at
    batch 128 of MD17 aspirin-sized graphs (21 atoms, all-ones edges as the MD17 loader's, random
    positions and atomic numbers): the ε-prediction diffusion loss, Adam with clipping at 1.0 (as
    train.py). FLOPs: torch's counter, i.e. the matrix products and einsums; the pairwise messages'
    elementwise work is not counted."""
    from paperline.methods.geoada.adapters import build_variant
    from paperline.methods.geoada.egtn import Schedule
    from paperline.methods.geoada.experiment import make_base

    cfg = paper_config("geoada")
    particles = 21  # aspirin, the paper profile's MD17 molecule (params/nbody.yaml nbody.paper)
    if scale < 1:  # the rehearsal: the code path at a toy size
        cfg = cfg.model_copy(update={"shape": cfg.shape.model_copy(update={"hidden": 16, "blocks": 2, "time_dim": 8}),
                                     "cond_frames": 2, "frame_control_frames": 3, "horizon": 4,
                                     "diffusion_steps": 10})
        particles = 4
    model = build_variant("geoada", make_base(cfg), "frame", cfg.cond_frames, cfg.adapter_every, cfg.partial_k,
                          cfg.head_blocks, cfg.adapter_x, cfg.gpf_plus_basis).to(device)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=cfg.finetune.lr)
    schedule = Schedule.linear(cfg.diffusion_steps)
    batch, given, horizon = scaled(cfg.finetune.batch_size, scale), cfg.frame_control_frames, cfg.horizon
    charges = torch.randint(1, 9, (batch, particles), device=device).float()
    edges = torch.ones(batch, particles, particles, device=device)

    def step():
        cond = torch.randn(batch, given, particles, 3, device=device)
        target = cond[:, -1:] + 0.3 * torch.randn(batch, horizon, particles, 3, device=device)
        d0 = (target - cond[:, -1:]) * cfg.displacement_scale
        t = torch.randint(cfg.diffusion_steps, (batch,), device=device)
        eps = torch.randn_like(d0)
        with autocast(device):
            out = model(cond, schedule.noise(d0, t, eps), t, charges, edges, None)
        loss = ((out.float() - eps) ** 2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return Prepared(step, batch, batch, "trajectories",
                    {"parameters": sum(p.numel() for p in model.parameters()),
                     "trainable": sum(p.numel() for p in params), "batch": batch, "particles": particles,
                     "frames": f"{given} + {horizon}",
                     "blocks": cfg.shape.blocks, "hidden": cfg.shape.hidden, "copied_blocks": len(model.selected)})


def hrm_pet_vit(device, scale):
    """ViT-B/16 at 224×224 (HRM-PET's paper backbone), LoRA rank 5 on the attention projections."""
    from peft import LoraConfig, get_peft_model

    from paperline.nn.vit import ViT

    cfg = paper_config("hrm_pet")
    dim, depth = (768, 12) if scale >= 1 else (64, 2)
    model = ViT(image_size=224, patch_size=16, channels=3, dim=dim, depth=depth, heads=12 if scale >= 1 else 4,
                mlp_ratio=4, num_classes=10)
    model = get_peft_model(model, LoraConfig(r=cfg.lora.rank, lora_alpha=cfg.lora.alpha, target_modules=["qkv"],
                                             modules_to_save=["head"])).to(device)
    optimizer = adamw(model, cfg.lora.lr)
    batch = scaled(cfg.tii.batch_size, scale)

    def step():
        x, y = torch.randn(batch, 3, 224, 224, device=device), torch.randint(0, 10, (batch,), device=device)
        with autocast(device):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return Prepared(step, batch, batch, "images", {"parameters": sum(p.numel() for p in model.parameters()),
                                                  "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
                                                  "batch": batch, "image": 224, "lora_rank": cfg.lora.rank})


def splashnet_variant(variant: str):
    def setup(device, scale):
        from paperline.methods.splashnet.modules import ELECTRODES, HANDS, TDSConvCTC
        from paperline.methods.splashnet.pipeline import model_spec
        from paperline.methods.splashnet.transforms import HOP

        cfg = paper_config("splashnet")
        spec = model_spec(cfg, variant)
        model = TDSConvCTC(spec).to(device)
        optimizer = adamw(model, cfg.lr)
        window = cfg.splashnet_window_samples if variant.startswith("splashnet") else cfg.window_samples
        frames = scaled((window + cfg.left_padding + cfg.right_padding) // HOP, scale, spec.receptive_field + 8)
        batch = scaled(cfg.batch_size, scale)
        labels = max(1, (frames - spec.receptive_field) // 40)  # about a keystroke per 320 ms

        def step():
            x = torch.randn(frames, batch, HANDS, ELECTRODES, spec.freq_features, device=device).abs()
            targets = torch.randint(1, spec.num_outputs - 1, (batch, labels), device=device)
            with autocast(device):
                emissions = model(x)
            lengths = torch.full((batch,), emissions.shape[0], dtype=torch.long, device=device)
            loss = F.ctc_loss(emissions.float(), targets, lengths, torch.full((batch,), labels, device=device),
                              blank=spec.num_outputs - 1)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return Prepared(step, batch, batch * frames, "frames", {"parameters": sum(p.numel() for p in model.parameters()),
                                                                "batch": batch, "frames": frames})
    return setup


def ngn_m_resnet(device, scale):
    from paperline.methods.ngn_m.optimizers import make_optimizer
    from paperline.methods.ngn_m.resnet import CifarResNet

    problem = paper_config("ngn_m").problems["cifar100_resnet110"]
    model = CifarResNet(problem.depth if scale >= 1 else 8, 100).to(device).to(memory_format=torch.channels_last)
    optimizer = make_optimizer("ngn_m", model.parameters(), 0.1)
    batch = scaled(problem.batch_size, scale)

    def step():
        x, y = torch.randn(batch, 3, 32, 32, device=device), torch.randint(0, 100, (batch,), device=device)

        def closure():  # the NGN family's step reads the minibatch loss (as the sweep calls it)
            optimizer.zero_grad(set_to_none=True)
            with autocast(device):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss.detach()
        optimizer.step(closure)
    return Prepared(step, batch, batch, "images", {"parameters": sum(p.numel() for p in model.parameters()),
                                                  "batch": batch, "depth": problem.depth if scale >= 1 else 8})


def star_sac(device, scale):
    from paperline.rl.sac import SAC, SACSettings

    cfg = paper_config("star")
    settings = SACSettings(**{k: v for k, v in cfg.sac.model_dump().items() if k in SACSettings.model_fields})
    if scale < 1:
        settings = settings.model_copy(update={"hidden": 64, "batch": 64})
    obs, act = 24, 6  # walker-walk's observation and action sizes
    agent = SAC(obs, act, -np.ones(act, np.float32), np.ones(act, np.float32), settings).to(device)
    rng = np.random.default_rng(0)
    batch = {"obs": rng.standard_normal((settings.batch, obs), dtype=np.float32),
             "act": rng.uniform(-1, 1, (settings.batch, act)).astype(np.float32),
             "reward": rng.standard_normal(settings.batch, dtype=np.float32),
             "next_obs": rng.standard_normal((settings.batch, obs), dtype=np.float32),
             "terminated": np.zeros(settings.batch, np.float32)}

    def step():
        agent.update(batch)
    return Prepared(step, settings.batch, settings.batch, "transitions",
                    {"parameters": sum(p.numel() for p in agent.parameters()), "batch": settings.batch,
                     "hidden": settings.hidden})


def workloads(depth_cap: int) -> list[Workload]:
    tpa_variants = ["mha", "mqa", "gqa", "mla", "tpa", "tpa_kvonly"]
    return [
        *[Workload(f"tpa/{v}", "tpa", tpa_variant(v), "T6-small shapes, micro-batch 16 of the paper's 480")
          for v in tpa_variants],
        *[Workload(f"sumo/{o}", "sumo", sumo_optimizer(o), "LLaMA-60M, micro-batch 128 of 512")
          for o in ("adamw", "galore_adamw", "muon", "sumo")],
        Workload("memory_decoder/base_large", "memory_decoder", memory_decoder("base_large"), "GPT2-medium shape"),
        Workload("memory_decoder/memdec", "memory_decoder", memory_decoder("memdec"), "GPT2-small shape"),
        Workload("qfft/qwen2.5-7b", "qfft", hf_truncated("qwen2.5-7b", depth_cap),
                 f"Qwen2.5-7B width, {depth_cap} of 28 layers, 16k tokens, gradient checkpointing"),
        Workload("influence_distillation/llama-3.2-3b", "influence_distillation",
                 hf_truncated("llama-3.2-3b", depth_cap),
                 f"Llama-3.2-3B width, {depth_cap} of 28 layers, gradient checkpointing"),
        Workload("hrm_pet/vit_b16", "hrm_pet", hrm_pet_vit, "ViT-B/16 224², LoRA r=5 on qkv"),
        *[Workload(f"splashnet/{v}", "splashnet", splashnet_variant(v), "emg2qwerty sizes, random sEMG features")
          for v in ("baseline", "splashnet")],
        Workload("ngn_m/resnet110", "ngn_m", ngn_m_resnet, "CIFAR-100 ResNet-110, NGN-M"),
        Workload("model_shapley/lm", "model_shapley", model_shapley_lm, ""),
        Workload("lm_base/paper", "lm_base", lm_base, "the shared base's paper profile"),
        Workload("star/sac_update", "star", star_sac, "SAC update, hidden 1024, batch 1024"),
        Workload("altlora/llama-3.1-8b", "altlora", altlora_llama(depth_cap),
                 f"Llama-3.1-8B width, {depth_cap} of 32 layers, LoRA r=8 on q/k/v/o, AltLoRA"),
        Workload("leff/gpt2-medium_client", "leff", leff_client, "GPT-2 Medium, a FedAvg client's full-model step"),
        Workload("fvae_lora/vit_b16", "fvae_lora", fvae_lora_vit, "ViT-B/16 224², FVAE-LoRA r=16 on qkv, batch 64"),
        Workload("lota_qaf/llama-3.1-8b", "lota_qaf", lota_qaf_llama(depth_cap),
                 f"Llama-3.1-8B width, {depth_cap} of 32 layers, int-4 g=64, ternary adapters r=64, t-SignSGD, "
                 "micro-batch 16 of 64"),
        Workload("geoada/egtn", "geoada", geoada_egtn,
                 "EGTN 6 blocks × 128, GeoAda copies 0/2/4, frame control 15 → 20, batch 128 × 21 atoms"),
    ]


NOT_GPU_BOUND = {
    "dnc": "deep UFMs of a few thousand parameters: CPU-bound (float64 gradient descent)",
    "ztsurv": "graphs of ~10^4 nodes per slide, CPU-bound preprocessing; the HGT fits any GPU",
    "pubsub_vfl": "two-party MLPs over sockets: bound by the channels, not the device",
    "codemerge": "a 28×28 ViT on batches of 8: too small to load a GPU",
}


def measure(workload: Workload, device: torch.device, scale: float, steps: int, warmup: int) -> dict:
    from torch.utils.flop_counter import FlopCounterMode

    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(0)
    started = time.perf_counter()
    prepared = workload.setup(device, scale)
    for _ in range(warmup):
        prepared.step()
    counter = FlopCounterMode(display=False)
    with counter:
        prepared.step()
    flops = counter.get_total_flops()
    times = []
    for _ in range(steps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        prepared.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t)
    step_s = statistics.median(times)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return {"method": workload.method, "note": workload.note, **prepared.shape,
            "step_s": step_s, "step_s_min": min(times), "samples_per_s": prepared.samples / step_s,
            f"{prepared.unit}_per_s": prepared.tokens / step_s, "unit": prepared.unit,
            "flops_per_step": flops, "achieved_tflops": flops / step_s / 1e12,
            "peak_memory_gib": None if peak is None else peak / 2**30,
            "wall_s": time.perf_counter() - started}


def device_peak(device: torch.device) -> tuple[str, float | None]:
    if device.type != "cuda":
        return platform.processor() or platform.machine(), None
    name = torch.cuda.get_device_name(device)
    for key, peak in PEAK_BF16.items():
        if key in name:
            return name, peak
    return name, None


def write_markdown(result: dict, path: Path) -> None:
    lines = [f"# GPU check: {result['device']}", "",
             f"`{result['command']}` on {result['date']}, torch {result['torch']}, {result['steps']} timed steps "
             f"after {result['warmup']} warm-up; scale {result['scale']}.", "",
             "| workload | params | step (ms) | throughput | peak mem (GiB) | TFLOP/s | MFU | note |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, r in result["workloads"].items():
        if "error" in r:
            lines.append(f"| {name} | | | | | | | failed: {r['error'][:120]} |")
            continue
        unit = r["unit"]
        mem = "" if r["peak_memory_gib"] is None else f"{r['peak_memory_gib']:.1f}"
        mfu = "" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%"
        lines.append(f"| {name} | {r['parameters'] / 1e6:.1f}M | {1e3 * r['step_s']:.1f} | "
                     f"{r[f'{unit}_per_s']:,.0f} {unit}/s | {mem} | {r['achieved_tflops']:.1f} | {mfu} | {r['note']} |")
    lines += ["", "Not timed (not GPU-bound at the paper profile):", ""]
    lines += [f"- {m}: {why}" for m, why in result["not_gpu_bound"].items()]
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--only", nargs="*", help="methods or workload names to run")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--scale", type=float, default=1.0, help="<1 shrinks lengths/batches/depth (CPU rehearsal)")
    parser.add_argument("--depth-cap", type=int, default=4, help="layers of the models too large for one device")
    parser.add_argument("--budget-s", type=float, default=540, help="stop starting workloads after this long")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible (use --device cpu for the rehearsal)")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    name, peak = device_peak(device)
    chosen = [w for w in workloads(args.depth_cap)
              if not args.only or w.method in args.only or w.name in args.only]
    if args.only and not chosen:
        parser.error(f"--only {' '.join(args.only)}: no such method or workload")
    started, results = time.perf_counter(), {}
    for w in chosen:
        if time.perf_counter() - started > args.budget_s:
            results[w.name] = {"method": w.method, "error": f"skipped: the {args.budget_s:.0f} s budget was spent"}
            continue
        try:
            r = measure(w, device, args.scale, args.steps, args.warmup)
            r["mfu"] = None if peak is None else r["achieved_tflops"] * 1e12 / peak
        except Exception as err:  # one workload's failure (e.g. out of memory) must not lose the rest
            r = {"method": w.method, "error": f"{type(err).__name__}: {err}"}
            if device.type == "cuda":
                torch.cuda.empty_cache()
        results[w.name] = r
        shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k != "note"}
        print(f"{w.name}: {shown}", flush=True)
    result = {"device": name, "peak_bf16_flops": peak, "torch": torch.__version__,
              "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d"), "steps": args.steps,
              "warmup": args.warmup, "scale": args.scale, "depth_cap": args.depth_cap,
              "command": "python benchmarks/gpu_check.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "workloads": results, "not_gpu_bound": NOT_GPU_BOUND,
              "seconds": time.perf_counter() - started}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = "".join(c if c.isalnum() else "_" for c in name).strip("_").lower()[:40] or device.type
    (out / f"gpu_check_{tag}.json").write_text(json.dumps(result, indent=1))
    write_markdown(result, out / f"gpu_check_{tag}.md")
    print(f"-> {out / f'gpu_check_{tag}.md'} ({result['seconds']:.0f} s)")
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
