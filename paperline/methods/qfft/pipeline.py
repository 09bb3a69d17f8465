"""The QFFT flow's steps as plain functions: the example sets (generated chain sums, or S1K/LIMO
JSONL validated line by line), the tokenizer and the short-CoT base model, training on examples
with or without the question, and the evaluation of a model on the evaluation questions."""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from paperline.data.local_tokenizer import shared_lm_tokenizer
from paperline.io import atomic_path
from paperline.methods.qfft.config import QFFTConfig

VARIANTS = ("sft", "qfft", "sft_noise_iv", "qfft_noise_iv")


@dataclass(frozen=True)
class QFFTData:
    """Where the example sets go (JSONL of question/response/answer; picklable); `sources`: the real
    JSONL files they are read from, if any. `version` is set by the flow from the sources' contents
    (generated sets are made from the parameters)."""

    folder: str
    sources: tuple[str, ...] = ()
    version: str = ""

    def path(self, name: str) -> Path:
        return Path(self.folder) / f"{name}.jsonl"


def read_examples(path: Path):
    from paperline.methods.qfft.data import Example

    with open(path) as f:
        return [Example(**json.loads(line)) for line in f]


def finetune_problems(cfg: QFFTConfig) -> list:
    """The generated fine-tuning problems (the S1K stand-in), none of them an evaluation question."""
    from paperline.methods.qfft import data as qdata

    p = cfg.problems
    asked = {q.question for q in qdata.chain_sum_problems(p.eval, p.seed + 2, p.min_terms, p.max_terms, p.max_digits)}
    return [q for q in qdata.chain_sum_problems(p.finetune, p.seed + 1, p.min_terms, p.max_terms, p.max_digits)
            if q.question not in asked]


def example_sets(cfg: QFFTConfig, first_passes: list[str] | None = None) -> dict[str, list]:
    """The example sets by name (base_train, finetune, finetune_noise_iv, eval). Generated:
    reasoning-gym chain sums for the base (terse solutions), the fine-tuning set (the long-CoT
    teacher's responses) and the evaluation set, no evaluation question in either training set.
    With `problems.first_pass: base` the fine-tuning sets need the base's own answers
    (`first_passes`, one per fine-tuning problem): without them they are left out (written after
    the base is trained). Real: the fine-tuning and evaluation JSONL, every line validated (a
    malformed line fails naming the file, line and field)."""
    from paperline.methods.qfft import data as qdata

    p = cfg.problems
    if cfg.real_data is None:
        def problems(n, offset):
            return qdata.chain_sum_problems(n, p.seed + offset, p.min_terms, p.max_terms, p.max_digits)

        evaluation = problems(p.eval, 2)
        asked = {q.question for q in evaluation}
        base = qdata.base_examples([q for q in problems(p.base_train, 0) if q.question not in asked])
        eval_set = [qdata.Example(q.question, qdata.short_response(q), q.answer) for q in evaluation]
        if p.first_pass == "teacher":
            finetune = qdata.teacher_examples(finetune_problems(cfg), p.seed, p.slip_rate)
        elif first_passes is not None:
            finetune = qdata.base_first_pass_examples(finetune_problems(cfg), first_passes)
        else:
            return {"base_train": base, "eval": eval_set}
    else:
        r = cfg.real_data
        finetune = list(qdata.iter_reasoning_jsonl(r.finetune_jsonl, r.finetune_format))
        eval_set = list(qdata.iter_reasoning_jsonl(r.eval_jsonl, r.eval_format))
        missing = next((i for i, e in enumerate(eval_set) if not e.answer), None)
        if missing is not None:
            raise qdata.QFFTDataError(f"{r.eval_jsonl}: example {missing + 1} has no answer to score against")
        base = []
    return {"base_train": base, "finetune": finetune,
            "finetune_noise_iv": qdata.shuffle_pairs(finetune, cfg.noise_seed), "eval": eval_set}


def check_example_sets(cfg: QFFTConfig, folder: str | Path) -> QFFTData:
    """The example sets made (or read and validated) before the run starts, and with `base_init:
    lm_base` the shared LM and its tokenizer checked; nothing written."""
    example_sets(cfg)
    if cfg.base_init == "lm_base":
        check_lm_base(cfg)
    sources = (cfg.real_data.finetune_jsonl, cfg.real_data.eval_jsonl) if cfg.real_data else ()
    return QFFTData(str(folder), sources)


