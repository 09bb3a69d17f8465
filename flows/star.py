"""STAR: preference-based RL with preference margin and policy regularisation, against PEBBLE,
SURF and the true-reward oracle (which normalises every score), with the two ablations, on a
continuous gymnasium task (SAC) and a grid world (DQN + in-sample value-iteration graph); and the
offline variant (reward model once, STAR's in-sample value vs IQL's vs plain AWR, advantage-weighted
extraction) on data rolled out from that task's oracle."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.runners import submit_gpu
from tasks.star import METHOD, data, oracle_row, planned_rows, report, train_offline, train_row


@flow(name="star", log_prints=True)
def star_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # data: the environments are checked before the run starts
    with method_run(METHOD, profile, overrides, data=data) as run:
        futures = {name: submit_gpu(train_row, run.cfg, task_name, variant, budget, run.context)
                   for name, (task_name, variant, budget) in planned_rows(run.cfg).items()}
        offline = None
        if run.cfg.offline is not None:  # after its task's oracle: that SAC is the expert behaviour policy
            oracle = futures[oracle_row(run.cfg)]
            offline = submit_gpu(train_offline, run.cfg, run.context, wait_for=[oracle])
        return run.publish(report.submit(run.cfg, {n: f.result() for n, f in futures.items()}, run.context,
                                          offline.result() if offline is not None else None))
