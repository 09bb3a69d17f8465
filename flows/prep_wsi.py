"""The WSI data-prep flows: wsi-cohort (the embedded cohort's slides, a chunk of patients a task,
or a user cohort CSV checked), wsi-downsample (50x thumbnails and Otsu tissue masks, a chunk of
slides a task) and til-maps (TIL maps registered to the thumbnails, a chunk of slides a task).
A slide that fails is reported by name in the stage's index.json; the stage fails above
`max_failed_fraction`. Parameters: wsi.profiles.<the profile ztsurv.profile names>."""
from __future__ import annotations

from prefect import flow

from flows.prep import resolve_prep, stage_chunk_mapper
from paperline.data import wsi_prep
from tasks.wsi_prep import data_dir, downsample_slides, make_patients, raw_dir, register_til_maps


@flow(name="wsi-cohort", log_prints=True)
def wsi_cohort_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve_prep("wsi-cohort", profile, overrides or [])
    path = wsi_prep.build_cohort(cfg, data_dir(), raw_dir(), map_chunks=stage_chunk_mapper(make_patients))
    print(f"wsi-cohort ({profile}): {path}")
    return {"profile": profile, "cohort": str(path)}


@flow(name="wsi-downsample", log_prints=True)
def wsi_downsample_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    return _per_slide_stage("wsi-downsample", wsi_prep.downsample_cohort, downsample_slides, profile, overrides)


@flow(name="til-maps", log_prints=True)
def til_maps_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    return _per_slide_stage("til-maps", wsi_prep.register_cohort_til_maps, register_til_maps, profile, overrides)


def _per_slide_stage(stage: str, write_stage, slides_task, profile: str | None, overrides: list[str] | None) -> dict:
    """A stage that writes a file per slide and an index naming the slides that failed."""
    profile, cfg = resolve_prep(stage, profile, overrides or [])
    out = write_stage(cfg, data_dir(), map_chunks=stage_chunk_mapper(slides_task))
    print(f"{stage} ({profile}): {len(out['slides'])} slides, {len(out['failed'])} failed")
    return {"profile": profile, "slides": len(out["slides"]), "failed": out["failed"]}
