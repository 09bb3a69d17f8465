"""WSI data: OpenSlide reads of the real fixture formats and of the pyramids we write (every
level), 50x downsampling, Otsu masks, TIL-map registration, the cohort CSV, bad-file errors that
name the file, and a prep run that reports failed slides instead of stopping."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from paperline.data import wsi, wsi_synth
from paperline.data.wsi_prep import WSIPrepConfig, downsample_cohort, register_cohort_til_maps

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "data" / "openslide"


@pytest.mark.parametrize("name, vendor, levels", [("boxes.tiff", "generic-tiff", 4), ("small.svs", "aperio", 1),
                                                  ("boxes_0.dcm", "dicom", 1)])
def test_real_fixture_formats_read_at_every_level(name, vendor, levels):
    slide = wsi.open_slide(FIXTURES / name)
    assert slide.properties["openslide.vendor"] == vendor and slide.level_count == levels
    for level in range(slide.level_count):
        rgb = wsi.read_level(slide, level, FIXTURES / name)
        w, h = slide.level_dimensions[level]
        assert rgb.shape == (h, w, 3) and rgb.dtype == np.uint8
        assert rgb.std() > 0  # real pixels, not an empty canvas
    slide.close()


def _test_image(size: int = 640) -> np.ndarray:
    """A smooth colour gradient with a dark square: JPEG keeps it to a few grey levels."""
    y, x = np.mgrid[0:size, 0:size] / size
    img = np.stack([200 * x + 40, 160 * y + 60, 120 + 80 * x * y], -1)
    img[size // 4:size // 2, size // 4:size // 2] = (60, 30, 110)
    return img.astype(np.uint8)


def test_our_pyramid_opens_as_generic_tiff_with_every_level(tmp_path):
    img = _test_image()
    levels = wsi_synth.write_pyramid_tiff(tmp_path / "s.tiff", img, mpp=0.5, quality=90, smallest=100)
    slide = wsi.open_slide(tmp_path / "s.tiff")
    assert slide.properties["openslide.vendor"] == "generic-tiff"
    assert slide.level_count == levels == 4  # 640, 320, 160, 80
    assert float(slide.properties["openslide.mpp-x"]) == pytest.approx(0.5, rel=1e-3)
    for level in range(levels):
        got = wsi.read_level(slide, level, tmp_path / "s.tiff").astype(float)
        f = 2 ** level
        want = img.reshape(640 // f, f, 640 // f, f, 3).mean(axis=(1, 3))
        assert slide.level_downsamples[level] == pytest.approx(f)
        assert np.abs(got - want).mean() < 4.0, level  # JPEG and the box filter, not another image
    slide.close()


def test_read_downsampled_uses_the_best_level_then_resizes(tmp_path):
    wsi_synth.write_pyramid_tiff(tmp_path / "s.tiff", _test_image(1600), mpp=0.5, smallest=256)
    thumb = wsi.read_downsampled(tmp_path / "s.tiff", 50)
    assert thumb.level == 3 and thumb.level_downsample == 8  # levels 1, 2, 4, 8: the coarsest <= 50
    assert thumb.rgb.shape == (32, 32, 3) and thumb.pixels_read == 200 * 200
    assert thumb.scale == (50.0, 50.0) and thumb.mpp == pytest.approx(0.5, rel=1e-3)


def test_bad_slides_raise_errors_naming_the_file(tmp_path):
    with pytest.raises(wsi.NotASlideError, match="boxes.png"):
        wsi.open_slide(FIXTURES / "boxes.png")
    with pytest.raises(wsi.UnreadableSlideError, match="unopenable.tiff.*compression"):
        wsi.open_slide(FIXTURES / "unopenable.tiff")
    with pytest.raises(wsi.UnreadableSlideError, match="unreadable.svs"):
        wsi.read_downsampled(FIXTURES / "unreadable.svs", 50)
    with pytest.raises(wsi.NotASlideError, match="missing.tiff: no such file"):
        wsi.open_slide(tmp_path / "missing.tiff")


def test_otsu_tissue_mask_finds_the_stained_region():
    rgb = np.full((60, 60, 3), 240, np.uint8)
    rgb[10:40, 20:50] = (170, 90, 160)
    mask, _ = wsi.otsu_tissue_mask(rgb)
    truth = np.zeros((60, 60), bool)
    truth[10:40, 20:50] = True
    assert (mask == truth).all()


def _thumb(base: int = 1000, mpp: float = 0.5, ds: float = 50.0) -> wsi.Thumbnail:
    n = round(base / ds)
    return wsi.Thumbnail(rgb=np.zeros((n, n, 3), np.uint8), downsample=ds, level=0, level_downsample=1.0,
                         base_size=(base, base), mpp=mpp, pixels_read=base * base)


def test_til_map_registration_scales_the_50um_grid_onto_the_thumbnail(tmp_path):
    # 1000 px at 0.5 µm = 500 µm = 10 TIL tiles; the thumbnail (50x) is 20 px: 2 px per tile
    grid = np.zeros((10, 10), np.float32)
    grid[2:5, 6:9] = 1.0
    prob = wsi.register_til_map(grid, _thumb(), tmp_path / "til.png")
    want = np.zeros((20, 20))
    want[4:10, 12:18] = 1
    assert prob.shape == (20, 20) and (prob == want).all()


def test_til_map_reader_takes_grayscale_and_the_tcga_colour_code(tmp_path):
    prob = np.array([[0.0, 0.5], [1.0, 0.25]])
    Image.fromarray(np.round(prob * 255).astype(np.uint8)).save(tmp_path / "gray.png")
    Image.fromarray(wsi_synth.til_map_rgb(prob.astype(np.float32))).save(tmp_path / "rgb.png")
    for name in ("gray.png", "rgb.png"):
        assert np.allclose(wsi.read_til_map(tmp_path / name), prob, atol=1 / 255)


def test_til_map_of_the_wrong_grid_is_an_error_naming_it(tmp_path):
    with pytest.raises(wsi.TilGridMismatchError, match=r"til\.png: TIL map grid 7x10.*10x10"):
        wsi.register_til_map(np.zeros((7, 10), np.float32), _thumb(), tmp_path / "til.png")
    wsi.register_til_map(np.zeros((11, 9), np.float32), _thumb(), tmp_path / "til.png")  # +-1 tile: rounding
    with pytest.raises(wsi.WSIError, match="nothing.png: not a TIL map image"):
        (tmp_path / "nothing.png").write_text("not an image")
        wsi.read_til_map(tmp_path / "nothing.png")


def test_cohort_csv_round_trip_and_errors_name_file_and_line(tmp_path):
    rows = [wsi.CohortRow("A", tmp_path / "a.tiff", tmp_path / "a.png", 12.5, True),
            wsi.CohortRow("B", tmp_path / "b.tiff", None, 30.0, False)]
    wsi.write_cohort_csv(tmp_path / "c.csv", rows)
    assert "a.tiff" in (tmp_path / "c.csv").read_text() and str(tmp_path) not in (tmp_path / "c.csv").read_text()
    back = wsi.read_cohort_csv(tmp_path / "c.csv")
    assert [(r.patient_id, r.slide_path, r.til_map_path, r.time, r.event) for r in back] == \
        [(r.patient_id, r.slide_path, r.til_map_path, r.time, r.event) for r in rows]
    bad = tmp_path / "bad.csv"
    bad.write_text("patient_id,slide_path,til_map_path,time,event\nA,a.tiff,,10,1\nB,b.tiff,,x,1\n")
    with pytest.raises(wsi.WSIError, match=r"bad.csv: line 3: time 'x' is not a number"):
        wsi.read_cohort_csv(bad)
    bad.write_text("patient_id,slide_path,til_map_path,time,event\nA,a.tiff,,10,dead\n")
    with pytest.raises(wsi.WSIError, match=r"bad.csv: line 2: event 'dead'"):
        wsi.read_cohort_csv(bad)
    bad.write_text("patient_id,slide,time,event\n")
    with pytest.raises(wsi.WSIError, match=r"bad.csv: line 1: missing column\(s\) slide_path, til_map_path"):
        wsi.read_cohort_csv(bad)


def _small_cohort(tmp_path: Path, patients: int = 3) -> Path:
    data = tmp_path / "data"
    wsi_synth.generate_cohort(data / "cohort", wsi_synth.procedural_texture_bank(0), patients, 600.0,
                              "contact", seed=1)
    return data


def test_embedded_cohort_slides_open_and_til_maps_fit_their_grid(tmp_path):
    data = _small_cohort(tmp_path)
    rows = wsi.read_cohort_csv(data / "cohort" / "cohort.csv")
    assert len(rows) == 3 and all(r.time > 0 for r in rows)
    for r in rows:
        thumb = wsi.read_downsampled(r.slide_path, 50)
        grid = wsi.read_til_map(r.til_map_path)
        assert grid.shape == wsi.expected_til_grid(thumb.base_size, thumb.mpp)
        assert wsi.register_til_map(grid, thumb, r.til_map_path).shape == thumb.rgb.shape[:2]


def test_prep_reports_failed_slides_and_writes_the_rest(tmp_path):
    data = _small_cohort(tmp_path)
    rows = wsi.read_cohort_csv(data / "cohort" / "cohort.csv")
    for name in ("boxes.png", "unreadable.svs"):
        shutil.copy(FIXTURES / name, data / "cohort" / name)
    Image.fromarray(np.zeros((3, 5), np.uint8)).save(data / "cohort" / "wrong_grid.png")
    rows += [wsi.CohortRow("PNG", data / "cohort" / "boxes.png", None, 5.0, True),
             wsi.CohortRow("BROKEN", data / "cohort" / "unreadable.svs", None, 6.0, False)]
    rows[0] = wsi.CohortRow(rows[0].patient_id, rows[0].slide_path, data / "cohort" / "wrong_grid.png",
                            rows[0].time, rows[0].event)
    wsi.write_cohort_csv(data / "cohort" / "cohort.csv", rows)
    cfg = WSIPrepConfig(texture="procedural", max_failed_fraction=0.7)
    out = downsample_cohort(cfg, data)
    assert sorted(out["slides"]) == sorted(r.patient_id for r in rows[:3])
    failed = {f["patient_id"]: f for f in out["failed"]}
    assert set(failed) == {"PNG", "BROKEN"}
    assert "boxes.png" in failed["PNG"]["error"] and "unreadable.svs" in failed["BROKEN"]["error"]
    assert (data / "thumbnails" / f"{rows[1].patient_id}.png").exists()
    til = register_cohort_til_maps(cfg, data)
    assert [f["patient_id"] for f in til["failed"]] == [rows[0].patient_id]
    assert "wrong_grid.png" in til["failed"][0]["error"]
    assert len(til["slides"]) == 2
    with pytest.raises(wsi.WSIError, match="2 of 5 slides failed"):
        downsample_cohort(WSIPrepConfig(texture="procedural", max_failed_fraction=0.2), data)


def test_a_cohort_without_til_maps_gets_the_stand_in(tmp_path):
    data = _small_cohort(tmp_path, patients=2)
    rows = [wsi.CohortRow(r.patient_id, r.slide_path, None, r.time, r.event)
            for r in wsi.read_cohort_csv(data / "cohort" / "cohort.csv")]
    wsi.write_cohort_csv(data / "cohort" / "cohort.csv", rows)
    cfg = WSIPrepConfig(texture="procedural")
    downsample_cohort(cfg, data)
    til = register_cohort_til_maps(cfg, data)
    assert {s["source"] for s in til["slides"].values()} == {"stand-in"}


def test_the_committed_texture_slide_is_checked_against_its_sha256(tmp_path):
    assert wsi_synth.cmu_small_region(REPO / "data" / "raw").name == wsi_synth.CMU_NAME
    (tmp_path / wsi_synth.CMU_NAME).write_bytes(b"not the slide")
    with pytest.raises(RuntimeError, match="sha256 .* is not the pinned"):
        wsi_synth.cmu_small_region(tmp_path)
    with pytest.raises(RuntimeError, match="missing"):
        wsi_synth.cmu_small_region(tmp_path / "nowhere")
