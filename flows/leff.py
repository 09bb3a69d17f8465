"""LEFF: layer-wise federated fine-tuning of the shared base LM on Flower (simulation engine),
against FedAvg full fine-tuning, FedLoRA and FedBitFit, and LEFF with random and round-robin block
choice: global test loss per method and α, client FLOPs, straggler time, bytes per round."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.leff import METHOD, data_version, report, train_all
from tasks.runners import submit_gpu


@flow(name="leff", log_prints=True)
def leff_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # data: a missing corpus or base model fails before the run starts
    with method_run(METHOD, profile, overrides, data=data_version) as run:
        trained = submit_gpu(train_all, run.cfg, run.context)
        return run.publish(report.submit(run.cfg, trained, run.context))
