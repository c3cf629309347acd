"""The backend string a real rank's process group is made with, and the backend it records.

Under ``CPUOffloadPolicy`` some collectives run on CPU tensors, which a plain ``"nccl"`` group
refuses; ``"cuda:nccl,cpu:gloo"`` routes each by its tensors' device, as torchtitan's does.
"""

from __future__ import annotations

__all__ = ["group_backend", "device_backend"]

OFFLOAD_NCCL = "cuda:nccl,cpu:gloo"


def group_backend(backend: str, offloads: bool) -> str:
    """``"cuda:nccl,cpu:gloo"`` for "nccl" when a unit may offload (``offloads``), else ``backend``."""
    return OFFLOAD_NCCL if backend == "nccl" and offloads else backend


def device_backend(group: str, device_type: str) -> str:
    """The backend of ``group`` (as ``dist.get_backend()`` names it) serving ``device_type``: what the
    observation records. ValueError: a device list without ``device_type``."""
    if ":" not in group:
        return group
    served = dict(part.split(":", 1) for part in group.split(","))
    if device_type not in served:
        raise ValueError(f"process group backend {group!r} serves no {device_type!r} device")
    return served[device_type]
