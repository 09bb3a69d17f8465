"""What each learner is evaluated with after every task, and the per-task record of one rule set:
accuracy on each seen task's test images, task-matching accuracy (initial and final), and the
re-matching counts (extra LoRA passes per sample); then the continual-learning metrics over the
run (final average accuracy A_N, forgetting)."""
from __future__ import annotations

import torch

from paperline.methods.hrm_pet.config import SWITCHES, VARIANT_SPECS, CrmConfig, HrmPetConfig, Rules
from paperline.methods.hrm_pet.inference import infer, masked

BASE_PASSES = 2  # the TII head's pass on the frozen backbone and the matched LoRA's pass
NO_LORA_PASSES = 1  # the frozen backbone's pass only (the trivial baseline, Rules.lora off)


def switch_name(switch: str) -> str:
    return f"hrm_pet[{switch}=code]"


def evaluations(cfg: HrmPetConfig, learner: str) -> dict[str, Rules]:
    """name -> rules evaluated on `learner`: the variants that run on it, and for the switch table
    hrm_pet with one code rule at a time (the inference rules on the ctird learner; the top-K rule is
    the ctird_code learner under the paper's inference rules)."""
    out: dict[str, Rules] = {v: rules for v, (on, rules) in VARIANT_SPECS.items() if on == learner and v in cfg.variants}
    hrm_rules = VARIANT_SPECS["hrm_pet"][1]
    if learner == "ctird":
        for switch in SWITCHES[1:]:
            out[switch_name(switch)] = hrm_rules.model_copy(update={switch: "code"})
    if learner == "ctird_code":
        out[switch_name("ctird_topk")] = hrm_rules
    return out


def evaluate_task(rules: dict[str, Rules], crm: CrmConfig, tii_logits: torch.Tensor, lora_logits: torch.Tensor,
                  labels: torch.Tensor, class_task: torch.Tensor, seen: int, n_tasks: int) -> dict[str, dict]:
    true_task = class_task[labels]
    rows = torch.arange(len(labels))
    # the learner's own figures, the same under every rule: the oracle (each sample through its true
    # task's LoRA: what perfect matching would give) and how often a LoRA pulls another task's
    # samples into its own classes (what leaves DRM nothing to detect)
    oracle = (masked(lora_logits[true_task, rows], seen).argmax(1) == labels).float()
    own = class_task[masked(lora_logits, seen).argmax(2)]  # (T, N) the task of each LoRA's prediction
    absorbed = [float((own[s][true_task != s] == s).float().mean()) for s in range(n_tasks) if (true_task != s).any()]
    learner = {"oracle_accuracy_per_task": [float(oracle[true_task == s].mean()) for s in range(n_tasks)],
               "absorbed": sum(absorbed) / len(absorbed) if absorbed else 0.0}
    out = {}
    for name, r in rules.items():
        res = infer(tii_logits, lora_logits, class_task, seen, r, crm)
        correct = (res.pred == labels).float()
        out[name] = {
            "base_passes": BASE_PASSES if r.lora else NO_LORA_PASSES,
            "accuracy_per_task": [float(correct[true_task == s].mean()) for s in range(n_tasks)],
            "accuracy": float(correct.mean()),
            "matching": float((res.task == true_task).float().mean()),
            "initial_matching": float((res.initial_task == true_task).float().mean()),
            "extra_passes": float(res.extra_passes.float().mean()),
            "drm_rematched": float(res.drm_rematched.float().mean()),
            "crm_flagged": float(res.crm_flagged.float().mean()),
            "crm_switched": float(res.crm_switched.float().mean()),
            **(learner if r.lora else {}),  # the LoRAs' own figures describe only rules that use them
        }
    return out


def final_average_accuracy(records: list[dict]) -> float:
    """A_N: the mean over tasks of each task's accuracy after the last task."""
    last = records[-1]["accuracy_per_task"]
    return sum(last) / len(last)


def forgetting(records: list[dict]) -> float:
    """The mean over tasks 1..N−1 of (best accuracy on the task before the last task − its final
    accuracy); 0 for a one-task sequence."""
    n = len(records)
    if n < 2:
        return 0.0
    drops = [max(records[t]["accuracy_per_task"][s] for t in range(s, n - 1)) - records[-1]["accuracy_per_task"][s]
             for s in range(n - 1)]
    return sum(drops) / len(drops)


def run_metrics(records: list[dict]) -> dict[str, float]:
    """The figures of one rule set on one run: after the last task (the LoRAs' oracle and
    absorption only for rules that use LoRAs)."""
    last = records[-1]
    out = {"final_accuracy": final_average_accuracy(records), "forgetting": forgetting(records),
           "matching": last["matching"], "initial_matching": last["initial_matching"],
           "extra_passes": last["extra_passes"],
           "forward_passes": last.get("base_passes", BASE_PASSES) + last["extra_passes"],
           "drm_rematched": last["drm_rematched"], "crm_flagged": last["crm_flagged"],
           "crm_switched": last["crm_switched"]}
    if "oracle_accuracy_per_task" in last:
        out["oracle_final_accuracy"] = sum(last["oracle_accuracy_per_task"]) / len(last["oracle_accuracy_per_task"])
        out["absorbed"] = last["absorbed"]
    return out
