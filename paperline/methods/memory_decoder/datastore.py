"""The kNN-LM datastore (spec §b.1): keys are the hidden state at the input of the last block's FFN
(knn-transformers' `last_ffn_input`: the RMS-normed residual stream that `layers[-1].mlp` reads),
values the next-token ids, indexed by faiss — exact `IndexFlatL2`, or IVF-PQ as the paper
(4096 centroids, 64-byte codes, nprobe 32). The key is read with a forward hook on the model's
module, so the shared CausalLM needs no change."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from paperline.io import atomic_dir, read_json
from paperline.methods.memory_decoder.config import DatastoreConfig

if TYPE_CHECKING:
    import faiss  # imported where used: loading it costs seconds

DATASTORE_FILES = ("keys.npy", "values.npy", "index.faiss", "datastore.json")


@torch.no_grad()
def logits_and_keys(model, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (B, T, V), last-FFN-input keys (B, T, d)) of one forward pass."""
    captured = {}

    def hook(_module, args):
        captured["keys"] = args[0].detach()

    handle = model.layers[-1].mlp.register_forward_pre_hook(hook)
    try:
        logits = model(input_ids).logits
    finally:
        handle.remove()
    return logits, captured["keys"]


def windows(tokens: np.ndarray, block_size: int) -> list[tuple[int, int]]:
    """Consecutive non-overlapping windows (start, length) covering positions 0 … len−2 (every
    position that has a next token); the last window may be shorter."""
    n = len(tokens) - 1
    return [(s, min(block_size, n - s)) for s in range(0, n, block_size)]


@torch.no_grad()
def extract_keys(model, tokens: np.ndarray, block_size: int, device, batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Keys (N, d) float32 and values (N,) int64 for every position i < len−1: the key of the
    context ending at token i, the value token i+1 (the next-token label, aligned by construction)."""
    model.eval().to(device)
    keys, values = [], []
    spans = windows(tokens, block_size)
    for i in range(0, len(spans), batch_size):
        batch = spans[i:i + batch_size]
        # only the last window can be shorter: the full ones go as one batch, a short one alone
        full = [s for s in batch if s[1] == block_size]
        rest = [s for s in batch if s[1] != block_size]
        for group in ([full] if full else []) + [[s] for s in rest]:
            x = torch.as_tensor(np.stack([np.asarray(tokens[s:s + n], dtype=np.int64) for s, n in group])).to(device)
            _, k = logits_and_keys(model, x)
            keys.append(k.reshape(-1, k.shape[-1]).float().cpu().numpy())
            values.append(np.concatenate([np.asarray(tokens[s + 1:s + 1 + n], dtype=np.int64) for s, n in group]))
    keys_arr, values_arr = np.concatenate(keys), np.concatenate(values)
    # the spec's pitfall (§f): targets must line up with the shifted labels — check it
    assert len(values_arr) == len(tokens) - 1 and np.array_equal(values_arr, np.asarray(tokens[1:], dtype=np.int64))
    return np.ascontiguousarray(keys_arr, dtype=np.float32), values_arr


def build_index(keys: np.ndarray, cfg: DatastoreConfig, seed: int = 0) -> faiss.Index:
    """Exact L2, or IVF-PQ trained on a seeded sample of the keys. nlist is capped so each
    centroid has ≥ 39 training keys (faiss's own rule of thumb) on a small datastore."""
    import faiss

    d = keys.shape[1]
    index: faiss.Index
    if cfg.index == "flat":
        index = faiss.IndexFlatL2(d)
    else:
        if d % cfg.code_size:
            raise ValueError(f"datastore.code_size {cfg.code_size} must divide the key dimension {d}")
        nlist = max(1, min(cfg.nlist, len(keys) // 39))
        quantizer = faiss.IndexFlatL2(d)
        ivf = faiss.IndexIVFPQ(quantizer, d, nlist, cfg.code_size, cfg.nbits)
        rng = np.random.default_rng(seed)
        sample = keys[rng.choice(len(keys), size=min(len(keys), cfg.train_keys), replace=False)]
        ivf.train(np.ascontiguousarray(sample))
        ivf.nprobe = min(cfg.nprobe, nlist)
        index = ivf
    index.add(keys)
    return index


@dataclass
class Datastore:
    keys: np.ndarray
    values: np.ndarray
    index: faiss.Index  # over `keys`

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(squared-L2 distances (N, k), neighbour ids (N, k)), nearest first."""
        return self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k)

    def index_bytes(self) -> int:
        import faiss

        return int(faiss.serialize_index(self.index).nbytes)

    def size_bytes(self) -> dict:
        return {"index_bytes": self.index_bytes(), "values_bytes": int(self.values.nbytes),
                "keys_bytes": int(self.keys.nbytes), "entries": int(len(self.values))}


def save_datastore(store: Datastore, folder: str | Path, meta: dict) -> Path:
    import faiss

    from paperline.io import write_json

    with atomic_dir(folder) as tmp:
        np.save(tmp / "keys.npy", store.keys)
        np.save(tmp / "values.npy", store.values)
        faiss.write_index(store.index, str(tmp / "index.faiss"))
        write_json(tmp / "datastore.json", meta | store.size_bytes())
    return Path(folder)


def load_datastore(folder: str | Path) -> tuple[Datastore, dict]:
    import faiss

    folder = Path(folder)
    for name in DATASTORE_FILES:
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name}: missing (the datastore is built by the memory_decoder flow)")
    keys, values = np.load(folder / "keys.npy"), np.load(folder / "values.npy")
    index = faiss.read_index(str(folder / "index.faiss"))
    if index.ntotal != len(values) or len(keys) != len(values):
        raise ValueError(f"{folder}: index holds {index.ntotal} entries, keys {len(keys)}, values {len(values)}")
    return Datastore(keys, values, index), read_json(folder / "datastore.json")
