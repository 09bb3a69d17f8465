"""emg2qwerty session format: round trip through the writer and reader, the committed fixture,
clear errors for malformed files (naming file and field), charset, windows and user splits, and
the generator's structure (user shifts, keystroke-locked bursts, band powers via mne)."""
from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from paperline.data import emg2qwerty as eq
from paperline.data.semg_synth import (
    band_powers,
    generate_sessions,
    load_corpus,
    motor_units,
    session_raw,
    user_profile,
)
from paperline.methods.splashnet.config import GeneratorConfig

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "splashnet" / "user00_session00_0.5s.hdf5"
CORPUS = Path(__file__).resolve().parents[2] / "data" / "raw" / "splashnet" / "in_the_year_2889.txt"
GEN = GeneratorConfig(users=3, sessions_per_user=1, session_seconds=4.0)


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> list[Path]:
    text = load_corpus(CORPUS, GEN.vocabulary)
    return generate_sessions(tmp_path_factory.mktemp("sessions"), GEN, text, seed=0)


def _session(T: int = 400) -> eq.Session:
    rng = np.random.default_rng(0)
    time = 1.6e9 + np.arange(T) / eq.SAMPLE_RATE
    keys = [{"key": "a", "start": time[50], "end": time[80]}, {"key": "Key.space", "start": time[200], "end": time[220]},
            {"key": "Key.ctrl", "start": time[250], "end": time[260]}, {"key": "B", "start": time[300], "end": time[320]}]
    prompts = [{"name": "text_prompt", "start": time[0], "end": time[-1], "payload": {"text": "a B"}}]
    return eq.Session("u1", "u1_s0", time, rng.standard_normal((T, 2, 16)).astype(np.float32), keys, prompts)


def test_round_trip_keeps_every_field(tmp_path):
    s = _session()
    path = eq.write_session(tmp_path / "s.hdf5", s)
    with h5py.File(path) as f:  # the exact layout: a compound dataset in group emg2qwerty
        table = f["emg2qwerty/timeseries"]
        assert table.dtype.names == ("time", "emg_left", "emg_right") and table["emg_left"].shape == (400, 16)
        assert json.loads(f["emg2qwerty"].attrs["keystrokes"])[1]["key"] == "Key.space"
    back = eq.read_session(path)
    assert back.user == "u1" and back.session_name == "u1_s0" and back.condition == "on_keyboard"
    np.testing.assert_array_equal(back.time, s.time)
    np.testing.assert_array_equal(back.emg, s.emg)
    assert back.keystrokes == s.keystrokes and back.prompts == s.prompts
    assert eq.text_of_labels(back.key_labels()) == "a B"  # ctrl is outside the charset: dropped
    assert eq.text_of_labels(back.key_labels(s.time[100], s.time[399])) == " B"


def test_committed_fixture_reads():
    s = eq.read_session(FIXTURE)
    assert s.emg.shape == (1000, 2, 16) and s.user == "user00"
    assert np.all(np.diff(s.time) > 0) and len(s.keystrokes) >= 1


def _rewrite(path: Path, edit) -> Path:
    with h5py.File(path, "r+") as f:
        edit(f["emg2qwerty"])
    return path


def _with_table(group, mutate, channels: int = 16):
    table = group["timeseries"][()]
    dtype = np.dtype([("time", "<f8"), ("emg_left", "<f4", (channels,)), ("emg_right", "<f4", (16,))])
    new = np.empty(len(table), dtype)
    new["time"] = table["time"]
    new["emg_left"] = table["emg_left"][:, :channels]
    new["emg_right"] = table["emg_right"]
    mutate(new)
    del group["timeseries"]
    group.create_dataset("timeseries", data=new)


@pytest.mark.parametrize("edit, message", [
    (lambda g: _with_table(g, lambda t: None, channels=15), r"timeseries\.emg_left: expected 16 channels"),
    (lambda g: _with_table(g, lambda t: t["emg_right"].__setitem__((7, 3), np.nan)),
     r"timeseries\.emg_right: non-finite value \(NaN/inf\) at sample 7, electrode 3"),
    (lambda g: g.attrs.__delitem__("user"), r"emg2qwerty\.attrs\['user'\]: missing attribute"),
    (lambda g: g.attrs.__delitem__("keystrokes"), r"attrs\['keystrokes'\]: missing attribute"),
    (lambda g: g.attrs.__setitem__("keystrokes", "[{\"key\": \"a\"}]"), r"attrs\['keystrokes'\]\[0\]: missing 'start'"),
    (lambda g: _with_table(g, lambda t: t["time"].__setitem__(slice(10, 12), t["time"][[11, 10]])),
     r"timeseries\.time: timestamps out of order at sample 11"),
])
def test_malformed_files_name_the_file_and_the_field(tmp_path, edit, message):
    path = _rewrite(eq.write_session(tmp_path / "bad.hdf5", _session()), edit)
    with pytest.raises(eq.SessionFormatError, match=message) as err:
        eq.read_session(path)
    assert str(path) in str(err.value)


