"""The plain-torch ViT (output shapes, a refused image shape, save/load round trip, a checkpoint
that does not fit: a clear error naming the file and the keys) and the image checks."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from paperline.data.images import ImageDataConfig, ImageDataError, check_images, load_images, split_images
from paperline.data.vit_source import ViTShape
from paperline.nn.vit import CheckpointMismatchError, ViT, load_classifier, save_classifier

SHAPE = ViTShape(image_size=8, patch_size=2, dim=8, depth=1, heads=2, num_classes=10)


def test_output_and_feature_shapes():
    torch.manual_seed(0)
    model = ViT.from_config(SHAPE)
    x = torch.rand(5, 8, 8)
    assert model(x).shape == (5, 10) and model.features(x).shape == (5, 8)
    torch.testing.assert_close(model(x), model(x[:, None]))  # (B, H, W) and (B, 1, H, W) agree
    assert model.patches(x).shape == (5, 16, 4)
    # patch 0 is the top-left 2×2 block, row-major
    torch.testing.assert_close(model.patches(x)[:, 0], x[:, :2, :2].reshape(5, 4))
    with pytest.raises(ValueError, match=r"expected images \(B, 1, 8, 8\).*got \(5, 7, 7\)"):
        model(torch.rand(5, 7, 7))


def test_save_load_round_trip_and_mismatches(tmp_path):
    torch.manual_seed(0)
    model = ViT.from_config(SHAPE)
    path = tmp_path / "vit.pt"
    save_classifier(path, model)
    x = torch.rand(3, 8, 8)
    torch.testing.assert_close(load_classifier(path)(x), model(x))
    wider = ViTShape(**(SHAPE.model_dump() | {"dim": 16}))
    with pytest.raises(CheckpointMismatchError, match=r"vit\.pt: the checkpoint does not fit.*embed\.weight: \(8, 4\) "
                                                      r"in the checkpoint, \(16, 4\) in the model"):
        load_classifier(path, wider)
    bare = tmp_path / "bare.pt"
    torch.save({"head.weight": torch.zeros(10, 8)}, bare)
    with pytest.raises(CheckpointMismatchError, match="bare.pt: a bare state_dict names no shape"):
        load_classifier(bare)
    with pytest.raises(CheckpointMismatchError, match=r"bare.pt: .*missing keys \['blocks"):
        load_classifier(bare, SHAPE)
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointMismatchError, match="junk.pt: not a readable torch checkpoint"):
        load_classifier(junk)


@pytest.mark.parametrize("images,labels,message", [
    (np.zeros((4, 8, 8, 1), np.float32), None, r"shape \(N, H, W\), got shape \(4, 8, 8, 1\)"),
    (np.zeros((4, 8, 8), np.uint8), None, "float32 images in \\[0, 1\\], got dtype uint8"),
    (np.full((4, 8, 8), 16.0, np.float32), None, "values in \\[0, 1\\], got \\[16.0, 16.0\\]"),
    (np.zeros((4, 8, 8), np.float32), np.zeros(3, np.int64), "4 images but 3 labels"),
    (np.zeros((4, 8, 8), np.float32), np.zeros(4, np.float32), "integer labels"),
    ([[0.0]], None, "expected a numpy array of images, got list"),
])
def test_bad_image_arrays_are_named(images, labels, message):
    with pytest.raises(ImageDataError, match=message):
        check_images(images, labels, where="batch")


def test_digits_load_and_split_seeded():
    x, y = load_images("digits")
    assert x.shape == (1797, 8, 8) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    # the file read directly is what scikit-learn's load_digits gives (images / 16 as float32, target):
    # digests taken from it once (scikit-learn 1.9.1), so the test does not import scikit-learn (~10 s)
    assert hashlib.sha256(x.tobytes()).hexdigest() == "9f578524b6cec1fc800cc52dfc87ebe56264983d490aa72a4bd928ba2570ec77"
    assert hashlib.sha256(y.tobytes()).hexdigest() == "a3c91c262eddcf7ba8f0e37507c30284493c9b20412ffe4af30d536401f7ba21"
    a = split_images(x, y, ImageDataConfig(train_fraction=0.5, max_images=100, seed=3))
    b = split_images(x, y, ImageDataConfig(train_fraction=0.5, max_images=100, seed=3))
    assert len(a["train_x"]) == 50 and len(a["test_x"]) == 50
    assert all(np.array_equal(a[k], b[k]) for k in a)
    with pytest.raises(ImageDataError, match="unknown image source"):
        load_images("cifar")  # type: ignore[arg-type]


def test_fashion_mnist_is_read_from_the_committed_npz_and_a_missing_or_changed_file_is_named(tmp_path):
    from paperline.data import images

    x = (np.arange(2 * 28 * 28) % 256).astype(np.uint8).reshape(2, 28, 28)
    y = np.array([3, 7], np.uint8)
    np.savez_compressed(tmp_path / "f.npz", images=x, labels=y)
    got_x, got_y = images._fashion_mnist(tmp_path / "f.npz", sha256=None)
    np.testing.assert_allclose(got_x, x / 255.0, rtol=1e-6)
    assert got_y.tolist() == [3, 7] and got_y.dtype == np.int64
    with pytest.raises(ImageDataError, match=r"f\.npz: arrays' sha256 [0-9a-f]+ is not the pinned"):
        images._fashion_mnist(tmp_path / "f.npz")  # the committed arrays' pin
    with pytest.raises(ImageDataError, match=r"nowhere\.npz: missing \(committed with the repository"):
        images._fashion_mnist(tmp_path / "nowhere.npz")
    np.savez_compressed(tmp_path / "g.npz", images=x.astype(np.float32), labels=y)
    with pytest.raises(ImageDataError, match=r"g\.npz: expected uint8 images"):
        images._fashion_mnist(tmp_path / "g.npz", sha256=None)
    x, y = load_images("fashion_mnist")  # the committed file, checked against its pin
    assert x.shape == (5000, 28, 28) and np.bincount(y).tolist() == [500] * 10
