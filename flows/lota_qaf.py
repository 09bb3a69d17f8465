"""LoTA-QAF: ternary adapters merged losslessly into an int-b (4/3/2-bit) GPTQ or RTN quantised
model, against the quantised model, 16-bit LoRA (peft) merged by re-quantising, and a QA-LoRA-style
group-pooled adapter merged into the zero points, on a digits MLP and the shared Shakespeare LM."""
from __future__ import annotations

from prefect import flow

from flows.skeleton import method_run
from tasks.lota_qaf import METHOD, data, float_models, quantize_and_recover, report
from tasks.runners import submit_gpu


@flow(name="lota_qaf", log_prints=True)
def lota_qaf_flow(profile: str | None = None, overrides: list[str] | None = None) -> dict:
    # data: a bad model folder, target module or rank fails before the run starts
    with method_run(METHOD, profile, overrides, data=data) as run:
        floats = submit_gpu(float_models, run.cfg, run.data, run.context)
        floats.result()  # the digits MLP every group quantises is trained (and saved) first
        groups = [submit_gpu(quantize_and_recover, run.cfg, name, bits, run.data, run.context)
                  for name in run.cfg.tasks for bits in run.cfg.bits]
        return run.publish(report.submit(run.cfg, floats.result(), [g.result() for g in groups], run.context))
