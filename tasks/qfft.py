"""Tasks of the QFFT flow: the problem sets (generated chain sums, or S1K/LIMO JSONL), the
short-CoT base model (trained here at smoke, an HF model by path at paper scale), the four
fine-tunes from it — SFT on [question; long response] with loss on the response, QFFT on the
response alone, and both under noise level IV (questions paired with other questions'
responses), one budget for all — each evaluated on the same questions, then the comparison:
accuracy, length and long-CoT rate on easy/hard questions (solvable or not by the base), RAK, AES."""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from paperline.io import atomic_path, write_json
from paperline.methods.qfft import plots
from paperline.methods.qfft.config import QFFTConfig
from tasks import track
from tasks.paths import metrics_path, models_dir, plots_dir, project_path, run_pointer_path
from tasks.runners import GPU_TAG, gpu_slot

METHOD = "qfft"
VARIANTS = ("sft", "qfft", "sft_noise_iv", "qfft_noise_iv")
DATA_FILES = ("base_train", "finetune", "finetune_noise_iv", "eval")


@dataclass(frozen=True)
class QFFTData:
    """Where the example sets are (JSONL of question/response/answer; picklable)."""

    folder: str
    version: str

    def path(self, name: str) -> Path:
        return Path(self.folder) / f"{name}.jsonl"


def _write_examples(path: Path, examples) -> None:
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        for e in examples:
            f.write(json.dumps(dataclasses.asdict(e)) + "\n")


def read_examples(path: Path):
    from paperline.methods.qfft.data import Example

    with open(path) as f:
        return [Example(**json.loads(line)) for line in f]


def prepare_data(cfg: QFFTConfig) -> QFFTData:
    """The example sets under models/qfft/data. Generated: reasoning-gym chain sums for the base
    (terse solutions), the fine-tuning set (the long-CoT teacher's responses) and the evaluation
    set, no evaluation question in either training set. Real: the fine-tuning and evaluation
    JSONL, every line validated here, before any training."""
    from paperline.methods.qfft import data as qdata

    folder = models_dir(METHOD) / "data"
    folder.mkdir(parents=True, exist_ok=True)
    p = cfg.problems
    sources: list[Path] = []
    if cfg.real_data is None:
        def problems(n, offset):
            return qdata.chain_sum_problems(n, p.seed + offset, p.min_terms, p.max_terms, p.max_digits)

        evaluation = problems(p.eval, 2)
        asked = {q.question for q in evaluation}
        base = qdata.base_examples([q for q in problems(p.base_train, 0) if q.question not in asked])
        finetune = qdata.teacher_examples([q for q in problems(p.finetune, 1) if q.question not in asked],
                                          p.seed, p.slip_rate)
        eval_set = [qdata.Example(q.question, qdata.short_response(q), q.answer) for q in evaluation]
    else:
        r = cfg.real_data
        finetune = list(qdata.iter_reasoning_jsonl(project_path(r.finetune_jsonl), r.finetune_format))
        eval_set = list(qdata.iter_reasoning_jsonl(project_path(r.eval_jsonl), r.eval_format))
        missing = next((i for i, e in enumerate(eval_set) if not e.answer), None)
        if missing is not None:
            raise qdata.QFFTDataError(f"{r.eval_jsonl}: example {missing + 1} has no answer to score against")
        base = []
        sources = [project_path(r.finetune_jsonl), project_path(r.eval_jsonl)]
    sets = {"base_train": base, "finetune": finetune,
            "finetune_noise_iv": qdata.shuffle_pairs(finetune, cfg.noise_seed), "eval": eval_set}
    for name, examples in sets.items():
        _write_examples(folder / f"{name}.jsonl", examples)
    version = track.data_version([folder / f"{n}.jsonl" for n in DATA_FILES] + sources)
    return QFFTData(str(folder), version)


def _tokenizer(cfg: QFFTConfig):
    from paperline.methods.qfft.data import CharTokenizer, HFTokenizer

    return HFTokenizer(project_path(cfg.base_model_path)) if cfg.base_model_path else CharTokenizer()


def _settings(t, cfg: QFFTConfig, examples: int):
    """LMTrainSettings of a budget; `epochs`/`warmup_ratio` (paper) set steps from the data size."""
    from paperline.train.lm import LMTrainSettings

    s = LMTrainSettings.from_config(t, cfg.cutoff, cfg.seed)
    if getattr(t, "epochs", None):
        steps = math.ceil(t.epochs * examples / t.batch_size)
        s = dataclasses.replace(s, steps=steps, eval_every=min(s.eval_every, steps),
                                checkpoint_every=min(s.checkpoint_every, steps))
    if getattr(t, "warmup_ratio", None) is not None:
        s = dataclasses.replace(s, warmup_steps=int(t.warmup_ratio * s.steps))
    return s


