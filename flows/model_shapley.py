"""Model Shapley: the closed-form Shapley value φ = θ⊙g − ½θ⊙(Hθ) with a block-Fisher EWMA,
against |θ|, |g·θ|, OBD and random, checked against permutation-sampling Shapley values of a
digits MLP's neurons, by pruning and top-neuron fine-tuning, and by pruning the causal LM's neurons."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.model_shapley import METHOD, data, evaluate_variant, ground_truth, report, scores, train_digits, train_lm
from tasks.runners import submit_gpu


@flow(name="model_shapley", log_prints=True)
def model_shapley_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # data: a missing or corrupt corpus fails before the run starts
    with method_run(METHOD, profile, overrides, data=data) as run:
        lm = submit_gpu(train_lm, run.cfg, run.data, run.context, run.distributed, gpus=run.gpus)
        mlp = submit_gpu(train_digits, run.cfg, run.data, run.context)
        gt = submit_gpu(ground_truth, run.cfg, mlp, run.context)
        mlp_scores = submit_gpu(scores, run.cfg, mlp)
        futures = {v: submit_gpu(evaluate_variant, run.cfg, v, run.data, gt, mlp_scores, lm, run.context)
                   for v in run.cfg.variants}
        return run.publish(report.submit(run.cfg, gt, mlp_scores, lm, {v: f.result() for v, f in futures.items()},
                                         run.context))
