"""Where a rank runs: host, node, local rank, device, library versions, communication variables.

Recorded in ``ranks[i].environment`` so that the ``environment`` check can hold the ranks against
each other.
"""

from __future__ import annotations

import os
import platform
import socket
from typing import Any, Mapping

import torch

from harness.run.rank.local_placement import local_placement

__all__ = ["VARIABLE_PREFIXES", "rank_environment", "communication_variables", "cpu_name"]

VARIABLE_PREFIXES: tuple[str, ...] = ("NCCL_", "TORCH_NCCL_", "GLOO_")
"""Environment variables that steer the collectives, recorded per rank when set."""


def communication_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``NCCL_*``, ``TORCH_NCCL_*`` and ``GLOO_*`` variables of ``environ``, sorted by name."""
    return {k: environ[k] for k in sorted(environ) if k.startswith(VARIABLE_PREFIXES)}


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (no subprocess), else the machine type."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or "cpu"


def _nccl_version() -> str | None:
    """``torch.cuda.nccl.version()`` as "2.21.5"; None without NCCL."""
    if not torch.cuda.is_available():
        return None
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # a CUDA build without NCCL
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def _cuda_device(index: int) -> dict[str, Any]:
    """Name, UUID and PCI address of CUDA device ``index`` (None where torch does not expose one)."""
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    bus = getattr(props, "pci_bus_id", None)
    pci = None
    if bus is not None:
        pci = f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
    return {
        "device_name": str(props.name),
        "device_uuid": f"GPU-{uuid}" if uuid is not None else None,
        "device_pci_bus_id": pci,
    }


def rank_environment(
    rank: int, world_size: int, device: torch.device, backend: str, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """This rank's entry (schema ``$defs/rank_environment``) from torch, the OS and ``environ``
    (default ``os.environ``); CUDA fields are None on CPU."""
    env = os.environ if environ is None else environ
    placement = local_placement(env, rank, world_size)  # torchrun's, Slurm's or Open MPI's variables
    out: dict[str, Any] = {
        "host": socket.gethostname(),
        "node_rank": int(env.get("GROUP_RANK", 0)),
        "local_rank": placement["local_rank"],
        "local_world_size": placement["local_world_size"],
        "pid": os.getpid(),
        "torch_version": str(torch.__version__),
        "python_version": platform.python_version(),
        "backend": backend,
        "device_type": device.type,
        "device_index": device.index if device.type == "cuda" else None,
        "device_name": cpu_name(),
        "device_uuid": None,
        "device_pci_bus_id": None,
        "cuda_version": torch.version.cuda,
        "nccl_version": _nccl_version(),
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
        "variables": communication_variables(env),
    }
    if device.type == "cuda":
        out.update(_cuda_device(device.index if device.index is not None else torch.cuda.current_device()))
    return out
