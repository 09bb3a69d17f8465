"""The files each NGN-M problem reads: scikit-learn's bundled CSVs for the CPU problems, a CIFAR or
nanoGPT token folder (`data_dir`) for the paper's. `check_data` fails before any work when a
folder lacks its files; `data_inputs` lists what the data version covers."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from paperline.config import ParamsError
from paperline.methods.ngn_m.config import NGNMConfig

# the files scikit-learn's load_diabetes / load_digits read (shipped inside the package)
SKLEARN_FILES = {"least_squares": ["diabetes_data_raw.csv.gz", "diabetes_target.csv.gz"],
                 "digits": ["digits.csv.gz"]}
REAL_DATA_FILES = {"cifar10": ["data_batch_1", "test_batch"], "cifar100": ["train", "test"],
                   "text_lm": ["train.bin", "val.bin"]}


def check_data(cfg: NGNMConfig, where: str = "params/ngn_m.yaml: ngn_m") -> None:
    """The real-data problems' folders hold their files; ParamsError naming the key otherwise.
    `data_dir` is absolute once the config is validated against the project root."""
    for name, pcfg in cfg.problems.items():
        if not hasattr(pcfg, "data_dir"):
            continue
        directory = Path(pcfg.data_dir)
        files = REAL_DATA_FILES[pcfg.dataset if pcfg.kind == "cifar" else pcfg.kind]
        missing = [f for f in files if not (directory / f).is_file()]
        if missing:
            hint = ("the CIFAR python version (cifar-10-batches-py/ or cifar-100-python/)" if pcfg.kind == "cifar"
                    else "token files in nanoGPT's format (prepare.py writes train.bin and val.bin)")
            raise ParamsError(f"{where}.problems.{name}.data_dir: {directory} lacks {', '.join(missing)}; "
                              f"point it at {hint}")


def data_inputs(cfg: NGNMConfig) -> tuple[list[Path], list[str]]:
    """(files and folders hashed into the data version, "name:size" of the LM token files, often
    many GB, which are not hashed)."""
    paths: list[Path] = []
    sizes = []
    for pcfg in cfg.problems.values():
        if pcfg.kind in SKLEARN_FILES:
            base = resources.files("sklearn.datasets") / "data"
            paths += [Path(str(base / f)) for f in SKLEARN_FILES[pcfg.kind]]
        elif pcfg.kind == "cifar":
            paths.append(Path(pcfg.data_dir))
        elif pcfg.kind == "text_lm":
            directory = Path(pcfg.data_dir)
            sizes += [f"{f}:{(directory / f).stat().st_size}" for f in REAL_DATA_FILES["text_lm"]]
    return paths, sizes
