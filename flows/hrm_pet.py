"""HRM-PET: class-incremental learning on the frozen vit-source ViT, a LoRA per task matched by a
TII head, with direct and confidence-based re-matching at inference and CTIRD in training, against
HiDe-LoRA (initial matching) and each component alone, on several seeded task sequences of real
images (one MLflow child per variant; each (sequence, seed, learner) trained once, nested under
the first variant it serves, and every variant that runs on it evaluated from its logits)."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.hrm_pet import METHOD, data, first_variant, report, source_config, train_learner
from tasks.runners import submit_gpu


@flow(name="hrm_pet", log_prints=True)
def hrm_pet_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    source = source_config(profile)  # the backbone's parameters are part of the run's identity
    with method_run(METHOD, profile, overrides, data=lambda cfg: data(cfg, source),
                    run_config=lambda cfg: cfg.model_dump() | {"vit_source": source.model_dump()}) as run:
        cfg = run.cfg
        with run.context.children({v: {"variant": v} for v in cfg.variants}) as children:
            futures = {f"{s.name}/{seed}/{learner}": submit_gpu(train_learner, cfg, learner, s.name, seed, run.data,
                                                                 run.context, children[first_variant(cfg, learner)])
                       for s in cfg.sequences for seed in cfg.seeds for learner in cfg.learners()}
            results = {key: f.result() for key, f in futures.items()}
            return run.publish(report.submit(cfg, results, run.context))
