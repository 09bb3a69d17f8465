"""ZTSurv: 50x slides -> zero-shot TME segmentation (TIL map + colour deconvolution) ->
heterogeneous graph -> typed GNN with Cox loss, against composition Cox, mean pooling, ABMIL and a
type-agnostic GCN on the same cells and folds, and a random risk (the trivial baseline), each at
every seed (its own folds and inits); plus the 50x-vs-20x compute accounting.
The slides, thumbnails and TIL maps come from the DVC stages wsi-cohort, wsi-downsample, til-maps."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.runners import submit_gpu
from tasks.ztsurv import (
    METHOD,
    NEURAL,
    build_graphs,
    compute_accounting,
    data_version,
    fit_baseline,
    report,
    train_method,
    wsi_config,
)


@flow(name="ztsurv", log_prints=True)
def ztsurv_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    wsi = wsi_config(profile)  # the prep parameters are part of the run's identity
    with method_run(METHOD, profile, overrides, data=data_version,
                    run_config=lambda cfg: cfg.model_dump() | {"wsi": wsi.model_dump()}) as run:
        cfg = run.cfg
        graphs = build_graphs.submit(cfg, run.context).result()
        # timed before training starts, so the two pipelines share a quiet machine
        compute = compute_accounting.submit(cfg, wsi).result()
        futures = {m: (submit_gpu(train_method, cfg, m, graphs, run.context) if m in NEURAL
                       else fit_baseline.submit(cfg, m, graphs, run.context))
                   for m in cfg.methods}
        results = {m: f.result() for m, f in futures.items()}
        return run.publish(report.submit(cfg, results, graphs, compute, run.context))
