"""Where a rank sits on its node, as its launcher says: its local rank (which GPU it drives) and how
many ranks share the node, from torchrun's, Slurm's or Open MPI's variables; else one node. No torch."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["LOCAL_RANK_VARIABLES", "LOCAL_SIZE_VARIABLES", "device_ordinal_problem", "local_placement"]

LOCAL_RANK_VARIABLES: tuple[str, ...] = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK")
"""The variables giving a rank's index on its node, in the order read (torchrun, Slurm, Open MPI)."""

LOCAL_SIZE_VARIABLES: tuple[str, ...] = ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE")
"""The variables giving how many ranks share a node, in the order read (torchrun, Slurm, Open MPI)."""


def local_placement(env: Mapping[str, str], rank: int, world_size: int) -> dict[str, int | str]:
    """``{"local_rank", "local_world_size", "local_rank_variable"}`` from the first variable set, else
    ``rank``, ``world_size`` and "RANK"; ValueError naming a variable that is not a whole number."""
    local_rank, rank_variable = _first(env, LOCAL_RANK_VARIABLES, rank, "RANK")
    local_world_size, _ = _first(env, LOCAL_SIZE_VARIABLES, world_size, "WORLD_SIZE")
    return {"local_rank": local_rank, "local_world_size": local_world_size, "local_rank_variable": rank_variable}


def device_ordinal_problem(local_rank: int, visible: int, variable: str) -> str | None:
    """Why GPU ``local_rank`` of ``visible`` cannot be this rank's (``variable`` gave it), or None. An
    ordinal at or beyond the visible count is a mislaunch: more ranks per node than GPUs, or
    CUDA_VISIBLE_DEVICES narrowed to one GPU per process while the index counts the node's."""
    if 0 <= local_rank < visible:
        return None
    return (
        f"{variable}={local_rank} names GPU {local_rank}, but this process sees {visible} "
        f"(device_count(), after CUDA_VISIBLE_DEVICES): one visible GPU per rank, so launch at most "
        f"{visible} ranks per node, each seeing all of the node's GPUs"
    )


def _first(env: Mapping[str, str], names: tuple[str, ...], default: int, default_name: str) -> tuple[int, str]:
    for name in names:
        if name in env:
            try:
                return int(env[name]), name
            except ValueError:
                raise ValueError(f"{name}={env[name]!r}: expected a whole number") from None
    return default, default_name
