"""Small modules the unit tests of plan and apply both lower."""

from __future__ import annotations

import torch
from torch import nn


class AddChain(nn.Module):
    """add(x, y) -> mul(., k) -> sub(., y) -> add_1(., k); ``k`` a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("k", torch.full((2,), 3.0))

    def forward(self, x, y):
        return (((x + y) * self.k) - y) + self.k
