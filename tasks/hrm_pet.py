"""Tasks of the HRM-PET flow: the data (the vit-source stage's backbone, built when missing, and the
seeded task sequences on real images), one task per (sequence, seed) training each learner through
every task and evaluating every inference rule after each (resumable per task, each learner's
MLflow run nested under the child run of the variant it serves first), then the report."""
from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.config import read_params
from paperline.data.vit_source import CLASSIFIER_FILE, RECORD_FILE, SPLIT_FILE, VitSourceConfig
from paperline.methods.hrm_pet import plots
from paperline.methods.hrm_pet.config import VARIANT_SPECS, HrmPetConfig
from paperline.methods.hrm_pet.data import TaskSequence
from paperline.methods.hrm_pet.summary import method_metrics, unit_key
from tasks import track, vit_source
from tasks.paths import params_path, plots_dir
from tasks.publish import Report
from tasks.runners import GPU_TAG
from tasks.unit import unit

METHOD = "hrm_pet"


@dataclass(frozen=True)
class HrmPetData:
    backbone: str  # the vit-source classifier file, or the configured backbone checkpoint
    fingerprint: str  # of the vit-source parameters, or the backbone file's content
    sequences: dict[str, TaskSequence]  # "<sequence>/<seed>" -> the seeded task sequence
    version: str


def source_config(profile: str | None) -> VitSourceConfig:
    """vit_source at this run's profile (`hrm_pet.profile` unless given)."""
    params = read_params(params_path())
    return vit_source.resolve(params, profile or params[METHOD]["profile"])[1]


def data(cfg: HrmPetConfig, source_cfg: VitSourceConfig) -> HrmPetData:
    """The frozen backbone (checked: a classifier that does not fit its shape fails here, before the
    run starts) and every (sequence, seed) task sequence (a bad image array or a split that leaves a
    task empty fails here too), versioned by content."""
    from paperline.methods.hrm_pet.data import build_sequence, load_source
    from paperline.nn.vit import load_classifier
    from paperline.train.vit import source_fingerprint

    if cfg.backbone:  # a checkpoint by path (the paper profile's converted ViT-B/16)
        backbone = Path(cfg.backbone)
        files, image_size = [backbone], load_classifier(backbone).shape["image_size"]
        fingerprint = track.data_version(files)
    else:
        folder = vit_source.ensure(source_cfg)
        backbone = folder / CLASSIFIER_FILE
        load_classifier(backbone, source_cfg.shape)
        files, image_size = [folder / n for n in (SPLIT_FILE, CLASSIFIER_FILE, RECORD_FILE)], source_cfg.shape.image_size
        fingerprint = source_fingerprint(source_cfg)
    digest = hashlib.sha256(track.data_version(files).encode())
    sequences = {}
    for s in cfg.sequences:
        x, y = load_source(s)
        for seed in cfg.run_seeds():
            seq = build_sequence(x, y, s, image_size, seed)
            sequences[f"{s.name}/{seed}"] = seq
            for a in (seq.train_x, seq.train_y, seq.test_x, seq.test_y):
                digest.update(a.tobytes())
    return HrmPetData(str(backbone), fingerprint, sequences, "sha256:" + digest.hexdigest())


def first_variant(cfg: HrmPetConfig, learner: str) -> str:
    """The variant whose child run a learner's training run nests under (hrm_pet for the switch-only learner)."""
    return next((v for v in cfg.variants if VARIANT_SPECS[v][0] == learner), "hrm_pet")


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="hrm_pet-learners", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_learners(cfg: HrmPetConfig, sequence: str, seed: int, source: HrmPetData, ctx: track.RunContext,
                   parents: dict[str, track.Run]) -> dict[str, dict]:
    """Every learner through one seeded task sequence (one task: the learners are seconds each at
    smoke, and a GPU slot per learner cost more in waiting than in work), each on its own MLflow run
    nested under the child run of the first variant it serves (`parents`: learner -> that run),
    with its losses and per-task accuracy, its per-task checkpoint under
    models/hrm_pet/<sequence>/<seed>/<learner>.pt. Returns unit key -> run_learner's output."""
    from paperline.methods.hrm_pet.train import learner_fingerprint, run_learner
    from paperline.nn.vit import load_classifier

    seq = source.sequences[f"{sequence}/{seed}"]
    out = {}
    with unit(ctx, threads=cfg.threads) as u:  # one slot for every learner; a run per learner below
        for learner in cfg.learners():
            key = unit_key(sequence, seed, learner)
            with ctx.child(key, params={"learner": learner, "sequence": sequence, "seed": seed,
                                        "source": seq.source, "device": str(u.device)}, parent=parents[learner]) as run:
                def on_task(t: int, state: dict, run=run) -> None:  # one write a task
                    run.log_metrics({"tii_loss": state["history"][-1]["tii_loss"],
                                     "lora_loss": state["history"][-1]["lora_loss"],
                                     **{f"accuracy_{name}": records[-1]["accuracy"]
                                        for name, records in state["evaluations"].items() if "[" not in name}}, step=t)

                result = run_learner(cfg, learner, seq, load_classifier(source.backbone), seed,
                                     checkpoint=u.models / sequence / str(seed) / f"{learner}.pt",
                                     fingerprint=learner_fingerprint(cfg, learner, sequence, seed, source.fingerprint),
                                     progress=sys.stderr.isatty(), on_task=on_task)
                run.log_metrics({"train_seconds": result["train_seconds"]})
            out[key] = result | {"source": seq.source}
    return out


@task(name="hrm_pet-report", cache_policy=NO_CACHE)
def report(cfg: HrmPetConfig, results: dict[str, dict], ctx: track.RunContext) -> Report:
    metrics = method_metrics(cfg, results, ctx.profile)
    return Report(metrics, plots.write_all(cfg, results, metrics.rows, plots_dir(METHOD)))
