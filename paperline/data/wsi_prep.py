"""The WSI data-prep stages, as plain functions (the flows in flows/prep_wsi.py run them for DVC,
each slide's work a chunk of `map_chunks`: paperline/data/chunks.py).

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
from paperline.data.chunks import ChunkMap, map_serially

COHORT_DIR, THUMB_DIR, TIL_DIR = "cohort", "thumbnails", "til"


class WSIPrepConfig(StrictModel):
    """`wsi.profiles.<profile>` in params/wsi.yaml."""

    source: Literal["embedded", "csv"] = "embedded"
    cohort_csv: str | None = None  # source csv: a cohort CSV of real slides (see paperline/data/wsi.py)
    # embedded cohort
    patients: int = Field(300, ge=2, le=686)  # drawn from GBSG2's 686
    slide_um: float = Field(2000.0, ge=400.0)  # side of each (square) slide
    risk_signal: Literal["contact", "area"] = "contact"
    texture: Literal["cmu", "procedural"] = "cmu"  # procedural: no download (tests, tiny)
    jpeg_quality: int = Field(70, ge=10, le=100)
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


def build_cohort(cfg: WSIPrepConfig, data_dir: Path, raw_dir: Path, map_chunks: ChunkMap = map_serially) -> Path:
    """wsi-cohort: generate the embedded cohort (a chunk of patients per `map_chunks` call), or
    check a user cohort CSV and record it."""
    from paperline.data import wsi_synth
    from paperline.io import atomic_dir

    out = Path(data_dir) / COHORT_DIR
    if cfg.source == "csv":
        assert cfg.cohort_csv  # the config's validator requires it for source csv
        rows = wsi.read_cohort_csv(cfg.cohort_csv)
        for column in ("slide_path", "til_map_path"):  # named but absent: a typo, not a bad slide
            missing = [str(p) for r in rows if (p := getattr(r, column)) is not None and not p.exists()]
            if missing:
                raise wsi.WSIError(f"{cfg.cohort_csv}: {len(missing)} {column} file(s) do not exist, e.g. {missing[0]}")
        with atomic_dir(out) as tmp:  # absolute paths: the slides stay where the user keeps them
            wsi.write_cohort_csv(tmp / "cohort.csv", rows, absolute=True)
        return out / "cohort.csv"
    if cfg.texture == "cmu":
        wsi_synth.cmu_small_region(raw_dir)  # a missing or changed texture slide fails before any slide
        bank = wsi_synth.TextureSource("cmu", raw_dir=str(raw_dir))
    else:
        bank = wsi_synth.TextureSource("procedural", seed=cfg.seed)
    wsi_synth.generate_cohort(out, bank, cfg.patients, cfg.slide_um, cfg.risk_signal, cfg.seed, cfg.jpeg_quality,
                              texture_name=bank.describe(), map_chunks=map_chunks)
    return out / "cohort.csv"


def downsample_slides(rows: list[wsi.CohortRow], cfg: WSIPrepConfig, out_dir: str | Path) -> list[dict]:
    """Thumbnail and Otsu tissue mask of each row's slide into `out_dir`: per row its index entry
    ({"patient_id", "entry"}) or its failure ({"failed"}) when the slide cannot be read."""
    from PIL import Image

    results: list[dict] = []
    for row in rows:
        started = time.perf_counter()
        try:
            thumb = wsi.read_downsampled(row.slide_path, cfg.downsample, cfg.default_mpp)
        except wsi.WSIError as err:
            results.append({"failed": _failure(row.slide_path, err) | {"patient_id": row.patient_id}})
            continue
        mask, threshold = wsi.otsu_tissue_mask(thumb.rgb)
        Image.fromarray(thumb.rgb).save(Path(out_dir) / f"{row.patient_id}.png")
        Image.fromarray((mask * 255).astype(np.uint8)).save(Path(out_dir) / f"{row.patient_id}.tissue.png")
        results.append({"patient_id": row.patient_id, "entry": {
            "slide": str(row.slide_path), "vendor": thumb.vendor, "level": thumb.level,
            "level_downsample": thumb.level_downsample, "downsample": thumb.downsample,
            "base_size": list(thumb.base_size), "thumb_size": [thumb.rgb.shape[1], thumb.rgb.shape[0]],
            "mpp": thumb.mpp, "pixels_read": thumb.pixels_read, "otsu_saturation": threshold,
            "tissue_fraction": float(mask.mean()), "seconds": time.perf_counter() - started}})
    return results


def downsample_cohort(cfg: WSIPrepConfig, data_dir: Path, map_chunks: ChunkMap = map_serially) -> dict:
    """wsi-downsample: every slide of the cohort at 1/downsample, with its Otsu tissue mask."""
    from paperline.io import atomic_dir, write_json

    rows = wsi.read_cohort_csv(Path(data_dir) / COHORT_DIR / "cohort.csv")
    with atomic_dir(Path(data_dir) / THUMB_DIR) as tmp:
        index, failed = _index(map_chunks(downsample_slides, rows, cfg=cfg, out_dir=str(tmp)))
        write_json(tmp / "index.json", {"slides": index, "failed": failed, "downsample": cfg.downsample})
    _report(failed)
    _check_failures("wsi-downsample", failed, len(rows), cfg)
    return {"slides": index, "failed": failed}


def _index(results: list[dict]) -> tuple[dict, list[dict]]:
    """A stage's index (patient id -> entry) and its failures, in cohort order."""
    index = {r["patient_id"]: r["entry"] for r in results if "failed" not in r}
    return index, [r["failed"] for r in results if "failed" in r]


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


def register_til_maps(rows: list[wsi.CohortRow], cfg: WSIPrepConfig, data_dir: str | Path, thumbs: dict,
                      out_dir: str | Path) -> list[dict]:
    """Each row's TIL map (or stand-in) on its thumbnail's grid into `out_dir`: per row its index
    entry or its failure, as `downsample_slides`."""
    from PIL import Image

    results: list[dict] = []
    for row in rows:
        thumb, mask = load_thumbnail(Path(data_dir), row.patient_id, thumbs[row.patient_id])
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
            results.append({"failed": _failure(row.til_map_path or row.slide_path, err) | {"patient_id": row.patient_id}})
            continue
        Image.fromarray(np.round(prob * 255).astype(np.uint8)).save(Path(out_dir) / f"{row.patient_id}.png")
        results.append({"patient_id": row.patient_id, "entry": {
            "source": source, "til_map": str(row.til_map_path or ""), "grid": grid_shape,
            "mean_prob_in_tissue": float(prob[mask].mean()) if mask.any() else 0.0}})
    return results


def register_cohort_til_maps(cfg: WSIPrepConfig, data_dir: Path, map_chunks: ChunkMap = map_serially) -> dict:
    """til-maps: each slide's TIL map checked against its 50-µm grid and resampled onto the
    thumbnail; a slide without one gets the stand-in from its own pixels (source 'stand-in')."""
    from paperline.io import atomic_dir, read_json, write_json

    data_dir = Path(data_dir)
    rows = wsi.read_cohort_csv(data_dir / COHORT_DIR / "cohort.csv")
    thumbs = read_json(data_dir / THUMB_DIR / "index.json")["slides"]
    downsampled = [row for row in rows if row.patient_id in thumbs]  # the others failed in wsi-downsample
    with atomic_dir(data_dir / TIL_DIR) as tmp:
        index, failed = _index(map_chunks(register_til_maps, downsampled, cfg=cfg, data_dir=str(data_dir),
                                          thumbs=thumbs, out_dir=str(tmp)))
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
