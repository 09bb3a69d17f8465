"""HRM-PET's inference rules on hand-built logit tables: the GEN score on known distributions, τ's
recalibration, initial matching, DRM, CRM, and each code-vs-paper switch changing the outcome
exactly where spec (g) says the two rules differ."""
from __future__ import annotations

import math

import pytest
import torch

from paperline.methods.hrm_pet.config import CrmConfig, Rules
from paperline.methods.hrm_pet.inference import gen_score, gen_uniform, infer, smooth_max_logit, threshold

CLASS_TASK = torch.tensor([0, 0, 1, 1])  # classes 0, 1 in task 0; 2, 3 in task 1
LOOSE = CrmConfig(recalibrate=False, tau=-1.0)  # flags any sample with GEN below −1


def test_gen_score_on_known_distributions():
    assert gen_score(torch.tensor([[1.0, 0.0, 0.0]])).item() == 0.0  # one-hot: the most confident
    c, g = 100, 0.1
    uniform = torch.full((1, c), 1 / c)
    assert gen_score(uniform, g, 20).item() == pytest.approx(-20 * (1 / c) ** g * (1 - 1 / c) ** g, rel=1e-6)
    assert gen_uniform(100, g, 20) == pytest.approx(-12.606, abs=1e-3)  # spec (f): ≈ −0.63·M
    assert gen_score(torch.tensor([[0.5, 0.5, 0.0, 0.0]]), g, 20).item() == pytest.approx(-2 * 0.5 ** (2 * g), rel=1e-6)
    assert gen_score(torch.full((1, 10), 0.1), g, 20).item() == pytest.approx(gen_uniform(10, g, 20), rel=1e-6)


def test_tau_recalibrated_to_the_class_count():
    cfg = CrmConfig()
    assert threshold(cfg, 100) == pytest.approx(-10.0)  # the official τ at the official class count
    assert threshold(cfg, 10) == pytest.approx(-10.0 * gen_uniform(10) / gen_uniform(100))
    assert gen_uniform(10) < threshold(cfg, 10) < 0  # between the uniform score and one-hot's, as at 100
    assert threshold(cfg.model_copy(update={"recalibrate": False}), 10) == -10.0


def test_smooth_max_logit():
    z = torch.tensor([[5.0, 4.9, -20.0]])
    expected = 0.1 * math.log(math.exp(50) + math.exp(49) + math.exp(-200))
    assert smooth_max_logit(z).item() == pytest.approx(expected, rel=1e-6)


def test_initial_matching_and_drm():
    tii = torch.tensor([[3.0, 0.0, 0.0, 0.0]])  # t_f = task 0
    lora = torch.tensor([[[0.0, 0.0, 2.0, 0.0]],  # LoRA 0 predicts class 2 (task 1)
                         [[0.0, 0.0, 0.0, 4.0]]])  # LoRA 1 predicts class 3
    base = infer(tii, lora, CLASS_TASK, 4, Rules(), CrmConfig())
    assert (base.pred.item(), base.task.item(), base.extra_passes.item()) == (2, 0, 0)
    drm = infer(tii, lora, CLASS_TASK, 4, Rules(drm=True), CrmConfig())
    assert (drm.pred.item(), drm.task.item(), drm.extra_passes.item(), drm.drm_rematched.item()) == (3, 1, 1, True)


def test_unseen_classes_are_masked_in_every_pass():
    tii = torch.tensor([[0.0, 3.0, 9.0, 9.0]])  # classes 2, 3 not learnt yet
    lora = torch.tensor([[[0.0, 1.0, 9.0, 9.0]]])
    res = infer(tii, lora, CLASS_TASK, 2, Rules(drm=True, crm=True), LOOSE)
    assert res.pred.item() == 1 and res.task.item() == 0 and res.extra_passes.item() == 0  # CRM needs 2 tasks


def test_crm_candidates_paper_from_tii_code_from_initial_lora_logits():
    tii = torch.tensor([[2.0, 0.0, 1.0, -5.0]])  # top-2 classes 0, 2: the runner-up task is 1
    lora = torch.tensor([[[1.0, 1.1, 0.9, 0.0]],  # flat (low GEN), top-2 classes 1, 0: both task 0
                         [[-20.0, -20.0, -20.0, 3.0]]])  # confident class 3
    paper = infer(tii, lora, CLASS_TASK, 4, Rules(crm=True), LOOSE)
    assert paper.crm_flagged.item() and paper.crm_switched.item() and paper.pred.item() == 3
    assert paper.extra_passes.item() == 1
    code = infer(tii, lora, CLASS_TASK, 4, Rules(crm=True, crm_candidates="code"), LOOSE)
    assert code.crm_flagged.item() and not code.crm_switched.item() and code.pred.item() == 1
    assert code.extra_passes.item() == 0  # the runner-up is the task in use: nothing to re-run