def _train(model, tok, examples, with_question: bool, settings, device, name: str, data: QFFTData, run, fingerprint):
    from paperline.methods.qfft.data import encode_examples, example_sampler, pad_batch
    from paperline.train.lm import train_lm

    encoded = encode_examples(tok, examples, with_question, settings.block_size)
    val = pad_batch(encoded[:settings.eval_windows], tok.pad_id)  # a fixed slice: same every eval
    return train_lm(model, None, None, settings, device,
                    checkpoint_path=models_dir(METHOD) / name / "checkpoint.pt",
                    fingerprint={"data": data.version, **fingerprint}, progress=sys.stderr.isatty(),
                    description=name, sample_batch=example_sampler(encoded, settings.batch_size, tok.pad_id),
                    val_batches=val, on_log=lambda step, m: run.log_metrics(m, step))


def _evaluate(model, tok, cfg: QFFTConfig, data: QFFTData, name: str, device) -> list[dict]:
    """`decode.samples` responses per evaluation question, scored; responses saved as JSONL."""
    from paperline.methods.qfft.data import prompt_ids
    from paperline.methods.qfft.generate import generate_responses
    from paperline.methods.qfft.metrics import score_responses

    questions = read_examples(data.path("eval"))
    prompts = [prompt_ids(tok, e.question, cfg.decode.chat_template) for e in questions]
    samples, rows = [], []
    for k in range(cfg.decode.samples):
        ids = generate_responses(model, prompts, cfg.decode.max_new_tokens, tok.eos_id, cfg.decode.temperature,
                                 cfg.decode.batch_size, cfg.seed + k, device, progress=sys.stderr.isatty())
        texts = [tok.decode(x) for x in ids]
        scored = score_responses(texts, [len(x) for x in ids], [e.answer for e in questions])
        samples.append(scored)
        rows += [{"sample": k, "question": e.question, "answer": e.answer, "response": t, "correct": c, "long_cot": lc}
                 for e, t, c, lc in zip(questions, texts, scored["correct"], scored["long_cot"])]
    out = models_dir(METHOD) / name / "responses.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp, open(tmp, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return samples


def _hf_dir(name: str) -> Path:
    return models_dir(METHOD) / name / "hf"


# DVC owns data-level caching: no Prefect result cache (NO_CACHE) on any task here.
@task(name="qfft-base", tags=[GPU_TAG], cache_policy=NO_CACHE)
def train_base(cfg: QFFTConfig, data: QFFTData, parent: track.Run, profile: str) -> dict:
    """The short-CoT reference M_S: trained on terse solutions ([question; response], loss on the
    response), or the HF model at `base_model_path`; then evaluated (its correctness defines the
    easy and hard questions)."""
    import torch

    from paperline.methods.qfft.hf import load_causal_lm
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig

    torch.set_num_threads(cfg.threads)
    tok = _tokenizer(cfg)
    with gpu_slot() as device, track.child_run(parent, METHOD, "base", profile, data.version,
                                               params={"shape": cfg.base.model_dump(), "train": cfg.base_train.model_dump(),
                                                       "model_path": cfg.base_model_path, "device": str(device)}) as run:
        row: dict = {}
        if cfg.base_model_path:
            model = load_causal_lm(project_path(cfg.base_model_path)).to(device)
        else:
            torch.manual_seed(cfg.seed)
            b = cfg.base
            model = CausalLM(CausalLMConfig(vocab_size=tok.vocab_size, hidden_size=b.hidden_size, num_layers=b.num_layers,
                                            num_heads=b.num_heads, head_dim=b.head_dim,
                                            max_position_embeddings=cfg.cutoff + cfg.decode.max_new_tokens + 64))
            examples = read_examples(data.path("base_train"))
            result = _train(model, tok, examples, True, _settings(cfg.base_train, cfg, len(examples)), device,
                            "base", data, run, {"variant": "base"})
            model.cpu().save_pretrained(_hf_dir("base"))
            tok.save(_hf_dir("base"))
            row = {"val_loss": result["val_loss"], "train_time_s": result["train_time_s"]}
        samples = _evaluate(model, tok, cfg, data, "base", device)
        run.log_metrics(row)  # its accuracy is logged with the others' by publish
    return {"run": run, "samples": samples, "train": row}