def write_example_sets(cfg: QFFTConfig, data: QFFTData, first_passes: list[str] | None = None) -> Path:
    """The example sets as JSONL in `data.folder`, one file per set."""
    folder = Path(data.folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, examples in example_sets(cfg, first_passes).items():
        with atomic_path(data.path(name)) as tmp, open(tmp, "w") as f:
            for e in examples:
                f.write(json.dumps(dataclasses.asdict(e)) + "\n")
    return folder


def tokenizer(cfg: QFFTConfig):
    from paperline.methods.qfft.data import BPETokenizer, CharTokenizer, HFTokenizer

    if cfg.base_model_path:
        return HFTokenizer(cfg.base_model_path)
    return BPETokenizer(cfg.lm_base_tokenizer) if cfg.base_init == "lm_base" else CharTokenizer()


def check_lm_base(cfg: QFFTConfig) -> None:
    """`base_init: lm_base`: the shared LM's folder is a model whose vocabulary is its tokenizer's
    (QFFTDataError naming the path and the keys otherwise)."""
    from paperline.methods.qfft.data import QFFTDataError

    shared_lm_tokenizer(cfg.lm_base_path, cfg.lm_base_tokenizer,
                        where="base_init: lm_base; lm_base_path, lm_base_tokenizer", error=QFFTDataError)


def base_model(cfg: QFFTConfig, tok):
    """The short-CoT base M_S trained here: a fresh char-level CausalLM of `cfg.base`'s shape, or
    (`base_init: lm_base`) the shared LM with three rows added to its (tied) embedding for the
    special tokens (transformers draws them from the old rows' mean and covariance) and its
    position limit raised to the sequences' (RoPE: positions are computed, not learned). Drawn
    from `cfg.seed` under `seeded_init` (training and sampling draw from generators of their own)."""
    from paperline.seeds import seeded_init

    with seeded_init(cfg.seed):
        return _base_model(cfg, tok)


def _base_model(cfg: QFFTConfig, tok):
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig
    from paperline.train.lm_base import load_causal_lm

    positions = cfg.cutoff + cfg.decode.max_new_tokens + 64
    if cfg.base_init == "lm_base":
        check_lm_base(cfg)
        model = load_causal_lm(cfg.lm_base_path, max_position_embeddings=positions)
        model.resize_token_embeddings(tok.vocab_size)
        return model
    b = cfg.base
    return CausalLM(CausalLMConfig(vocab_size=tok.vocab_size, hidden_size=b.hidden_size, num_layers=b.num_layers,
                                   num_heads=b.num_heads, head_dim=b.head_dim,
                                   max_position_embeddings=positions))


def train_settings(t, cfg: QFFTConfig, examples: int):
    """LMTrainSettings of a budget; `epochs`/`warmup_ratio` (paper) set steps from the data size,
    `adam_beta2` (paper) AdamW's beta2."""
    from paperline.train.lm import LMTrainSettings

    s = LMTrainSettings.from_config(t, cfg.cutoff, cfg.seed)
    if getattr(t, "epochs", None):
        steps = math.ceil(t.epochs * examples / t.batch_size)
        s = dataclasses.replace(s, steps=steps, eval_every=min(s.eval_every, steps),
                                checkpoint_every=min(s.checkpoint_every, steps))
    if getattr(t, "warmup_ratio", None) is not None:  # rounded up, as the HF Trainer's get_warmup_steps
        s = dataclasses.replace(s, warmup_steps=math.ceil(t.warmup_ratio * s.steps))
    if getattr(t, "adam_beta2", None) is not None:
        s = dataclasses.replace(s, beta2=t.adam_beta2)
    return s


def train_on_examples(model, tok, examples, with_question: bool, settings, device, checkpoint_path: Path,
                      fingerprint: dict, description: str, on_log: Callable[[int, dict], None] | None = None,
                      distributed=None, device_indices: list[int] | None = None, qfft_end: str = "none") -> dict:
    """Train on [question; response] with loss on the response (`with_question`), or on the
    response alone, ending as `qfft_end` says (data.QFFT_ENDS; default the official template's: no
    end token); validation on a fixed slice of the examples. `distributed` (params/runtime.yaml
    runtime.distributed) spreads the training over devices."""
    from paperline.methods.qfft.data import ExampleSampler, encode_examples, pad_batch
    from paperline.train.distributed import DistributedConfig
    from paperline.train.lm import train_lm_spread

    encoded = encode_examples(tok, examples, with_question, settings.block_size, qfft_end)
    if not with_question:  # a checkpoint of the other encoding must not be resumed
        fingerprint = {**fingerprint, "qfft_end": qfft_end}
    val = pad_batch(encoded[:settings.eval_windows], tok.pad_id)  # a fixed slice: same every eval
    return train_lm_spread(distributed or DistributedConfig(), model, None, None, settings, device,
                           device_indices=device_indices, checkpoint_path=checkpoint_path, fingerprint=fingerprint,
                           progress=sys.stderr.isatty(), description=description,
                           sample_batch=ExampleSampler(encoded, settings.batch_size, tok.pad_id), val_batches=val,
                           on_log=on_log)


def base_first_passes(model, tok, cfg: QFFTConfig, device) -> list[str]:
    """The base's own greedy short-CoT answers to the fine-tuning questions (`problems.first_pass:
    base`), prompted as at evaluation."""
    from paperline.methods.qfft.data import prompt_ids
    from paperline.methods.qfft.generate import generate_responses

    prompts = [prompt_ids(tok, q.question) for q in finetune_problems(cfg)]
    ids = generate_responses(model, prompts, cfg.decode.max_new_tokens, tok.eos_id, 0.0, cfg.decode.batch_size,
                             cfg.seed, device, progress=sys.stderr.isatty())
    return [tok.decode(x) for x in ids]


def evaluate_model(model, tok, cfg: QFFTConfig, data: QFFTData, device, responses_path: Path) -> list[dict]:
    """`decode.samples` responses per evaluation question, scored; the responses saved as JSONL."""
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
    responses_path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(responses_path) as tmp, open(tmp, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return samples
