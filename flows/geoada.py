"""GeoAda: SE(3)-equivariant adapters for a pretrained geometric diffusion model. A GeoTDM-style
EGTN is pretrained on frame-conditioned N-body forecasting, then fine-tuned to frame, global and
subgraph control by GeoAda and by the paper's baselines (full fine-tuning, PARTIAL-k, MLP-k, GPF,
GPF-plus, Prompt-Template where it fits), against
the frozen base and a non-equivariant ControlNet, at every fine-tuning seed (an MLflow child per
row, a run per seed nested under it). The trajectories come from the nbody prep stage."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.geoada import METHOD, data, data_config, finetune, pretrain, report, variant_runs
from tasks.runners import submit_gpu


@flow(name="geoada", log_prints=True)
def geoada_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    source = data_config(profile)  # the data's parameters are part of the run's identity
    with method_run(METHOD, profile, overrides, data=lambda cfg: data(cfg, source),
                    run_config=lambda cfg: cfg.model_dump() | {"nbody": source.model_dump()}) as run:
        base = submit_gpu(pretrain, run.cfg, run.data, run.context).result()
        with variant_runs(run.cfg, run.context) as runs:
            # the first seed sweeps the learning rates (each variant keeping its best on the
            # validation set); a later seed's task waits for its control's sweep (its future as an
            # argument) and trains at the chosen rates. Seed by seed: where the tasks queue on one
            # device, each seed's comparison lands whole
            first, *rest = run.cfg.run_seeds()
            swept = {control: submit_gpu(finetune, run.cfg, control, first, run.data, base, run.context, runs)
                     for control in run.cfg.controls}
            futures = [*swept.values(), *(submit_gpu(finetune, run.cfg, control, seed, run.data, base, run.context,
                                                     runs, swept[control])
                                          for seed in rest for control in run.cfg.controls)]
            results = [result for future in futures for result in future.result()]
            return run.publish(report.submit(run.cfg, results, base, run.data, run.context))
