"""The Lightning module (emg2qwerty's TDSConvCTCModule): CTC loss on windows, Adam with a linear
warm-up from 1e-8 then cosine to 1e-6, greedy CER on whole sessions (validation: the validation
users' sessions, logged as val_cer / val_ctc_loss, which the best checkpoint is chosen by)."""
from __future__ import annotations

import math
from typing import Callable, Sequence

import lightning as L
import torch
from torch import nn

from paperline.data.emg2qwerty import BLANK
from paperline.methods.splashnet.decoding import character_error_rate, greedy_decode
from paperline.methods.splashnet.features import SessionFeatures
from paperline.methods.splashnet.modules import ModelSpec, TDSConvCTC


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, lr: float, start_lr: float = 1e-8,
                  final_lr: float = 1e-6) -> float:
    """The lr at `step`: linear from start_lr to lr over warmup_steps, then cosine to final_lr."""
    if step < warmup_steps:
        return start_lr + (lr - start_lr) * step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return final_lr + 0.5 * (lr - final_lr) * (1 + math.cos(math.pi * progress))


class CTCModule(L.LightningModule):
    def __init__(self, spec: ModelSpec, lr: float, warmup_steps: int, total_steps: int, blank_bias: float = 0.0):
        super().__init__()
        self.model = TDSConvCTC(spec)
        if blank_bias:  # start in CTC's all-blank phase (config `ctc_blank_bias`)
            with torch.no_grad():
                self.model.classifier.bias[BLANK] += blank_bias
        self.ctc = nn.CTCLoss(blank=BLANK, zero_infinity=True)
        self.lr, self.warmup_steps, self.total_steps = lr, warmup_steps, total_steps
        self.history: list[tuple[int, float]] = []
        self.val_history: list[tuple[int, float]] = []  # (step, validation CER)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(inputs)

    def training_step(self, batch, batch_idx):
        emissions = self.model(batch["inputs"])
        lengths = self.model.emission_lengths(batch["input_lengths"])
        loss = self.ctc(emissions, batch["targets"], lengths, batch["target_lengths"])
        self.history.append((int(self.global_step), float(loss.detach())))
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_pairs: list[tuple[list[int], list[int]]] = []
        self._val_loss = 0.0

    def validation_step(self, batch, batch_idx):
        """Whole validation sessions (batch 1 each, as at test time)."""
        emissions = self.model(batch["inputs"])
        lengths = self.model.emission_lengths(batch["input_lengths"])
        offset = 0
        for i, n in enumerate(batch["target_lengths"].tolist()):
            reference = batch["targets"][offset:offset + n].tolist()
            hypothesis, loss = _greedy_and_ctc_loss(emissions[:int(lengths[i]), i], reference)
            self._val_pairs.append((reference, hypothesis))
            self._val_loss += loss
            offset += n

    def on_validation_epoch_end(self) -> None:
        pairs, loss = self._val_pairs, self._val_loss
        if self.trainer.world_size > 1:  # under DDP each process validated its share of the sessions
            import torch.distributed as dist

            shares: list = [None] * self.trainer.world_size
            dist.all_gather_object(shares, (pairs, loss))
            # (Lightning's sampler pads the shares to equal length: up to world − 1 sessions count twice)
            pairs, loss = [p for share, _ in shares for p in share], sum(share_loss for _, share_loss in shares)
        cer = character_error_rate(pairs)
        self.log("val_cer", cer)
        self.log("val_ctc_loss", loss / sum(len(r) for r, _ in pairs))
        self.val_history.append((int(self.global_step), cer))

    # the histories travel in Lightning's checkpoint, so a resumed run logs the whole curves
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["loss_history"] = list(self.history)
        checkpoint["val_history"] = list(self.val_history)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.history = [tuple(h) for h in checkpoint.get("loss_history", [])]
        self.val_history = [tuple(h) for h in checkpoint.get("val_history", [])]

    def on_train_epoch_start(self) -> None:
        loader = self.trainer.train_dataloader
        assert loader is not None  # the epoch's
        dataset = loader.dataset
        if hasattr(dataset, "set_epoch"):
            dataset.set_epoch(self.current_epoch)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=1.0)  # LambdaLR multiplies by this
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, self.warmup_steps, self.total_steps, self.lr))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def _greedy_and_ctc_loss(emissions: torch.Tensor, reference: list[int]) -> tuple[list[int], float]:
    """One sequence's (T, C) emissions: the greedy labels and the summed CTC loss of `reference`
    (the held-out CTC loss per label: a continuous measure while greedy CER is saturated)."""
    targets = torch.tensor(reference, dtype=torch.long, device=emissions.device)
    # the lengths as tuples (documented; the stubs say Tensor)
    loss = nn.functional.ctc_loss(emissions, targets, (len(emissions),), (len(reference),),  # type: ignore[arg-type]
                                  blank=BLANK, reduction="sum", zero_infinity=True)
    return greedy_decode(emissions), float(loss)


@torch.no_grad()
def session_cer(model: TDSConvCTC, sessions: Sequence[SessionFeatures], device: torch.device,
                beam: Callable[[torch.Tensor], list[int]] | None = None) -> dict:
    """Greedy CER over whole sessions (batch 1, the whole session at once, as at test time), and
    with `beam` (emissions -> labels: beam search with the character LM) its CER too."""
    model.eval()
    pairs, beam_pairs, loss_sum = [], [], 0.0
    for s in sessions:
        x = torch.from_numpy(s.features).to(device).unsqueeze(1)
        emissions = model(x)[:, 0].cpu()
        reference = s.key_label.tolist()  # every keystroke of the session
        hypothesis, loss = _greedy_and_ctc_loss(emissions, reference)
        pairs.append((reference, hypothesis))
        loss_sum += loss
        if beam is not None:
            beam_pairs.append((reference, beam(emissions)))
    labels = sum(len(r) for r, _ in pairs)
    out = {"cer": character_error_rate(pairs), "labels": labels, "ctc_loss_sum": loss_sum, "pairs": pairs}
    if beam is not None:
        out |= {"beam_cer": character_error_rate(beam_pairs), "beam_pairs": beam_pairs}
    return out
