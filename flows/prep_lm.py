"""The lm-base flow: the shared causal LM the adaptation methods start from (AltLoRA, LoTA-QAF,
FVAE-LoRA's text task, LEFF), pretrained once on the text-corpus stage's Shakespeare tokens (one
task, spread over the devices of params/runtime.yaml runtime.distributed). Parameters: lm_base.profiles.<the profile tpa.profile names>."""
from __future__ import annotations

from prefect import flow

from flows.prep import resolve_prep
from paperline.config import read_params
from tasks.lm_base import base_dir, build
from tasks.paths import params_path
from tasks.runners import ensure_gpu_limit, runtime_config


@flow(name="lm-base", log_prints=True)
def lm_base_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve_prep("lm-base", profile, overrides or [])
    distributed = runtime_config(read_params(params_path())).distributed
    ensure_gpu_limit()
    # params/runtime.yaml `runtime.distributed`: the paper profile's base over several GPUs (DDP/FSDP)
    record = build.submit(cfg, distributed).result()
    print(f"lm-base ({profile}): {record['parameters']} parameters, {record['steps']} steps, "
          f"{record['tokens_seen']} tokens, validation loss {record['val_loss']:.3f} "
          f"(perplexity {record['val_perplexity']:.1f}) -> {base_dir(cfg)}")
    return {"profile": profile, **{k: record[k] for k in ("parameters", "val_loss", "steps")}}
