"""Loading a saved model state with an error that names the file and the first key that does not
fit (missing, unexpected, or of another shape), instead of torch's list of every mismatch."""
from __future__ import annotations

from pathlib import Path

from paperline.io import DataError


class CheckpointError(DataError):
    """A checkpoint that is missing or does not fit the model it is loaded into."""


def load_checked_state(model, state: dict, source: str) -> None:
    ours = model.state_dict()
    for key, tensor in ours.items():
        if key not in state:
            raise CheckpointError(f"{source}: checkpoint has no {key!r}: not this model's")
        if tuple(state[key].shape) != tuple(tensor.shape):
            raise CheckpointError(f"{source}: {key} has shape {tuple(state[key].shape)}, the model's is "
                                  f"{tuple(tensor.shape)} (another configuration?)")
    extra = sorted(set(state) - set(ours))
    if extra:
        raise CheckpointError(f"{source}: unexpected key {extra[0]!r}: not this model's")
    model.load_state_dict(state)


def load_trained(model, path: str | Path) -> None:
    """The model weights of a training checkpoint (paperline.train.checkpoint's layout)."""
    from paperline.train.checkpoint import load_checkpoint

    ckpt = load_checkpoint(path)
    if ckpt is None:
        raise CheckpointError(f"{path}: no such checkpoint (train the model first)")
    try:
        state = ckpt["state"]["model"]
    except (KeyError, TypeError):
        raise CheckpointError(f"{path}: not a training checkpoint (no state.model)") from None
    load_checked_state(model, state, str(path))
