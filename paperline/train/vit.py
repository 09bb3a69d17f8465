"""The source classifier of the vision methods: a ViT (paperline/nn/vit.py) trained on the clean
training split of an offline image set (paperline/data/images.py), or a local checkpoint loaded
and checked instead. Writes `out/` = images.npz (the seeded split: the held-out part is what TTA
streams draw from), classifier.pt, source.json (the record: fingerprint, accuracies, seconds).
A killed training resumes from out/train.pt (paperline/train/checkpoint.Resumable)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from paperline.data.images import check_images, load_images, split_images
from paperline.data.vit_source import CLASSIFIER_FILE, RECORD_FILE, SPLIT_FILE, TRAIN_STATE_FILE, VitSourceConfig
from paperline.io import DataError, atomic_path, json_digest, read_json, write_json
from paperline.nn.vit import ViT, load_classifier, save_classifier
from paperline.seeds import seeded_init
from paperline.train.classifier import train_classifier


def source_fingerprint(cfg: VitSourceConfig) -> str:
    """What the stage's outputs are made from (out excluded: moving them changes nothing)."""
    return json_digest(cfg.model_dump(exclude={"out"}))


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int = 512) -> float:
    model.eval()
    correct = sum(int((model(torch.as_tensor(x[i:i + batch_size])).argmax(1)
                       == torch.as_tensor(y[i:i + batch_size])).sum()) for i in range(0, len(x), batch_size))
    return correct / max(len(x), 1)


def _train(cfg: VitSourceConfig, split: dict[str, np.ndarray], state_path: Path, progress: bool) -> tuple[ViT, dict]:
    """AdamW with a cosine schedule over the epochs (paperline.train.classifier), resumable."""
    with seeded_init(cfg.seed):  # the ViT's initial weights
        model = ViT.from_config(cfg.shape)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.train.epochs)
    trained = train_classifier(model, torch.as_tensor(split["train_x"]), torch.as_tensor(split["train_y"]), opt,
                               torch.Generator().manual_seed(cfg.seed), epochs=cfg.train.epochs,
                               batch_size=cfg.train.batch_size, scheduler=sched, checkpoint=state_path,
                               fingerprint=source_fingerprint(cfg), every=cfg.train.checkpoint_every,
                               progress=progress, desc="vit-source")
    return model, trained


def build_vit_source(cfg: VitSourceConfig, out: str | Path, checkpoint: str | Path | None = None,
                     progress: bool = False) -> dict:
    """Write the stage's folder `out` (see the module docstring), training the ViT or, with
    `checkpoint` (cfg.checkpoint resolved against the project), loading it; returns the record."""
    torch.set_num_threads(cfg.threads)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    x, y = load_images(cfg.data.source)
    split = split_images(x, y, cfg.data)
    if split["train_x"].shape[1:] != (cfg.shape.image_size, cfg.shape.image_size):
        raise DataError(f"vit_source.shape.image_size {cfg.shape.image_size} does not fit the "
                         f"{cfg.data.source} images ({split['train_x'].shape[1]}×{split['train_x'].shape[2]})")
    if checkpoint:  # a given classifier: checked against the shape, never trained here
        model, history = load_classifier(checkpoint, cfg.shape), {"train_loss": [], "train_seconds": 0.0}
    else:
        model, history = _train(cfg, split, out / TRAIN_STATE_FILE, progress)
    record = {"fingerprint": source_fingerprint(cfg), "source": cfg.data.source,
              "checkpoint": cfg.checkpoint, "shape": cfg.shape.model_dump(),
              "parameters": sum(p.numel() for p in model.parameters()),
              "train_images": len(split["train_x"]), "test_images": len(split["test_x"]),
              "train_accuracy": accuracy(model, split["train_x"], split["train_y"]),
              "test_accuracy": accuracy(model, split["test_x"], split["test_y"]), **history}
    with atomic_path(out / SPLIT_FILE) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **split)  # type: ignore[arg-type]  # numpy's stub matches **split against allow_pickle
    save_classifier(out / CLASSIFIER_FILE, model)
    write_json(out / RECORD_FILE, record)  # last: its presence means the folder is complete
    return record


def read_vit_source(folder: str | Path, fingerprint: str | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """(the split, the record) of a built folder; DataError naming what is missing or stale."""
    folder = Path(folder)
    if not (folder / RECORD_FILE).is_file():
        raise FileNotFoundError(f"{folder}: no {RECORD_FILE} (run `python -m flows run vit-source`)")
    record = read_json(folder / RECORD_FILE)
    if fingerprint is not None and record.get("fingerprint") != fingerprint:
        raise DataError(f"{folder}: built from other vit_source parameters than the params files'")
    with np.load(folder / SPLIT_FILE) as z:
        split = {k: z[k] for k in z.files}
    for part in ("train", "test"):
        check_images(split[f"{part}_x"], split[f"{part}_y"], where=f"{folder / SPLIT_FILE}:{part}")
    return split, record
