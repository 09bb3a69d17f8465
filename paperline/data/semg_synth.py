"""Synthetic two-wrist sEMG typing sessions, written in the exact emg2qwerty layout
(paperline.data.emg2qwerty) so that the real reader, windows and transforms are exercised.

Structure (spec §e, with the issue's additions; every number below is our reconstruction, not
measured sEMG):
- 2 hands × 16 electrodes around each wrist at 2 kHz.
- keys → fingers by touch typing on QWERTY; each finger has a spatial gain profile over its hand's
  electrodes (a bump centred on the finger's flexor, on the circular electrode axis); each key
  shifts and perturbs its finger's profile (row, fixed random part), so every key has a fixed
  template, left-hand keys on left channels only (space: the right thumb).
- a keystroke drives that key's motor units: action-potential trains (biphasic MUAP waveforms)
  whose units are recruited in order of threshold as the activation rises (size principle: later
  units are larger) and fire faster with more drive; activation starts 50 ms before the press and
  ends 30 ms after the release (hold times: `hold_seconds`). MUAP widths (σ 0.4–1 ms) put the
  keystroke power at ~150–400 Hz, in spec §e's 50–400 Hz band and over several spectrogram bins.
- background: 1/f (pink) noise, white noise and mains hum (50 or 60 Hz and harmonics), all
  scaled by the user's noise floor (electrode contact); the sum is scaled to `scale` units and high-passed (mne.filter.filter_data) as the real recordings are.
- per user: a gain per electrode (log-uniform in gain_range), an electrode rotation offset per
  hand (the band sits differently on the wrist), a noise floor and a typing speed, plus a 10%
  perturbation of the key templates (people differ in how they press). These are the cross-user
  shifts rolling time normalization targets.
- typed text: prompts cut from a public-domain story (data/raw/splashnet/), lower-cased and
  filtered to the vocabulary. A vocabulary of one key per finger (`distinct_fingers`; the smoke's
  "asetnio ") gives every key its own spatial bump; keys sharing a finger differ only by the
  row shift and the random part of their templates.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from paperline.data.chunks import ChunkMap, map_serially
from paperline.data.emg2qwerty import CHAR_TO_KEY, ELECTRODES, SAMPLE_RATE, Session, write_session
from paperline.io import DataError

CORPUS_SHA256 = "12eecc075ca0cda7f98e41013e7df0ad4bfbe0bd4d8d4796e3c50dacfd365bf7"

# Touch typing on QWERTY: (hand, finger) per key; finger 0 thumb .. 4 pinky.
_FINGER_ROWS = {
    ("left", 4): "qaz1`", ("left", 3): "wsx2", ("left", 2): "edc3", ("left", 1): "rfvtgb45",
    ("right", 1): "yhnujm67", ("right", 2): "ik,8", ("right", 3): "ol.9", ("right", 4): "p;/0-'[]",
    ("right", 0): " ",
}
KEY_FINGER: dict[str, tuple[str, int]] = {c: hf for hf, keys in _FINGER_ROWS.items() for c in keys}
_ROWS = ["1234567890-`", "qwertyuiop[]", "asdfghjkl;'", "zxcvbnm,./", " "]
KEY_ROW = {c: r for r, row in enumerate(_ROWS) for c in row}
# the finger flexors' positions on the 16-electrode band (electrode index, reconstruction)
FINGER_CENTRE = {0: 2.0, 1: 5.0, 2: 8.0, 3: 11.0, 4: 13.5}
# MUAP width σ (s) of the first Hermite-Rodriguez function: its power peaks near 1/(2πσ), so
# 0.4–1 ms gives ~160–400 Hz (the first version's 1–2.5 ms, 60–160 Hz, lit two or three bins)
MUAP_SIGMA_S = (0.4e-3, 1.0e-3)
WORLD_SEED = 1501  # fixes the key templates and motor units: the same for every user


def distinct_fingers(vocabulary: str) -> bool:
    """Whether every key of `vocabulary` is typed by a finger of its own."""
    fingers = [KEY_FINGER[c] for c in vocabulary]
    return len(set(fingers)) == len(fingers)


class CorpusError(DataError):
    pass


def load_corpus(path: str | Path, vocabulary: str, check_hash: bool = True) -> str:
    """The corpus text lower-cased, filtered to `vocabulary` (other characters become spaces),
    with whitespace runs collapsed."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: no such corpus file")
    data = path.read_bytes()
    if check_hash and hashlib.sha256(data).hexdigest() != CORPUS_SHA256:
        raise CorpusError(f"{path}: sha256 differs from the committed excerpt ({CORPUS_SHA256[:12]}…)")
    text = data.decode("utf-8").lower()
    allowed = set(vocabulary)
    text = "".join(c if c in allowed else " " for c in text)
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) < 100:
        raise CorpusError(f"{path}: fewer than 100 characters left after filtering to the vocabulary")
    return text


