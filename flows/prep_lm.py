"""The lm-base flow: the shared causal LM the adaptation methods start from (AltLoRA, LoTA-QAF,
FVAE-LoRA's text task, LEFF), pretrained once on the text-corpus stage's Shakespeare tokens (one
task). Parameters: lm_base.profiles.<the profile tpa.profile names>."""
from __future__ import annotations

from prefect import flow

from flows.prep import resolve_prep
from tasks.lm_base import base_dir, build


@flow(name="lm-base", log_prints=True)
def lm_base_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve_prep("lm-base", profile, overrides or [])
    record = build.submit(cfg).result()
    print(f"lm-base ({profile}): {record['parameters']} parameters, {record['steps']} steps, "
          f"{record['tokens_seen']} tokens, validation loss {record['val_loss']:.3f} "
          f"(perplexity {record['val_perplexity']:.1f}) -> {base_dir(cfg)}")
    return {"profile": profile, **{k: record[k] for k in ("parameters", "val_loss", "steps")}}
