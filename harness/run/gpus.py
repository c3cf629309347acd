"""The GPUs this process would see, and their free memory, read without creating a CUDA context.

``torch.cuda.mem_get_info(i)`` would create a context on GPU ``i`` (about half a GB, held by the
launcher and every pytest-xdist worker), so this asks, in turn: NVML (``libnvidia-ml.so.1``)
through :mod:`ctypes` (NVML API reference, "Device Queries"); ``nvidia-smi --query-gpu`` (MiB);
else None, and the caller skips what needs GPU figures. No torch import.

``CUDA_VISIBLE_DEVICES`` is applied as the CUDA runtime does (CUDA C Programming Guide, "CUDA
Environment Variables"): indices or ``GPU-`` UUID prefixes up to the first that names no device;
empty or ``-1``: none. NVML's PCI bus order is assumed to match the runtime's (true on a node of
identical GPUs). MIG instances are not resolved (None)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "Gpu",
    "compute_processes",
    "nvml_gpus",
    "parse_visible_devices",
    "smi_gpus",
    "visible_gpu_count",
    "visible_gpus",
]

MIB = 2**20

_SMI_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Gpu:
    """One physical GPU: its NVML index, UUID (``GPU-...``) and memory in bytes."""

    index: int
    uuid: str
    free_bytes: int
    total_bytes: int


class _NvmlMemory(ctypes.Structure):  # nvmlMemory_t
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def nvml_gpus(library: str = "libnvidia-ml.so.1") -> list[Gpu] | None:
    """Every GPU NVML reports (PCI bus order), or None where NVML cannot be loaded or initialized."""
    try:
        nvml = ctypes.CDLL(library)
    except OSError:
        return None
    try:
        if nvml.nvmlInit_v2() != 0:
            return None
    except AttributeError:
        return None
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        gpus = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            memory = _NvmlMemory()
            uuid = ctypes.create_string_buffer(96)
            if (
                nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0
                or nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0
                or nvml.nvmlDeviceGetUUID(handle, uuid, len(uuid)) != 0
            ):
                return None
            gpus.append(Gpu(i, uuid.value.decode(), int(memory.free), int(memory.total)))
        return gpus
    except AttributeError:  # a library without these symbols is not NVML
        return None
    finally:
        nvml.nvmlShutdown()


def smi_gpus(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> list[Gpu] | None:
    """Every GPU ``nvidia-smi`` reports, or None where it is missing, fails or prints no table."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = run(
            [exe, "--query-gpu=index,uuid,memory.free,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    gpus = []
    for line in done.stdout.splitlines():
        if not line.strip():
            continue
        try:
            index, uuid, free, total = (part.strip() for part in line.split(","))
            gpus.append(Gpu(int(index), uuid, int(float(free) * MIB), int(float(total) * MIB)))
        except ValueError:  # "[N/A]" or an unexpected layout: no figures rather than wrong ones
            return None
    return gpus


def parse_visible_devices(value: str | None, gpus: Sequence[Gpu]) -> list[Gpu] | None:
    """``gpus`` as ``CUDA_VISIBLE_DEVICES=value`` shows them, in its order; None for MIG instances."""
    if value is None:
        return list(gpus)
    visible: list[Gpu] = []
    for entry in (e.strip() for e in value.split(",")):
        if entry.startswith("MIG-"):
            return None
        if entry.lstrip("-").isdigit():
            index = int(entry)
            match = [g for g in gpus if g.index == index] if index >= 0 else []
        else:
            match = [g for g in gpus if entry and g.uuid.startswith(entry)]
        if len(match) != 1 or match[0] in visible:  # the runtime stops at the first entry naming no device
            break
        visible.append(match[0])
    return visible


def visible_gpus(
    environ: Mapping[str, str] | None = None, sources: Sequence[Callable[[], list[Gpu] | None]] | None = None
) -> list[Gpu] | None:
    """The GPUs a CUDA process started with ``environ`` (default ``os.environ``) sees, with their free
    memory now, from the first of ``sources`` that answers (default NVML, then nvidia-smi); None if none."""
    environ = os.environ if environ is None else environ
    for source in sources if sources is not None else (nvml_gpus, smi_gpus):
        gpus = source()
        if gpus is not None:
            return parse_visible_devices(environ.get("CUDA_VISIBLE_DEVICES"), gpus)
    return None


def visible_gpu_count(environ: Mapping[str, str] | None = None) -> int:
    """How many GPUs a CUDA process would see (0 where none can be found)."""
    gpus = visible_gpus(environ)
    return len(gpus) if gpus else 0


def compute_processes(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> list[tuple[int, str, int]]:
    """(pid, GPU UUID, used bytes) of every process holding a CUDA context, from
    ``nvidia-smi --query-compute-apps``; empty where nvidia-smi is missing or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        done = run(
            [exe, "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    out = []
    for line in done.stdout.splitlines() if done.returncode == 0 else ():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            used = int(float(parts[2]) * MIB)
        except ValueError:
            used = 0
        if parts[0].isdigit():
            out.append((int(parts[0]), parts[1], used))
    return out
