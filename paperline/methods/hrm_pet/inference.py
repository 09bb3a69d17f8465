"""HRM-PET's inference on precomputed logit tables: the TII head's logits and every seen task's
LoRA logits for each sample (so every rule is a pure function of tensors, and a re-match is a
look-up that is counted as the extra forward pass it costs).

1. Initial matching: t_f = T(argmax TII(x)); z = LoRA_{t_f} logits masked to the seen classes.
2. DRM: t_s = T(argmax z); where t_s ≠ t_f, re-run with LoRA t_s (one extra pass).
3. CRM (from the second task on): GEN(p) = −Σ_{top M} p^γ(1−p)^γ; where GEN < τ_C, run the
   runner-up candidate's LoRA (one extra pass) and keep the more confident output.
Without LoRA (`Rules.lora` off, the trivial baseline) the TII head's own class is the prediction.
The four places where the official code and the paper differ (spec (g)) are `Rules` switches;
the paper's rule is the default. Re-run logits are masked to the seen classes (the code leaves
them unmasked; spec (g) asks to mask them).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from paperline.methods.hrm_pet.config import CrmConfig, Rules


def masked(logits: torch.Tensor, seen: int) -> torch.Tensor:
    """Logits with the classes ≥ `seen` (not yet learnt) set to −inf."""
    out = logits.clone()
    out[..., seen:] = float("-inf")
    return out


def gen_score(probs: torch.Tensor, gamma: float = 0.1, top_m: int = 20) -> torch.Tensor:
    """GEN = −Σ over the top-M probabilities of p^γ(1−p)^γ (0 for a one-hot distribution, lowest for
    the uniform one): higher is more confident."""
    m = min(top_m, probs.shape[-1])
    p = probs.topk(m, dim=-1).values
    return -(p.pow(gamma) * (1 - p).pow(gamma)).sum(-1)


def gen_uniform(classes: int, gamma: float = 0.1, top_m: int = 20) -> float:
    """GEN of the uniform distribution over `classes` classes: −min(M, C)·(1/C)^γ(1 − 1/C)^γ."""
    p = 1.0 / classes
    return -min(top_m, classes) * p ** gamma * (1 - p) ** gamma


def threshold(cfg: CrmConfig, classes: int) -> float:
    """τ at `classes` seen classes: the configured τ (meant for `tau_classes` classes) rescaled by the
    uniform distribution's GEN, so τ keeps its place between the uniform score and 0 (spec (f):
    recalibrate τ to the class count) [I]; τ itself when `recalibrate` is off."""
    if not cfg.recalibrate:
        return cfg.tau
    return cfg.tau * gen_uniform(classes, cfg.gamma, cfg.top_m) / gen_uniform(cfg.tau_classes, cfg.gamma, cfg.top_m)


def smooth_max_logit(z: torch.Tensor, temperature: float = 0.1) -> torch.Tensor:
    """The code's CRM selection score 0.1·logsumexp(z/0.1)."""
    return temperature * torch.logsumexp(z / temperature, dim=-1)


@dataclass
class Inference:
    pred: torch.Tensor  # (N,) predicted class
    task: torch.Tensor  # (N,) the task whose LoRA gave the final output
    initial_task: torch.Tensor  # (N,) t_f
    extra_passes: torch.Tensor  # (N,) LoRA re-runs beyond the initial one
    drm_rematched: torch.Tensor  # (N,) bool
    crm_flagged: torch.Tensor  # (N,) bool: GEN < τ
    crm_switched: torch.Tensor  # (N,) bool: the runner-up's output was kept


def infer(tii_logits: torch.Tensor, lora_logits: torch.Tensor, class_task: torch.Tensor, seen: int,
          rules: Rules, crm: CrmConfig) -> Inference:
    """`tii_logits` (N, C); `lora_logits` (T, N, C) for the T seen tasks' LoRAs; `class_task` (C,);
    `seen` the number of seen classes (ids 0..seen−1, tasks 0..T−1)."""
    n_tasks, n = lora_logits.shape[0], tii_logits.shape[0]
    rows = torch.arange(n)
    tii = masked(tii_logits, seen)
    t_f = class_task[tii.argmax(1)]
    none = torch.zeros(n, dtype=torch.bool)
    if not rules.lora:  # the head on the frozen backbone classifies by itself: no LoRA pass at all
        return Inference(tii.argmax(1), t_f, t_f, torch.zeros(n, dtype=torch.long), none, none, none)
    z_init = masked(lora_logits[t_f, rows], seen)
    z, task = z_init.clone(), t_f.clone()
    extra = torch.zeros(n, dtype=torch.long)
    drm_rematched = torch.zeros(n, dtype=torch.bool)
    if rules.drm:
        t_s = class_task[z.argmax(1)]
        drm_rematched = t_s != t_f
        z[drm_rematched] = masked(lora_logits[t_s[drm_rematched], rows[drm_rematched]], seen)
        task = torch.where(drm_rematched, t_s, task)
        extra += drm_rematched.long()
    flagged = torch.zeros(n, dtype=torch.bool)
    switched = torch.zeros(n, dtype=torch.bool)
    if rules.crm and n_tasks >= 2:  # CRM runs from the second task on
        gen_of = z if rules.gen_input == "paper" else z_init
        score = gen_score(gen_of.softmax(1), crm.gamma, crm.top_m)
        flagged = score < threshold(crm, seen)
        top = (tii if rules.crm_candidates == "paper" else z_init).topk(min(crm.candidates, seen), dim=1).indices
        runner_up = class_task[top[:, 1]] if top.shape[1] > 1 else task
        rerun = flagged & (runner_up != task)  # a candidate already in use costs no pass
        z_alt = masked(lora_logits[runner_up, rows], seen)
        if rules.crm_select == "paper":
            better = gen_score(z_alt.softmax(1), crm.gamma, crm.top_m) > gen_score(z.softmax(1), crm.gamma, crm.top_m)
        else:
            better = smooth_max_logit(z_alt) > smooth_max_logit(z)
        switched = rerun & better
        z[switched] = z_alt[switched]
        task = torch.where(switched, runner_up, task)
        extra += rerun.long()
    return Inference(z.argmax(1), task, t_f, extra, drm_rematched, flagged, switched)
