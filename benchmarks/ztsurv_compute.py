"""ZTSurv's compute claim, measured: the 50x pipeline (best level, resize, Otsu, TIL registration,
segmentation, graph) against 20x patch tiling (Otsu on a low level, every tissue tile at 20x
read and featurised with the same statistics) on the same slides, in one run.

    .venv/bin/python benchmarks/ztsurv_compute.py                       # 4 generated 2 mm slides
    .venv/bin/python benchmarks/ztsurv_compute.py --cohort data/wsi/cohort/cohort.csv --slides 10

Prints pixels decoded, pixels processed and wall time per slide, and the ratios 20x / 50x. The
patch side featurises with colour statistics, not a CNN, so the time ratio is a lower bound on
what a CNN patch pipeline costs. Timings on a shared 2-core machine are noisy; the pixel ratios
are exact.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cohort", type=Path, help="a cohort CSV (default: generate slides)")
    parser.add_argument("--slides", type=int, default=4)
    parser.add_argument("--slide-um", type=float, default=2000.0, help="side of generated slides")
    args = parser.parse_args()

    from paperline.data import wsi, wsi_synth
    from paperline.methods.ztsurv.compute import compare_pipelines
    from paperline.methods.ztsurv.config import ZTSurvConfig

    with tempfile.TemporaryDirectory() as tmp:
        csv = args.cohort
        if csv is None:
            out = Path(tmp) / "cohort"
            wsi_synth.generate_cohort(out, wsi_synth.procedural_texture_bank(0), args.slides, args.slide_um,
                                      "contact", seed=0)
            csv = out / "cohort.csv"
        rows = wsi.read_cohort_csv(csv)[: args.slides]
        result = compare_pipelines([(r.slide_path, r.til_map_path) for r in rows], ZTSurvConfig())
    for key, value in result.items():
        print(f"{key:34s} {value:14.4g}")
    print(f"\n20x tiling / 50x pipeline: {result['pixel_ratio_processed']:.0f}x the pixels processed, "
          f"{result['pixel_ratio_read']:.0f}x decoded, {result['time_ratio']:.1f}x the wall time "
          f"({result['slides']} slides)")


if __name__ == "__main__":
    main()
