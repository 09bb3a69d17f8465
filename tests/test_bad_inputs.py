"""Every input format a paper profile can name, fed a truncated, a wrongly-shaped and a wrong-type
file: each check raises DataError (so `python -m flows run` exits 2) with one line naming the file and
what is wrong; the intact file passes the same check (so a check that refuses everything fails here).

Formats (and the profile keys that name them): a CSV table (pubsub_vfl data.path), Tulu JSONL
(tulu tulu_path / target_dir), QFFT's JSONL (qfft real_data), C4 shards and the tokenizer.json
(sumo lm.c4_dir, lm.tokenizer), emg2qwerty HDF5 sessions (splashnet data.directory), D4RL HDF5
(star offline), the MD17 .npz (nbody md17), WSI slides, the cohort CSV and TIL maps (wsi cohort_csv),
a transformers model folder (influence_distillation hf_model_path, leff model, fvae_lora text.base,
memory_decoder, ... via load_causal_lm), nanoGPT token files and CIFAR batches (ngn_m data_dir),
a domain text file (memory_decoder), an image folder and a backbone checkpoint (fvae_lora)."""
from __future__ import annotations

import gzip
import json
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from paperline.io import DataError

FIXTURES = Path(__file__).parent / "data"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 2  # image bytes where data belongs


