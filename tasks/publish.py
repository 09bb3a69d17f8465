"""The publish tail every method flow ends with, written once.

A method's report task returns a `Report` (its validated `MethodMetrics` and the plot files it
drew); `publish` then
- logs the plots to the parent MLflow run (`plots/`) and the comparison table as a table artifact
  (`comparison.json`, which the MLflow UI shows as a table, and `comparison.csv`);
- logs each claim's effect and interval on the parent run (`claim.<name>.effect`, `.low`,
  `.high`, `.seeds`) with its verdict as a tag (`claim.<name>.verdict`, and `verdicts`: the count
  of each), so the runs table filters by verdict;
- logs the headline figures on the parent run, and each comparison row's columns (with the
  primary metric's ratio to the baseline) on the child run of that variant, under the same names
  on every child (so the chart view lines the variants up);
- writes `results/<method>.json` (the validated record), `metrics/<method>.json` (its claims'
  outcome counts, the few keys `dvc metrics show` prints for every method) and
  `runs/<method>/mlflow_run.json`.
"""
from __future__ import annotations

import csv
import io
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.claims import Claim, counts_text, outcome_counts
from paperline.io import write_json
from paperline.metrics import MethodMetrics, numeric, table_columns
from tasks import track
from tasks.paths import metrics_path, results_path, run_pointer_path


@dataclass(frozen=True)
class Report:
    metrics: MethodMetrics
    plots: list[Path] = field(default_factory=list)


def comparison_csv(metrics: MethodMetrics) -> str:
    rows = metrics.rows
    columns = table_columns(rows)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["variant", *columns])
    for name, row in rows.items():
        writer.writerow([name, *(row.get(c, "") for c in columns)])
    return out.getvalue()


def claim_metrics(claims: list[Claim]) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in claims:
        values = {"effect": c.effect, "low": c.low, "high": c.high, "seeds": c.seeds}
        out |= {f"claim.{c.name}.{k}": float(v) for k, v in values.items() if v is not None}
    return out


def claim_tags(claims: list[Claim]) -> dict[str, str]:
    return {f"claim.{c.name}.verdict": c.verdict for c in claims} | {"verdicts": counts_text(claims)}


@task(name="publish", cache_policy=NO_CACHE)
def publish(ctx: track.RunContext, report: Report) -> dict:
    metrics = report.metrics.with_ratios()
    if metrics.method != ctx.method or metrics.profile != ctx.profile:
        raise ValueError(f"report of {metrics.method}/{metrics.profile} published in the run of "
                         f"{ctx.method}/{ctx.profile}")
    parent = ctx.parent
    for path in report.plots:
        parent.log_artifact(path, "plots")
    table = {"variant": list(metrics.rows)} | {c: [row.get(c) for row in metrics.rows.values()]
                                              for c in table_columns(metrics.rows)}
    track.client().log_table(parent.run_id, table, "comparison.json")
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "comparison.csv"
        csv_path.write_text(comparison_csv(metrics))
        parent.log_artifact(csv_path)
    # the parent holds the headline figures only: per-variant values live on the variants' runs
    parent.log_metrics(numeric(metrics.headline))
    parent.log_metrics(claim_metrics(metrics.claims))
    parent.set_tags(claim_tags(metrics.claims))
    children = track.child_runs(parent)
    for name, row in metrics.rows.items():
        if name in children:
            track.Run(children[name], parent.experiment_id).log_final(numeric(row))
    record = metrics.model_dump(mode="json")
    write_json(results_path(ctx.method), record, sort_keys=False)  # rows in the method's order
    write_json(metrics_path(ctx.method), outcome_counts(metrics.claims), sort_keys=False)
    write_json(run_pointer_path(ctx.method), track.run_pointer(parent, ctx.method))
    return record
