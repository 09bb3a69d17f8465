"""`python tests/import_probe.py name=module,module ...`: for each name, the files of this project
that importing those modules loads, as JSON. The heavy third-party libraries are imported once in
this process, then each name is probed in a forked child that imports only our modules: a fresh
interpreter per stage, at the cost of our own imports (tests/test_dvc.py; measured ~2 s a stage
against ~12 s for an interpreter that imports torch, Prefect and MLflow itself)."""
from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("numpy", "scipy", "torch", "pydantic", "yaml", "prefect", "prefect.flows", "prefect.tasks",
         "mlflow", "mlflow.tracking", "matplotlib.pyplot", "sklearn", "transformers", "tokenizers", "lightning",
         "h5py", "mne", "faiss", "torch_geometric", "openslide", "tifffile", "skimage", "sksurv", "dask",
         "distributed", "prefect_dask", "reasoning_gym")
OURS = ("paperline", "tasks", "flows", "tests")


def probe(modules: list[str]) -> list[str]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: import ours, report, leave without running atexit handlers
        os.close(read)
        try:
            for module in modules:
                importlib.import_module(module)
            files = sorted({Path(m.__file__).resolve().relative_to(ROOT).as_posix()
                            for m in list(sys.modules.values())
                            if getattr(m, "__file__", None) and Path(m.__file__).is_absolute()
                            and Path(m.__file__).resolve().is_relative_to(ROOT)
                            and "/.venv/" not in m.__file__})
            os.write(write, json.dumps(files).encode())
            os._exit(0)
        except BaseException as err:  # noqa: BLE001 - reported to the parent
            os.write(write, json.dumps({"error": repr(err)}).encode())
            os._exit(1)
    os.close(write)
    with os.fdopen(read) as f:
        out = json.loads(f.read())
    os.waitpid(pid, 0)
    if isinstance(out, dict):
        raise RuntimeError(f"importing {modules}: {out['error']}")
    return out


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    for name in HEAVY:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    assert not any(m.split(".")[0] in OURS for m in sys.modules), "our modules must load in the children only"
    print(json.dumps({name: probe(modules.split(",")) for name, modules in (a.split("=", 1) for a in argv)}))


if __name__ == "__main__":
    main(sys.argv[1:])
