"""The CIFAR ResNet of He et al. (2016, §4.2): depth 6n+2 (ResNet-20: n = 3, ResNet-110: n = 18).

A 3×3 conv to 16 channels, three stages of n basic blocks at 16, 32, 64 channels (the first
block of stages 2 and 3 halves the resolution), global average pooling, a linear classifier.
Shortcuts are option A of the paper: identity, and where the shape changes a stride-2
subsample zero-padded to the new width (no parameters).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, in_channels: int, channels: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.stride, self.pad = stride, channels - in_channels

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1 and self.pad == 0:
            return x
        x = x[:, :, ::self.stride, ::self.stride]
        return F.pad(x, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, depth: int = 20, num_classes: int = 10):
        super().__init__()
        if (depth - 2) % 6:
            raise ValueError(f"a CIFAR ResNet has depth 6n+2, got {depth}")
        n = (depth - 2) // 6
        self.conv = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        blocks, channels = [], 16
        for width, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(n):
                blocks.append(BasicBlock(channels, width, stride if i == 0 else 1))
                channels = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.conv(x)))
        x = self.blocks(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))
