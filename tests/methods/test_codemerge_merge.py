"""CodeMerge's maths, exact where it allows: ridge leverage scores (primal == dual, their sum in
closed form, the outlier scores highest), top-K, TIES on hand-made task vectors, the RLS-weighted
merge, and the official schedule (a merge at every batch, its Θ₀ the previous merge with the
drifting anchor, the source with the fixed one) on a one-parameter model."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from paperline.methods.codemerge import merge
from paperline.methods.codemerge.config import CodeMergeConfig
from paperline.methods.codemerge.tta import BankMerger, StreamResult


@pytest.mark.parametrize("n,d", [(4, 16), (12, 5), (7, 7)])
def test_rls_primal_equals_dual_and_sums_to_the_effective_dimension(n, d):
    keys = torch.randn(n, d, generator=torch.Generator().manual_seed(n * d), dtype=torch.float64)
    lam = 1e-2
    primal, dual = merge.rls_primal(keys, lam), merge.rls_dual(keys, lam)
    torch.testing.assert_close(primal, dual, rtol=1e-10, atol=1e-10)
    # Σ s_i = tr(F H⁻¹ Fᵀ) = N Σ_j μ_j / (μ_j + Nλ), μ_j the eigenvalues of FᵀF
    F = keys - keys.mean(0)
    mu = torch.linalg.eigvalsh(F.T @ F)
    assert float(primal.sum()) == pytest.approx(float(n * (mu / (mu + n * lam)).sum()), rel=1e-10)
    assert float(merge.leverage_scores(keys, lam).sum()) == pytest.approx(float(primal.sum()), rel=1e-10)


def test_the_fingerprint_in_an_uncovered_direction_scores_highest():
    keys = torch.tensor([[1.0, 0, 0], [1.1, 0, 0], [0.9, 0, 0], [1.0, 0, 5.0]], dtype=torch.float64)
    scores = merge.rls_primal(keys, 1e-3)
    assert int(scores.argmax()) == 3
    assert merge.select_top_k(scores, 2)[-1] == 3


def test_top_k_takes_all_when_few_and_breaks_ties_by_the_earlier_checkpoint():
    assert merge.select_top_k(torch.tensor([0.1, 0.5, 0.2]), 5) == [0, 1, 2]
    assert merge.select_top_k(torch.tensor([0.1, 0.5, 0.5, 0.9, 0.5]), 3) == [1, 2, 3]


def test_random_projection_is_unscaled_and_redrawn_at_each_call():
    g = torch.Generator().manual_seed(0)
    f = torch.eye(3, dtype=torch.float64)
    a, b = merge.random_projection(f, 4, g), merge.random_projection(f, 4, g)
    R = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(a, R)  # eye @ R: R itself, no 1/√d′
    assert not torch.equal(a, b)


def _states(*vectors):
    return [{"w": torch.tensor(v, dtype=torch.float32)} for v in vectors]


def test_ties_on_hand_made_task_vectors():
    anchor = {"w": torch.zeros(4)}
    t1, t2, t3 = [1.0, -2.0, 0.5, 3.0], [2.0, 1.0, -0.1, -1.0], [-1.0, 1.0, 0.2, 0.5]
    # keep everything: elected signs of the sums [2, 0, 0.6, 2.5] are +, (0 → majority +), +, +;
    # disjoint means of the agreeing entries: 1.5, 1, 0.35, 1.75
    merged = merge.ties_merge(anchor, _states(t1, t2, t3), keep=1.0, scale=0.85)
    torch.testing.assert_close(merged["w"], 0.85 * torch.tensor([1.5, 1.0, 0.35, 1.75]))
    # keep half: k = 4 − int(4 · 0.5) = 2, every |entry| ≥ the row's 2nd smallest is kept (so 3 of 4:
    # merge_utils.topk_values_mask's inclusive threshold, kept as the official code has it)
    trimmed = merge.trim_top_fraction(torch.tensor([t1, t2, t3], dtype=torch.float64), 0.5)
    torch.testing.assert_close(trimmed, torch.tensor([[1.0, -2.0, 0, 3.0], [2.0, 1.0, 0, -1.0], [-1.0, 1.0, 0, 0.5]],
                                                     dtype=torch.float64))
    # the anchor's offset is added back: Θ₀ + 0.85 τ
    shifted = merge.ties_merge({"w": torch.ones(4)}, _states(*[[x + 1 for x in t] for t in (t1, t2, t3)]), 1.0)
    torch.testing.assert_close(shifted["w"], 1 + 0.85 * torch.tensor([1.5, 1.0, 0.35, 1.75]))


def test_elected_sign_of_a_zero_sum_is_the_majority_sign():
    tau = torch.tensor([[1.0, -1.0, -3.0], [-1.0, -1.0, -3.0]])
    torch.testing.assert_close(merge.elect_signs(tau), torch.tensor([-1.0, -1.0, -1.0]))


def test_rls_weighted_merge_and_mos_weights():
    ckpts = _states([0.0, 3.0], [2.0, 1.0])
    w = merge.rls_weights(torch.tensor([1.0, 3.0]))
    torch.testing.assert_close(w, torch.tensor([0.25, 0.75], dtype=torch.float64))
    torch.testing.assert_close(merge.weighted_average(ckpts, w)["w"], torch.tensor([1.5, 1.5]))
    # MOS-like: one forward pass each; the confident checkpoint weighs more
    logits = {0: torch.tensor([[10.0, 0.0]]), 1: torch.tensor([[0.0, 0.0]])}
    calls = []
    weights = merge.mos_weights(ckpts, torch.zeros(1), lambda s, b: calls.append(1) or logits[int(s["w"][0] > 0)])
    assert len(calls) == 2 and weights[0] > weights[1] and float(weights.sum()) == pytest.approx(1.0)


class OneWeight(nn.Module):
    """A one-parameter model: features are the inputs times w (enough for fingerprints)."""

    def __init__(self, w: float = 0.0):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([w]))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


@pytest.mark.parametrize("mode,expected", [("fixed", [1.7, 2.125, 2.125]), ("drifting", [1.7, 2.805, 1.69575])])
def test_the_teacher_is_merged_again_at_every_batch_from_the_previous_merge(mode, expected):
    """The official schedule: students w = 1, 2, 3 stored at batches 0-2, then 4 at batch 3; from
    batch 3 on the bank is merged at the start of every batch (all kept: top-K ≥ 4, keep 1).
    Batch 3: τ = [1, 2, 3] → 0.85 · 2 = 1.7 for both. Batch 4: fixed Θ₀ = 0, τ = [1, 2, 3, 4] →
    0.85 · 2.5 = 2.125; drifting Θ₀ = 1.7 (the previous merge), τ = [−0.7, 0.3, 1.3, 2.3] (sign +) →
    1.7 + 0.85 · 1.3 = 2.805. Batch 5, no new checkpoint: fixed unchanged; drifting Θ₀ = 2.805,
    τ = [−1.805, −0.805, 0.195, 1.195] sums < 0 → 2.805 − 0.85 · 1.305 = 1.69575. R is drawn afresh
    (2×2) at each of the three merges."""
    cfg = CodeMergeConfig(min_merge=3, top_k=5, ties_keep=1.0, ties_scale=0.85, projection_dim=2)
    anchor, teacher, student = OneWeight(0.0), OneWeight(0.0), OneWeight(0.0)
    generator = torch.Generator().manual_seed(0)
    bank = BankMerger("ties", mode, cfg, anchor, generator)
    result = StreamResult("codemerge", [])
    x = torch.tensor([[1.0, 2.0], [3.0, 1.0]])
    teachers = []
    for t, w in enumerate([1.0, 2.0, 3.0, 4.0, None, None]):
        bank.remerge(x, t, teacher, OneWeight(), result)
        if t >= 3:
            teachers.append(float(teacher.w.detach()))
            assert float(anchor.w.detach()) == pytest.approx(teachers[-1] if mode == "drifting" else 0.0, rel=1e-6)
        if w is not None:
            student.w.data.fill_(w)
            bank.store(student, x, result)
    assert teachers == pytest.approx(expected, rel=1e-6)
    assert result.merge_batches == [3, 4, 5] and len(result.selected) == 3
    assert result.merge_forward_passes == 4 and result.bank_size == 4  # one fingerprint a checkpoint
    redrawn = torch.Generator().manual_seed(0)
    for _ in range(3):
        torch.randn(2, 2, generator=redrawn, dtype=torch.float64)
    assert torch.equal(generator.get_state(), redrawn.get_state())
