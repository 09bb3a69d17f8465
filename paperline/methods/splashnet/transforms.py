"""Feature transforms (spec §b, "Train-time transforms" and "SplashNet changes").

Tensors are time-first as in emg2qwerty: a session's signal is (T, 2, 16) (hand, electrode) and
its features (T', 2, 16, F).

The log spectrogram is computed once per session by the `semg-normalize` stage, so the train-time
augmentations that emg2qwerty applies to raw samples act here on feature frames: the band rotation
commutes with the spectrogram (it only permutes electrodes), while the temporal alignment jitter
moves whole frames (16 samples) instead of samples (our change, so training reads features).
"""
from __future__ import annotations

import math

import torch

N_FFT = 64
HOP = 16
N_BINS = N_FFT // 2 + 1  # 33 bins, 31.25 Hz apart at 2 kHz
LOG_FLOOR = 1e-6
# RSG (NewLogSpectrogram): bin index ranges [lo, hi) summed in the log domain; DC (bin 0) dropped.
# [31.25, 62.5), [62.5, 125), [125, 250), [250, 375), [375, 687.5), [687.5, 1000] Hz.
BAND_BINS = ((1, 2), (2, 4), (4, 8), (8, 12), (12, 22), (22, 33))
N_BANDS = len(BAND_BINS)


def log_spectrogram(emg: torch.Tensor) -> torch.Tensor:
    """(T, 2, 16) samples -> (T', 2, 16, 33) log10 power, T' = (T - 64) // 16 + 1.

    torchaudio's `Spectrogram(n_fft=64, hop_length=16, normalized=True, center=False)` (power 2)
    then `log10(x + 1e-6)`, written with torch.stft because torchaudio is not installed:
    a periodic Hann window, and `normalized=True` in torchaudio divides the STFT by the window's
    L2 norm."""
    T = emg.shape[0]
    if T < N_FFT:
        raise ValueError(f"a signal of {T} samples is shorter than one {N_FFT}-sample frame")
    signal = emg.reshape(T, -1).T.to(torch.float32)  # (32, T)
    window = torch.hann_window(N_FFT, periodic=True, dtype=signal.dtype, device=signal.device)
    stft = torch.stft(signal, n_fft=N_FFT, hop_length=HOP, window=window, center=False, return_complex=True)
    power = (stft.abs() / window.pow(2).sum().sqrt()) ** 2  # (32, 33, T')
    out = torch.log10(power + LOG_FLOOR)
    return out.permute(2, 0, 1).reshape(out.shape[-1], *emg.shape[1:], N_BINS)


def six_bands(logspec: torch.Tensor) -> torch.Tensor:
    """(..., 33) log spectrum -> (..., 6): the *sum of log values* in each band (spec pitfall:
    not the log of summed power, so the bands' scales differ: band 0 has 1 bin, band 5 has 11)."""
    return torch.stack([logspec[..., lo:hi].sum(-1) for lo, hi in BAND_BINS], dim=-1)


def rolling_time_norm(x: torch.Tensor, warmup: int = 125, eps: float = 0.1) -> torch.Tensor:
    """RTN: standardise every frame t of x (time-first: (T, ...)) with the expanding mean and
    spread of frames 0..t of the same sequence, per every other index; frames before `warmup`
    use the statistics of frames 0..warmup-1 (the whole sequence when it is shorter).
    σ_t = sqrt(mean(x²) − μ² + ε). No parameters; causal after the warm-up."""
    T = x.shape[0]
    work = x.double()  # long cumulative sums lose precision in float32
    count = torch.arange(1, T + 1, device=x.device, dtype=work.dtype).view(T, *([1] * (x.dim() - 1)))
    mean = work.cumsum(0) / count
    mean_sq = (work * work).cumsum(0) / count
    w = min(warmup, T)
    mean[: w - 1] = mean[w - 1]
    mean_sq[: w - 1] = mean_sq[w - 1]
    var = (mean_sq - mean * mean).clamp_min(0.0)
    return ((work - mean) / torch.sqrt(var + eps)).to(x.dtype)


def _mask_along_axis_iid(spec: torch.Tensor, mask_param: int, axis: int, generator: torch.Generator,
                         mask_value: float = 0.0) -> torch.Tensor:
    """torchaudio.functional.mask_along_axis_iid (p = 1) on a 4-D (hand, electrode, freq, time)
    tensor: one mask per (hand, electrode), width ⌊U·param⌋ from ⌊U'·(size − width)⌋. With a
    parameter wider than the axis the start can be negative: torchaudio truncates both toward zero,
    which is what lets one ACM draw blank a whole electrode (reproduced as is)."""
    size = spec.shape[axis]
    shape = spec.shape[:2]
    value = torch.rand(shape, generator=generator) * mask_param
    min_value = torch.rand(shape, generator=generator) * (size - value)
    start = min_value.long()[..., None, None]
    end = (min_value.long() + value.long())[..., None, None]
    index = torch.arange(size)
    moved = spec.transpose(axis, -1)
    moved = moved.masked_fill((index >= start) & (index < end), mask_value)
    return moved.transpose(axis, -1)


def spec_augment(features: torch.Tensor, n_time_masks: int, time_mask_param: int, n_freq_masks: int,
                 freq_mask_param: int, generator: torch.Generator) -> torch.Tensor:
    """emg2qwerty's SpecAugment on (T, 2, 16, F): a number of time masks uniform in {0..n_time},
    then of frequency masks uniform in {0..n_freq} (one count per call), each mask drawn iid per
    (hand, electrode); masked values are 0. Baseline: 3 × 25 frames, 2 × 4 bins. ACM: 0 time
    masks, 2 × 12 bands."""
    x = features.permute(1, 2, 3, 0)  # (2, 16, F, T), the 4-D layout torchaudio's iid masks need
    for _ in range(int(torch.randint(n_time_masks + 1, (1,), generator=generator))):
        x = _mask_along_axis_iid(x, time_mask_param, 3, generator)
    for _ in range(int(torch.randint(n_freq_masks + 1, (1,), generator=generator))):
        x = _mask_along_axis_iid(x, freq_mask_param, 2, generator)
    return x.permute(3, 0, 1, 2)


def random_band_rotation(features: torch.Tensor, generator: torch.Generator,
                         offsets: tuple[int, ...] = (-1, 0, 1)) -> torch.Tensor:
    """Roll the electrode axis of each hand by an offset drawn independently per hand."""
    picks = torch.randint(len(offsets), (features.shape[1],), generator=generator)
    return torch.stack([features[:, h].roll(offsets[int(picks[h])], dims=1) for h in range(features.shape[1])],
                       dim=1)


def temporal_alignment_jitter(features: torch.Tensor, max_offset_frames: int,
                              generator: torch.Generator) -> torch.Tensor:
    """Shift the right hand against the left by an offset uniform in ±max frames (emg2qwerty:
    ±120 samples; here frames of 16 samples). The output keeps T − max frames for every draw,
    so a batch has one length."""
    m = max_offset_frames
    if m == 0:
        return features
    T = features.shape[0] - m
    offset = int(torch.randint(-m, m + 1, (1,), generator=generator))
    left_start = max(0, -offset) if offset < 0 else 0
    right_start = left_start + offset
    if right_start < 0 or right_start + T > features.shape[0]:
        right_start = min(max(right_start, 0), features.shape[0] - T)
    left = features[left_start:left_start + T, 0]
    right = features[right_start:right_start + T, 1]
    return torch.stack([left, right], dim=1)


JITTER_FRAMES = math.floor(120 / HOP)  # ±60 ms
