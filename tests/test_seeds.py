"""paperline.seeds.mean_over_seeds: the mean over seeds and the sample std, by hand."""
import math

import pytest

from paperline.seeds import mean_over_seeds


def test_mean_and_sample_std_over_the_seeds_that_have_each_figure():
    rows = [{"acc": 1.0, "hard": 2.0, "steps": 5}, {"acc": 3.0, "steps": 5}, {"acc": 5.0, "hard": 4.0, "steps": 5}]
    out = mean_over_seeds(rows, spread=lambda k: k != "steps")
    assert list(out) == ["acc", "hard", "steps", "acc_std", "hard_std"]  # means first, then spreads
    assert out["acc"] == 3.0 and out["acc_std"] == 2.0  # sqrt((4 + 0 + 4) / (3 - 1)); the population std is 1.63
    # a figure seed 1 lacks: over seeds 0 and 2 only
    assert out["hard"] == 3.0 and out["hard_std"] == pytest.approx(math.sqrt(2))
    assert out["steps"] == 5.0 and isinstance(out["steps"], float)


def test_one_seed_has_no_spread_and_shared_figures_can_stay_as_they_are():
    assert mean_over_seeds([{"acc": 0.25, "n": 3}]) == {"acc": 0.25, "n": 3.0, "acc_std": 0.0, "n_std": 0.0}
    out = mean_over_seeds([{"acc": 0.25, "n": 3}, {"acc": 0.5, "n": 3}], keep_shared=True)
    assert out["n"] == 3 and isinstance(out["n"], int) and out["n_std"] == 0.0
    assert out["acc"] == 0.375 and out["acc_std"] == pytest.approx(0.125 * math.sqrt(2))


# ---------------------------------------------------------------- seeded_init, load_pretrained, the one lock

def _hold_lock_and_try(enter) -> tuple[bool, bool]:
    """(whether `enter` ran while another thread held INIT_LOCK, whether it ran once released)."""
    import threading

    from paperline.seeds import INIT_LOCK

    ran = threading.Event()
    with INIT_LOCK:
        worker = threading.Thread(target=lambda: (enter(), ran.set()))
        worker.start()
        during = ran.wait(0.3)
    worker.join(5)
    return during, ran.is_set()


def test_seeded_init_and_every_load_wait_for_the_one_lock():
    import torch

    from paperline.seeds import load_pretrained, seeded_init

    def build():
        with seeded_init(0):
            torch.nn.Linear(2, 2)

    class Loader:
        @classmethod
        def from_pretrained(cls, path, **kwargs):
            return path, kwargs

    assert _hold_lock_and_try(build) == (False, True)
    assert _hold_lock_and_try(lambda: load_pretrained(Loader, "dir", local_files_only=True)) == (False, True)
    assert load_pretrained(Loader, "dir", dtype="auto") == ("dir", {"dtype": "auto"})
    with seeded_init(1):  # reentrant: a load inside a seeded build
        assert load_pretrained(Loader, "inner") == ("inner", {})


def test_no_module_keeps_a_lock_of_its_own_for_init_or_loading():
    import ast
    from pathlib import Path

    import paperline
    own = []
    for path in Path(paperline.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("Lock", "RLock") and path.name != "seeds.py"):
                own.append(f"{path}:{node.lineno}")
            if isinstance(node, ast.Attribute) and node.attr == "fork_rng" and path.name != "seeds.py":
                own.append(f"{path}:{node.lineno} fork_rng")
    assert not own, f"a lock or an RNG fork of its own (use paperline.seeds.seeded_init): {own}"


def test_seeded_init_draws_the_weights_of_the_old_recipes_and_restores_the_outer_rng():
    import torch

    from paperline.methods.fvae_lora.train import DigitsMLP
    from paperline.methods.ngn_m.resnet import CifarResNet
    from paperline.nn.causal_lm import CausalLM, CausalLMConfig
    from paperline.seeds import seeded_init

    factories = {"mlp": lambda: DigitsMLP(8, 16, 10), "resnet": lambda: CifarResNet(8, 10),
                 "causal_lm": lambda: CausalLM(CausalLMConfig(vocab_size=32, hidden_size=16, num_layers=1,
                                                              num_heads=2, head_dim=8, num_kv_heads=2))}
    for name, build in factories.items():
        torch.manual_seed(123)
        outer = torch.random.get_rng_state()
        with seeded_init(7):
            ours = build()
        with seeded_init(7):
            again = build()
        assert torch.equal(torch.random.get_rng_state(), outer), name  # the caller's stream untouched
        torch.manual_seed(7)  # the recipe before issue 39: splashnet's and tasks/memory_decoder.py's
        bare = build()
        with torch.random.fork_rng(devices=[]):  # ngn_m's and fvae_lora's (under their own locks)
            torch.manual_seed(7)
            forked = build()
        for other in (again, bare, forked):
            assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), other.state_dict().values())), name
        with seeded_init(8):
            changed = build()
        assert not all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), changed.state_dict().values()))


def test_seeded_init_without_a_seed_only_fences_the_draws_off():
    import torch

    from paperline.seeds import seeded_init

    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    with seeded_init():
        inside = torch.rand(3)
    assert torch.equal(inside, expected) and torch.equal(torch.rand(3), expected)  # drawn, then restored


def test_sample_std_along_an_axis_and_for_one_seed():
    import numpy as np

    from paperline.seeds import sample_std

    values = np.array([[1.0, 2.0], [3.0, 2.0], [5.0, 2.0]])
    assert sample_std(values, axis=0).tolist() == [2.0, 0.0]
    assert sample_std([[1.0, 4.0]], axis=0).tolist() == [0.0, 0.0]
    assert sample_std([2.0, 4.0]) == pytest.approx(math.sqrt(2)) and sample_std([3.0]) == 0.0


# ---------------------------------------------------------------- the one LM loader

def test_load_causal_lm_options_and_the_draws_of_a_plain_from_pretrained(tmp_path):
    import torch

    from paperline.nn.causal_lm import CausalLM, CausalLMConfig
    from paperline.train.lm_base import load_causal_lm

    config = CausalLMConfig(vocab_size=32, hidden_size=16, num_layers=1, num_heads=2, head_dim=8,
                            num_kv_heads=2, max_position_embeddings=16)
    CausalLM.seeded(config, torch.Generator().manual_seed(0)).save_pretrained(tmp_path)
    torch.manual_seed(1)
    before = CausalLM.from_pretrained(tmp_path)  # what memory_decoder and qfft called before issue 39
    state_after_before = torch.random.get_rng_state()
    torch.manual_seed(1)
    model = load_causal_lm(tmp_path)
    assert torch.equal(torch.random.get_rng_state(), state_after_before)  # the same global draws: later ones alike
    assert type(model) is CausalLM and model.dtype == torch.float32
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), before.state_dict().values()))
    longer = load_causal_lm(tmp_path, max_position_embeddings=64)
    assert longer.config.max_position_embeddings == 64
    assert load_causal_lm(tmp_path, dtype=torch.bfloat16).dtype == torch.bfloat16
    assert load_causal_lm(tmp_path, dtype="auto").dtype == torch.float32
