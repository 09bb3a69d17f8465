"""Tasks of the CodeMerge flow: the data (the vit-source stage's folder, built when missing), one
task per (variant, seed) running that seed's whole test-time adaptation stream (an MLflow run
`<variant>/seed<seed>` nested under the variant's child run, resumable from its checkpoint), then
the report."""
from __future__ import annotations

import sys
from dataclasses import dataclass

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import read_params
from paperline.data.vit_source import CLASSIFIER_FILE, RECORD_FILE, SPLIT_FILE, VitSourceConfig
from paperline.methods.codemerge import plots
from paperline.methods.codemerge.config import CodeMergeConfig
from paperline.methods.codemerge.summary import mean_curves, method_metrics, variant_row
from paperline.methods.codemerge.tta import StreamResult
from tasks import track, vit_source
from tasks.paths import params_path, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import unit

METHOD = "codemerge"


@dataclass(frozen=True)
class SourceData:
    folder: str  # the vit-source stage's output
    fingerprint: str  # of the parameters it was built from
    record: dict
    version: str


def source_config(profile: str | None) -> VitSourceConfig:
    """vit_source at the profile this run uses (`codemerge.profile` unless given)."""
    return vit_source.resolve(read_params(params_path()), profile)[1]


def data(cfg: CodeMergeConfig, source_cfg: VitSourceConfig) -> SourceData:
    """The source classifier and its held-out images, checked (a wrong image array or a classifier
    that does not fit its shape fails here, before the run starts), versioned by content."""
    from paperline.nn.vit import load_classifier
    from paperline.train.vit import read_vit_source, source_fingerprint

    folder = vit_source.ensure(source_cfg)
    fingerprint = source_fingerprint(source_cfg)
    split, record = read_vit_source(folder, fingerprint)
    load_classifier(folder / CLASSIFIER_FILE, source_cfg.shape)
    if split["test_x"].shape[1:] != (source_cfg.shape.image_size,) * 2:
        from paperline.data.images import ImageDataError

        raise ImageDataError(f"{folder / SPLIT_FILE}: {split['test_x'].shape[1:]} images for a ViT of "
                             f"image_size {source_cfg.shape.image_size}")
    files = [folder / name for name in (SPLIT_FILE, CLASSIFIER_FILE, RECORD_FILE)]
    return SourceData(str(folder), fingerprint, record, track.data_version(files))


def variant_runs(cfg: CodeMergeConfig, ctx: track.RunContext):
    """A child run per variant, open while its seeds run (each seed's run nested under it); the
    variant's row, the mean over seeds, lands on it when the flow publishes."""
    return ctx.children({v: {"variant": v, "seeds": cfg.run_seeds()} for v in cfg.variants})


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="codemerge-stream", tags=[GPU_TAG], cache_policy=NO_CACHE)
def run_variant(cfg: CodeMergeConfig, variant: str, seed: int, source: SourceData, ctx: track.RunContext,
                variant_run: track.Run | None = None) -> StreamResult:
    """One variant over seed `seed`'s corruption stream (the seed draws the stream and the
    fingerprints' projections): its row on the MLflow run `<variant>/seed<seed>` nested under
    `variant_run`, the per-batch accuracy as a history, its resume checkpoint under
    models/codemerge/<variant>/seed<seed>/."""
    from paperline.methods.codemerge.corruptions import make_stream
    from paperline.methods.codemerge.tta import run_stream
    from paperline.nn.vit import load_classifier
    from paperline.train.vit import read_vit_source

    cfg = cfg.model_copy(update={"seed": seed})
    # cfg.threads: tiny matmuls; variants run side by side
    with unit(ctx, f"{variant}/seed{seed}", {"variant": variant, "seed": seed}, threads=cfg.threads,
              parent=variant_run) as u:
        run = u.run
        split, _ = read_vit_source(source.folder, source.fingerprint)
        model = load_classifier(f"{source.folder}/{CLASSIFIER_FILE}")
        stream_x, stream_y = make_stream(split["test_x"], split["test_y"], cfg.stream, seed)
        result = run_stream(model, stream_x, stream_y, cfg, variant,
                            checkpoint_path=u.models / variant / f"seed{seed}" / "stream.pt",
                            fingerprint=source.fingerprint, progress=sys.stderr.isatty())
        run.log_history("accuracy_per_batch", range(len(result.accuracy)), result.accuracy)
        run.log_metrics({k: float(v) for k, v in variant_row(cfg, result).items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool)})
    return result


@task(name="codemerge-report", cache_policy=NO_CACHE)
def report(cfg: CodeMergeConfig, results: dict[str, dict[int, StreamResult]], source: SourceData,
           ctx: track.RunContext) -> Report:
    """`results`: variant -> seed -> its stream's result."""
    metrics = method_metrics(cfg, results, source.record, ctx.profile)
    return Report(metrics, plots.write_all(cfg, mean_curves(results), metrics.rows, plots_dir(METHOD)))
