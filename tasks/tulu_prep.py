"""Tasks of the Tulu selection data-prep flows (flows/prep_tulu.py).

- tulu-pool: parameters `tulu.profiles.<profile>` (TuluPoolConfig), the profile the one
  `influence_distillation.profile` names; writes <project>/data/tulu/ (pool.jsonl, targets/,
  manifest.json). Chunk tasks: sub-datasets of the embedded pool, or line ranges of a real Tulu
  file (`skip_invalid: true` skips its malformed lines and counts them in manifest.json).
- tulu-select: the selections on that pool with the method's parameters
  (`influence_distillation.profiles.<profile>`): a GPU task for the warm-up, then a GPU task per
  selection method (random, RDS+-like, exact first-order, Influence Distillation: JVP embeddings,
  landmark gradients, propagation), each timed on its own device; writes
  <project>/data/tulu/selection/ (<method>.jsonl of id, dataset, weight, rank, score; warmup.pt;
  scores.npz; selection.json). The method's flow fine-tunes on each.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.data import tulu_pool
from paperline.io import json_digest
from tasks.paths import project_path, repo_path
from tasks.runners import GPU_TAG, gpu_slot


def data_dir() -> Path:
    return repo_path("data", "tulu")


def selection_dir() -> Path:
    return data_dir() / "selection"


def with_resolved_paths(cfg):
    """A relative pool_dir / hf_model_path is relative to the project root (the folder holding params/)."""
    update = {key: str(project_path(getattr(cfg, key))) for key in ("pool_dir", "hf_model_path")
              if getattr(cfg, key) is not None}
    return cfg.model_copy(update=update)


def require_pool(cfg) -> Path:
    """The pool's path; a missing pool, or a model folder (`model: hf` / `lm_base`) that is not one,
    fails here, before the selection folder is touched."""
    from paperline.methods.influence_distillation.model import check_model

    pool = Path(cfg.pool_dir) / "pool.jsonl"
    if not pool.is_file():
        raise FileNotFoundError(f"{pool}: no pool; run the tulu-pool stage (dvc repro tulu-pool, or "
                                "python -m flows run tulu-pool)")
    check_model(cfg)
    return pool


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
sub_dataset_records = task(tulu_pool.sub_dataset_records, name="tulu-generate-sub-datasets", cache_policy=NO_CACHE)
count_valid_lines = task(tulu_pool.count_valid_lines, name="tulu-count-valid-lines", cache_policy=NO_CACHE)
write_sampled_lines = task(tulu_pool.write_sampled_lines, name="tulu-sample-lines", cache_policy=NO_CACHE)


# The warmed-up model, pool and targets on a device, for one flow run: the warm-up task builds it,
# each selection task of the same process (thread runner) reuses it, a process that lacks it (a
# Dask worker) loads it from the finished warmup.pt. One per device, so a long-lived worker holds
# at most the last run's.
_states: dict[str, tuple[str, Any]] = {}  # device -> (the run and parameters it is for, state)
_states_lock = threading.Lock()


def selection_state(cfg, out_dir: str, device) -> tuple[Any, Any, dict]:
    """(prep, optimizer, warm-up history) on `device` (see `pipeline.prepare_selection`)."""
    from prefect.runtime import flow_run

    from paperline.methods.influence_distillation import pipeline

    wanted = json_digest([flow_run.get_id(), pipeline.selection_fingerprint(cfg), out_dir])
    with _states_lock:
        held = _states.pop(str(device), None)  # dropped before a new one is built: one model at a time
        if held is None or held[0] != wanted:
            held = (wanted, pipeline.prepare_selection(cfg, Path(out_dir), device))
        _states[str(device)] = held
        return held[1]


def release_selection_states() -> None:
    with _states_lock:
        _states.clear()


def start_selection() -> str:
    """The selection folder, marked unfinished while a killed run's warm-up checkpoint stays."""
    from paperline.methods.influence_distillation import pipeline

    return str(pipeline.start_selection(selection_dir()))


def finish_selection(cfg, warm: dict, results: dict[str, dict]) -> dict:
    """The stage's outputs from the warm-up and each method's selection (selection.json last)."""
    from paperline.methods.influence_distillation import pipeline

    return pipeline.finish_selection(cfg, selection_dir(), warm, results)


@task(name="tulu-warm-up", tags=[GPU_TAG], cache_policy=NO_CACHE)
def warm_up(cfg, out_dir: str) -> dict:
    """The warm-up (resumed from warmup.pt when a killed run left it), then the model's target
    metrics before any fine-tuning; with the pool's ids and datasets for the selection files."""
    from paperline.methods.influence_distillation import pipeline

    with gpu_slot() as device:
        prep, _, history = selection_state(cfg, out_dir, device)
        return {"history": history, "before_finetune": pipeline.evaluate_targets(cfg, prep),
                "pool_ids": prep.pool.ids, "pool_datasets": prep.pool.datasets, "targets": sorted(prep.evals),
                "target_rows": prep.target_names}


@task(name="tulu-select-method", tags=[GPU_TAG], cache_policy=NO_CACHE, task_run_name="tulu-select-{method}")
def select_method(cfg, out_dir: str, method: str) -> dict:
    """One selection method on the warmed-up model, timed while it holds the GPU slot alone."""
    from paperline.methods.influence_distillation import pipeline

    with gpu_slot() as device:
        prep, optimizer, _ = selection_state(cfg, out_dir, device)
        return pipeline.select_method(cfg, prep, pipeline.adam_of(cfg, prep, optimizer), method)
