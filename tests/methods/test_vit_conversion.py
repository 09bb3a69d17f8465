"""A transformers ViT image classifier (the layout of ViT-B/16, here tiny and randomly initialised:
nothing is downloaded) converted into paperline.nn.vit gives the same logits, through the
checkpoint the `paper` profiles load by path; a grey batch runs on the colour backbone."""
from __future__ import annotations

import pytest
import torch

from paperline.data.vit_source import ViTShape
from paperline.nn.vit import convert_transformers_checkpoint, load_classifier, vit_from_transformers


@pytest.fixture(scope="module")
def hf_vit():
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(image_size=8, patch_size=2, num_channels=3, hidden_size=16, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=64, num_labels=5)
    model = ViTForImageClassification(config).eval()
    with torch.no_grad():  # non-trivial norms, cls token and positions (their initial values are 1, 0, 0)
        for name, p in model.named_parameters():
            if "layernorm" in name or "cls_token" in name or "position" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


def test_converted_weights_give_the_same_logits(hf_vit, tmp_path):
    images = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        expected = hf_vit(pixel_values=images).logits
        ours = vit_from_transformers(hf_vit).eval()
        torch.testing.assert_close(ours(images), expected, rtol=1e-5, atol=1e-5)
    assert ours.shape["norm_eps"] == hf_vit.config.layer_norm_eps == 1e-12 and ours.shape["mlp_ratio"] == 4

    hf_vit.save_pretrained(tmp_path / "hf")
    out = convert_transformers_checkpoint(tmp_path / "hf", tmp_path / "vit.pt")
    # loaded as the vit-source paper profile loads it: built from the configured shape, the eps the file's
    shape = ViTShape(image_size=8, patch_size=2, channels=3, dim=16, depth=2, heads=2, mlp_ratio=4, num_classes=5)
    with torch.no_grad():
        loaded = load_classifier(out, shape).eval()
        assert loaded.shape["norm_eps"] == 1e-12
        torch.testing.assert_close(loaded(images), expected, rtol=1e-5, atol=1e-5)
        grey = torch.rand(2, 8, 8)  # MNIST-like: repeated over the three channels
        torch.testing.assert_close(ours(grey), hf_vit(pixel_values=grey[:, None].expand(-1, 3, -1, -1)).logits,
                                   rtol=1e-5, atol=1e-5)


def test_a_folder_without_a_config_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        convert_transformers_checkpoint(tmp_path, tmp_path / "vit.pt")
