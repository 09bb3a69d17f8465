"""Whole-slide images: cohort CSVs, slides read through OpenSlide, 50x thumbnails, Otsu tissue
masks, and TIL maps registered to the thumbnail grid.

Formats
- Cohort CSV: a header with `patient_id,slide_path,til_map_path,time,event` (more columns are kept
  but unused). Paths are absolute or relative to the CSV's folder; `til_map_path` may be empty
  (then `til_stand_in` replaces the map). `event` is 1 (death observed) or 0 (censored).
- Slides: anything OpenSlide opens (generic tiled TIFF, Aperio SVS, DICOM, ...).
- TIL maps: the TCGA lymphocyte-map layout (Saltz et al. 2018; Abousamra et al. 2022): an image
  with one pixel per 50 µm x 50 µm tile of the slide (100 x 100 px at 20x), row-major from the
  slide's top-left corner. Grayscale: the value / 255 is the TIL probability. RGB: the TCGA colour
  code, red = TIL probability, blue = tissue, black = no tissue; the red channel / 255 is read.
  (Our reading of the released PNGs; the loader is where to change it for another convention.)

Every error names the file: a file that is not a slide, a slide whose pixels cannot be read, a TIL
map whose grid does not fit the slide.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from paperline.io import DataError

COHORT_COLUMNS = ("patient_id", "slide_path", "til_map_path", "time", "event")
TIL_TILE_UM = 50.0  # the TCGA TIL maps' tile side
# a TIL map may be one tile shorter or longer per axis than ceil(extent / tile): the released
# maps round either way at the slide's right and bottom edges
TIL_GRID_TOLERANCE = 1


class WSIError(DataError):
    """Bad slide, cohort or TIL-map input; the message starts with the file's path."""


class NotASlideError(WSIError):
    pass


class UnreadableSlideError(WSIError):
    pass


class TilGridMismatchError(WSIError):
    pass


# ---------------------------------------------------------------------------------------------
# cohort CSV


@dataclass(frozen=True)
class CohortRow:
    patient_id: str
    slide_path: Path
    til_map_path: Path | None
    time: float
    event: bool


def read_cohort_csv(path: str | Path) -> list[CohortRow]:
    """Rows of a cohort CSV; a missing column or a bad value raises WSIError naming file:line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise WSIError(f"{path}: cannot read the cohort CSV ({err.strerror or err})") from err
    except UnicodeDecodeError as err:  # an image or archive named as the cohort
        raise WSIError(f"{path}: not a text CSV (byte {err.start}: {err.reason})") from None
    if "\0" in text:
        raise WSIError(f"{path}: line {text[:text.index(chr(0))].count(chr(10)) + 1}: NUL byte (binary, not a CSV)")
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in COHORT_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise WSIError(f"{path}: line 1: missing column(s) {', '.join(missing)} "
                       f"(expected a header {','.join(COHORT_COLUMNS)})")
    rows, seen = [], set()
    for line, rec in enumerate(reader, start=2):
        where = f"{path}: line {line}"
        pid = (rec["patient_id"] or "").strip()
        if not pid:
            raise WSIError(f"{where}: empty patient_id")
        if pid in seen:
            raise WSIError(f"{where}: patient_id {pid!r} repeats")
        seen.add(pid)
        if not (rec["slide_path"] or "").strip():
            raise WSIError(f"{where}: empty slide_path")
        try:
            time = float(rec["time"])
        except (TypeError, ValueError):
            raise WSIError(f"{where}: time {rec['time']!r} is not a number") from None
        if not math.isfinite(time) or time < 0:
            raise WSIError(f"{where}: time {rec['time']!r} must be a finite number >= 0")
        event = (rec["event"] or "").strip().lower()
        if event not in ("0", "1", "true", "false"):
            raise WSIError(f"{where}: event {rec['event']!r}: expected 1 (observed) or 0 (censored)")
        til = (rec["til_map_path"] or "").strip()
        rows.append(CohortRow(pid, _resolve(path, rec["slide_path"].strip()),
                              _resolve(path, til) if til else None, time, event in ("1", "true")))
    if not rows:
        raise WSIError(f"{path}: no patients")
    return rows


def _resolve(csv_path: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else (csv_path.parent / p)


def write_cohort_csv(path: str | Path, rows: list[CohortRow], absolute: bool = False) -> None:
    """Write rows; paths under the CSV's folder are written relative to it unless `absolute`."""
    from paperline.io import atomic_path

    path = Path(path)
    base = path.parent.resolve()

    def rel(p: Path | None) -> str:
        if p is None:
            return ""
        p = Path(p).resolve()
        return p.relative_to(base).as_posix() if p.is_relative_to(base) and not absolute else str(p)

    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COHORT_COLUMNS)
        for r in rows:
            writer.writerow([r.patient_id, rel(r.slide_path), rel(r.til_map_path), f"{r.time:g}",
                             int(r.event)])


# ---------------------------------------------------------------------------------------------
# slides


