"""The vit-source flow: the source classifier every vision method adapts (CodeMerge; HRM-PET to
come): a small ViT trained on the clean training split of an offline image set, or a local
checkpoint loaded and checked (one task: seconds at tiny/smoke). Parameters: vit_source.profiles.<the
profile codemerge.profile names>."""
from __future__ import annotations

from prefect import flow

from flows.prep import resolve_prep
from tasks.vit_source import build, source_dir


@flow(name="vit-source", log_prints=True)
def vit_source_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve_prep("vit-source", profile, overrides or [])
    record = build.submit(cfg).result()
    print(f"vit-source ({profile}): {record['source']} {record['train_images']}/{record['test_images']} images, "
          f"{record['parameters']} parameters, clean test accuracy {record['test_accuracy']:.3f} -> {source_dir(cfg)}")
    return {"profile": profile, **{k: record[k] for k in ("source", "test_accuracy", "parameters")}}
