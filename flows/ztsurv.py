"""ZTSurv: 50x slides -> zero-shot TME segmentation (TIL map + colour deconvolution) ->
heterogeneous graph -> typed GNN with Cox loss, against composition Cox, mean pooling, ABMIL and a
type-agnostic GCN on the same cells and folds; plus the 50x-vs-20x compute accounting.
The slides, thumbnails and TIL maps come from the DVC stages wsi-cohort, wsi-downsample, til-maps."""
from __future__ import annotations

from prefect import flow

from flows.launch import resolve
from paperline.config import read_params
from tasks import track
from tasks.paths import params_path
from tasks.resume import open_run_dir
from tasks.runners import ensure_gpu_limit, submit_gpu
from tasks.wsi_prep import resolve as resolve_wsi
from tasks.ztsurv import (METHOD, NEURAL, build_graphs, compute_accounting, data_inputs, fit_composition_cox,
                          publish, train_method)


@flow(name="ztsurv", log_prints=True)
def ztsurv_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    profile, cfg = resolve(METHOD, profile, overrides or [])
    _, wsi_cfg = resolve_wsi(read_params(params_path()), profile)
    ensure_gpu_limit()
    run_config = {"profile": profile, **cfg.model_dump(), "wsi": wsi_cfg.model_dump()}
    run_dir = open_run_dir(METHOD, run_config)
    if run_dir.resumed and track.fail_if_running(run_dir.previous_parent_run):
        print(f"previous run {run_dir.previous_parent_run} died; resuming from its checkpoints")
    data = track.data_version(data_inputs())
    with track.parent_run(METHOD, profile, run_config, data) as parent:
        run_dir.record_parent(parent.run_id)
        graphs = build_graphs.submit(cfg).result()
        # timed before training starts, so the two pipelines share a quiet machine
        compute = compute_accounting.submit(cfg, wsi_cfg.downsample, wsi_cfg.til_tile_um).result()
        futures = {m: (submit_gpu(train_method, cfg, m, graphs, parent, profile, data) if m in NEURAL
                       else fit_composition_cox.submit(cfg, graphs, parent, profile, data))
                   for m in cfg.methods}
        results = {m: f.result() for m, f in futures.items()}
        summary = publish(cfg, results, graphs, compute, parent)
    run_dir.mark_complete()
    return summary
