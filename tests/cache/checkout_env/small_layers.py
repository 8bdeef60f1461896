"""A "library" of the two-checkouts test: copied to a folder standing for a virtual
environment (on ``PYTHONPATH``, a base directory through ``FASTLOWER_CACHE_BASE_DIR``)."""

import torch


class ScaledSum(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * 2.0 + y
