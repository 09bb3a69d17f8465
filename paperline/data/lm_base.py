"""Parameters of the `lm-base` prep stage (torch-free, so validating them imports no torch): the
shared causal LM that the adaptation methods (AltLoRA, LoTA-QAF, FVAE-LoRA's text task, LEFF)
start from, pretrained once on the committed Shakespeare corpus and reused by every one of them.
The training is paperline/train/lm_base.py."""
from __future__ import annotations

from pydantic import Field

from paperline.config import LMShapeConfig, LMTrainConfig, ProjectPath, StrictModel

# what the stage writes into `out` besides the transformers files (config.json, model.safetensors)
RECORD_FILE, TRAIN_STATE_FILE = "lm_base.json", "train.pt"


class LMBaseConfig(StrictModel):
    corpus: ProjectPath = "data/text/shakespeare"  # a text-corpus folder (its tokenizer sets the vocabulary)
    shape: LMShapeConfig = LMShapeConfig(hidden_size=128, num_layers=4, num_heads=4, head_dim=32)
    block_size: int = Field(128, ge=2)
    train: LMTrainConfig = LMTrainConfig()
    threads: int = Field(2, ge=1)
    seed: int = 0
    out: ProjectPath = "data/lm_base"
