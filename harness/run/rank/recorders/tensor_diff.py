"""How far a rank's tensor is from its reference's: the one comparison of the numerics and update recorders.

The two sides may live on different devices: a gradient shard offloaded to the CPU
(``CPUOffloadPolicy``) against reference rows computed on the GPU, or the reverse. Both are
brought to the CPU in float64 before they are subtracted, so the comparison never mixes
devices (CUDA refuses ``cuda - cpu`` for tensors that are not 0-dim) and its float64 copies never
take GPU memory.
"""

from __future__ import annotations

import torch

__all__ = ["on_one_device", "max_abs_diff"]


def on_one_device(actual: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``actual`` and ``expected`` as float64 CPU tensors (copies; the inputs are left as they are)."""
    return actual.detach().to("cpu", torch.float64), expected.detach().to("cpu", torch.float64)


def max_abs_diff(actual: torch.Tensor, expected: torch.Tensor, against: str = "the reference's") -> dict[str, float]:
    """``{"max_abs_diff": max |actual - expected|, "max_abs_ref": max |expected|}`` (0.0 each when empty).

    Args:
        actual, expected: tensors of one shape, any dtypes, any devices.
        against: how an error names ``expected`` ("the replica's").

    Raises:
        ValueError: the shapes differ ("shape [2, 3] is compared with the replica's [4, 3]").
    """
    if actual.shape != expected.shape:
        raise ValueError(f"shape {list(actual.shape)} is compared with {against} {list(expected.shape)}")
    if actual.numel() == 0:
        return {"max_abs_diff": 0.0, "max_abs_ref": 0.0}
    a, e = on_one_device(actual, expected)
    return {"max_abs_diff": float((a - e).abs().max()), "max_abs_ref": float(e.abs().max())}
