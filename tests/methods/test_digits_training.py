"""The digits methods' shared pieces: the MLP (paperline/nn/mlp.py), the small supervised loop
(paperline/train/classifier.py) and the digits split (paperline/data/digits.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from paperline.data.digits import CLASSES, FEATURES, read_digits, split_digits
from paperline.nn.mlp import MLP
from paperline.seeds import seeded_init
from paperline.train.classifier import epoch_batches, train_classifier


def test_mlp_shapes_layers_and_names():
    model = MLP(64, [32, 16], 10)
    assert model(torch.zeros(5, 64)).shape == (5, 10)
    assert model.features(torch.zeros(5, 64)).shape == (5, 16)
    assert [type(m) for m in model] == [nn.Linear, nn.ReLU, nn.Linear, nn.ReLU, nn.Linear]
    assert [k for k in model.state_dict() if k.endswith("weight")] == ["0.weight", "2.weight", "4.weight"]
    assert [tuple(w.shape) for w in model.hidden_weights()] == [(32, 64), (16, 32)]
    named = MLP(64, [8, 8], 2, activation=nn.Tanh, names=("fc1", "fc2", "head"))
    assert isinstance(named.fc1, nn.Linear) and isinstance(named.fc1_act, nn.Tanh)
    x = torch.randn(3, 64)
    assert torch.equal(named.features(x), torch.tanh(named.fc2(torch.tanh(named.fc1(x)))))
    named.head = nn.Identity()  # what FVAE-LoRA's task model does: the features, its head dropped
    assert torch.equal(named(x), named.features(x))
    with pytest.raises(ValueError, match="2 names for 3"):
        MLP(64, [8, 8], 2, names=("a", "b"))


def test_mlp_init_is_seeded_both_ways():
    with seeded_init(3):
        a = MLP(64, [32], 10)
    with seeded_init(3):
        b = MLP(64, [32], 10)
    with seeded_init(4):
        c = MLP(64, [32], 10)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a[0].weight, c[0].weight)
    # the generator's init draws nn.Linear's bounds and ignores the global RNG
    d = MLP(64, [32], 10).reset_parameters(torch.Generator().manual_seed(5))
    torch.manual_seed(99)
    e = MLP(64, [32], 10).reset_parameters(torch.Generator().manual_seed(5))
    assert all(torch.equal(p, q) for p, q in zip(d.parameters(), e.parameters()))
    assert d[0].weight.abs().max() <= 64 ** -0.5 and d[2].bias.abs().max() <= 32 ** -0.5
    assert d[0].weight.abs().max() > 0.8 * 64 ** -0.5  # uniform over the whole bound, not a narrower one


def test_epoch_batches_cover_the_rows_once():
    g = torch.Generator().manual_seed(0)
    batches = epoch_batches(10, 4, g)
    assert [len(b) for b in batches] == [4, 4, 2]
    assert sorted(torch.cat(batches).tolist()) == list(range(10))
    assert [len(b) for b in epoch_batches(10, 4, g, drop_last=True)] == [4, 4]
    assert [len(b) for b in epoch_batches(3, 4, g, drop_last=True)] == [3]  # the only batch is kept
    again = epoch_batches(10, 4, torch.Generator().manual_seed(0))
    assert all(torch.equal(p, q) for p, q in zip(batches, again))


def _toy(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Three well-separated Gaussian blobs in 2-d."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.tensor([[4.0, 0.0], [-4.0, 0.0], [0.0, 4.0]])
    y = torch.arange(150) % 3
    return centers[y] + 0.5 * torch.randn(150, 2, generator=g), y


def _fit(seed: int, epochs: int = 30, **kwargs) -> tuple[MLP, dict]:
    x, y = _toy()
    with seeded_init(seed):
        model = MLP(2, [16], 3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model, train_classifier(model, x, y, opt, torch.Generator().manual_seed(seed), epochs=epochs,
                                   batch_size=32, **kwargs)


def test_the_loop_fits_a_separable_set_and_is_seeded():
    model, trained = _fit(0)
    x, y = _toy()
    assert len(trained["train_loss"]) == 30
    assert trained["train_loss"][-1] < 0.05 < trained["train_loss"][0]
    assert (model(x).argmax(1) == y).float().mean() == 1.0
    assert not model.training
    again, retrained = _fit(0)
    assert retrained["train_loss"] == trained["train_loss"]
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters()))
    _, other = _fit(1)
    assert other["train_loss"] != trained["train_loss"]


def test_the_loop_steps_the_scheduler_each_epoch():
    x, y = _toy()
    model = MLP(2, [4], 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
    train_classifier(model, x, y, opt, torch.Generator().manual_seed(0), epochs=2, batch_size=50, scheduler=sched)
    assert sched.last_epoch == 2 and opt.param_groups[0]["lr"] == pytest.approx(0.5e-2)


def test_the_loop_resumes_where_a_killed_run_stopped(tmp_path):
    """Three epochs then three more from the checkpoint train what six epochs in one go train."""
    whole, trained = _fit(2, epochs=6)
    path = tmp_path / "ck.pt"
    _fit(2, epochs=3, checkpoint=path, fingerprint="toy")
    # a resumed run rebuilds its model and optimizer fresh; the checkpoint puts back their state
    x, y = _toy()
    with seeded_init(2):
        model = MLP(2, [16], 3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    resumed = train_classifier(model, x, y, opt, torch.Generator().manual_seed(2), epochs=6, batch_size=32,
                               checkpoint=path, fingerprint="toy")
    assert resumed["train_loss"] == pytest.approx(trained["train_loss"])
    assert all(torch.allclose(p, q) for p, q in zip(whole.parameters(), model.parameters()))


@pytest.mark.parametrize("val_fraction", [0.0, 0.15])
def test_the_split_is_stratified_disjoint_and_seeded(val_fraction):
    rows = split_digits(0, 0.2, val_fraction)
    parts = [rows.train, rows.val, rows.test]
    assert sum(map(len, parts)) == len(rows.y) == 1797
    assert len(np.unique(np.concatenate(parts))) == 1797  # disjoint, every row once
    counts = np.bincount(rows.y, minlength=CLASSES)
    for part, fraction in ((rows.test, 0.2), (rows.val, val_fraction)):
        per_class = np.bincount(rows.y[part], minlength=CLASSES)
        assert np.all(np.abs(per_class - fraction * counts) <= 0.5)  # each class its share, rounded
    again, other = split_digits(0, 0.2, val_fraction), split_digits(1, 0.2, val_fraction)
    assert np.array_equal(again.test, rows.test) and not np.array_equal(other.test, rows.test)


def test_the_split_scales_unit_or_standard():
    raw, labels = read_digits()
    unit = split_digits(0, 0.2)
    assert unit.x.dtype == np.float32 and unit.x.shape == (1797, FEATURES)
    assert np.allclose(unit.x, raw / 16.0) and np.array_equal(unit.y, labels)
    standard = split_digits(0, 0.2, scaling="standard")
    assert np.array_equal(standard.test, unit.test)
    train = standard.x[standard.train]
    assert np.allclose(train.mean(0), 0.0, atol=1e-5)
    varying = raw[standard.train].std(0) > 1e-8
    assert np.allclose(train.std(0)[varying], 1.0, atol=1e-4)
    assert np.allclose(train[:, ~varying], 0.0)  # a constant pixel keeps scale 1 (and is centred)
    assert not np.allclose(standard.x[standard.test].mean(0), 0.0, atol=1e-5)  # test rows: train statistics
    with pytest.raises(ValueError, match="scaling"):
        split_digits(0, 0.2, scaling="minmax")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="below 1"):
        split_digits(0, 0.6, 0.5)
