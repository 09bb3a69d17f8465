"""The emg2qwerty TDS-CTC model and SplashNet's changes, top to bottom (spec §b "Baseline model"
and "SplashNet changes"). Inputs are time-first features (T, N, 2 hands, 16 electrodes, F);
outputs are (T − receptive_field + 1, N, 99) log-probabilities (98 keys + the CTC blank).

- SpectrogramNorm: BatchNorm2d over the 32 (hand × electrode) channels (baseline), or
  RollingTimeNorm (RTN, no parameters; SplashNet).
- a RotationInvariantMLP per hand (baseline) or one shared by both hands (Split-and-Share).
- TDSConvEncoder: [TDSConv2dBlock + TDSFullyConnectedBlock] per entry of block_channels, no
  temporal padding. Split-and-Share runs both hands through the same blocks as 2N sequences of
  width H (LayerNorm over H) and merges them only in the final Linear(2H → 99).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from paperline.data.emg2qwerty import BLANK, ELECTRODES
from paperline.methods.splashnet.transforms import N_BANDS, N_BINS, rolling_time_norm

HANDS = 2


@dataclass(frozen=True)
class ModelSpec:
    """Everything that changes the network of a variant."""

    mlp_features: tuple[int, ...] = (384,)
    block_channels: tuple[int, ...] = (24, 24, 24, 24)
    kernel_width: int = 32
    six_bands: bool = False  # RSG: 6 summed bands instead of 33 bins
    rtn: bool = False  # RollingTimeNorm instead of BatchNorm
    share_hand_weights: bool = False  # Split-and-Share
    rtn_warmup: int = 125
    rtn_eps: float = 0.1
    num_outputs: int = BLANK + 1
    extra: dict = field(default_factory=dict)

    @property
    def freq_features(self) -> int:
        return N_BANDS if self.six_bands else N_BINS

    @property
    def receptive_field(self) -> int:
        return len(self.block_channels) * (self.kernel_width - 1) + 1


class SpectrogramNorm(nn.Module):
    """BatchNorm2d over the hand × electrode channels, statistics over (N, F, T)."""

    def __init__(self, channels: int):
        super().__init__()
        self.batch_norm = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (T, N, 2, 16, F)
        T, N, H, C, F = x.shape
        y = x.movedim(0, -1).reshape(N, H * C, F, T)
        y = self.batch_norm(y)
        return y.reshape(N, H, C, F, T).movedim(-1, 0)


class RollingTimeNorm(nn.Module):
    """RTN: causal, expanding per-(sample, hand, electrode, band) standardisation; restarts at the
    start of every input sequence (a training window or a whole test session)."""

    def __init__(self, warmup: int = 125, eps: float = 0.1):
        super().__init__()
        self.warmup, self.eps = warmup, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rolling_time_norm(x, self.warmup, self.eps)


class RotationInvariantMLP(nn.Module):
    """The input rolled by −1, 0, +1 electrodes, each copy flattened and passed through the MLP,
    then mean-pooled over the copies."""

    def __init__(self, in_features: int, mlp_features: tuple[int, ...], offsets: tuple[int, ...] = (-1, 0, 1)):
        super().__init__()
        layers: list[nn.Module] = []
        for out in mlp_features:
            layers += [nn.Linear(in_features, out), nn.ReLU()]
            in_features = out
        self.mlp = nn.Sequential(*layers)
        self.offsets = offsets

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (T, N, 16, F) -> (T, N, out)
        rolled = torch.stack([x.roll(o, dims=2) for o in self.offsets], dim=2)  # (T, N, 3, 16, F)
        return self.mlp(rolled.flatten(start_dim=3)).mean(dim=2)


class TDSConv2dBlock(nn.Module):
    """A (1 × kernel) convolution over time on features viewed as channels × width, ReLU, the
    residual of the input's cropped tail, LayerNorm over the features."""

    def __init__(self, channels: int, width: int, kernel_width: int):
        super().__init__()
        self.channels, self.width = channels, width
        self.conv2d = nn.Conv2d(channels, channels, kernel_size=(1, kernel_width))
        self.relu = nn.ReLU()
        self.layer_norm = nn.LayerNorm(channels * width)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:  # (T, N, C·W)
        T_in, N, C = inputs.shape
        x = inputs.movedim(0, -1).reshape(N, self.channels, self.width, T_in)
        x = self.relu(self.conv2d(x))
        x = x.reshape(N, C, -1).movedim(-1, 0)
        return self.layer_norm(x + inputs[-x.shape[0]:])


class TDSFullyConnectedBlock(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.fc_block = nn.Sequential(nn.Linear(num_features, num_features), nn.ReLU(),
                                      nn.Linear(num_features, num_features))
        self.layer_norm = nn.LayerNorm(num_features)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(self.fc_block(inputs) + inputs)


class TDSConvEncoder(nn.Module):
    def __init__(self, num_features: int, block_channels: tuple[int, ...], kernel_width: int):
        super().__init__()
        blocks: list[nn.Module] = []
        for channels in block_channels:
            if num_features % channels:
                raise ValueError(f"block channels {channels} do not divide the feature width {num_features}")
            blocks += [TDSConv2dBlock(channels, num_features // channels, kernel_width),
                       TDSFullyConnectedBlock(num_features)]
        self.tds_conv_blocks = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tds_conv_blocks(x)


class TDSConvCTC(nn.Module):
    """Features (T, N, 2, 16, F) -> log-probabilities (T − receptive_field + 1, N, 99)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        in_features = ELECTRODES * spec.freq_features  # 528 for 33 bins, 96 for 6 bands
        self.norm = (RollingTimeNorm(spec.rtn_warmup, spec.rtn_eps) if spec.rtn
                     else SpectrogramNorm(HANDS * ELECTRODES))
        hand_width = spec.mlp_features[-1]
        if spec.share_hand_weights:
            self.mlp = RotationInvariantMLP(in_features, spec.mlp_features)  # one MLP for both hands
            self.encoder = TDSConvEncoder(hand_width, spec.block_channels, spec.kernel_width)
        else:
            self.mlps = nn.ModuleList([RotationInvariantMLP(in_features, spec.mlp_features) for _ in range(HANDS)])
            self.encoder = TDSConvEncoder(HANDS * hand_width, spec.block_channels, spec.kernel_width)
        self.classifier = nn.Linear(HANDS * hand_width, spec.num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        T, N = x.shape[:2]
        if self.spec.share_hand_weights:
            h = self.mlp(x.transpose(1, 2).reshape(T, HANDS * N, *x.shape[3:]))  # (T, 2N, H): hand-major
            h = self.encoder(h)  # both hands through the same blocks, LayerNorm over H
            T_out = h.shape[0]
            h = h.reshape(T_out, HANDS, N, -1).transpose(1, 2).reshape(T_out, N, -1)  # hands meet here
        else:
            h = torch.cat([mlp(x[:, :, i]) for i, mlp in enumerate(self.mlps)], dim=-1)  # (T, N, 2H)
            h = self.encoder(h)
        return self.classifier(h).log_softmax(dim=-1)

    def emission_lengths(self, input_lengths: torch.Tensor) -> torch.Tensor:
        return input_lengths - (self.spec.receptive_field - 1)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def count_flops(model: TDSConvCTC, frames: int) -> int:
    """FLOPs of one forward pass over `frames` feature frames, batch 1 (torch's FlopCounterMode:
    matmuls and convolutions, 2 per multiply-add; norms and activations are not counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.zeros(frames, 1, HANDS, ELECTRODES, model.spec.freq_features)
    was_training = model.training
    model.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    model.train(was_training)
    return int(counter.get_total_flops())
