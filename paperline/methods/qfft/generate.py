"""Batched decoding of responses to many prompts: greedy (temperature 0) or sampled, stopping at
<eos>. Prompts are grouped by length so a batch needs no padding (and so no attention mask: our
CausalLM has none, and any HF causal LM decodes the same way)."""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch


@torch.no_grad()
def generate_responses(model, prompts: Sequence[list[int]], max_new_tokens: int, eos_id: int,
                       temperature: float = 0.0, batch_size: int = 256, seed: int = 0,
                       device="cpu", progress: bool = False) -> list[list[int]]:
    """Generated token ids per prompt (without the prompt, cut before <eos>)."""
    from tqdm.auto import tqdm

    from paperline.nn.causal_lm import CausalLM

    model.eval()
    ours = isinstance(model, CausalLM)
    groups: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(prompts):
        groups[len(p)].append(i)
    out: list[list[int]] = [[] for _ in prompts]
    generator = torch.Generator(device="cpu").manual_seed(seed)
    batches = [idx[j:j + batch_size] for idx in groups.values() for j in range(0, len(idx), batch_size)]
    for idx in tqdm(batches, desc="generate", disable=not progress, leave=False):
        x = torch.tensor([prompts[i] for i in idx], device=device)
        done = torch.zeros(len(idx), dtype=torch.bool, device=device)
        tokens = []
        cache, step_input = None, x
        for _ in range(max_new_tokens):
            if ours:
                result = model(step_input, cache=cache, use_cache=True)
                cache = result.cache
            else:  # a transformers model: its own KV cache
                result = model(step_input, past_key_values=cache, use_cache=True)
                cache = result.past_key_values
            logits = result.logits[:, -1].float()
            if temperature > 0:
                probs = torch.softmax(logits / temperature, -1).cpu()
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1).to(device)
            else:
                nxt = logits.argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, eos_id), nxt)
            tokens.append(nxt)
            done |= nxt == eos_id
            if bool(done.all()):
                break
            step_input = nxt[:, None]
        gen = torch.stack(tokens, 1).cpu().tolist()
        for i, row in zip(idx, gen):
            out[i] = row[:row.index(eos_id)] if eos_id in row else row
    return out