def test_crm_select_paper_by_gen_code_by_smooth_max_logit():
    tii = torch.tensor([[2.0, 0.0, 1.0, -5.0]])
    lora = torch.tensor([[[5.0, 4.9, -20.0, -20.0]],  # large logits, split between two classes
                         [[-20.0, -20.0, 3.0, -20.0]]])  # smaller logits, one class
    z0, z1 = lora[0], lora[1]
    assert gen_score(z1.softmax(1)) > gen_score(z0.softmax(1)) > -1.9  # GEN prefers LoRA 1 …
    assert smooth_max_logit(z0) > smooth_max_logit(z1)  # … the smooth max logit LoRA 0
    loose = CrmConfig(recalibrate=False, tau=-1.5)
    assert infer(tii, lora, CLASS_TASK, 4, Rules(crm=True), loose).pred.item() == 2
    assert infer(tii, lora, CLASS_TASK, 4, Rules(crm=True, crm_select="code"), loose).pred.item() == 0


def test_gen_input_paper_after_drm_code_before():
    tii = torch.tensor([[2.0, 1.5, -5.0, -5.0]])  # t_f = task 0; TII's runner-up class 1 is task 0 too
    lora = torch.tensor([[[0.0, 0.0, 0.1, 0.05]],  # flat, argmax class 2: DRM re-runs with LoRA 1
                         [[-20.0, -20.0, -20.0, 6.0]]])  # confident class 3
    strict = CrmConfig(recalibrate=False, tau=-1.0)
    paper = infer(tii, lora, CLASS_TASK, 4, Rules(drm=True, crm=True), strict)
    assert not paper.crm_flagged.item() and paper.extra_passes.item() == 1 and paper.pred.item() == 3
    code = infer(tii, lora, CLASS_TASK, 4, Rules(drm=True, crm=True, gen_input="code"), strict)
    assert code.crm_flagged.item() and code.extra_passes.item() == 2  # flagged on the pre-DRM softmax
    assert code.pred.item() == 3  # LoRA 0's flat output loses the comparison


def test_evaluate_task_records_matching_oracle_and_absorption():
    from paperline.methods.hrm_pet.evaluate import evaluate_task

    labels = torch.tensor([0, 3])
    tii = torch.tensor([[3.0, 0.0, 0.0, 0.0], [3.0, 0.0, 0.0, 0.0]])  # both matched to task 0
    lora = torch.tensor([[[4.0, 0.0, 0.0, 0.0], [0.0, 4.0, 0.0, 0.0]],  # LoRA 0: both into task 0
                         [[0.0, 0.0, 4.0, 0.0], [0.0, 0.0, 0.0, 4.0]]])  # LoRA 1: both into task 1
    rec = evaluate_task({"base": Rules(), "drm": Rules(drm=True)}, CrmConfig(), tii, lora, labels, CLASS_TASK, 4, 2)
    assert rec["base"]["accuracy_per_task"] == [1.0, 0.0] and rec["base"]["matching"] == 0.5
    assert rec["base"]["oracle_accuracy_per_task"] == [1.0, 1.0]  # the true task's LoRA is right on both
    assert rec["base"]["absorbed"] == 1.0  # each LoRA pulls the other task's sample into its classes
    assert rec["drm"]["extra_passes"] == 0.0  # so DRM finds nothing to re-match


def test_without_lora_the_tii_head_classifies_alone():
    """The trivial baseline (frozen_head): the TII head's own class over the seen classes, no LoRA
    pass, whatever the LoRAs would say; its record has no LoRA oracle or absorption."""
    from paperline.methods.hrm_pet.evaluate import evaluate_task

    tii = torch.tensor([[3.0, 0.0, 0.0, 9.0], [0.0, 0.0, 2.0, 1.0]])  # class 3 unseen (seen = 3)
    lora = torch.tensor([[[0.0, 5.0, 0.0, 0.0]] * 2, [[0.0, 0.0, 0.0, 5.0]] * 2])
    res = infer(tii, lora, CLASS_TASK, 3, Rules(lora=False, drm=True, crm=True), LOOSE)
    assert res.pred.tolist() == [0, 2] and res.task.tolist() == [0, 1] and res.extra_passes.tolist() == [0, 0]
    rec = evaluate_task({"frozen_head": Rules(lora=False), "hide_lora": Rules()}, CrmConfig(), tii, lora,
                        torch.tensor([0, 2]), CLASS_TASK, 3, 2)
    assert rec["frozen_head"]["accuracy_per_task"] == [1.0, 1.0] and rec["frozen_head"]["base_passes"] == 1
    assert "oracle_accuracy_per_task" not in rec["frozen_head"] and "absorbed" in rec["hide_lora"]
    # the matched LoRAs predict class 1 (wrong) and, masked to the seen classes, class 0 (wrong)
    assert rec["hide_lora"]["base_passes"] == 2 and rec["hide_lora"]["accuracy_per_task"] == [0.0, 0.0]
