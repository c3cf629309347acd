"""Where a rank runs: host, node, local rank, device, library versions, communication variables.

What a cluster validator's diagnostics script prints per rank (nccl-tests prints "Rank r Pid p
on host device d [bus id] name"), recorded in each rank's entry of the observation
(``ranks[i].environment``, ``harness/contract/observation.schema.json``) so that the
``environment`` check kind can hold the ranks against each other.

Sources, all torch's or the OS's own:

- host: ``socket.gethostname()``; node: torchrun's ``GROUP_RANK`` (the agent's rank in the
  rendezvous; 0 when the harness starts the ranks itself); local rank and local world size:
  ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE`` (torchrun), else the global rank and the world size
  (the local launcher starts every rank on this host);
- device: ``torch.cuda.get_device_properties`` (name, UUID, PCI domain:bus:device) on CUDA;
  the CPU model from /proc/cpuinfo on CPU;
- versions: ``torch.__version__``, ``torch.version.cuda``, ``torch.cuda.nccl.version()``;
- variables: every ``NCCL_*``, ``TORCH_NCCL_*`` and ``GLOO_*`` variable set, and
  ``CUDA_VISIBLE_DEVICES``.
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
    """``torch.cuda.nccl.version()`` as "2.21.5"; None on a build without NCCL."""
    if not torch.cuda.is_available():
        return None
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # a CUDA build without NCCL
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def _cuda_device(index: int) -> dict[str, Any]:
    """Name, UUID and PCI address of CUDA device ``index`` (fields torch does not expose: None)."""
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
    """This rank's environment entry (schema ``$defs/rank_environment``).

    Args:
        rank: the global rank; world_size: ranks in the world.
        device: the rank's device (``cuda:<i>`` or ``cpu``).
        backend: the process group's backend ("gloo", "nccl").
        environ: the variables to read (default ``os.environ``).

    Returns:
        ``{host, node_rank, local_rank, local_world_size, pid, torch_version, python_version,
        backend, device_type, device_index, device_name, device_uuid, device_pci_bus_id,
        cuda_version, nccl_version, cuda_visible_devices, variables}``; the CUDA fields are
        None on CPU.
    """
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