def cut(path: Path, fraction: float = 0.5) -> Path:
    """Keep the first `fraction` of `path`'s bytes: a copy or download stopped part way."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    return path


# --- intact files, each written in its real format ------------------------------------------------

def csv_table(path: Path) -> Path:
    path.write_text("a,b,y\n" + "".join(f"{i},{i * 2}.5,{i % 2}\n" for i in range(40)))
    return path


def tulu_jsonl(path: Path) -> Path:
    from paperline.data.tulu import write_tulu_jsonl

    write_tulu_jsonl(path, [{"dataset": "d", "id": f"d_{i}", "messages": [
        {"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]}
        for i in range(20)])
    return path


def qfft_jsonl(path: Path) -> Path:
    path.write_text("".join(json.dumps({"question": f"q{i}", "solution": f"s{i}", "answer": str(i)}) + "\n"
                            for i in range(20)))
    return path


def c4_shard(path: Path) -> Path:
    from paperline.data.c4 import write_c4_shard

    return write_c4_shard(path, [f"document {i} " + "word " * 50 for i in range(40)])


def tokenizer_json(path: Path) -> Path:
    from paperline.data.c4 import write_word_level_tokenizer

    return write_word_level_tokenizer(path, ["the cat sat on the mat", "a dog ran"])


def emg_session(path: Path) -> Path:
    from paperline.data.emg2qwerty import ELECTRODES, Session, write_session

    t = np.arange(4000) / 2000.0
    emg = np.random.default_rng(0).normal(size=(len(t), 2, ELECTRODES)).astype(np.float32)
    return write_session(path, Session("u0", "s0", t, emg, [{"key": "a", "start": 0.5, "end": 0.6}]))


def d4rl_hdf5(path: Path) -> Path:
    from paperline.rl.offline import write_d4rl

    n = 7
    return write_d4rl(path, np.zeros((n, 3), np.float32), np.zeros((n, 1), np.float32), np.zeros(n, np.float32),
                      np.eye(1, n, n - 1, dtype=bool)[0], np.eye(1, n, 3, dtype=bool)[0])


def md17_npz(path: Path) -> Path:
    rng = np.random.default_rng(0)
    np.savez(path, R=rng.normal(size=(300, 5, 3)), z=np.array([6, 6, 8, 1, 1]))
    return path


def slide(path: Path) -> Path:
    shutil.copy(FIXTURES / "openslide" / "boxes.tiff", path)
    return path


def cohort_csv(path: Path) -> Path:
    rows = [f"P{i},slides/P{i}.svs,tils/P{i}.png,{10 + i}.5,{i % 2}" for i in range(30)]
    path.write_text("patient_id,slide_path,til_map_path,time,event\n" + "\n".join(rows) + "\n")
    return path


def til_map(path: Path) -> Path:
    from PIL import Image

    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64), dtype=np.uint8)).save(path)
    return path


def model_folder(path: Path) -> Path:
    import torch

    from paperline.nn.causal_lm import CausalLM, CausalLMConfig

    config = CausalLMConfig(vocab_size=64, hidden_size=16, num_layers=1, num_heads=2, head_dim=8,
                            max_position_embeddings=32)
    CausalLM.seeded(config, torch.Generator().manual_seed(0)).save_pretrained(path)
    return path


def token_bin(path: Path) -> Path:
    np.arange(200, dtype=np.uint16).tofile(path)
    return path


def cifar_batch(path: Path) -> Path:
    from paperline.data.cifar import write_batch

    write_batch(path, np.zeros((8, 3, 32, 32), np.uint8), np.arange(8) % 10, "cifar10")
    return path


def domain_text(path: Path) -> Path:
    path.write_text("".join(f"Line {i}: the tide comes in, the tide goes out — ünïcode.\n" for i in range(40)))
    return path


def image_folder(path: Path) -> Path:
    from PIL import Image

    for k in range(2):
        (path / f"class{k}").mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.full((20, 20), 60 * k + i, np.uint8)).save(path / f"class{k}" / f"{i}.png")
    return path


def backbone(path: Path) -> Path:
    from paperline.methods.fvae_lora.train import DigitsMLP, save_backbone

    save_backbone(path, DigitsMLP(8, 16, 2))
    return path


# --- the checks: the library function each data step calls ----------------------------------------

def check_csv(path):
    from paperline.methods.pubsub_vfl.data import read_table

    read_table(path, "y", None)


def check_tulu(path):
    from paperline.data.tulu import read_tulu_jsonl

    read_tulu_jsonl(path)


def check_qfft(path):
    from paperline.methods.qfft.data import iter_reasoning_jsonl

    list(iter_reasoning_jsonl(path, "limo"))


def check_c4(path):
    from paperline.data.c4 import check_shards, read_documents

    check_shards([path])
    list(read_documents(path))


def check_tokenizer(path):
    from paperline.data.local_tokenizer import read_tokenizer_json

    read_tokenizer_json(path, max_vocab=32)


def check_session(path):
    from paperline.data.emg2qwerty import read_session

    read_session(path)


def check_d4rl(path):
    from paperline.rl.offline import load_dataset

    load_dataset(path)


def check_md17(path):
    from paperline.data.nbody import load_md17_npz

    load_md17_npz(path, span=20, stride=10)


def check_slide(path):
    from paperline.data.wsi import read_downsampled

    read_downsampled(path, 10)


def check_cohort(path):
    from paperline.data.wsi import read_cohort_csv

    read_cohort_csv(path)


def check_til(path):
    from paperline.data.wsi import read_til_map

    read_til_map(path)


def check_model(path):
    from paperline.train.lm_base import load_causal_lm

    load_causal_lm(path)


def check_tokens(path):
    from paperline.data.tokens import open_tokens

    open_tokens(path, vocab_size=256, block_size=16)


def check_cifar(path):
    from paperline.data.cifar import read_batch

    read_batch(path, "cifar10")


def check_domain_text(path):
    from paperline.data.local_tokenizer import read_tokenizer_json
    from paperline.methods.memory_decoder.corpora import read_domain_text

    tokenizer = read_tokenizer_json(tokenizer_json(path.parent / "tok.json"))
    read_domain_text(path, tokenizer, val_fraction=0.2)


def check_image_folder(path):
    from paperline.methods.fvae_lora.data import read_image_folder

    read_image_folder(path, 8)


def check_backbone(path):
    from paperline.methods.fvae_lora.train import load_backbone

    load_backbone(path)


# --- the bad files: each kind made from the intact file --------------------------------------------

def h5_edit(edit: Callable) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        import h5py

        with h5py.File(path, "a") as f:
            edit(f)
    return apply


def emg_one_channel(f) -> None:
    from paperline.data.emg2qwerty import DATASET, GROUP

    table = f[GROUP][DATASET][()]
    del f[GROUP][DATASET]
    narrow = np.dtype([("time", "<f8"), ("emg_left", "<f4", (1,)), ("emg_right", "<f4", (1,))])
    f[GROUP][DATASET] = np.zeros(len(table), dtype=narrow)


def d4rl_flat_actions(f) -> None:
    del f["actions"]
    f["actions"] = np.zeros(7)


def safetensors_weights(folder: Path) -> Path:
    return folder / "model.safetensors"


def narrow_weight(folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(safetensors_weights(folder))
    weights["embed_tokens.weight"] = weights["embed_tokens.weight"][:-1].clone()
    save_file(weights, safetensors_weights(folder), metadata={"format": "pt"})


def cmyk_image(path: Path) -> None:
    from PIL import Image

    Image.new("CMYK", (8, 8)).save(path, format="TIFF")


def one_image_class(folder: Path) -> None:
    shutil.rmtree(folder / "class1")


def truncated_image(folder: Path) -> None:
    cut(folder / "class0" / "0.png")


def png_as_image(folder: Path) -> None:
    (folder / "class0" / "0.png").write_bytes(PNG)


@dataclass(frozen=True)
class Format:
    """One input format: how to write an intact file, its check, and the three bad files (each an
    edit of the intact one, or raw bytes) with the message each must give after the file's name."""

    name: str
    write: Callable[[Path], Path]
    check: Callable[[Path], None]
    filename: str
    truncated: tuple[Callable[[Path], object], str]
    wrong_shape: tuple[Callable[[Path], object], str]
    wrong_type: tuple[Callable[[Path], object], str]
    file_in: Callable[[Path], Path] = lambda path: path  # the file a folder format's edits damage


