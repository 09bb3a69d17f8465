"""HRM-PET: class-incremental learning on the frozen vit-source ViT, a LoRA per task matched by a
TII head, with direct and confidence-based re-matching at inference and CTIRD in training, against
HiDe-LoRA (initial matching) and each component alone, on several seeded task sequences of real
images (one MLflow child per variant; each learner trained once per (sequence, seed), its run
nested under the first variant it serves, and every variant that runs on it evaluated from its
logits)."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.hrm_pet import METHOD, data, first_variant, report, source_config, train_learners
from tasks.runners import submit_gpu


@flow(name="hrm_pet", log_prints=True)
def hrm_pet_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    source = source_config(profile)  # the backbone's parameters are part of the run's identity
    with method_run(METHOD, profile, overrides, data=lambda cfg: data(cfg, source),
                    run_config=lambda cfg: cfg.model_dump() | {"vit_source": source.model_dump()}) as run:
        cfg = run.cfg
        with run.context.children({v: {"variant": v} for v in cfg.variants}) as children:
            parents = {learner: children[first_variant(cfg, learner)] for learner in cfg.learners()}
            futures = [submit_gpu(train_learners, cfg, s.name, seed, run.data, run.context, parents)
                       for s in cfg.sequences for seed in cfg.run_seeds()]
            results = {key: value for f in futures for key, value in f.result().items()}
            return run.publish(report.submit(cfg, results, run.context))
