"""QFFT's evaluation: answer extraction, the Short/Long CoT label, RAK (Cohen's κ between the
reference model's solvability and the evaluated model's Short/Long choice) and AES (accuracy-
efficiency against the base), per spec §b."""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

# [I] the paper names "wait" as a reflective keyword but not its list; these are R1's usual ones
LONG_COT_KEYWORDS = ("wait", "recheck", "double-check", "let me verify")
_LONG = re.compile(r"\b(" + "|".join(re.escape(k) for k in LONG_COT_KEYWORDS) + r")\b", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_MARKED = re.compile(r"A:\s*(-?\d+)")


def extract_answer(text: str) -> str | None:
    """The last \\boxed{...} (the paper's prompt), else the last `A:<int>` (our smoke format)."""
    for pattern in (_BOXED, _MARKED):
        found = pattern.findall(text)
        if found:
            return found[-1].strip()
    return None


def is_long_cot(text: str) -> bool:
    return _LONG.search(text) is not None


def rak(solvable: Sequence[bool] | np.ndarray, long_cot: Sequence[bool] | np.ndarray) -> float:
    """Cohen's κ of (solvable ↔ Short): TP = solvable & Short, FN = solvable & Long, FP =
    unsolvable & Short, TN = unsolvable & Long; p_o = (TP+TN)/N,
    p_e = [(TP+FP)(TP+FN) + (FN+TN)(FP+TN)]/N², κ = (p_o − p_e)/(1 − p_e); 0 when p_e = 1."""
    s = np.asarray(solvable, bool)
    lc = np.asarray(long_cot, bool)
    if s.shape != lc.shape or s.size == 0:
        raise ValueError("rak: solvable and long_cot must be equal-length and non-empty")
    tp, fn = float((s & ~lc).sum()), float((s & lc).sum())
    fp, tn = float((~s & ~lc).sum()), float((~s & lc).sum())
    n = s.size
    p_o = (tp + tn) / n
    p_e = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / n ** 2
    return 0.0 if p_e == 1.0 else (p_o - p_e) / (1.0 - p_e)


def aes(length: float, accuracy: float, base_length: float, base_accuracy: float) -> float | None:
    """ΔL = (L_b − L)/L_b, ΔA = (A − A_b)/A_b; 0.1ΔL + 0.1|ΔA| if ΔA ≥ 0 else 0.1ΔL − 1.0|ΔA|.
    None when the base scores 0 (ΔA undefined)."""
    if base_accuracy <= 0 or base_length <= 0:
        return None
    d_len = (base_length - length) / base_length
    d_acc = (accuracy - base_accuracy) / base_accuracy
    return 0.1 * d_len + 0.1 * abs(d_acc) if d_acc >= 0 else 0.1 * d_len - 1.0 * abs(d_acc)


def score_responses(texts: Sequence[str], lengths: Sequence[int], answers: Sequence[str]) -> dict:
    """Per response: correct, long-CoT, length (generated tokens)."""
    correct = [extract_answer(t) == a for t, a in zip(texts, answers)]
    return {"correct": correct, "long_cot": [is_long_cot(t) for t in texts], "length": list(lengths)}


def summarize_variant(samples: Sequence[dict], solvable: Sequence[bool]) -> dict:
    """Accuracy, mean length and long-CoT rate on all / easy (solvable by the base) / hard
    questions, RAK on all questions (on one split alone κ is 0 by construction); each averaged
    over the samples drawn per question (spec: RAK averaged over the 16 samples)."""
    s = np.asarray(solvable, bool)
    out: dict = {}
    for split, mask in (("all", np.ones_like(s)), ("easy", s), ("hard", ~s)):
        if not mask.any():
            continue
        out[f"{split}_accuracy"] = float(np.mean([np.asarray(x["correct"])[mask].mean() for x in samples]))
        out[f"{split}_mean_length"] = float(np.mean([np.asarray(x["length"])[mask].mean() for x in samples]))
        out[f"{split}_long_cot_rate"] = float(np.mean([np.asarray(x["long_cot"])[mask].mean() for x in samples]))
    out["rak"] = float(np.mean([rak(s, x["long_cot"]) for x in samples]))
    out["questions_easy"], out["questions_hard"] = int(s.sum()), int((~s).sum())
    return out
