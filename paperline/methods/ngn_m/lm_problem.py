"""A causal LM on nanoGPT-format token files (the paper's NGN-MD language-model setting):
next-token cross-entropy on random windows of train.bin, scored on val.bin. The model is the shared
`paperline.nn.causal_lm.CausalLM` (LLaMA-style: RoPE, RMSNorm, SwiGLU, no biases, tied embeddings)
at the config's width, depth and heads [I: it was a GPT-2-style model (learned positions,
LayerNorm, GELU MLP, biases) until the one shared LM replaced it; the paper profile's LM is
untrained here either way].

Minibatch `step` is drawn from a generator seeded by (seed, step), so a resumed run sees the
same windows. On CUDA the forward pass runs under bf16 autocast (the loss stays float32).
"""
from __future__ import annotations

import contextlib
from pathlib import Path

import torch
import torch.nn.functional as F

from paperline.data.tokens import open_tokens, sample_windows
from paperline.methods.ngn_m.base import Problem
from paperline.methods.ngn_m.config import TextLMConfig
from paperline.nn.causal_lm import CausalLM, CausalLMConfig
from paperline.seeds import seeded_init

EVAL_SEED = 12345  # the validation windows: the same for every run


class TextLM(Problem):
    kind = "text_lm"

    def __init__(self, cfg: TextLMConfig, seed: int, device: torch.device):
        self.cfg, self.seed, self.device = cfg, seed, device
        self.train = open_tokens(Path(cfg.data_dir) / "train.bin", cfg.vocab_size, cfg.block_size)
        self.val = open_tokens(Path(cfg.data_dir) / "val.bin", cfg.vocab_size, cfg.block_size)
        config = CausalLMConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.n_embd, num_layers=cfg.n_layer,
                                attention="mha", num_heads=cfg.n_head, head_dim=cfg.n_embd // cfg.n_head,
                                max_position_embeddings=cfg.block_size)
        with seeded_init(seed):  # transformers' init draws from the global RNG; runs train in threads
            self.model = CausalLM(config)
            self.model.to(device)  # type: ignore[arg-type]  # in place; transformers types its `to` unbound
        self.total_steps = cfg.steps

    def parameters(self):
        return list(self.model.parameters())

    def state_dict(self):
        return self.model.state_dict()

    def load_state_dict(self, state):
        self.model.load_state_dict(state)

    def _autocast(self):
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with self._autocast():
            logits = self.model(x).logits
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))

    def batch(self, step):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        x, y = sample_windows(self.train, self.cfg.batch_size, self.cfg.block_size, g)
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def loss(self, batch):
        return self._loss(*batch)

    @torch.no_grad()
    def _mean_loss(self, tokens) -> float:
        g = torch.Generator().manual_seed(EVAL_SEED)
        total = 0.0
        for _ in range(self.cfg.eval_batches):
            x, y = sample_windows(tokens, self.cfg.batch_size, self.cfg.block_size, g)
            total += float(self._loss(x.to(self.device), y.to(self.device)))
        return total / self.cfg.eval_batches

    def evaluate(self):
        return {"loss": self._mean_loss(self.val), "train_loss": self._mean_loss(self.train)}