@dataclass(frozen=True)
class MotorUnits:
    """Every key's motor units: spatial vectors over its hand's electrodes, waveforms, thresholds."""

    keys: str
    hand: np.ndarray  # (K,) 0 left, 1 right
    spatial: np.ndarray  # (K, U, 16)
    threshold: np.ndarray  # (K, U) recruitment thresholds in (0, 1), ascending
    waveform: np.ndarray  # (K, U, L) MUAP shapes


def key_templates(keys: str, rng: np.random.Generator) -> np.ndarray:
    """(K, 16) spatial gain profile of each key over its hand's electrodes."""
    electrodes = np.arange(ELECTRODES)
    out = np.zeros((len(keys), ELECTRODES))
    for i, key in enumerate(keys):
        hand, finger = KEY_FINGER[key]
        centre = FINGER_CENTRE[finger] + 0.6 * (KEY_ROW[key] - 2)  # rows pull a little along the band
        d = np.abs(((electrodes - centre) + ELECTRODES / 2) % ELECTRODES - ELECTRODES / 2)  # circular
        width = 1.5 + 0.5 * rng.random()
        bump = np.exp(-0.5 * (d / width) ** 2)
        second = np.exp(-0.5 * (np.abs(((electrodes - centre - 6) + 8) % 16 - 8) / 1.5) ** 2)  # extensor
        out[i] = bump + 0.3 * rng.random() * second + 0.15 * rng.random(ELECTRODES)
    return out


