"""The language model seen by Influence Distillation: tokenized Tulu samples, the small LLaMA
(`paperline.nn.llama`, byte-level vocabulary) or a transformers causal LM by local path, and the
assistant-only loss.

Samples are tokenized with the Tulu template (`paperline.data.tulu.encode_tulu`). Longer than
`max_length`, a sample keeps a window that starts at most max_length/2 tokens before its first
assistant token, so every sample has tokens to train on (open-instruct cuts the right end; at our
byte-level lengths that would leave long GSM prompts with no answer at all) [I].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from paperline.data.tulu import ByteTokenizer, TuluRecord, encode_tulu
from paperline.nn.llama import Llama, LlamaConfig, init_llama


@dataclass
class TokenizedSet:
    tokens: torch.Tensor  # (N, L) int64, right-padded with pad_id
    mask: torch.Tensor  # (N, L) bool: token t is an assistant token (trained on)
    lengths: torch.Tensor  # (N,)
    ids: list[str]
    datasets: list[str]

    def __len__(self) -> int:
        return len(self.ids)

    def to(self, device) -> "TokenizedSet":
        return TokenizedSet(self.tokens.to(device), self.mask.to(device), self.lengths, self.ids, self.datasets)

    def batch(self, index: torch.Tensor | Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows `index`, cut to their longest length (no work on all-pad columns)."""
        index = torch.as_tensor(index, dtype=torch.long)
        width = int(self.lengths[index].max())
        return self.tokens[index, :width], self.mask[index, :width]


def tokenize(records: Sequence[TuluRecord], tokenizer, max_length: int) -> TokenizedSet:
    rows, masks = [], []
    for record in records:
        ids, mask = encode_tulu(record.messages, tokenizer)
        if len(ids) > max_length:
            first = mask.index(True)
            start = max(0, min(first - max_length // 2, len(ids) - max_length))
            ids, mask = ids[start:start + max_length], mask[start:start + max_length]
        rows.append(ids)
        masks.append(mask)
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), tokenizer.pad_id, dtype=torch.long)
    loss_mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (r, m) in enumerate(zip(rows, masks)):
        tokens[i, :len(r)] = torch.tensor(r)
        loss_mask[i, :len(m)] = torch.tensor(m)
    return TokenizedSet(tokens, loss_mask, torch.tensor([len(r) for r in rows]),
                        [r.id for r in records], [r.dataset for r in records])


def masked_lm_loss(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor,
                   per_sample: bool = False) -> torch.Tensor:
    """Next-token cross-entropy on assistant tokens: the token-mean over the batch (open-instruct's
    loss), or each sample's own mean (per_sample)."""
    targets = tokens[:, 1:]
    weight = mask[:, 1:].to(logits.dtype if logits.dtype.is_floating_point else torch.float32)
    ce = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                         reduction="none").view_as(targets)
    if per_sample:
        return (ce * weight).sum(1) / weight.sum(1).clamp_min(1)
    return (ce * weight).sum() / weight.sum().clamp_min(1)


class CausalLM(nn.Module):
    """`forward(tokens) -> logits` plus what the method needs from the architecture: the names of
    the MLP down-projection weights (where gradients are taken), of the first blocks' parameters
    (the JVP tangents), and hidden states after the first blocks / the last block."""

    def __init__(self, net: nn.Module, kind: str):
        super().__init__()
        self.net = net
        self.kind = kind

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.net(tokens) if self.kind == "llama" else self.net(input_ids=tokens).logits

    def _layers(self) -> nn.ModuleList:
        # the spec's pitfall: the JVP needs a `.model.layers` structure (transformers) or `.layers`
        return self.net.layers if self.kind == "llama" else self.net.model.layers

    def layer_prefix(self) -> str:
        return "net.layers." if self.kind == "llama" else "net.model.layers."

    def down_proj_names(self) -> list[str]:
        return [name for name, _ in self.named_parameters() if name.endswith("mlp.down_proj.weight")]

    def block_param_names(self, num_blocks: int) -> list[str]:
        prefix = self.layer_prefix()
        return [name for name, _ in self.named_parameters()
                if name.startswith(prefix) and int(name[len(prefix):].split(".")[0]) < num_blocks]

    def hidden_states(self, tokens: torch.Tensor, num_blocks: int | None = None) -> torch.Tensor:
        """(B, T, H) after the first `num_blocks` blocks (None: after the last block and the norm)."""
        if self.kind == "llama":
            from paperline.nn.llama import rotary_tables

            net = self.net
            x = net.embed_tokens(tokens)
            cos, sin = rotary_tables(tokens.shape[1], net.cfg.hidden_size // net.cfg.num_heads,
                                     net.cfg.rope_base, x.device, x.dtype)
            layers = net.layers if num_blocks is None else net.layers[:num_blocks]
            for layer in layers:
                x = layer(x, cos, sin)
            return net.norm(x) if num_blocks is None else x
        out = self.net(input_ids=tokens, output_hidden_states=True)
        return out.hidden_states[-1 if num_blocks is None else num_blocks]


def build_model(cfg, seed: int) -> tuple[CausalLM, object]:
    """(model, tokenizer) of `cfg.model`: the small LLaMA from a seeded init with the byte
    tokenizer, or a transformers causal LM and its tokenizer from `cfg.hf_model_path`."""
    if cfg.model == "llama":
        tok = ByteTokenizer()
        size = cfg.llama
        net = Llama(LlamaConfig(hidden_size=size.hidden_size, intermediate_size=size.intermediate_size,
                                num_heads=size.num_heads, num_layers=size.num_layers,
                                vocab_size=tok.vocab_size, max_seq_len=cfg.max_length))
        init_llama(net, torch.Generator().manual_seed(seed))
        return CausalLM(net, "llama"), tok
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from paperline.data.tulu import HFTokenizer

    dtype = torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32
    net = AutoModelForCausalLM.from_pretrained(cfg.hf_model_path, dtype=dtype, local_files_only=True,
                                               attn_implementation="eager")
    tok = HFTokenizer(AutoTokenizer.from_pretrained(cfg.hf_model_path, local_files_only=True))
    return CausalLM(net, "hf"), tok
