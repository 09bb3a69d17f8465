"""Figures go to files only (the Agg backend) and are written atomically."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from paperline.io import atomic_path  # noqa: E402


def save_figure(fig, path: Path) -> Path:
    """Write `fig` as a PNG at `path` (atomically), close it, and return the path."""
    path = Path(path)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