@task(name="qfft-finetune", tags=[GPU_TAG], cache_policy=NO_CACHE)
def finetune_variant(cfg: QFFTConfig, variant: str, data: QFFTData, parent: track.Run, profile: str) -> dict:
    """One fine-tune of the base: `sft*` on [question; response] (loss on the response), `qfft*`
    on the response alone (no question, no template: spec §b); `*_noise_iv` on the shuffled
    pairs. Same settings, same seed for all four."""
    import torch

    from paperline.methods.qfft.hf import load_causal_lm, trainable, unwrap

    torch.set_num_threads(cfg.threads)
    tok = _tokenizer(cfg)
    with_question = variant.startswith("sft")
    source = "finetune_noise_iv" if variant.endswith("noise_iv") else "finetune"
    with gpu_slot() as device, track.child_run(parent, METHOD, variant, profile, data.version,
                                               params={"train": cfg.finetune.model_dump(), "with_question": with_question,
                                                       "data": source, "device": str(device)}) as run:
        base_dir = project_path(cfg.base_model_path) if cfg.base_model_path else _hf_dir("base")
        model = trainable(load_causal_lm(base_dir)).train()
        examples = read_examples(data.path(source))
        result = _train(model, tok, examples, with_question, _settings(cfg.finetune, cfg, len(examples)), device,
                        variant, data, run, {"variant": variant, "base": str(base_dir)})
        unwrap(model).save_pretrained(_hf_dir(variant))
        tok.save(_hf_dir(variant))
        samples = _evaluate(unwrap(model), tok, cfg, data, variant, device)
        row = {"val_loss": result["val_loss"], "train_time_s": result["train_time_s"]}
        run.log_metrics(row)
    return {"run": run, "samples": samples, "train": row}


def summarize(base: dict, variants: dict[str, dict]) -> dict:
    """metrics/qfft.json: one row per model (base and the four fine-tunes) with accuracy, mean
    length and long-CoT rate on all/easy/hard questions, RAK and AES against the base; easy =
    the base answers correctly (in at least half its samples)."""
    import numpy as np

    from paperline.methods.qfft.metrics import aes, summarize_variant

    solvable = np.mean([s["correct"] for s in base["samples"]], axis=0) >= 0.5
    out: dict = {}
    rows = {"base": base} | variants
    for name, result in rows.items():
        row = summarize_variant(result["samples"], solvable)
        row |= {f"fit_{k}": v for k, v in result["train"].items()}
        out[name] = row
    b = out["base"]
    for name, row in out.items():
        score = aes(row["all_mean_length"], row["all_accuracy"], b["all_mean_length"], b["all_accuracy"])
        if score is not None:
            row["aes"] = score
    # headline scalars (paperline.report shows dict rows as a table, scalars as figures)
    top = {"questions": int(len(solvable)), "base_accuracy": b["all_accuracy"],
           "qfft_minus_sft_rak": out["qfft"]["rak"] - out["sft"]["rak"],
           "qfft_over_sft_length": out["qfft"]["all_mean_length"] / max(out["sft"]["all_mean_length"], 1e-9),
           "qfft_minus_sft_accuracy": out["qfft"]["all_accuracy"] - out["sft"]["all_accuracy"],
           "noise_iv_sft_accuracy_drop": out["sft"]["all_accuracy"] - out["sft_noise_iv"]["all_accuracy"],
           "noise_iv_qfft_accuracy_drop": out["qfft"]["all_accuracy"] - out["qfft_noise_iv"]["all_accuracy"]}
    return top | out


@task(name="qfft-publish", cache_policy=NO_CACHE)
def publish(base: dict, variants: dict[str, dict], parent: track.Run) -> dict:
    summary = summarize(base, variants)
    for name, result in ({"base": base} | variants).items():  # the evaluation onto each model's child run
        result["run"].log_metrics({k: v for k, v in summary[name].items() if not k.startswith("fit_")})
    out = plots_dir(METHOD)
    paths = [plots.plot_comparison(summary, ("base",) + VARIANTS, out / "qfft_comparison.png"),
             plots.write_table(summary, ("base",) + VARIANTS, out / "qfft_comparison.csv")]
    for path in paths:
        parent.log_artifact(path, "plots")
    parent.log_metrics({k: v for k, v in summary.items() if isinstance(v, (int, float))}
                       | {f"{name}/{k}": v for name in ("base",) + VARIANTS for k, v in summary[name].items()})
    write_json(metrics_path(METHOD), summary)
    write_json(run_pointer_path(METHOD), track.run_pointer(parent, METHOD))
    return summary
