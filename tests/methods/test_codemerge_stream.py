"""Corruptions and the seeded stream, the online loop (source-only is the plain model's accuracy;
every variant runs), a killed stream resuming exactly, and the summary's claims from hand-made
results."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paperline.data.images import ImageDataError
from paperline.data.vit_source import ViTShape
from paperline.methods.codemerge import corruptions as C
from paperline.methods.codemerge.config import VARIANTS, CodeMergeConfig, StreamConfig
from paperline.methods.codemerge.summary import method_metrics
from paperline.methods.codemerge.tta import StreamResult, run_stream
from paperline.nn.vit import ViT

STREAM = StreamConfig(batches=8, batch_size=6, segment_batches=2, early_batches=4, tail_batches=4)


def test_corruptions_keep_shape_and_range_and_follow_their_formulas():
    rng = np.random.default_rng(0)
    x = rng.random((3, 8, 8)).astype(np.float32)
    for name in STREAM.corruptions:
        y = C.corrupt(x, name, STREAM, np.random.default_rng(1))
        assert y.shape == x.shape and y.dtype == x.dtype and 0 <= y.min() and y.max() <= 1
    c = C.contrast(x, 0.5)
    np.testing.assert_allclose(c, x.mean(axis=(1, 2), keepdims=True) + 0.5 * (x - x.mean(axis=(1, 2), keepdims=True)),
                               rtol=1e-6)
    flat = np.full((1, 9, 9), 0.5, np.float32)
    assert C.blur(flat, 1.0)[0, 4, 4] == pytest.approx(0.5)  # a constant interior is unchanged
    assert float(C.gaussian_kernel(1.0).sum()) == pytest.approx(1.0)
    dropped = C.pixel_dropout(np.ones((200, 8, 8), np.float32), 0.4, np.random.default_rng(0))
    assert dropped.mean() == pytest.approx(0.6, abs=0.01)


def test_stream_is_seeded_and_cycles_its_corruptions():
    x = np.random.default_rng(0).random((30, 8, 8)).astype(np.float32)
    y = np.arange(30) % 10
    a, b = C.make_stream(x, y, STREAM, 0), C.make_stream(x, y, STREAM, 0)
    assert a[0].shape == (8, 6, 8, 8) and a[1].shape == (8, 6)
    assert np.array_equal(a[0], b[0]) and not np.array_equal(a[0], C.make_stream(x, y, STREAM, 1)[0])
    assert [C.corruption_of(t, STREAM) for t in range(0, 10, 2)] == [
        "gaussian_noise", "pixel_dropout", "blur", "contrast", "gaussian_noise"]
    with pytest.raises(ImageDataError, match="stream pool: expected float32"):
        C.make_stream(x.astype(np.int64), y, STREAM, 0)


def _setup():
    torch.manual_seed(0)
    model = ViT.from_config(ViTShape(dim=8, depth=1, heads=2))
    x = np.random.default_rng(0).random((40, 8, 8)).astype(np.float32)
    sx, sy = C.make_stream(x, np.arange(40) % 10, STREAM, 0)
    cfg = CodeMergeConfig(stream=STREAM, save_at=[0, 1, 2], save_every=2, top_k=3, projection_dim=8,
                          lr=1e-2, threshold=0.0, checkpoint_every=2)
    return model, sx, sy, cfg


def test_every_variant_runs_and_source_only_is_the_plain_model():
    model, sx, sy, cfg = _setup()
    with torch.no_grad():
        plain = [float((model(torch.as_tensor(b)).argmax(1) == torch.as_tensor(l)).float().mean()) for b, l in zip(sx, sy)]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    results = {v: run_stream(model, sx, sy, cfg, v) for v in VARIANTS}
    assert results["source"].accuracy == plain
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the source is untouched
    for v in ("mos", "codemerge", "codemerge_rls", "codemerge_fixed"):
        r = results[v]
        assert r.merge_batches == [2, 4, 6] and r.bank_size == 5 and len(r.teacher_accuracy) == 8
    assert results["mos"].merge_forward_passes == 3 + 4 + 5  # every stored checkpoint, at each merge
    assert results["codemerge"].merge_forward_passes == 5  # one fingerprint per stored checkpoint
    assert len(results["codemerge"].selected[-1]) == 3 and results["mos"].selected[-1] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="unknown variant 'bogus'"):
        run_stream(model, sx, sy, cfg, "bogus")


@pytest.mark.parametrize("variant", ["pl", "codemerge"])
def test_a_killed_stream_resumes_to_the_same_result(tmp_path, variant):
    model, sx, sy, cfg = _setup()
    whole = run_stream(model, sx, sy, cfg, variant)
    path = tmp_path / "stream.pt"
    run_stream(model, sx[:4], sy[:4], cfg, variant, checkpoint_path=path)  # "killed" after batch 4
    resumed = run_stream(model, sx, sy, cfg, variant, checkpoint_path=path)
    assert resumed.accuracy == whole.accuracy and resumed.merge_batches == whole.merge_batches
    assert resumed.selected == whole.selected


def test_claims_are_computed_from_the_rows():
    cfg = CodeMergeConfig(stream=StreamConfig(batches=4, early_batches=2, tail_batches=2), collapse_fraction=0.5,
                          match_tolerance=0.05, variants=["source", "pl", "tent", "mos", "codemerge"])
    acc = {"source": [0.5, 0.5, 0.5, 0.5], "pl": [0.6, 0.4, 0.2, 0.0], "tent": [0.5, 0.5, 0.6, 0.6],
           "mos": [0.5, 0.6, 0.6, 0.6], "codemerge": [0.5, 0.6, 0.6, 0.7]}
    results = {v: StreamResult(v, a) for v, a in acc.items()}
    results["mos"].merge_seconds, results["mos"].merge_forward_passes = 2.0, 12
    results["codemerge"].merge_seconds, results["codemerge"].merge_forward_passes = 0.5, 3
    m = method_metrics(cfg, results, {}, "tiny")
    h = m.headline
    assert h["online_gain_vs_pl"] == pytest.approx(0.6 - 0.3) and h["early_gain_vs_tent"] == pytest.approx(0.05)
    assert h["merge_seconds_ratio_vs_mos"] == 0.25 and h["merge_forward_passes_ratio_vs_mos"] == 0.25
    assert h["claim_geq_pl_tent"] is True and h["claim_no_collapse"] is True
    assert h["claim_matches_mos_cheaper"] is True  # |0.6 − 0.575| ≤ 0.05, 4× cheaper
    assert m.rows["pl"]["collapsed"] is True and h["collapsed_variants"] == "pl"  # tail 0.1 < 0.5 · 0.5
    assert math.isclose(m.with_ratios().rows["codemerge"]["online_accuracy_vs_baseline"], 0.6 / 0.5)
