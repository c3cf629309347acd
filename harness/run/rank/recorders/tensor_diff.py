"""How far a rank's tensor is from its reference's, in float64 on the CPU: the two may be on
different devices (a CPU-offloaded shard against GPU rows).
"""

from __future__ import annotations

import torch

__all__ = ["on_one_device", "max_abs_diff"]


def on_one_device(actual: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``actual`` and ``expected`` as float64 CPU tensors (copies; the inputs are left as they are)."""
    return actual.detach().to("cpu", torch.float64), expected.detach().to("cpu", torch.float64)


def max_abs_diff(actual: torch.Tensor, expected: torch.Tensor, against: str = "the reference's") -> dict[str, float]:
    """``max_abs_diff`` and ``max_abs_ref`` of ``actual`` against ``expected`` (0.0 when empty);
    ValueError on other shapes."""
    if actual.shape != expected.shape:
        raise ValueError(f"shape {list(actual.shape)} is compared with {against} {list(expected.shape)}")
    if actual.numel() == 0:
        return {"max_abs_diff": 0.0, "max_abs_ref": 0.0}
    a, e = on_one_device(actual, expected)
    return {"max_abs_diff": float((a - e).abs().max()), "max_abs_ref": float(e.abs().max())}
