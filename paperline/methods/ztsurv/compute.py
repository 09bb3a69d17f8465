"""Compute accounting (the paper's efficiency claim): ZTSurv's 50x pipeline against a 20x
patch-tiling pipeline on the same slides, in pixels decoded and wall time.

- 50x: read the best pyramid level for 50x, resize, Otsu mask, register the TIL map, segment,
  build the graph (everything ZTSurv does before the GNN).
- 20x tiling (CLAM / Patch-GCN practice): Otsu tissue mask on a low-resolution level, then every
  `patch_px` tile at 20x with tissue under it read and featurised. Featurisation here is the same
  colour-texture statistics (rgb2hed and co.) ZTSurv computes per cell, not the ImageNet CNN a
  patch pipeline runs per tile, so the measured time ratio is a lower bound on the saving.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paperline.data import wsi
from paperline.methods.ztsurv.config import ZTSurvConfig
from paperline.methods.ztsurv.segment import stain_features


@dataclass
class PipelineCost:
    seconds: float
    pixels_read: int  # decoded from the slide
    pixels_processed: int  # that the pipeline's features were computed on
    units: int  # thumbnails (1) or tiles


def pipeline_50x(slide_path: Path, til_path: Path | None, cfg: ZTSurvConfig, downsample: float = 50.0,
                 til_tile_um: float = wsi.TIL_TILE_UM) -> PipelineCost:
    from paperline.methods.ztsurv.pipeline import slide_graph

    started = time.perf_counter()
    thumb = wsi.read_downsampled(slide_path, downsample)
    tissue, _ = wsi.otsu_tissue_mask(thumb.rgb)
    if til_path is not None:
        til = wsi.register_til_map(wsi.read_til_map(til_path), thumb, til_path, til_tile_um)
    else:
        til = wsi.til_stand_in(thumb.rgb, tissue)
    slide_graph(thumb.rgb, tissue, til, cfg)
    return PipelineCost(time.perf_counter() - started, thumb.pixels_read,
                        int(thumb.rgb.shape[0] * thumb.rgb.shape[1]), 1)


def tile_features(tile: np.ndarray) -> np.ndarray:
    """The per-cell statistics of graph.cell_table, on one tile."""
    st = stain_features(tile)
    px = tile.reshape(-1, 3).astype(np.float32) / 255.0
    s = st.reshape(-1, 3)
    return np.concatenate([px.mean(0), px.std(0), s.mean(0), s.std(0)])


def pipeline_20x_tiles(slide_path: Path, cfg: ZTSurvConfig) -> PipelineCost:
    from PIL import Image

    started = time.perf_counter()
    slide = wsi.open_slide(slide_path)
    try:
        mpp = wsi.slide_mpp(slide)
        mag = wsi.slide_magnification(slide, mpp) or cfg.patch_magnification
        ds = max(1.0, mag / cfg.patch_magnification)  # level-0 px per 20x px
        level = slide.get_best_level_for_downsample(ds)
        level_ds = slide.level_downsamples[level]
        read_px = int(round(cfg.patch_px * ds / level_ds))  # tile side at the level read
        # tissue mask on the coarsest level (the usual low-resolution pass)
        low = slide.level_count - 1
        low_rgb = wsi.read_level(slide, low, slide_path)
        mask, _ = wsi.otsu_tissue_mask(low_rgb)
        low_ds = slide.level_downsamples[low]
        step0 = cfg.patch_px * ds  # tile side in level-0 px
        W, H = slide.dimensions
        pixels, tiles = int(low_rgb.shape[0] * low_rgb.shape[1]), 0
        for y0 in np.arange(0, H, step0):
            for x0 in np.arange(0, W, step0):
                ys = slice(int(y0 / low_ds), max(int(y0 / low_ds) + 1, int((y0 + step0) / low_ds)))
                xs = slice(int(x0 / low_ds), max(int(x0 / low_ds) + 1, int((x0 + step0) / low_ds)))
                under = mask[ys, xs]
                if under.size == 0 or under.mean() < 0.1:  # no tissue under this tile
                    continue
                region = slide.read_region((int(x0), int(y0)), level, (read_px, read_px))
                tile = wsi.rgba_to_rgb(region)
                if read_px != cfg.patch_px:
                    tile = np.asarray(Image.fromarray(tile).resize((cfg.patch_px, cfg.patch_px), Image.Resampling.BOX))
                tile_features(tile)
                pixels += read_px * read_px
                tiles += 1
    finally:
        slide.close()
    return PipelineCost(time.perf_counter() - started, pixels, tiles * cfg.patch_px ** 2, tiles)


def compare_pipelines(slides: list[tuple[Path, Path | None]], cfg: ZTSurvConfig, downsample: float = 50.0,
                      til_tile_um: float = wsi.TIL_TILE_UM) -> dict:
    """Both pipelines on the same slides, alternating (so machine load hits both alike) after one
    untimed warm-up; per-slide means and the ratios 20x / 50x of pixels decoded, pixels processed
    and wall time."""
    fast, slow = [], []
    if slides:  # warm-up, untimed: imports and first-call set-up would land on whichever runs first
        pipeline_50x(slides[0][0], slides[0][1], cfg, downsample, til_tile_um)
        pipeline_20x_tiles(slides[0][0], cfg)
    for slide, til in slides:
        fast.append(pipeline_50x(slide, til, cfg, downsample, til_tile_um))
        slow.append(pipeline_20x_tiles(slide, cfg))
    tot = lambda costs, k: float(sum(getattr(c, k) for c in costs))
    n = max(1, len(slides))
    return {
        "slides": len(slides),
        "pixels_read_per_slide_50x": tot(fast, "pixels_read") / n,
        "pixels_read_per_slide_20x": tot(slow, "pixels_read") / n,
        "pixels_processed_per_slide_50x": tot(fast, "pixels_processed") / n,
        "pixels_processed_per_slide_20x": tot(slow, "pixels_processed") / n,
        "tiles_per_slide_20x": tot(slow, "units") / n,
        "seconds_per_slide_50x": tot(fast, "seconds") / n,
        "seconds_per_slide_20x": tot(slow, "seconds") / n,
        "pixel_ratio_read": tot(slow, "pixels_read") / max(1.0, tot(fast, "pixels_read")),
        "pixel_ratio_processed": tot(slow, "pixels_processed") / max(1.0, tot(fast, "pixels_processed")),
        "time_ratio": tot(slow, "seconds") / max(1e-9, tot(fast, "seconds")),
    }


def cohort_slides(data_dir: Path, count: int) -> list[tuple[Path, Path | None]]:
    """(slide, TIL map) of the first `count` prepared slides of the cohort (those wsi-downsample read)."""
    from paperline.data.wsi_prep import COHORT_DIR, THUMB_DIR
    from paperline.io import read_json

    thumbs = read_json(Path(data_dir) / THUMB_DIR / "index.json")["slides"]
    rows = [r for r in wsi.read_cohort_csv(Path(data_dir) / COHORT_DIR / "cohort.csv") if r.patient_id in thumbs]
    return [(r.slide_path, r.til_map_path) for r in rows[:count]]
