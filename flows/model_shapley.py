"""Model Shapley: the closed-form Shapley value φ = θ⊙g − ½θ⊙(Hθ) with a block-Fisher EWMA,
against |θ|, |g·θ|, OBD and random, checked against permutation-sampling Shapley values of a
digits MLP's neurons, by pruning and top-neuron fine-tuning, and by pruning the causal LM's neurons."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.model_shapley import (
    METHOD,
    child_runs,
    data,
    evaluate_variant,
    ground_truth,
    report,
    scores,
    train_digits,
    train_lm,
)
from tasks.runners import submit_gpu


@flow(name="model_shapley", log_prints=True)
def model_shapley_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # data: a missing or corrupt corpus fails before the run starts
    with method_run(METHOD, profile, overrides, data=data) as run:
        cfg = run.cfg
        with child_runs(cfg, run.context) as children:
            futures = {}
            for seed in cfg.run_seeds():  # seed by seed: each seed's whole comparison, its steps side by side
                lm = submit_gpu(train_lm, cfg, seed, run.data, run.context, run.distributed, children["causal_lm"],
                                gpus=run.gpus)
                mlp = submit_gpu(train_digits, cfg, seed, run.data, run.context, children["digits_mlp"])
                gt = submit_gpu(ground_truth, cfg, seed, mlp, run.context, children["ground_truth"])
                mlp_scores = submit_gpu(scores, cfg, seed, mlp)
                futures[seed] = {"gt": gt, "scores": mlp_scores, "lm": lm,
                                 "results": {v: submit_gpu(evaluate_variant, cfg, seed, v, run.data, gt, mlp_scores,
                                                           lm, run.context, children[v]) for v in cfg.variants}}
            per_seed = {seed: {"gt": f["gt"].result(), "scores": f["scores"].result(), "lm": f["lm"].result(),
                               "results": {v: r.result() for v, r in f["results"].items()}}
                        for seed, f in futures.items()}
            return run.publish(report.submit(cfg, per_seed, run.context))