def test_missing_group_and_not_hdf5(tmp_path):
    with h5py.File(tmp_path / "empty.hdf5", "w"):
        pass
    with pytest.raises(eq.SessionFormatError, match="empty.hdf5: emg2qwerty: missing group"):
        eq.read_session(tmp_path / "empty.hdf5")
    (tmp_path / "text.hdf5").write_text("no")
    with pytest.raises(eq.SessionFormatError, match="text.hdf5: not an HDF5 file"):
        eq.read_session(tmp_path / "text.hdf5")


def test_charset_and_windows():
    assert eq.NUM_CLASSES == 98 and eq.BLANK == 98
    assert eq.CHARSET[eq.BLANK - 1] == "⇧" and eq.key_to_char("Key.shift_r") == "⇧"
    assert eq.labels_of_text("hi!") == [eq.CHARSET.index(c) for c in "hi!"]
    windows = eq.training_windows(20000, 8000, 1800, 200)
    assert [(w.start, w.stop) for w in windows] == [(1800, 9800), (9800, 17800)]
    assert eq.training_windows(20000, 8000, 1800, 200, offset=2100)[-1].stop + 200 <= 20000


def test_user_split_holds_out_the_last_users(generated):
    refs = eq.scan_sessions(generated[0].parent)
    extra = [eq.SessionRef(str(p), r.user, r.session_name + "b") for p, r in zip(generated, refs)]
    split = eq.user_split(refs + extra, test_users=1, val_users=1)
    assert {r.user for r in split.train} == {"user00"} and {r.user for r in split.val} == {"user01"}
    assert list(split.test) == ["user02"] and len(split.finetune["user02"]) == 1
    with pytest.raises(ValueError, match="cannot give"):
        eq.user_split(refs, test_users=3)


def test_generator_structure(generated):
    sessions = [eq.read_session(p) for p in generated]
    s = sessions[0]
    assert s.emg.shape == (8000, 2, 16) and s.prompts and s.keystrokes
    typed = "".join(eq.key_to_char(k["key"]) for k in s.keystrokes)
    assert set(typed) <= set(GEN.vocabulary) and typed.strip()
    # keystroke-locked: the key's hand carries more power within 150 ms of a press than elsewhere
    t0, emg = s.time[0], s.emg
    near = np.zeros(len(emg), bool)
    for k in s.keystrokes:
        i = int((k["start"] - t0) * 2000)
        near[max(0, i - 100):i + 200] = True
    assert (emg[near] ** 2).mean() > 1.5 * (emg[~near] ** 2).mean()
    # users differ by electrode gains: the per-channel RMS profiles are far apart across users
    rms = np.stack([np.sqrt((x.emg ** 2).mean(0)).ravel() for x in sessions])
    assert np.abs(np.log(rms[0] / rms[1])).mean() > 0.3
    units = motor_units(GEN.vocabulary, GEN.motor_units_per_key)
    assert {tuple(user_profile(u, units, GEN, 0).rotation) for u in range(6)} != {(0, 0)}
    # mne QA: annotations per keystroke; the high-pass leaves little power below 31 Hz
    raw = session_raw(s)
    assert len(raw.annotations) == len(s.keystrokes) and raw.info["sfreq"] == 2000
    powers = band_powers(s, [(0, 31.25), (31.25, 250), (250, 1000)])
    assert powers["band_fraction"][0] < 0.1 and powers["band_fraction"][1] > 0.5


def test_smoke_typing_structure(tmp_path):
    """The smoke's easy typing: one key per finger, holds within hold_seconds, bursts in the
    50–400 Hz band over several bins, and `scale` scales the whole signal."""
    from paperline.data.semg_synth import MUAP_SIGMA_S, distinct_fingers

    assert distinct_fingers("asetnio ") and not distinct_fingers(GEN.vocabulary)  # t, r share the left index
    gen = GeneratorConfig(users=1, sessions_per_user=1, session_seconds=4.0, vocabulary="asetnio ",
                          keys_per_second=3.0, hold_seconds=(0.03, 0.05))
    text = load_corpus(CORPUS, gen.vocabulary)
    s = eq.read_session(generate_sessions(tmp_path / "a", gen, text, seed=0)[0])
    holds = np.array([k["end"] - k["start"] for k in s.keystrokes])
    assert len(holds) >= 6 and holds.min() >= 0.03 and holds.max() <= 0.05
    assert set("".join(eq.key_to_char(k["key"]) for k in s.keystrokes)) <= set("asetnio ")
    # every MUAP's power peaks between ~150 and ~400 Hz (the first version's peaked at 60–160 Hz)
    wave = motor_units("asetnio ", 6).waveform.reshape(-1, 40)
    spectrum = np.abs(np.fft.rfft(wave, n=400, axis=1)) ** 2
    peaks = np.fft.rfftfreq(400, 1 / eq.SAMPLE_RATE)[spectrum.argmax(1)]
    assert peaks.min() >= 120 and peaks.max() <= 450 and MUAP_SIGMA_S[1] < 1.5e-3
    scaled = eq.read_session(generate_sessions(tmp_path / "b", gen.model_copy(update={"scale": 30.0}), text,
                                               seed=0)[0])
    np.testing.assert_allclose(scaled.emg, 30.0 * s.emg, rtol=1e-3, atol=1e-4 * np.abs(scaled.emg).max())
