"""What a rank will do, decided up front from the setup and the world: :func:`plan_rank`.

Pure, no torch objects: every combination is tested without a rank (``tests/unit/run/test_rank_plan.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.contract.instrument_names import chosen_instruments

__all__ = ["MODES", "INITS", "NUMERICS", "RankPlan", "plan_rank"]

MODES = ("real", "simulated")
"""``real``: a process of a gloo/NCCL world; ``simulated``: the fake process group under ``FakeTensorMode``."""

INITS = ("full", "meta", "local")
"""How the weights come to be (``setup.init``): "full" builds the full model on every rank; "meta"
builds on meta, shards, then fills each rank's shards with the full init's values; "local": meta,
each rank drawing its own shards."""

NUMERICS = ("off", "rank_0", "each_rank", "schedule")
"""What the sharded step is compared with: nothing; one replica on rank 0 (one step); a replica on
each rank (one step); each rank's single-process reference of the whole schedule."""


@dataclass(frozen=True)
class RankPlan:
    """One rank's decisions: ``mode``, ``init`` and ``numerics`` (of :data:`MODES`, :data:`INITS`,
    :data:`NUMERICS`; simulated: the real rank's init, numerics "off"); ``meta_init``: a real rank
    builds on meta; ``rows``: (first, stop) of its samples in the global batch ((0, B) simulated);
    ``param_updates``: record each step's updates; ``instruments``: those the rank runs."""

    mode: str
    init: str
    numerics: str
    meta_init: bool
    rows: tuple[int, int]
    param_updates: bool
    instruments: frozenset[str] = frozenset()

    @property
    def simulated(self) -> bool:
        return self.mode == "simulated"


def plan_rank(setup: Any, rank: int, world_size: int, *, simulated: bool = False) -> RankPlan:
    """The plan of rank ``rank`` of ``world_size`` running ``setup`` (a ``harness.load.setup.RunSetup``).

    ``init`` defaults to "meta" where one replica on rank 0 checks the numerics, "full" where every rank
    does, else "local" (a full model on every rank at once would not fit here for Qwen3-0.6B on 8
    ranks). Without the ``numerics`` instrument numerics are "off", ``init`` unchanged. ValueError where
    ``world_size`` is not the setup's or ``setup.instruments`` names an unknown instrument."""
    if world_size != setup.world_size:
        raise ValueError(
            f"world size {world_size} but setup.mesh.shape {list(setup.mesh_shape)} needs {setup.world_size}"
        )
    schedule = setup.schedule
    instruments = chosen_instruments(getattr(setup, "instruments", None))
    if not setup.numerics:
        real_numerics = "off"
    elif schedule is not None:
        real_numerics = "schedule"
    else:
        real_numerics = "rank_0" if setup.numerics_reference == "rank_0" else "each_rank"
    # a simulated rank's init is the real rank's: what it records stands for that (fully_shard_calls);
    # switching the replica off leaves the init as the setup asks (the weights stay the same)
    init = setup.init or {"rank_0": "meta", "off": "local"}.get(real_numerics, "full")
    if "numerics" not in instruments:
        real_numerics = "off"
    numerics = "off" if simulated else real_numerics
    B = setup.batch_per_rank
    return RankPlan(
        mode="simulated" if simulated else "real",
        init=init,
        numerics=numerics,
        meta_init=not simulated and init != "full",
        rows=(0, B) if simulated else (setup.data_rank(rank) * B, (setup.data_rank(rank) + 1) * B),
        param_updates=schedule is not None
        and not simulated
        and ("updates" in instruments or real_numerics == "schedule"),
        instruments=instruments,
    )
