"""Memory plans of each method's `paper` profile (paperline/memory_plan.py), written into the
method pages between `<!-- memory-plan -->` markers.

    python benchmarks/memory_plans.py            # print the tables
    python benchmarks/memory_plans.py --write    # update docs/methods/<method>.md

Parameter counts come from the models themselves, built on the meta device (no memory, no
weights) at the paper profile's shapes read from the params files; transformer activations from the
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
    """Bytes autograd saves for backward in one forward (meta tensors: nothing is computed). The
    parameters it saves (a linear layer's weight, or a view of it) are held once, not per sample:
    they are the plan's weights, not activations; a tensor two ops save (a ReLU's output, the next
    layer's input) is held once."""
    total = 0
    seen = {id(p) for p in model.parameters()}  # the saved tensors stay alive, so their ids are unique

    def pack(t: torch.Tensor):
        nonlocal total
        if id(t) not in seen and (t._base is None or id(t._base) not in seen):
            seen.add(id(t))
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


VIT_B16 = dict(image_size=224, patch_size=16, channels=3, dim=768, depth=12, heads=12, mlp_ratio=4, num_classes=10)


def meta_vit(shape: dict = VIT_B16):
    """(paperline.nn.vit.ViT of `shape` on the meta device, one meta image of its size): ViT-B/16 unless given."""
    from paperline.nn.vit import ViT

    with torch.device("meta"):
        vit = ViT(**shape)
        return vit, torch.empty(1, vit.channels, vit.image_size, vit.image_size)


def hrm_pet() -> list[Workload]:
    from peft import LoraConfig, get_peft_model

    cfg = paper_config("hrm_pet")
    vit, image = meta_vit()
    with torch.device("meta"):
        model = get_peft_model(vit, LoraConfig(r=cfg.lora.rank, lora_alpha=cfg.lora.alpha, target_modules=["qkv"],
                                               modules_to_save=["head"]))
        act = saved_activation_bytes(model, image)
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


def lm_activations(model, seq: int, vocab: int | None = None, checkpointing: bool = False) -> float:
    """The transformer formula at a transformers model's width and depth (vocab 0: no LM head)."""
    c = model.config
    return transformer_activation_bytes(seq, c.hidden_size, c.num_hidden_layers,
                                        c.vocab_size if vocab is None else vocab, checkpointing)


def altlora() -> list[Workload]:
    from paperline.methods.altlora.adapters import add_lora, expected_state_floats

    cfg = paper_config("altlora")
    lm = cfg.lm
    act = lm_activations(hf_model("llama-3.1-8b"), lm.block_size)
    out = []
    for name in cfg.lm_optimizers:
        model = hf_model("llama-3.1-8b")
        if name != "full_ft":
            with torch.device("meta"):
                model = add_lora(model, lm.target_modules, lm.rank, lm.alpha)
        trainable = count(model, trainable_only=True)
        out.append(Workload(f"Llama-3.1-8B {name}", trainable, frozen=count(model) - trainable,
                            optimizer_state_floats=expected_state_floats(name, model), activation_bytes_per_sample=act,
                            micro_batch=lm.batch_size, global_batch=lm.batch_size,
                            note=f"the paper's model (public config) for the profile's base; {lm.block_size} tokens"
                                 + ("" if name == "full_ft" else f"; LoRA r={lm.rank} on "
                                    f"{'/'.join(lm.target_modules)}, state by the altlora formula")))
    return out


def fvae_lora() -> list[Workload]:
    from paperline.methods.fvae_lora.adapter import inject
    from paperline.methods.fvae_lora.train import TaskModel

    cfg = paper_config("fvae_lora")
    vit, image = meta_vit()
    with torch.device("meta"):
        vit.dim = 768
        model = TaskModel(vit)
        inject(model.backbone, "fvae", cfg.adapter.target_modules, cfg.adapter.rank, cfg.adapter.alpha,
               cfg.fvae_settings("fvae_lora"))
        act = saved_activation_bytes(model, image)
    trainable = count(model, trainable_only=True)
    out = [Workload(f"ViT-B/16 FVAE-LoRA r={cfg.adapter.rank}", trainable, frozen=count(model) - trainable,
                    activation_bytes_per_sample=act, micro_batch=cfg.train.batch_size,
                    global_batch=cfg.train.batch_size,
                    note="the paper's backbone for the profile's checkpoint path; 224² images; backbone frozen")]
    text = cfg.text
    if text is not None:  # the spec names no text model: Llama-3.1-8B assumed; features, no LM head
        llama = hf_model("llama-3.1-8b")
        with torch.device("meta"):
            inject(llama, "fvae", text.adapter.target_modules, text.adapter.rank, text.adapter.alpha,
                   cfg.text_config().fvae_settings("fvae_lora"))
            act = saved_activation_bytes(llama.model, torch.zeros(1, text.length, dtype=torch.long))
        trainable = count(llama, trainable_only=True)
        out.append(Workload(f"Llama-3.1-8B FVAE-LoRA r={text.adapter.rank}", trainable,
                            frozen=count(llama) - trainable, activation_bytes_per_sample=act,
                            micro_batch=text.train.batch_size, global_batch=text.train.batch_size,
                            note=f"text task, {text.length} tokens; model assumed (the spec names none) for the "
                                 "profile's base; activations saved in an fp32 meta forward"))
    return out


def lota_qaf() -> list[Workload]:
    from paperline.methods.lota_qaf.layers import select_targets

    cfg = paper_config("lota_qaf")
    lm = cfg.lm
    model = hf_model("llama-3.1-8b")
    layers = [model.get_submodule(n) for n in select_targets(model, lm.target_modules)]
    quantized = sum(m.weight.numel() for m in layers)

    def low_rank(rank: int) -> int:  # A (d_in × r) and B (r × d_out) on each quantized layer
        return sum((m.in_features + m.out_features) * rank for m in layers)

    adapter = {"lota": low_rank(cfg.lota.rank), "lora": low_rank(cfg.lora.rank),  # QA-LoRA: A on the groups, r capped
               "qalora": sum((g + m.out_features) * min(cfg.qalora.rank, g, m.out_features)
                             for m in layers for g in [-(-m.in_features // lm.group_size)])}
    act = lm_activations(model, lm.block_size)
    note = (f"the paper's model (public config) for the profile's model_dir; {lm.block_size} tokens; b-bit codes "
            f"packed as GPTQ stores them (quant.py keeps uint8), fp16 scale and zero per {lm.group_size}")
    return [Workload(f"Llama-3.1-8B int{bits} {method}", adapter[method], frozen=count(model) - quantized,
                     quantized=quantized, quantized_bits=bits + 32 / lm.group_size,
                     optimizer_state_floats=0 if method == "lota" else None, activation_bytes_per_sample=act,
                     micro_batch=lm.batch_size, global_batch=lm.batch_size,
                     note=note + ("; t-SignSGD keeps no state" if method == "lota" else "; AdamW"))
            for bits in cfg.bits for method in cfg.methods]


def leff() -> list[Workload]:
    from paperline.methods.leff.leff import context_layers

    cfg = paper_config("leff")
    model = hf_model("gpt2-medium")
    layers, layer = model.config.n_layer, count(model.transformer.h[0])
    rest = count(model) - layers * layer  # embeddings, final norm (the head is tied)
    capacity = max(cfg.capacities)
    context = context_layers(layers - capacity, cfg.compression)
    note = (f"one client's local step; GPT-2 Medium (the paper's E2E model) for the profile's model path; "
            f"{cfg.block_size} tokens")

    def client(trained: int, frozen_layers: int) -> float:
        return transformer_activation_bytes(cfg.block_size, model.config.n_embd, trained + frozen_layers,
                                            model.config.vocab_size)

    return [Workload(f"LEFF client (L_i = {capacity}, context {context})", capacity * layer,
                     frozen=context * layer + rest, activation_bytes_per_sample=client(capacity, context),
                     micro_batch=cfg.batch_size, global_batch=cfg.batch_size,
                     note=note + f"; the {layers - capacity} other layers distilled to {context} (frozen; their "
                          "activations counted too, an upper bound)"),
            Workload("FedAvg client (full model)", count(model), activation_bytes_per_sample=client(layers, 0),
                     micro_batch=cfg.batch_size, global_batch=cfg.batch_size, note=note)]


def pubsub_vfl() -> list[Workload]:
    from paperline.methods.pubsub_vfl.data import split_columns
    from paperline.nn.mlp import MLP

    cfg = paper_config("pubsub_vfl")
    # Bank: 48 features (spec (c)); the active party's share of them by the profile's split
    active, _ = split_columns([f"f{i}" for i in range(48)], cfg.data)
    with torch.device("meta"):
        bottom = MLP(len(active), [cfg.hidden] * (cfg.bottom_layers - 1), cfg.embedding)  # bottom_layers Linears
        top = MLP(2 * cfg.embedding, [cfg.top_hidden], 1)
        act = saved_activation_bytes(bottom, torch.empty(1, len(active))) + saved_activation_bytes(
            top, torch.empty(1, 2 * cfg.embedding))  # the passive party's embedding joins at the top
    params = count(bottom) + count(top)
    return [Workload("active party (bottom f_a + top g)", params, optimizer_state_floats=0,
                     activation_bytes_per_sample=act, micro_batch=cfg.batch_size, global_batch=cfg.batch_size,
                     note=f"one party's step ({params:,} parameters), Bank's {len(active)} of 48 features; plain SGD; "
                          "the code runs numpy float64 (twice these bytes)")]


def geoada() -> list[Workload]:
    from paperline.methods.geoada.adapters import build_variant
    from paperline.methods.geoada.egtn import EGTN

    cfg = paper_config("geoada")
    n = 5  # charged N-body particles (GeoTDM's)
    out = []
    for name, cond, train in (("EGTN pretraining", cfg.cond_frames, cfg.pretrain),
                              ("GeoAda frame control", cfg.frame_control_frames, cfg.finetune)):
        with torch.device("meta"):
            base = EGTN(cfg.shape.hidden, cfg.shape.blocks, cfg.shape.time_dim, cfg.diffusion_steps)
            inputs = (torch.empty(1, cond, n, 3), torch.empty(1, cfg.horizon, n, 3))
            graph = (torch.empty(1, n), torch.empty(1, n, n), torch.zeros(1, dtype=torch.long))
            if name.startswith("EGTN"):
                model = base
                act = saved_activation_bytes(model, *inputs, *graph)
            else:
                model = build_variant("geoada", base, "frame", cfg.cond_frames, every=cfg.adapter_every)
                act = saved_activation_bytes(model, inputs[0], inputs[1], graph[2], graph[0], graph[1])
        trainable = count(model, trainable_only=True)
        out.append(Workload(name, trainable, frozen=count(model) - trainable, activation_bytes_per_sample=act,
                            micro_batch=train.batch_size, global_batch=train.batch_size,
                            note=f"{n} particles, {cond} + {cfg.horizon} frames"))
    return out


def dnc() -> list[Workload]:
    from paperline.methods.dnc.ufm import forward, param_shapes, unflatten

    cfg = paper_config("dnc")
    K, L = max(cfg.classes), max(cfg.depths)
    width, N = max(cfg.width_multipliers) * K, K * cfg.samples_per_class
    shapes = param_shapes(K, L, width, N)
    S = len(cfg.run_seeds())
    params = S * sum(r * c for r, c in shapes)
    with torch.device("meta"):  # all seeds in one float64 tensor θ (S, P), as ufm.py trains them
        Z, features = forward(unflatten(torch.empty(S, params // S, dtype=torch.float64), shapes),
                              cfg.activation)
    held = sum(H.nbytes for H in features[1:]) + 3 * Z.nbytes  # H_2..H_L, and Z, its log-softmax, dZ
    return [Workload(f"deep UFM K={K} L={L} d={width}, {S} seeds ({params / 1e6:.1f}M float64 parameters)",
                     2 * params, activation_bytes_per_sample=held / N, micro_batch=N, global_batch=N,
                     note=f"the grid's largest group, full batch (N = {N}), explicit backward; float64 parameters "
                          "counted as two fp32 words each, so weights, gradients and Adam's two moments (kept "
                          "through the GD phase) are their true bytes")]


def ztsurv() -> list[Workload]:
    import numpy as np

    from paperline.methods.ztsurv.graph import VISUAL_FEATURES, hetero_graph
    from paperline.methods.ztsurv.models import GraphBatch, build_model

    cfg = paper_config("ztsurv")
    side = 256 // cfg.cell_px  # the spec's 256 px thumbnail (§e) in the profile's cells
    graph = hetero_graph({"features": np.zeros((side, side, 3, len(VISUAL_FEATURES)), np.float32),
                          "present": np.ones((side, side, 3), bool)})  # every cell holds all three types
    batch = GraphBatch.from_graphs([graph])
    model = build_model("ztsurv", len(VISUAL_FEATURES), cfg, batch.metadata)  # HGTConv cannot run on meta
    act = saved_activation_bytes(model, batch)  # one real fp32 CPU forward of the slide's graph
    slides = 686 * (cfg.folds - 1) // cfg.folds  # the spec's 686-patient cohort (§e), a training fold
    return [Workload(f"ZTSurvNet ({cfg.gnn.upper()}, {cfg.layers}×{cfg.hidden}, {cfg.heads} heads)", count(model),
                     activation_bytes_per_sample=act, micro_batch=slides, global_batch=slides,
                     note=f"a slide: the spec's 256 px thumbnail in {side}×{side} cells of {cfg.cell_px} px, all "
                          f"three types in each (an upper bound: {len(batch.x):,} nodes, {batch.edge_index.shape[1]:,} "
                          f"edges); full-batch Cox over a fold of {slides} slides: micro-batches need the risk "
                          "sets carried across them (or the large batches the spec allows)")]


def codemerge() -> list[Workload]:
    from paperline.config import load_data_config, read_params
    from paperline.data.vit_source import VitSourceConfig
    from paperline.methods.codemerge.tta import adapted_parameters, save_due

    cfg = paper_config("codemerge")
    shape = load_data_config(VitSourceConfig, read_params(ROOT / "params"), "vit_source", "codemerge", "paper")[1].shape
    student, image = meta_vit(shape.model_dump())
    student.requires_grad_(False)
    for p in adapted_parameters(student, cfg.adapt):
        p.requires_grad_(True)
    act = saved_activation_bytes(student, image)
    trainable = count(student, trainable_only=True)
    bank = sum(save_due(t, cfg) for t in range(cfg.stream.batches))
    s = shape
    return [Workload(f"ViT {s.image_size}²/{s.patch_size} d={s.dim}×{s.depth} student ({cfg.adapt}), "
                     f"{count(student):,} parameters a copy", trainable,
                     frozen=count(student) - trainable + (3 + bank) * count(student),
                     activation_bytes_per_sample=act, micro_batch=cfg.stream.batch_size,
                     global_batch=cfg.stream.batch_size,
                     note=f"vit_source's paper shape; AdamW on the {cfg.adapt}; frozen: the head, teacher, anchor, "
                          f"scratch copy and the bank's {bank} stored students after {cfg.stream.batches} batches "
                          "(kept in fp32 by tta.py: twice the bf16 counted)")]


PLANS = {"tpa": tpa, "sumo": sumo, "memory_decoder": memory_decoder, "qfft": qfft,
         "influence_distillation": influence_distillation, "hrm_pet": hrm_pet, "splashnet": splashnet,
         "ngn_m": ngn_m, "model_shapley": model_shapley, "star": star, "altlora": altlora, "fvae_lora": fvae_lora,
         "lota_qaf": lota_qaf, "leff": leff, "pubsub_vfl": pubsub_vfl, "geoada": geoada, "dnc": dnc,
         "ztsurv": ztsurv, "codemerge": codemerge}


def method_plans(method: str) -> list[Plan]:
    return [plan(w) for w in PLANS[method]()]


def page_block(method: str) -> str:
    return (f"{START}\n## Memory plan (paper profile)\n\nComputed by `python benchmarks/memory_plans.py` from "
            f"`{method}.profiles.paper` in params/{method}.yaml (see paperline/memory_plan.py for the accounting: bf16 "
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
