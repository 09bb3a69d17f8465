"""The ground truth's machinery: exact enumeration, permutation sampling (efficient by
construction, resumable by chunks), the digits game (a masked neuron is a zeroed row), rankings,
pruning, top-neuron fine-tuning, and clear errors for bad arrays and checkpoints."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperline.methods.model_shapley import digits as D
from paperline.methods.model_shapley import shapley as S
from paperline.methods.model_shapley.checkpoints import CheckpointError, load_checked_state, load_trained
from paperline.methods.model_shapley.ranking import keep_masks, top_units
from paperline.train.checkpoint import save_checkpoint


def additive_plus_pair(masks: torch.Tensor) -> torch.Tensor:
    """v(S) = Σ_{i∈S} w_i + 3·[0, 1 ∈ S]: φ = w + (1.5, 1.5, 0, ...)."""
    m = masks.double()
    return m @ torch.tensor([1.0, 2.0, -1.0, 0.5], dtype=torch.float64) + 3.0 * m[:, 0] * m[:, 1]


def test_exact_shapley_of_a_known_game():
    assert S.exact_shapley(additive_plus_pair, 4).tolist() == pytest.approx([2.5, 3.5, -1.0, 0.5], abs=1e-12)


def test_permutation_sampling_is_efficient_and_converges():
    result = S.permutation_shapley(additive_plus_pair, 4, 400, torch.Generator().manual_seed(0), chunk=50)
    assert float(result["phi"].sum()) == pytest.approx(5.5, abs=1e-12)  # v(N) − v(∅), every sample
    assert result["phi"].tolist() == pytest.approx([2.5, 3.5, -1.0, 0.5], abs=0.25)
    assert result["phi"][2:].tolist() == pytest.approx([-1.0, 0.5], abs=1e-12)  # additive players: no noise
    assert result["done"] == 400 and result["stderr"][2] == pytest.approx(0.0, abs=1e-12)


def test_permutation_sampling_resumes_to_the_same_estimate():
    full = S.permutation_shapley(additive_plus_pair, 4, 40, torch.Generator().manual_seed(1), chunk=10)
    saved = {}
    generator = torch.Generator().manual_seed(1)

    def stop_after_two(state):
        if state["done"] == 20:
            saved.update({k: v.clone() if torch.is_tensor(v) else v for k, v in state.items()}, rng=generator.get_state())
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        S.permutation_shapley(additive_plus_pair, 4, 40, generator, chunk=10, on_chunk=stop_after_two)
    resumed_gen = torch.Generator()
    resumed_gen.set_state(saved.pop("rng"))
    resumed = S.permutation_shapley(additive_plus_pair, 4, 40, resumed_gen, chunk=10, progress_state=saved)
    assert torch.equal(resumed["phi"], full["phi"]) and torch.equal(resumed["phi_first_half"], full["phi_first_half"])


def test_a_value_function_of_the_wrong_shape_is_named():
    with pytest.raises(ValueError, match=r"value function returned \(16, 1\) for 16 coalitions"):
        S.exact_shapley(lambda m: torch.zeros(len(m), 1), 4)
    with pytest.raises(ValueError, match="n = 20: exact enumeration is for 1 ≤ n ≤ 16"):
        S.exact_shapley(additive_plus_pair, 20)


def test_spearman():
    assert S.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert S.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="expected two equal 1-d vectors"):
        S.spearman([1, 2], [1, 2, 3])


def test_rankings_break_ties_by_index():
    imp = torch.tensor([0.5, 0.1, 0.1, 0.9])
    assert keep_masks(imp, [0.0, 0.5, 0.75]).tolist() == [[True] * 4, [True, False, False, True],
                                                         [False, False, False, True]]
    assert top_units(imp, 0.25) == [3] and top_units(imp, 0.5) == [0, 3] and top_units(imp, 0.01) == [3]


@pytest.fixture(scope="module")
def small():
    tasks = D.load_tasks(0.25, 0.25, 0.5, seed=0)
    model = D.make_mlp(6, 0)
    D.train_mlp(model, tasks.train, epochs=1, batch_size=128, lr=1e-2, weight_decay=0.0, seed=0)
    return tasks, model


def test_a_masked_neuron_is_its_zeroed_row(small):
    """The neuron game is the parameter-group game of [W1[u] | b1[u]]."""
    tasks, model = small
    mask = torch.tensor([[True, False, True, True, False, True]])
    zeroed = D.make_mlp(6, 0)
    zeroed.load_state_dict(model.state_dict())
    with torch.no_grad():
        zeroed[0].weight[~mask[0]] = 0
        zeroed[0].bias[~mask[0]] = 0
    with torch.no_grad():
        expected = -D.mean_ce(zeroed, tasks.val.x, tasks.val.y)
    assert float(D.value_function(model, tasks.val)(mask)[0]) == pytest.approx(float(expected), abs=1e-6)
    curve = D.pruning_curve(model, tasks.val, torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0]), [0.0, 2 / 6])
    assert curve["loss"][1] == pytest.approx(float(-expected), abs=1e-6)


def test_finetuning_moves_only_the_selected_neurons(small):
    tasks, model = small
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = D.finetune_units(model, [1, 4], tasks.shifted_train, tasks.shifted_test, steps=3, batch_size=32,
                              lr=1e-2, seed=0)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the model is copied
    assert result["units"] == [1, 4] and 0 <= result["accuracy"] <= 1


def test_the_shift_is_seeded_noise_on_the_same_digits():
    a, b = D.load_tasks(0.25, 0.25, 0.5, seed=3), D.load_tasks(0.25, 0.25, 0.5, seed=3)
    assert torch.equal(a.shifted_test.x, b.shifted_test.x) and torch.equal(a.shifted_test.y, a.test.y)
    noise = a.shifted_test.x - a.test.x
    assert 0.45 < float(noise.std()) < 0.55


def test_bad_arrays_are_named():
    x, y = np.zeros((5, 64), np.float32), np.zeros(5, np.int64)
    with pytest.raises(D.DigitsDataError, match=r"val: features of shape \(5, 63\): expected \(N, 64\)"):
        D.check_arrays(x[:, :63], y, "val")
    with pytest.raises(D.DigitsDataError, match="val: features of dtype int64: expected floating point"):
        D.check_arrays(x.astype(np.int64), y, "val")
    with pytest.raises(D.DigitsDataError, match=r"val: labels of shape \(4,\): expected \(5,\)"):
        D.check_arrays(x, y[:4], "val")
    with pytest.raises(D.DigitsDataError, match="val: labels of dtype float32: expected integers"):
        D.check_arrays(x, y.astype(np.float32), "val")
    with pytest.raises(D.DigitsDataError, match="val: label 10 outside 0..9"):
        D.check_arrays(x, y + 10, "val")
    x[2, 3] = np.nan
    with pytest.raises(D.DigitsDataError, match="val: features hold NaN or inf"):
        D.check_arrays(x, y, "val")


def test_a_checkpoint_that_does_not_fit_is_named(tmp_path):
    model = D.make_mlp(6, 0)
    with pytest.raises(CheckpointError, match=r"ck.pt: 0.weight has shape \(8, 64\), the model's is \(6, 64\)"):
        load_checked_state(model, D.make_mlp(8, 0).state_dict(), "ck.pt")
    state = model.state_dict()
    with pytest.raises(CheckpointError, match="x: checkpoint has no '2.bias'"):
        load_checked_state(model, {k: v for k, v in state.items() if k != "2.bias"}, "x")
    with pytest.raises(CheckpointError, match="x: unexpected key 'extra'"):
        load_checked_state(model, state | {"extra": torch.zeros(1)}, "x")
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_trained(model, tmp_path / "none.pt")
    save_checkpoint(tmp_path / "other.pt", {"weights": state})
    with pytest.raises(CheckpointError, match=r"other.pt: not a training checkpoint"):
        load_trained(model, tmp_path / "other.pt")


def test_digits_are_scikit_learns():
    """The arrays sklearn.datasets.load_digits(return_X_y=True) returns (their sha256, taken with
    scikit-learn 1.9.1): read without importing sklearn.datasets, which costs seconds."""
    import hashlib

    from paperline.data.digits import read_digits

    x, y = read_digits()
    assert x.shape == (1797, 64) and x.dtype == np.float64 and y.dtype == np.int64
    assert hashlib.sha256(x.tobytes()).hexdigest() == "20def7f70a702f0af9732fbba4375e147a7d54fe70d8c45569b8e7c1c7010c10"
    assert hashlib.sha256(y.tobytes()).hexdigest() == "a3c91c262eddcf7ba8f0e37507c30284493c9b20412ffe4af30d536401f7ba21"


def test_spearman_equals_scipys_with_ties():
    # scipy.stats.spearmanr(a, b).statistic with scipy 1.17.1 (not imported here: seconds of import)
    a = [3.0, 1.0, 2.0, 2.0, 5.0, 1.0]
    b = [0.5, 0.1, 0.9, 0.3, 0.2, 0.1]
    assert S.spearman(a, b) == pytest.approx(0.5373732906238788, abs=1e-12)


def test_the_ground_truth_resumes_from_its_checkpoint(tmp_path):
    """A finished (or killed) ground truth is read back from its chunks, not recomputed: a second
    call with a model of other weights returns the first call's values."""
    from paperline.methods.model_shapley import pipeline
    from paperline.methods.model_shapley.config import ModelShapleyConfig

    cfg = ModelShapleyConfig(digits={"hidden": 5}, permutations=6, permutation_batch=3)
    first = pipeline.ground_truth(cfg, D.make_mlp(5, 0), tmp_path / "gt.pt")
    again = pipeline.ground_truth(cfg, D.make_mlp(5, 1), tmp_path / "gt.pt")
    assert again["phi"] == first["phi"] and again["permutations"] == 6
    assert again["sum_phi"] == pytest.approx(first["value_full_minus_empty"], abs=1e-9)
    fresh = pipeline.ground_truth(cfg, D.make_mlp(5, 1), None)
    assert fresh["phi"] != first["phi"]
