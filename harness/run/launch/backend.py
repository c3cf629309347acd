"""Which process-group backend and device a real rank uses (``auto``, ``gloo``, ``nccl``)."""

from __future__ import annotations

from harness.contract.names import BACKENDS
from harness.run.launch.errors import RunError

__all__ = ["resolve_backend"]


def resolve_backend(backend: str, world_size: int, local_world_size: int | None = None) -> tuple[str, str]:
    """(process-group backend, device type) for ``backend``: ``auto`` is NCCL on CUDA when at least
    ``local_world_size`` (default ``world_size``) GPUs are visible, else gloo. Imports torch.
    Raises ValueError (not auto, gloo or nccl) or RunError (``nccl`` with too few GPUs on this node)."""
    import torch

    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend {backend!r}: expected one of {BACKENDS}")
    needed = local_world_size or world_size
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= needed else "gloo"
    if backend == "nccl":
        if torch.cuda.device_count() < needed:
            raise RunError(f"backend nccl needs {needed} GPUs (one per rank), {torch.cuda.device_count()} visible")
        return "nccl", "cuda"
    return "gloo", "cpu"
