"""The Tulu selection data-prep flows: tulu-pool (the pool and target sets in the Tulu V2 format: the
embedded generators, a chunk of sub-datasets a task, or a uniform sample of the real file, a chunk
of its line ranges a task) and tulu-select (a GPU task for the warm-up, then one per selection
method, each timed on its own device, so the cost ratio compares like with like).
Parameters: tulu.profiles.<influence_distillation.profile> and influence_distillation.profiles.<it>."""
from __future__ import annotations

from prefect import flow
from prefect.futures import wait

from flows.prep import resolve_prep, stage_chunk_mapper
from paperline.data.tulu_pool import write_pool
from tasks.paths import repo_path
from tasks.runners import ensure_gpu_limit, submit_gpu
from tasks.tulu_prep import (
    count_valid_lines,
    data_dir,
    finish_selection,
    release_selection_states,
    require_pool,
    select_method,
    selection_dir,
    start_selection,
    sub_dataset_records,
    warm_up,
    with_resolved_paths,
    write_sampled_lines,
)


@flow(name="tulu-pool", log_prints=True)
def tulu_pool_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve_prep("tulu-pool", profile, overrides or [])
    map_chunks = stage_chunk_mapper(sub_dataset_records, count_valid_lines, write_sampled_lines)
    manifest = write_pool(cfg, data_dir(), root=repo_path(), map_chunks=map_chunks)
    skipped = manifest["skipped"]
    print(f"tulu-pool ({profile}): {manifest['pool_size']} pool samples, {len(manifest['targets'])} target sets; "
          f"skipped {skipped['skipped']} invalid lines {skipped['reasons'] or ''}")
    return manifest


@flow(name="tulu-select", log_prints=True)
def tulu_select_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve_prep("tulu-select", profile, overrides or [])
    cfg = with_resolved_paths(cfg)
    require_pool(cfg)  # a missing pool fails here, before any work
    ensure_gpu_limit()
    out = start_selection()
    try:
        warm = submit_gpu(warm_up, cfg, out).result()
        futures = {m: submit_gpu(select_method, cfg, out, m) for m in cfg.methods}
        wait(list(futures.values()))
        results = {m: f.result() for m, f in futures.items()}
    finally:
        release_selection_states()
    summary = finish_selection(cfg, warm, results)
    for method, sel in summary["selections"].items():
        print(f"tulu-select ({profile}) {method}: {sel['wall_s']:.1f} s, {sel['gradient_evaluations']} gradient "
              f"evaluations, {sel['forward_passes']} forward passes")
    print(f"  -> {selection_dir()}")
    return summary
