"""Corruptions and the seeded stream, the online loop (source-only is the plain model's accuracy;
every variant runs), a killed stream resuming exactly, and the summary's rows (means over seeds,
collapse per seed) and claims from hand-made results."""
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
        assert r.merge_batches == [3, 4, 5, 6, 7] and r.bank_size == 5 and len(r.teacher_accuracy) == 8
    # stored at 0, 1, 2, 4, 6 (end of batch): 3, 3, 4, 4, 5 checkpoints at the merges of batches 3-7
    assert results["mos"].merge_forward_passes == 3 + 3 + 4 + 4 + 5  # every stored checkpoint, at each merge
    assert results["codemerge"].merge_forward_passes == 5  # one fingerprint per stored checkpoint
    assert len(results["codemerge"].selected[-1]) == 3 and results["mos"].selected[-1] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="unknown variant 'bogus'"):
        run_stream(model, sx, sy, cfg, "bogus")


def test_the_teacher_is_merged_again_at_every_batch_once_three_are_stored():
    """The official loop over 12 batches with checkpoints at {0, 1, 2, 4} and every 3 (stored at
    0, 1, 2, 3, 4, 6, 9): a new teacher at every batch from 3 on, each with its own selection, and
    the same figures again under the same seed. (Merging only when a checkpoint is stored gave new
    teachers at batches 3, 4, 5, 7, 10.)"""
    model, _, _, _ = _setup()
    stream = StreamConfig(batches=12, batch_size=6, segment_batches=3, early_batches=4, tail_batches=4)
    x = np.random.default_rng(0).random((40, 8, 8)).astype(np.float32)
    sx, sy = C.make_stream(x, np.arange(40) % 10, stream, 0)
    cfg = CodeMergeConfig(stream=stream, save_at=[0, 1, 2, 4], save_every=3, top_k=3, projection_dim=8,
                          lr=1e-2, threshold=0.0)
    for variant in ("codemerge", "codemerge_fixed", "mos"):
        r = run_stream(model, sx, sy, cfg, variant)
        assert r.merge_batches == list(range(3, 12)) and len(r.selected) == 9 and r.bank_size == 7
        again = run_stream(model, sx, sy, cfg, variant)
        assert again.accuracy == r.accuracy and again.selected == r.selected
    assert len(r.selected[0]) == 3 and len(r.selected[-1]) == 7  # MOS weighs every stored checkpoint


@pytest.mark.parametrize("variant", ["pl", "codemerge"])
def test_a_killed_stream_resumes_to_the_same_result(tmp_path, variant):
    model, sx, sy, cfg = _setup()
    whole = run_stream(model, sx, sy, cfg, variant)
    path = tmp_path / "stream.pt"
    run_stream(model, sx[:4], sy[:4], cfg, variant, checkpoint_path=path)  # "killed" after batch 4
    resumed = run_stream(model, sx, sy, cfg, variant, checkpoint_path=path)
    assert resumed.accuracy == whole.accuracy and resumed.merge_batches == whole.merge_batches
    assert resumed.selected == whole.selected


def test_rows_are_means_over_seeds_and_claims_pair_by_seed():
    cfg = CodeMergeConfig(stream=StreamConfig(batches=4, early_batches=2, tail_batches=2), collapse_fraction=0.5,
                          variants=["source", "pl", "tent", "mos", "codemerge"], seeds=[0, 1, 2])
    acc = {"source": [0.5, 0.5, 0.5, 0.5], "pl": [0.6, 0.4, 0.2, 0.0], "tent": [0.5, 0.5, 0.6, 0.6],
           "mos": [0.5, 0.6, 0.6, 0.6], "codemerge": [0.5, 0.6, 0.6, 0.7]}
    # seed s shifts every variant by 0.01·s (the pairing cancels it); pl collapses on seeds 0 and 1 only
    results = {v: {s: StreamResult(v, [x + 0.01 * s for x in a]) for s in cfg.run_seeds()} for v, a in acc.items()}
    results["pl"][2] = StreamResult("pl", [0.8, 0.7, 0.6, 0.6])
    # codemerge 0.002·s more: a gap the same at every seed has no interval (the sign test judges it)
    results["codemerge"] = {s: StreamResult("codemerge", [x + 0.012 * s for x in acc["codemerge"]]) for s in cfg.run_seeds()}
    for s in cfg.run_seeds():
        results["mos"][s].merge_seconds, results["mos"][s].merge_forward_passes = 2.0 + s, 12
        results["codemerge"][s].merge_seconds, results["codemerge"][s].merge_forward_passes = 0.5, 3
    m = method_metrics(cfg, results, {}, "tiny")
    h, rows = m.headline, m.rows
    assert rows["codemerge"]["online_accuracy"] == pytest.approx(0.6 + 0.012)  # the mean over seeds 0, 1, 2
    assert rows["codemerge"]["online_accuracy_std"] == pytest.approx(0.012)  # sample std of 0.600, 0.612, 0.624
    assert rows["pl"]["collapsed_seeds"] == 2 and rows["codemerge"]["collapsed_seeds"] == 0 and rows["pl"]["seeds"] == 3
    assert "teacher_accuracy" not in rows["source"]  # no teacher: no figure, not a None averaged
    assert h["merge_forward_passes_ratio_vs_mos"] == 0.25 and h["merge_seconds_ratio_vs_mos"] == pytest.approx(0.5 / 3)
    assert h["collapsed_variants"] == "pl" and not any("claim" in k for k in h)
    claims = {c.name: c for c in m.claims}
    assert claims["codemerge_above_source"].trivial and claims["codemerge_above_source"].verdict == "shown"
    assert claims["codemerge_above_source"].seeds == 3 and claims["codemerge_above_source"].effect == pytest.approx(0.102)
    assert claims["codemerge_above_tent"].verdict == "shown"  # +0.025, +0.027, +0.029
    assert claims["codemerge_above_pl"].verdict == "inconclusive"  # +0.3, +0.3, −0.055: the interval holds 0
    assert claims["codemerge_merges_faster_than_mos"].verdict == "shown"
    assert "codemerge_above_ema" not in claims  # ema did not run
    assert math.isclose(m.with_ratios().rows["codemerge"]["online_accuracy_vs_baseline"], 0.612 / 0.51)
    with pytest.raises(ValueError, match="'source' \\(no adaptation"):
        CodeMergeConfig(variants=["codemerge", "tent"])
