"""Parameters of the `vit-source` prep stage (torch-free, so validating them imports no torch):
the image data, the ViT's shape, and its pretraining on clean images — or, with `checkpoint`, a
local classifier loaded by path instead (the paper profile). CodeMerge reads the stage's folder;
HRM-PET is to read the same one. The training itself is paperline/train/vit.py."""
from __future__ import annotations

from pydantic import Field, model_validator

from paperline.config import ProjectPath, StrictModel
from paperline.data.images import ImageDataConfig

# what the stage writes into `out`
SPLIT_FILE, CLASSIFIER_FILE, RECORD_FILE, TRAIN_STATE_FILE = "images.npz", "classifier.pt", "source.json", "train.pt"


class ViTShape(StrictModel):
    """The constructor arguments of paperline.nn.vit.ViT."""

    image_size: int = Field(8, ge=2)
    patch_size: int = Field(2, ge=1)
    channels: int = Field(1, ge=1)
    dim: int = Field(32, ge=4)
    depth: int = Field(2, ge=1)
    heads: int = Field(2, ge=1)
    mlp_ratio: int = Field(2, ge=1)
    num_classes: int = Field(10, ge=2)

    @model_validator(mode="after")
    def _divisible(self):
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size {self.image_size} is not a multiple of patch_size {self.patch_size}")
        if self.dim % self.heads:
            raise ValueError(f"dim {self.dim} is not a multiple of heads {self.heads}")
        return self


class ViTPretrainConfig(StrictModel):
    epochs: int = Field(30, ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(3e-3, gt=0)
    weight_decay: float = Field(0.05, ge=0)
    checkpoint_every: int = Field(5, ge=1)  # epochs


class VitSourceConfig(StrictModel):
    data: ImageDataConfig = ImageDataConfig()
    shape: ViTShape = ViTShape()
    train: ViTPretrainConfig = ViTPretrainConfig()
    # a local classifier checkpoint (paperline.nn.vit.save_classifier's format, or a bare state_dict
    # of a ViT of `shape`): loaded and checked instead of training
    checkpoint: ProjectPath | None = None
    threads: int = Field(1, ge=1)
    seed: int = 0
    out: ProjectPath = "data/vit_source"