def open_slide(path: str | Path):
    """An `openslide.OpenSlide`; NotASlideError / UnreadableSlideError name the file."""
    import openslide

    path = Path(path)
    if not path.exists():
        raise NotASlideError(f"{path}: no such file")
    try:
        return openslide.OpenSlide(str(path))
    except openslide.OpenSlideUnsupportedFormatError:
        raise NotASlideError(f"{path}: not a slide OpenSlide can open (unsupported or not an image)") from None
    except openslide.OpenSlideError as err:
        raise UnreadableSlideError(f"{path}: OpenSlide cannot open it: {err}") from None


def slide_mpp(slide, default: float | None = None) -> float | None:
    """Microns per pixel at level 0 (mean of x and y), or `default` when the slide does not say."""
    try:
        x = float(slide.properties["openslide.mpp-x"])
        y = float(slide.properties.get("openslide.mpp-y", x))
        return (x + y) / 2
    except (KeyError, ValueError):
        return default


def slide_magnification(slide, mpp: float | None) -> float | None:
    """Objective power of level 0: the vendor's property, else 10 / mpp (0.25 µm/px is 40x)."""
    try:
        return float(slide.properties["openslide.objective-power"])
    except (KeyError, ValueError):
        return 10.0 / mpp if mpp else None


def rgba_to_rgb(region) -> np.ndarray:
    """OpenSlide gives premultiplied RGBA with alpha 0 outside the scanned area: paint that white."""
    a = np.asarray(region)
    rgb = a[..., :3].astype(np.float32)
    alpha = a[..., 3:4].astype(np.float32) / 255.0
    return np.clip(rgb + 255.0 * (1.0 - alpha), 0, 255).astype(np.uint8)


def read_level(slide, level: int, path: Path, chunk: int = 4096) -> np.ndarray:
    """The whole of one level as RGB uint8, read in chunks (bounded memory on large levels)."""
    import openslide

    w, h = slide.level_dimensions[level]
    ds = slide.level_downsamples[level]
    out = np.empty((h, w, 3), np.uint8)
    try:
        for y in range(0, h, chunk):
            for x in range(0, w, chunk):
                cw, ch = min(chunk, w - x), min(chunk, h - y)
                # read_region takes level-0 coordinates of the top-left corner
                region = slide.read_region((int(round(x * ds)), int(round(y * ds))), level, (cw, ch))
                out[y:y + ch, x:x + cw] = rgba_to_rgb(region)
    except openslide.OpenSlideError as err:
        raise UnreadableSlideError(f"{path}: reading level {level} failed: {err}") from None
    return out


@dataclass
class Thumbnail:
    """A slide down-sampled `downsample` x from level 0, and where it came from."""

    rgb: np.ndarray  # (h, w, 3) uint8
    downsample: float  # requested factor from level 0 (50)
    level: int  # the pyramid level that was read
    level_downsample: float
    base_size: tuple[int, int]  # level-0 (width, height)
    mpp: float | None  # level-0 µm per pixel
    pixels_read: int  # pixels decoded from the level that was read
    vendor: str = ""
    scale: tuple[float, float] = field(init=False)  # level-0 px per thumbnail px, (x, y)

    def __post_init__(self):
        h, w = self.rgb.shape[:2]
        self.scale = (self.base_size[0] / w, self.base_size[1] / h)


def read_downsampled(path: str | Path, downsample: float = 50.0, default_mpp: float | None = None) -> Thumbnail:
    """Read a slide `downsample` x smaller than level 0: the best pyramid level for that factor
    (`get_best_level_for_downsample`, never a finer level than needed), then a box-filter resize
    to round(level-0 size / downsample)."""
    from PIL import Image

    path = Path(path)
    slide = open_slide(path)
    try:
        level = slide.get_best_level_for_downsample(downsample)
        level_rgb = read_level(slide, level, path)
        base_w, base_h = slide.dimensions
        size = (max(1, round(base_w / downsample)), max(1, round(base_h / downsample)))
        rgb = np.asarray(Image.fromarray(level_rgb).resize(size, Image.Resampling.BOX))
        return Thumbnail(rgb=rgb, downsample=float(downsample), level=level,
                         level_downsample=float(slide.level_downsamples[level]),
                         base_size=(base_w, base_h), mpp=slide_mpp(slide, default_mpp),
                         pixels_read=int(level_rgb.shape[0] * level_rgb.shape[1]),
                         vendor=slide.properties.get("openslide.vendor", ""))
    finally:
        slide.close()


def saturation(rgb: np.ndarray) -> np.ndarray:
    """HSV saturation in [0, 1] (tissue is coloured, glass and background are grey-white)."""
    rgb = rgb.astype(np.float32)
    mx, mn = rgb.max(axis=-1), rgb.min(axis=-1)
    return np.where(mx > 0, (mx - mn) / np.maximum(mx, 1e-6), 0.0)


