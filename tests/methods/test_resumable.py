"""The resume logic every hand-written training loop shares (`paperline.train.checkpoint.Resumable`):
a loop killed between checkpoints ends where an uninterrupted one does, its elapsed time carries
over, a checkpoint of another configuration (or of the older layout) is never mixed in."""
from __future__ import annotations

import pytest
import torch

from paperline.train import checkpoint
from paperline.train.checkpoint import Resumable, load_checkpoint, save_checkpoint

STEPS, EVERY = 10, 3


class Killed(Exception):
    pass


def toy_loop(path, fingerprint=None, kill_at: int | None = None,
             random_state: bool = True) -> tuple[dict, torch.nn.Module, Resumable]:
    """A regression trained on noisy batches from a generator, with dropout from the global RNG, an
    lr schedule: every kind of state a loop carries (`random_state` False: the random streams left
    out of the checkpoint)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
    generator = torch.Generator().manual_seed(1)
    streams = {"generator": generator, "rng": torch.default_generator} if random_state else {}
    run = Resumable(path, fingerprint or {"lr": 0.05}, EVERY, model=model, optimizer=optimizer, scheduler=scheduler,
                    **streams)
    record = run.resume() or {"step": 0, "losses": []}
    while record["step"] < STEPS:
        if record["step"] == kill_at:
            raise Killed
        x = torch.randn(16, 4, generator=generator)
        loss = (model(x).squeeze(1) - x.sum(1)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        record["losses"].append(loss.item())
        record["step"] += 1
        if run.due(record["step"], STEPS):
            run.save(record)
    return record, model, run


def test_a_loop_killed_between_checkpoints_resumes_to_the_uninterrupted_result(tmp_path):
    straight, straight_model, _ = toy_loop(tmp_path / "a.pt")
    with pytest.raises(Killed):
        toy_loop(tmp_path / "b.pt", kill_at=7)  # its last checkpoint: step 6
    assert load_checkpoint(tmp_path / "b.pt")["progress"]["step"] == 6
    resumed, resumed_model, _ = toy_loop(tmp_path / "b.pt")
    assert resumed["losses"] == straight["losses"]  # bit for bit: batches, dropout masks, lr all resumed
    for a, b in zip(straight_model.parameters(), resumed_model.parameters()):
        assert torch.equal(a, b)
    assert load_checkpoint(tmp_path / "b.pt")["progress"]["step"] == STEPS  # saved at the end too


def test_a_resume_without_the_random_state_would_differ(tmp_path):
    """The test above can fail: a resume that restores the weights but not the random streams
    ends elsewhere."""
    straight, _, _ = toy_loop(tmp_path / "a.pt")
    with pytest.raises(Killed):
        toy_loop(tmp_path / "b.pt", kill_at=7, random_state=False)
    resumed, _, _ = toy_loop(tmp_path / "b.pt", random_state=False)
    assert resumed["losses"][:6] == straight["losses"][:6] and resumed["losses"][6:] != straight["losses"][6:]


def test_the_elapsed_time_of_every_try_is_carried_over(tmp_path, monkeypatch):
    clock = iter(range(0, 10_000, 10))  # each reading of the clock: 10 s later
    monkeypatch.setattr(checkpoint.time, "perf_counter", lambda: float(next(clock)))
    with pytest.raises(Killed):
        toy_loop(tmp_path / "a.pt", kill_at=7)
    saved = load_checkpoint(tmp_path / "a.pt")["elapsed"]
    assert saved > 0
    _, _, run = toy_loop(tmp_path / "a.pt")
    assert run.elapsed() > saved + 10


def test_another_configuration_or_the_older_layout_starts_afresh(tmp_path):
    path = tmp_path / "a.pt"
    toy_loop(path)
    with pytest.warns(UserWarning, match="another configuration; starting afresh"):
        record, _, _ = toy_loop(path, fingerprint={"lr": 0.1})
    assert record["step"] == STEPS and len(record["losses"]) == STEPS  # trained from step 0
    save_checkpoint(path, {"fingerprint": {"lr": 0.05}, "step": 4, "model": {}})  # before Resumable
    with pytest.warns(UserWarning, match="another configuration"):
        assert Resumable(path, {"lr": 0.05}).resume() is None


def test_without_a_path_nothing_is_saved_or_resumed(tmp_path):
    run = Resumable(None, {"a": 1}, 1, model=torch.nn.Linear(2, 2))
    assert run.resume() is None
    run.save({"step": 1})
    assert not list(tmp_path.iterdir())
    assert [s for s in range(1, 11) if Resumable(None, {}, 4).due(s, 10)] == [4, 8, 10]


@pytest.mark.parametrize("suffix", [".json", ".pkl", ".pt"])
def test_a_finished_unit_is_read_back_for_its_fingerprint_only(tmp_path, suffix):
    from paperline.train.records import finished_unit

    path, calls = tmp_path / "units" / f"seed0{suffix}", []

    def compute(value):
        def run():
            calls.append(value)
            return {"metric": value, "curve": [value, value / 2]}
        return run

    assert finished_unit(path, {"lr": 0.1}, compute(1.0)) == {"metric": 1.0, "curve": [1.0, 0.5]}
    assert finished_unit(path, {"lr": 0.1}, compute(2.0)) == {"metric": 1.0, "curve": [1.0, 0.5]}  # read back
    assert finished_unit(path, {"lr": 0.2}, compute(3.0))["metric"] == 3.0  # another unit's settings: recomputed
    assert calls == [1.0, 3.0]


def test_a_pt_unit_is_a_torch_checkpoint_read_back_onto_the_cpu(tmp_path):
    import torch

    from paperline.train.records import finished_unit

    path = tmp_path / "model.pt"
    weights = {"w": torch.arange(3.0)}
    assert finished_unit(path, {"lr": 0.1}, lambda: weights) is weights
    saved = torch.load(path, weights_only=False)  # what a logged artifact's reader sees
    assert saved["result"]["w"].tolist() == [0.0, 1.0, 2.0] and isinstance(saved["fingerprint"], str)
    back = finished_unit(path, {"lr": 0.1}, lambda: {"w": torch.zeros(3)})
    assert back["w"].tolist() == [0.0, 1.0, 2.0] and back["w"].device.type == "cpu"


def test_a_unit_that_fails_leaves_no_record(tmp_path):
    from paperline.train.records import finished_unit

    def killed():
        raise Killed

    with pytest.raises(Killed):
        finished_unit(tmp_path / "seed0.json", {"lr": 0.1}, killed)
    assert list(tmp_path.iterdir()) == []
