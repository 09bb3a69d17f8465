"""The language model seen by Influence Distillation: tokenized Tulu samples, the shared
`CausalLM` shaped as a small LLaMA (byte-level vocabulary) or a transformers causal LM by local
path, and the assistant-only loss.

Samples are tokenized with the Tulu template (`paperline.data.tulu.encode_tulu`). Longer than
`max_length`, a sample keeps a window that starts at most max_length/2 tokens before its first
assistant token, so every sample has tokens to train on (open-instruct cuts the right end; at our
byte-level lengths that would leave long GSM prompts with no answer at all) [I].
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from paperline.data.local_tokenizer import shared_lm_tokenizer
from paperline.data.tulu import ByteTokenizer, HFTokenizer, Tokenizer, TuluRecord, encode_tulu
from paperline.nn.causal_lm import CausalLM, llama_config
from paperline.seeds import load_pretrained, seeded_init
from paperline.train.lm_base import check_causal_lm, load_causal_lm


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


class InfluenceLM(nn.Module):
    """`forward(tokens) -> logits` plus what the method needs from the architecture: the names of
    the MLP down-projection weights (where gradients are taken), the model cut to its first blocks
    (the JVP embeddings), and hidden states after the first blocks / the last block. `kind` "llama":
    our CausalLM; "hf": a transformers causal LM."""

    def __init__(self, net: nn.Module, kind: str):
        super().__init__()
        # our CausalLM ("llama") or a transformers causal LM ("hf"): read by the attributes of its kind
        self.net: Any = net
        self.kind = kind

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.kind == "hf":
            return self.net(input_ids=tokens, use_cache=False).logits
        # not net(tokens): CausalLM.forward checks the token ids with a branch on their values,
        # which vmap (per-sample gradients) cannot take
        return self.net.lm_head(self.net.hidden_states(tokens))

    def layer_prefix(self) -> str:
        # the spec's pitfall: the JVP needs a `.model.layers` structure (transformers) or `.layers`
        return "net.layers." if self.kind == "llama" else "net.model.layers."

    def down_proj_names(self) -> list[str]:
        return [name for name, _ in self.named_parameters() if name.endswith("mlp.down_proj.weight")]

    def truncated(self, num_blocks: int) -> "InfluenceLM":
        """The model cut to its first `num_blocks` blocks, its head an identity, so `forward` gives the
        hidden states after those blocks *and the final norm*, as the official `create_jvp_store`
        cuts a deep copy (`model.model.layers[:num_blocks]`, `lm_head = Identity()`). Here the
        parameters are shared, not copied (shallow copies of the containers only)."""
        net = copy.copy(self.net)
        net._modules = dict(net._modules)  # a shallow copy shares the dict: this one is the copy's own
        body = net if self.kind == "llama" else copy.copy(net.model)
        if body is not net:
            body._modules = dict(body._modules)
            net.model = body
        body.layers = nn.ModuleList(list(body.layers)[:num_blocks])
        net.lm_head = nn.Identity()
        return InfluenceLM(net, self.kind)

    def hidden_states(self, tokens: torch.Tensor, num_blocks: int | None = None) -> torch.Tensor:
        """(B, T, H) after the first `num_blocks` blocks (None: after the last block and the norm)."""
        if self.kind == "llama":
            return self.net.hidden_states(tokens, num_blocks)
        out = self.net(input_ids=tokens, output_hidden_states=True)
        return out.hidden_states[-1 if num_blocks is None else num_blocks]


def build_model(cfg, seed: int) -> tuple[InfluenceLM, Tokenizer]:
    """(model, tokenizer) of `cfg.model`: the small LLaMA from a seeded init with the byte
    tokenizer, the shared lm-base model with its BPE, or a transformers causal LM and its tokenizer
    from `cfg.hf_model_path`."""
    if cfg.model == "lm_base":
        return lm_base_model(cfg, seed)
    if cfg.model == "llama":
        tok = ByteTokenizer()
        size = cfg.llama
        config = llama_config(size.hidden_size, size.intermediate_size, size.num_heads, size.num_layers,
                              vocab_size=tok.vocab_size, max_position_embeddings=cfg.max_length)
        return InfluenceLM(CausalLM.seeded(config, torch.Generator().manual_seed(seed)), "llama"), tok
    from transformers import AutoTokenizer

    dtype = torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32
    net = load_causal_lm(cfg.hf_model_path, dtype=dtype, attn_implementation="eager")
    hf_tok = HFTokenizer(load_pretrained(AutoTokenizer, cfg.hf_model_path, local_files_only=True))
    return InfluenceLM(net, "hf"), hf_tok


def check_model(cfg) -> None:
    """The model folder (and tokenizer) `cfg.model` names, opened and checked without loading its
    weights: what a data step calls before any work (a 3B model's weights are read by the task)."""
    if cfg.model == "lm_base":
        shared_lm_tokenizer(cfg.lm_base_path, cfg.lm_base_tokenizer, where="influence_distillation.lm_base_path, "
                            "lm_base_tokenizer")
        check_causal_lm(cfg.lm_base_path)
    elif cfg.model == "hf":
        from paperline.data.local_tokenizer import read_tokenizer_json

        check_causal_lm(cfg.hf_model_path)
        own = Path(cfg.hf_model_path) / "tokenizer.json"
        if own.exists():  # else AutoTokenizer's other files (a sentencepiece model), read by the task
            read_tokenizer_json(own, where="influence_distillation.hf_model_path")


def lm_base_model(cfg, seed: int) -> tuple[InfluenceLM, Tokenizer]:
    """The shared Shakespeare-pretrained CausalLM (`cfg.lm_base_path`) and the BPE it was trained with
    (`cfg.lm_base_tokenizer`, no special tokens of its own) with `</s>` and a pad appended after its
    vocabulary, as a transformers tokenizer: it reads `</s>` out of the Tulu text as open-instruct's
    tokenizers do, and adds no BOS (it has none). The tied embedding grows by those two rows
    (transformers draws them from the old rows' mean and covariance, here under `seed`), and the
    position limit becomes `max_length` (RoPE: positions past the pretraining block are computed,
    untrained)."""
    from transformers import PreTrainedTokenizerFast

    from paperline.io import DataError

    bpe = shared_lm_tokenizer(cfg.lm_base_path, cfg.lm_base_tokenizer, where="influence_distillation.lm_base_path, "
                              "lm_base_tokenizer")
    tok = HFTokenizer(PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="</s>", pad_token="<pad>"))
    net = load_causal_lm(cfg.lm_base_path, max_position_embeddings=cfg.max_length)
    if cfg.jvp_blocks > net.config.num_layers:
        raise DataError(f"jvp_blocks {cfg.jvp_blocks} exceeds the {net.config.num_layers} layers of "
                        f"{cfg.lm_base_path} (influence_distillation.jvp_blocks)")
    with seeded_init(seed, cuda=True):
        net.resize_token_embeddings(tok.vocab_size)
    return InfluenceLM(net, "llama"), tok
