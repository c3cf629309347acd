"""What keeps a spec from running on this machine, decided before anything runs.

One answer for ``run``, ``render`` and the pytest plugin: a spec whose every entry is gated out by
the running torch (:meth:`harness.load.spec.Spec.skip_reason`), or on ``nccl`` with fewer visible
GPUs than ranks on this node, is skipped whole with the reason. A single gated entry is skipped by
the judge (``harness.judge.evaluate``)."""

from __future__ import annotations

from typing import Any

from harness.contract.names import torch_build_of

__all__ = ["running_torch", "spec_gate", "gpu_gate"]


def running_torch() -> tuple[str, str]:
    """(``torch.__version__``, "cpu" or "cuda") of the torch this process imports; the import is made
    with signals held (docs/command-line.md, "Signals and the rank processes")."""
    from harness.run.launch.held_signals import signals_held

    with signals_held():
        import torch

    return torch.__version__, torch_build_of(torch.version.cuda)


def gpu_gate(backend: str, world_size: int, gpus: int) -> str | None:
    """Why ``world_size`` ranks on ``backend`` cannot start with ``gpus`` visible GPUs (nccl takes one
    per rank on this node); None when they can."""
    if backend != "nccl":
        return None
    from harness.run.launch.joined import joined_world

    world = joined_world()
    needed = int(world["local_world_size"]) if world else world_size
    if gpus >= needed:
        return None
    return f"needs {needed} GPUs for nccl (one per rank); {gpus} visible"


def spec_gate(spec: Any, backend: str, gpus: int | None = None) -> str | None:
    """Why ``spec`` is skipped whole on ``backend``: the running torch's version or build, then the GPUs
    nccl needs (``gpus``: counted through NVML when None). None: run it."""
    reason = spec.skip_reason(*running_torch())
    if reason is not None or backend != "nccl":
        return reason
    if gpus is None:
        from harness.run.gpus import visible_gpu_count

        gpus = visible_gpu_count()
    return gpu_gate(backend, spec.setup.world_size, gpus)
