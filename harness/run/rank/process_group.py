"""The backend string a real rank's process group is made with, and the backend it records.

With ``CPUOffloadPolicy`` on NCCL ranks the sharded parameters, gradients and optimizer states
live on the CPU, and some collectives then run on CPU tensors: ``clip_grad_norm_``'s all-reduce
of the offloaded gradients' norms, ``full_tensor()`` of an offloaded shard (the state-dict round
trip, the update comparisons). A plain ``"nccl"`` group refuses CPU tensors; a group made with
``"cuda:nccl,cpu:gloo"`` routes each collective by its tensors' device, as torchtitan's does
when it offloads. Torch-free.
"""

from __future__ import annotations

__all__ = ["group_backend", "device_backend"]

OFFLOAD_NCCL = "cuda:nccl,cpu:gloo"


def group_backend(backend: str, offloads: bool) -> str:
    """What ``init_process_group`` is given for ``backend`` ("gloo" or "nccl", as
    :func:`harness.run.launch.backend.resolve_backend` chose it): ``"cuda:nccl,cpu:gloo"`` for
    NCCL when ``offloads`` (a unit of the setup may take a ``CPUOffloadPolicy``), else
    ``backend`` itself."""
    return OFFLOAD_NCCL if backend == "nccl" and offloads else backend


def device_backend(group: str, device_type: str) -> str:
    """The backend of ``group`` (what ``dist.get_backend()`` returns: "gloo", "nccl", "fake" or
    a ``"device:backend,..."`` list) that serves ``device_type`` ("cpu", "cuda"): what the
    observation records ("nccl" for a ``"cuda:nccl,cpu:gloo"`` group on CUDA ranks).

    Raises:
        ValueError: a device list without ``device_type``.
    """
    if ":" not in group:
        return group
    served = dict(part.split(":", 1) for part in group.split(","))
    if device_type not in served:
        raise ValueError(f"process group backend {group!r} serves no {device_type!r} device")
    return served[device_type]
