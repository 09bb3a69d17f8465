"""CodeMerge: test-time model merging by fingerprints and ridge leverage scores, on a small ViT over
a stream of changing corruptions, against source-only, TENT, pseudo-labelling, an EMA teacher and
a MOS-like merge (one MLflow child each, a run per seed nested under it), with merge cost measured
in the same run. The source ViT comes from the vit-source prep stage."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.codemerge import METHOD, data, report, run_variant, source_config, variant_runs
from tasks.runners import submit_gpu


@flow(name="codemerge", log_prints=True)
def codemerge_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    source = source_config(profile)  # the source model's parameters are part of the run's identity
    with method_run(METHOD, profile, overrides, data=lambda cfg: data(cfg, source),
                    run_config=lambda cfg: cfg.model_dump() | {"vit_source": source.model_dump()}) as run:
        cfg = run.cfg
        with variant_runs(cfg, run.context) as children:
            futures = {v: {s: submit_gpu(run_variant, cfg, v, s, run.data, run.context, children[v])
                           for s in cfg.run_seeds()} for v in cfg.variants}
            results = {v: {s: f.result() for s, f in by.items()} for v, by in futures.items()}
            return run.publish(report.submit(cfg, results, run.data, run.context))
