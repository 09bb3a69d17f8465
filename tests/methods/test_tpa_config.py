"""The TPA profiles validate; the paper profile instantiates the paper-size models (on the meta
device: shapes only); real corpora as nanoGPT token files load by a path relative to the project
root, and a bad token file or a half-given data block is named."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperline.claims import MIN_SEEDS
from paperline.config import ParamsError, load_method_config, read_params
from paperline.methods.tpa.claims import BASELINES
from paperline.methods.tpa.config import TPAConfig
from paperline.methods.tpa.formulas import PAPER_SHAPES, VARIANTS, attention_params
from paperline.methods.tpa.models import lm_config
from paperline.nn.causal_lm import CausalLM
from tests.conftest import CHECKOUT

PARAMS = read_params(CHECKOUT / "params")


@pytest.mark.parametrize("profile", ["tiny", "smoke", "paper"])
def test_every_profile_validates(profile):
    _, cfg = load_method_config(TPAConfig, PARAMS, "tpa", profile, [])
    if profile == "smoke":  # the claims' variants, at the seeds a verdict needs
        assert set(cfg.variants) == {"tpa", *BASELINES} and len(cfg.run_seeds()) >= MIN_SEEDS
    else:
        assert cfg.variants == list(VARIANTS)


def test_seeds_default_to_the_seed_and_may_not_repeat():
    _, cfg = load_method_config(TPAConfig, PARAMS, "tpa", "paper", ["seed=7"])
    assert cfg.run_seeds() == [7]
    with pytest.raises(ParamsError, match=r"seeds: \[1\] listed more than once"):
        load_method_config(TPAConfig, PARAMS, "tpa", "smoke", ["seeds=[1, 1, 2]"])


def test_the_paper_profile_instantiates_t6_small_sizes():
    _, cfg = load_method_config(TPAConfig, PARAMS, "tpa", "paper", [])
    assert cfg.shape == PAPER_SHAPES["small"]
    for variant in VARIANTS:
        with torch.device("meta"):
            model = CausalLM(lm_config(variant, cfg.shape, cfg.data.vocab_size, cfg.train.block_size))
        h = cfg.shape.heads[variant]
        assert model.attention_parameters() == attention_params(variant, h, cfg.shape)
        total = sum(p.numel() for p in model.parameters())
        assert 110e6 < total < 135e6, (variant, total)  # "124M" at ≈ 4d² attention params


def test_invalid_parameters_are_named():
    with pytest.raises(ParamsError, match="tpa.profiles.smoke.data: .*train_bin, val_bin and vocab_size go together"):
        load_method_config(TPAConfig, PARAMS, "tpa", "smoke", ["data.train_bin=x.bin"])
    with pytest.raises(ParamsError, match="shape.bogus: unknown parameter"):
        load_method_config(TPAConfig, PARAMS, "tpa", "smoke", ["shape.bogus=1"])


def test_real_token_files_load_by_path_and_bad_ones_are_named(tmp_path):
    from paperline.methods.tpa.data import open_data

    tokens = (np.arange(5000) % 300).astype(np.uint16)
    (tmp_path / "fw").mkdir()
    tokens.tofile(tmp_path / "fw" / "train.bin")
    tokens[:1000].tofile(tmp_path / "fw" / "val.bin")
    _, cfg = load_method_config(TPAConfig, PARAMS, "tpa", "tiny",
                                ["data.train_bin=fw/train.bin", "data.val_bin=fw/val.bin", "data.vocab_size=300"],
                                root=tmp_path)
    assert cfg.data.train_bin == str(tmp_path / "fw" / "train.bin")  # relative to the project root
    data = open_data(cfg)
    assert data.vocab_size == 300 and data.corpus_dir is None and data.files() == [tmp_path / "fw" / "train.bin",
                                                                                    tmp_path / "fw" / "val.bin"]
    small_vocab = cfg.model_copy(update={"data": cfg.data.model_copy(update={"vocab_size": 256})})
    with pytest.raises(ValueError, match="fw/train.bin: token id 299 ≥ vocab_size 256"):
        open_data(small_vocab)