def _muap(length: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """A biphasic motor-unit action potential (first Hermite-Rodriguez function), unit peak."""
    t = (np.arange(length) - length / 2) / SAMPLE_RATE
    shape = -t / sigma * np.exp(-0.5 * (t / sigma) ** 2)
    shape += 0.3 * rng.standard_normal() * (1 - (t / sigma) ** 2) * np.exp(-0.5 * (t / sigma) ** 2)
    return shape / np.abs(shape).max()


def motor_units(keys: str, units_per_key: int, seed: int = WORLD_SEED) -> MotorUnits:
    rng = np.random.default_rng(seed)
    templates = key_templates(keys, rng)
    spatial = templates[:, None, :] * (1 + 0.3 * rng.standard_normal((len(keys), units_per_key, ELECTRODES)))
    spatial = np.clip(spatial, 0, None)
    threshold = np.sort(rng.uniform(0.05, 0.8, (len(keys), units_per_key)), axis=1)
    spatial *= (0.5 + 2.0 * threshold)[..., None]  # size principle: late units are larger
    length = 40  # 20 ms
    waveform = np.stack([np.stack([_muap(length, rng.uniform(*MUAP_SIGMA_S), rng) for _ in range(units_per_key)])
                         for _ in keys])
    hand = np.array([0 if KEY_FINGER[k][0] == "left" else 1 for k in keys])
    return MotorUnits(keys, hand, spatial, threshold, waveform)


@dataclass(frozen=True)
class UserProfile:
    name: str
    gain: np.ndarray  # (2, 16)
    rotation: np.ndarray  # (2,) electrode offsets
    noise_floor: float
    mains_hz: float
    speed: float  # typing-speed factor
    template_jitter: np.ndarray  # (K, U, 16) multiplicative


def user_profile(index: int, units: MotorUnits, gen: Any, seed: int) -> UserProfile:
    rng = np.random.default_rng([seed, index, 7])
    lo, hi = gen.gain_range
    gain = np.exp(rng.uniform(np.log(lo), np.log(hi), (2, ELECTRODES)))
    rotation = rng.integers(-gen.max_rotation, gen.max_rotation + 1, 2)
    noise = float(np.exp(rng.uniform(*np.log(gen.noise_floor_range))))
    return UserProfile(name=f"user{index:02d}", gain=gain, rotation=rotation, noise_floor=noise,
                       mains_hz=float(rng.choice([50.0, 60.0])), speed=float(rng.uniform(0.8, 1.25)),
                       template_jitter=np.clip(1 + 0.1 * rng.standard_normal(units.spatial.shape), 0, None))


def _pink_noise(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """1/f noise along the last axis, unit variance."""
    n = shape[-1]
    spectrum = rng.standard_normal((shape[0], n // 2 + 1)) + 1j * rng.standard_normal((shape[0], n // 2 + 1))
    f = np.fft.rfftfreq(n, 1 / SAMPLE_RATE)
    spectrum /= np.sqrt(np.maximum(f, 1.0))
    x = np.fft.irfft(spectrum, n)
    return x / x.std(axis=-1, keepdims=True)


def type_text(text: str, seconds: float, keys_per_second: float, speed: float,
              rng: np.random.Generator, hold_seconds: tuple[float, float] = (0.06, 0.14)
              ) -> tuple[list[dict], list[dict]]:
    """Keystrokes (press/release times from session start) and the prompts typed; a key is held
    for a time uniform in `hold_seconds`."""
    keystrokes, prompts = [], []
    t = 0.5
    mean_gap = 1.0 / (keys_per_second * speed)
    while True:
        length = int(rng.integers(30, 80))
        start = int(rng.integers(0, max(1, len(text) - length)))
        prompt = text[start:start + length].strip()
        if not prompt:
            continue
        prompt_start, typed = t, []
        for char in prompt:
            press = t + rng.gamma(4.0, mean_gap / 4.0)
            release = press + rng.uniform(*hold_seconds)
            if release + 0.3 > seconds:
                break
            typed.append({"key": CHAR_TO_KEY[char], "start": press, "end": release})
            t = press
        keystrokes += typed
        if typed:
            prompts.append({"name": "text_prompt", "start": prompt_start, "end": typed[-1]["end"],
                            "payload": {"text": prompt[:len(typed)]}})
        if len(typed) < len(prompt):
            return keystrokes, prompts
        t += 1.0 + rng.uniform(0, 0.5)  # a pause between prompts


def synthesize_emg(keystrokes: list[dict], num_samples: int, units: MotorUnits, user: UserProfile,
                   rng: np.random.Generator, highpass_hz: float, scale: float = 1.0) -> np.ndarray:
    """(T, 2, 16) float32 sEMG of the keystrokes for this user."""
    import mne
    from scipy.signal import fftconvolve

    K, U, L = units.waveform.shape
    key_index = {k: i for i, k in enumerate(units.keys)}
    spikes = np.zeros((num_samples, K * U))
    for stroke in keystrokes:
        char = {v: c for c, v in CHAR_TO_KEY.items()}.get(stroke["key"], stroke["key"])
        if char not in key_index:
            continue
        k = key_index[char]
        onset, offset = stroke["start"] - 0.05, stroke["end"] + 0.03
        peak = rng.uniform(0.6, 1.0)
        ramp = 0.03
        for u in range(U):
            theta = units.threshold[k, u]
            if peak <= theta:
                continue  # not recruited at this force
            t = onset + ramp * theta / peak + rng.uniform(0, 0.01)
            while t < offset:
                i = int(t * SAMPLE_RATE)
                if 0 <= i < num_samples:
                    spikes[i, k * U + u] += 1.0
                rate = 8.0 + 40.0 * (peak - theta) / (1 - theta)  # Hz: more drive, faster firing
                t += rng.normal(1.0 / rate, 0.15 / rate)
    kernels = units.waveform.reshape(K * U, L).T  # (L, K*U)
    trains = fftconvolve(spikes, kernels, axes=0)[:num_samples]
    spatial = units.spatial * user.template_jitter
    emg = np.zeros((num_samples, 2, ELECTRODES))
    for hand in (0, 1):
        cols = np.flatnonzero(np.repeat(units.hand == hand, U))
        emg[:, hand] = trains[:, cols] @ spatial.reshape(K * U, ELECTRODES)[cols]
    # background: pink + white noise at the user's floor, mains hum with harmonics
    t = np.arange(num_samples) / SAMPLE_RATE
    noise = (0.08 * _pink_noise(rng, (2 * ELECTRODES, num_samples))
             + 0.03 * rng.standard_normal((2 * ELECTRODES, num_samples))) * user.noise_floor
    hum = sum(rng.uniform(0.02, 0.1, (2 * ELECTRODES, 1)) * user.noise_floor / h
              * np.sin(2 * np.pi * h * user.mains_hz * t + rng.uniform(0, 2 * np.pi, (2 * ELECTRODES, 1)))
              for h in (1, 2, 3))
    emg = emg + (noise + hum).T.reshape(num_samples, 2, ELECTRODES)
    emg = emg * (scale * user.gain[None])  # electrode contact: scales everything that electrode records
    for hand in (0, 1):
        emg[:, hand] = np.roll(emg[:, hand], int(user.rotation[hand]), axis=1)
    flat = emg.reshape(num_samples, 2 * ELECTRODES).T
    flat = mne.filter.filter_data(flat, SAMPLE_RATE, l_freq=highpass_hz, h_freq=None, verbose="ERROR")
    return flat.T.reshape(num_samples, 2, ELECTRODES).astype(np.float32)


def generate_sessions(out_dir: str | Path, gen: Any, corpus_text: str, seed: int = 0,
                      map_chunks: ChunkMap = map_serially) -> list[Path]:
    """Write gen.users × gen.sessions_per_user session files into out_dir (a chunk of sessions per
    `map_chunks` call; each session draws from its own seed); returns their paths, user by user."""
    missing = [c for c in gen.vocabulary if c not in KEY_FINGER]
    if missing:
        raise ValueError(f"generator.vocabulary: no finger for {missing[0]!r} (letters, digits, space, ,./;'-[]`)")
    sessions = [(u, s) for u in range(gen.users) for s in range(gen.sessions_per_user)]
    return map_chunks(write_sessions, sessions, out_dir=str(out_dir), gen=gen, corpus_text=corpus_text, seed=seed)


def write_sessions(sessions: list[tuple[int, int]], out_dir: str | Path, gen: Any, corpus_text: str,
                   seed: int = 0) -> list[Path]:
    """The generated sessions (user index, session index) as emg2qwerty HDF5 files in out_dir."""
    out_dir = Path(out_dir)
    units = motor_units(gen.vocabulary, gen.motor_units_per_key)
    paths = []
    for u, s in sessions:
        user = user_profile(u, units, gen, seed)
        rng = np.random.default_rng([seed, u, s, 11])
        num_samples = int(gen.session_seconds * SAMPLE_RATE)
        keystrokes, prompts = type_text(corpus_text, gen.session_seconds, gen.keys_per_second, user.speed, rng,
                                         tuple(gen.hold_seconds))
        emg = synthesize_emg(keystrokes, num_samples, units, user, rng, gen.highpass_hz, gen.scale)
        t0 = 1.6e9 + 86400.0 * (u * gen.sessions_per_user + s)
        for k in keystrokes:
            k["start"] += t0
            k["end"] += t0
        for p in prompts:
            p["start"] += t0
            p["end"] += t0
        name = f"{user.name}_session{s:02d}"
        session = Session(user=user.name, session_name=name, time=t0 + np.arange(num_samples) / SAMPLE_RATE,
                          emg=emg, keystrokes=keystrokes, prompts=prompts)
        paths.append(write_session(out_dir / f"{name}.hdf5", session))
    return paths


def user_truth(gen: Any, seed: int = 0) -> dict[str, dict]:
    """The generator's per-user parameters (for the README and the statistics plot)."""
    units = motor_units(gen.vocabulary, gen.motor_units_per_key)
    out = {}
    for u in range(gen.users):
        p = user_profile(u, units, gen, seed)
        out[p.name] = {"rotation": p.rotation.tolist(), "noise_floor": p.noise_floor, "mains_hz": p.mains_hz,
                       "gain_min": float(p.gain.min()), "gain_max": float(p.gain.max())}
    return out


# ---- QA with mne -----------------------------------------------------------------------------------


def session_raw(session: Session):
    """An mne RawArray of the session (32 EMG channels) with a keystroke Annotation per press,
    as emg2qwerty's BIDS converter builds it."""
    import mne

    names = [f"{hand}{i:02d}" for hand in ("L", "R") for i in range(ELECTRODES)]
    info = mne.create_info(names, SAMPLE_RATE, ch_types="emg")
    data = session.emg.reshape(len(session.time), -1).T.astype(np.float64)
    raw = mne.io.RawArray(data, info, verbose="ERROR")
    t0 = session.time[0]
    raw.set_annotations(mne.Annotations(onset=[k["start"] - t0 for k in session.keystrokes],
                                        duration=[k["end"] - k["start"] for k in session.keystrokes],
                                        description=[k["key"] for k in session.keystrokes]))
    return raw


def band_powers(session: Session, edges_hz: list[tuple[float, float]]) -> dict[str, Any]:
    """Welch PSD (mne.time_frequency.psd_array_welch) of every channel, and the fraction of power
    in each band: the check behind the 6-band choice (where the keystroke power lies)."""
    from mne.time_frequency import psd_array_welch

    data = session.emg.reshape(len(session.time), -1).T.astype(np.float64)
    psd, freqs = psd_array_welch(data, SAMPLE_RATE, fmin=0.0, fmax=SAMPLE_RATE / 2, n_fft=256, verbose="ERROR")
    total = psd[:, freqs > 0].sum(axis=1, keepdims=True)
    fractions = [float((psd[:, (freqs >= lo) & (freqs < hi)].sum(axis=1, keepdims=True) / total).mean())
                 for lo, hi in edges_hz]
    return {"freqs": freqs, "psd": psd, "band_fraction": fractions}

