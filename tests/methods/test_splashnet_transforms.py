"""Transforms: the log spectrogram's shape and scale, the 6 bands, rolling time normalization
(causality, warm-up, values), and the masking rates of the baseline's SpecAugment and ACM."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paperline.methods.splashnet.transforms import (
    BAND_BINS,
    N_BINS,
    log_spectrogram,
    random_band_rotation,
    rolling_time_norm,
    six_bands,
    spec_augment,
    temporal_alignment_jitter,
)


def test_log_spectrogram_shape_and_a_sine_lands_in_its_bin():
    t = torch.arange(8000) / 2000.0
    emg = torch.zeros(8000, 2, 16)
    emg[:, 1, 3] = torch.sin(2 * math.pi * 250.0 * t)  # bin 8 (250 / 31.25)
    spec = log_spectrogram(emg)
    assert spec.shape == ((8000 - 64) // 16 + 1, 2, 16, N_BINS) == (497, 2, 16, 33)
    assert int(spec[:, 1, 3].mean(0).argmax()) == 8
    assert torch.allclose(spec[:, 0, 0], torch.full_like(spec[:, 0, 0], -6.0))  # log10(0 + 1e-6)
    power = 10 ** spec[:, 1, 3, 8].mean()
    assert 5 < float(power) < 15  # ~ (Σw/2)² / Σw² = (32/2)²/24 = 10.7 for the periodic Hann window


def test_six_bands_sum_log_values_over_the_spec_bins():
    assert [hi - lo for lo, hi in BAND_BINS] == [1, 2, 4, 4, 10, 11]
    assert BAND_BINS[0][0] == 1 and BAND_BINS[-1][1] == 33  # DC dropped, every other bin used once
    x = torch.randn(5, 2, 16, 33)
    bands = six_bands(x)
    assert bands.shape == (5, 2, 16, 6)
    assert torch.allclose(bands[..., 4], x[..., 12:22].sum(-1))


def test_rolling_time_norm_is_causal_after_the_warm_up():
    torch.manual_seed(0)
    x = torch.randn(400, 3, 2) * 5 + 3
    y = rolling_time_norm(x, warmup=125, eps=0.1)
    changed = x.clone()
    changed[300:] = torch.randn(100, 3, 2) * 50
    y2 = rolling_time_norm(changed, warmup=125, eps=0.1)
    assert torch.equal(y[:300], y2[:300])  # the future does not reach back
    assert not torch.allclose(y[300:], y2[300:])
    # inside the warm-up the statistics are those of frames 0..124: frame 100 sees frame 120
    bumped = x.clone()
    bumped[120] += 10
    assert not torch.allclose(rolling_time_norm(bumped)[100], y[100])


def test_rolling_time_norm_values_and_a_short_sequence():
    x = torch.arange(1.0, 201.0).view(200, 1)
    y = rolling_time_norm(x, warmup=125, eps=0.1)
    frames = x[:150, 0].double()
    expected = (150 - frames.mean()) / torch.sqrt(frames.var(unbiased=False) + 0.1)
    assert float(y[149, 0]) == pytest.approx(float(expected), rel=1e-6)
    w = x[:125, 0].double()
    assert float(y[0, 0]) == pytest.approx(float((1 - w.mean()) / torch.sqrt(w.var(unbiased=False) + 0.1)), rel=1e-6)
    short = torch.randn(40, 2)
    ys = rolling_time_norm(short, warmup=125)
    whole = short.double()
    assert torch.allclose(ys[0], ((short[0] - whole.mean(0)) / torch.sqrt(whole.var(0, unbiased=False) + 0.1)).float(),
                          atol=1e-6)
    # a user's gain and offset on a channel drop out (up to ε)
    z = torch.randn(500, 4)
    assert torch.allclose(rolling_time_norm(z * 30 + 7, eps=1e-6)[200:], rolling_time_norm(z, eps=1e-6 / 900)[200:],
                          atol=1e-4)


def _rates(n_bins: int, n_freq: int, param: int, draws: int = 3000) -> tuple[float, float]:
    g = torch.Generator().manual_seed(0)
    full, masked = 0, 0.0
    ones = torch.ones(4, 2, 16, n_bins)
    for _ in range(draws):
        out = spec_augment(ones, 0, 25, n_freq, param, g)
        zero = out[0] == 0  # no time masks: a mask covers every frame
        full += int(zero.all(-1).sum())
        masked += float(zero.float().mean())
    return full / (draws * 32), masked / draws


def test_acm_blanks_whole_electrodes_and_the_baseline_masking_never_does():
    p_full, frac = _rates(6, 2, 12)
    assert p_full == pytest.approx(0.42, abs=0.03)  # spec: ≈ 0.42
    assert frac == pytest.approx(0.54, abs=0.03)  # spec: ≈ 54% of the features
    p_full_b, frac_b = _rates(33, 2, 4)
    assert p_full_b == 0.0
    assert frac_b == pytest.approx(0.045, abs=0.01)  # spec: ≈ 4.5%


def test_time_masks_cover_at_most_their_width_and_masks_are_iid_per_electrode():
    g = torch.Generator().manual_seed(1)
    out = spec_augment(torch.ones(300, 2, 16, 33), 3, 25, 0, 4, g)
    zero_frames = (out == 0).all(-1)  # (T, 2, 16)
    assert int(zero_frames.sum(0).max()) <= 3 * 24
    assert len({tuple(zero_frames[:, h, e].nonzero().flatten().tolist()) for h in range(2) for e in range(16)}) > 4


def test_band_rotation_and_jitter():
    g = torch.Generator().manual_seed(0)
    x = torch.arange(16.0).view(1, 1, 16, 1).expand(10, 2, 16, 3).contiguous()
    seen = set()
    for _ in range(30):
        r = random_band_rotation(x, g)
        for h in range(2):
            first = int(r[0, h, 0, 0])  # electrode 0 now holds the value of electrode -offset
            offset = {0: 0, 15: 1, 1: -1}[first]
            assert torch.equal(r[:, h], x[:, h].roll(offset, dims=1))
            seen.add(offset)
    assert seen == {-1, 0, 1}
    t = torch.arange(50.0).view(50, 1, 1, 1).expand(50, 2, 1, 1).contiguous()
    offsets = set()
    for _ in range(40):
        j = temporal_alignment_jitter(t, 7, g)
        assert j.shape[0] == 43
        offsets.add(int(j[0, 1, 0, 0] - j[0, 0, 0, 0]))
    assert offsets <= set(range(-7, 8)) and len(offsets) > 5
    assert np.all(np.abs(sorted(offsets)) <= 7)