def png(path: Path) -> None:
    path.write_bytes(PNG)


def text(content: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(content)


FORMATS = [
    Format("csv table", csv_table, check_csv, "t.csv",
           (lambda p: cut(p, 0.55), r"line \d+: column 'y' holds an empty cell, not a number"),
           (text("a,b\n1,2\n"), r"no label column 'y'"),
           (png, r"not a readable CSV table")),
    Format("tulu jsonl", tulu_jsonl, check_tulu, "pool.jsonl",
           (cut, r"line \d+: not valid JSON"),
           (text('{"dataset": "d", "id": "1", "messages": "hello"}\n'), r"line 1: field 'messages'"),
           (png, r"line 1: ")),
    Format("qfft jsonl", qfft_jsonl, check_qfft, "limo.jsonl",
           (cut, r"line \d+: not valid JSON"),
           (text('{"question": "q", "answer": "1"}\n'), r"line 1: missing field 'solution'"),
           (png, r"line 1: ")),
    Format("c4 shard", c4_shard, check_c4, "c4-train.00000-of-01024.json.gz",
           (cut, r"not a readable C4 shard \(EOFError"),
           (lambda p: p.write_bytes(gzip.compress(b'{"url": "u"}\n')), r'line 1: expected a JSON object with a "text"'),
           (png, r"line 1: not a readable C4 shard")),
    Format("tokenizer.json", tokenizer_json, check_tokenizer, "tokenizer.json",
           (cut, r"not a tokenizers tokenizer.json"),
           (text('{"model": {"type": "BPE", "vocab": [1, 2]}}'), r"not a tokenizers tokenizer.json"),
           (png, r"not a tokenizers tokenizer.json")),
    Format("emg2qwerty hdf5", emg_session, check_session, "session.hdf5",
           (cut, r"not an HDF5 file"),
           (h5_edit(emg_one_channel), r"emg_left: expected 16 channels"),
           (png, r"not an HDF5 file")),
    Format("d4rl hdf5", d4rl_hdf5, check_d4rl, "d.hdf5",
           (cut, r"not a readable HDF5 file"),
           (h5_edit(d4rl_flat_actions), r"field 'actions' has shape \(7,\), expected 2-D"),
           (png, r"not a readable HDF5 file")),
    Format("md17 npz", md17_npz, check_md17, "md17.npz",
           (cut, r"not a readable .npz"),
           (lambda p: np.savez(p, R=np.zeros((300, 5)), z=np.ones(5)), r"R: expected \(frames, atoms, 3\)"),
           (png, r"not a readable .npz")),
    Format("wsi slide", slide, check_slide, "s.tiff",
           (cut, r"(cannot|not a slide|failed)"),
           (lambda p: shutil.copy(FIXTURES / "openslide" / "unreadable.svs", p), r"reading level 0 failed"),
           (png, r"not a slide OpenSlide can open")),
    Format("cohort csv", cohort_csv, check_cohort, "cohort.csv",
           (lambda p: cut(p, 0.53), r"line \d+: (time|event) "),
           (text("patient_id,slide_path,time\nP0,s.svs,1\n"), r"line 1: missing column\(s\) til_map_path, event"),
           (png, r"not a text CSV")),
    Format("til map", til_map, check_til, "til.png",
           (cut, r"not a TIL map image"),
           (cmyk_image, r"TIL map has image mode 'CMYK'"),
           (text('{"not": "an image"}'), r"not a TIL map image")),
    Format("model folder", model_folder, check_model, "model",
           (lambda p: cut(safetensors_weights(p)), r"weights that do not load \(SafetensorError"),
           (narrow_weight, r"weight 'embed_tokens.weight' has shape \(63, 16\), but its config.json's model expects \(64, 16\)"),
           (lambda p: png(safetensors_weights(p)), r"weights that do not load \(SafetensorError"),
           file_in=lambda p: p),
    Format("nanogpt tokens", token_bin, check_tokens, "train.bin",
           (lambda p: cut(p, 0.0525), r"21 bytes is not a whole number of uint16 tokens"),
           (lambda p: np.arange(10, dtype=np.uint16).tofile(p), r"10 tokens, fewer than block_size \+ 2"),
           (png, r"token id \d+ ≥ vocab_size 256")),
    Format("cifar batch", cifar_batch, check_cifar, "data_batch_1",
           (cut, r"not a CIFAR python-format batch"),
           (lambda p: p.write_bytes(pickle.dumps({b"data": np.zeros((4, 100), np.uint8), b"labels": [0] * 4})),
            r"b'data' must be N × 3072"),
           (png, r"not a CIFAR python-format batch")),
    Format("domain text", domain_text, check_domain_text, "domain.txt",
           (lambda p: p.write_bytes("ü".encode() * 40 + "ü".encode()[:1]), r"line 1: not UTF-8 text"),
           (text("one line only\n"), r"needs at least 2 non-empty lines"),
           (png, r"line 1: (not UTF-8 text|NUL byte)")),
    Format("image folder", image_folder, check_image_folder, "images",
           (truncated_image, r"not a readable image"),
           (one_image_class, r"1 class folder\(s\)"),
           (png_as_image, r"not a readable image")),
    Format("backbone checkpoint", backbone, check_backbone, "backbone.pt",
           (cut, r"not a readable torch checkpoint"),
           (lambda p: __import__("torch").save({"shape": {"kind": "mlp", "image_size": 8, "hidden": 4, "classes": 2},
                                                "state_dict": {}}, p), r"does not fit the model: missing keys"),
           (png, r"not a readable torch checkpoint")),
]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_the_intact_file_passes_its_check(tmp_path, fmt):
    fmt.check(fmt.write(tmp_path / fmt.filename))


# Formats whose check does not raise DataError yet (strict: the mark must go once it does).
KNOWN_GAPS: dict[str, str] = {}  # format name -> why its check does not raise DataError yet


@pytest.mark.parametrize("kind", ["truncated", "wrong_shape", "wrong_type"])
@pytest.mark.parametrize("fmt", [
    pytest.param(f, id=f.name, marks=[pytest.mark.xfail(strict=True, raises=ValueError, reason=KNOWN_GAPS[f.name])]
                 if f.name in KNOWN_GAPS else []) for f in FORMATS])
def test_a_bad_file_is_one_line_naming_it(tmp_path, fmt, kind):
    path = fmt.write(tmp_path / fmt.filename)
    damage, message = getattr(fmt, kind)
    damage(path)
    with pytest.raises(DataError) as caught:
        fmt.check(path)
    text = str(caught.value)
    assert "\n" not in text.strip(), f"a multi-line error: {text!r}"
    assert str(path) in text, f"the error does not name {path}: {text!r}"
    assert __import__("re").search(message, text), f"expected /{message}/ in {text!r}"


@pytest.mark.parametrize("damage, message", [
    (cut, r"model.safetensors: not a readable safetensors file \(.*incomplete metadata"),
    (png, r"model.safetensors: not a readable safetensors file \(.*header too large"),
    (lambda p: p.unlink(), r"model: no weights \(model.safetensors"),
])
def test_a_data_step_checks_a_model_folder_without_loading_it(tmp_path, damage, message):
    """check_causal_lm (what the data steps call on a paper profile's model folder) reads only the
    config and the safetensors headers: a 7B folder costs milliseconds, a bad one fails before work."""
    from paperline.train.lm_base import ModelDirError, check_causal_lm

    folder = model_folder(tmp_path / "model")
    assert check_causal_lm(folder).config.vocab_size == 64
    damage(safetensors_weights(folder))
    with pytest.raises(ModelDirError, match=message):
        check_causal_lm(folder)


def test_a_session_folder_is_checked_file_by_file_before_any_is_read(tmp_path):
    """scan_sessions (the semg-sessions data step on a `directory` source) checks each file's table
    layout from its header: a wrongly-shaped session fails there, not in the normalization."""
    from paperline.data.emg2qwerty import SessionFormatError, scan_sessions

    emg_session(tmp_path / "a.hdf5")
    h5_edit(emg_one_channel)(emg_session(tmp_path / "b.hdf5"))
    with pytest.raises(SessionFormatError, match=r"b\.hdf5: emg2qwerty/timeseries\.emg_left: expected 16 channels"):
        scan_sessions(tmp_path)