def otsu_tissue_mask(rgb: np.ndarray, min_object_px: int = 4) -> tuple[np.ndarray, float]:
    """Tissue = saturation above its Otsu threshold, small specks removed; (mask, threshold)."""
    from skimage.filters import threshold_otsu
    from skimage.morphology import remove_small_objects

    sat = saturation(rgb)
    if float(sat.max() - sat.min()) < 1e-6:  # flat image: no tissue to separate
        return np.zeros(sat.shape, bool), float(sat.max())
    threshold = float(threshold_otsu(sat))
    mask = sat > threshold
    if min_object_px > 1:
        mask = remove_small_objects(mask, max_size=min_object_px - 1)
    return mask, threshold


# ---------------------------------------------------------------------------------------------
# TIL maps


def read_til_map(path: str | Path) -> np.ndarray:
    """TIL probabilities in [0, 1], one value per 50 µm tile: (rows, cols) float32."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    try:
        with Image.open(path) as im:
            im.load()
            mode = im.mode
            if mode in ("L", "I;16", "I", "F"):
                a = np.asarray(im).astype(np.float32)
                top = {"L": 255.0, "I;16": 65535.0}.get(mode, max(1.0, float(a.max())))
                prob = a / top
            elif mode in ("RGB", "RGBA", "P"):
                prob = np.asarray(im.convert("RGB"))[..., 0].astype(np.float32) / 255.0
            else:
                raise WSIError(f"{path}: TIL map has image mode {mode!r}; expected grayscale or RGB")
    except FileNotFoundError:
        raise WSIError(f"{path}: TIL map: no such file") from None
    except (UnidentifiedImageError, OSError) as err:
        raise WSIError(f"{path}: not a TIL map image ({err})") from None
    if prob.ndim != 2 or min(prob.shape) < 1:
        raise WSIError(f"{path}: TIL map must be a 2-D image, got shape {prob.shape}")
    return np.clip(prob, 0.0, 1.0)


def expected_til_grid(base_size: tuple[int, int], mpp: float, tile_um: float = TIL_TILE_UM) -> tuple[int, int]:
    """(rows, cols) of the TIL map of a slide with this level-0 size and resolution."""
    w, h = base_size
    return math.ceil(h * mpp / tile_um), math.ceil(w * mpp / tile_um)


def register_til_map(prob: np.ndarray, thumb: Thumbnail, path: str | Path,
                     tile_um: float = TIL_TILE_UM) -> np.ndarray:
    """The TIL map resampled onto the thumbnail grid (nearest tile under each thumbnail pixel's
    centre), after checking that its grid is the slide's 50-µm grid. Both grids start at the
    slide's top-left corner, so registration is a scale: tile = floor(centre_µm / tile_um)."""
    path = Path(path)
    if thumb.mpp is None:
        raise TilGridMismatchError(f"{path}: the slide has no microns-per-pixel, so its 50-µm TIL "
                                   "grid is unknown (set wsi default_mpp)")
    want = expected_til_grid(thumb.base_size, thumb.mpp, tile_um)
    got = prob.shape
    if any(abs(g - w) > TIL_GRID_TOLERANCE for g, w in zip(got, want)):
        raise TilGridMismatchError(
            f"{path}: TIL map grid {got[0]}x{got[1]} (rows x cols) does not match the slide: a "
            f"{thumb.base_size[0]}x{thumb.base_size[1]} px slide at {thumb.mpp:.4g} µm/px has a "
            f"{want[0]}x{want[1]} grid of {tile_um:g}-µm tiles")
    h, w = thumb.rgb.shape[:2]
    tile_px = tile_um / thumb.mpp  # level-0 px per TIL tile
    rows = np.minimum(((np.arange(h) + 0.5) * thumb.scale[1] / tile_px).astype(int), got[0] - 1)
    cols = np.minimum(((np.arange(w) + 0.5) * thumb.scale[0] / tile_px).astype(int), got[1] - 1)
    return prob[np.ix_(rows, cols)].astype(np.float32)


def til_stand_in(rgb: np.ndarray, tissue: np.ndarray) -> np.ndarray:
    """A TIL probability from the slide itself, for cohorts without TIL maps (our choice, [I]):
    lymphocyte aggregates are the most hematoxylin-dense tissue (small, tightly packed nuclei).
    The hematoxylin channel of `rgb2hed` over tissue is split into three classes by multi-Otsu;
    the densest class scores 1, the middle class 0.25, the rest 0, smoothed over ~one 50-µm tile.
    Weaker than a trained TIL classifier: it also marks dense tumour nuclei."""
    from scipy.ndimage import uniform_filter
    from skimage.color import rgb2hed
    from skimage.filters import threshold_multiotsu

    hema = rgb2hed(rgb)[..., 0]
    out = np.zeros(hema.shape, np.float32)
    values = hema[tissue]
    if values.size < 16 or float(values.max() - values.min()) < 1e-6:
        return out
    lo, hi = threshold_multiotsu(values, classes=3)
    out[tissue & (hema > lo)] = 0.25
    out[tissue & (hema > hi)] = 1.0
    return np.clip(uniform_filter(out, size=3), 0.0, 1.0) * tissue
