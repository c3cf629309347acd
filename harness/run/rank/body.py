"""What every stage of a rank's step reads (:class:`RankBody`) and what the steps leave (:class:`Trained`),
apart from ``harness.run.rank.step`` so that the stages' modules can name them without a cycle."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch

import model as qwen3
from harness.load.setup import RunSetup
from harness.run.rank.aux_loss import with_router_aux_loss
from harness.run.rank.build import make_inputs, make_loss, torch_dtype
from harness.run.rank.expert_parallel import world_mesh
from harness.run.rank.hooks import load_hooks
from harness.run.rank.instruments import Instruments
from harness.run.rank.loop import StepOutcome
from harness.run.rank.observe import group_dims
from harness.run.rank.parallelize import ShardUnit, build_mesh, init_local_shards, init_shards_like_full
from harness.run.rank.plan import RankPlan
from harness.run.rank.recorders.phases import Phases
from harness.run.rank.recorders.updates import ParamUpdates
from harness.run.rank.step_plan import forward_count, global_batches, loss_function, step_plan
from harness.run.rank.tensor_parallel import sequence_parallel_loss

__all__ = ["RankBody", "Trained"]


@dataclass
class Trained:
    """What the steps left: the sharded model and its parts, the instruments, the references."""

    root: torch.nn.Module
    shard_units: list[ShardUnit]
    units: list[Any]
    optimizer: torch.optim.Optimizer
    sharded: list[tuple[str, torch.Tensor]]  # the shards, whatever the module holds later
    instruments: Instruments
    references: tuple[Any, Any]  # (one-step reference, schedule reference), None where not planned
    updates: ParamUpdates | None
    outcome: StepOutcome


class RankBody:
    """One rank's step as its plan says: what every stage reads (setup, plan, device, mesh, phases).
    ``got`` holds what exists so far, for a recorded error; the mesh is built first, outside any
    ``FakeTensorMode``."""

    def __init__(
        self,
        setup: RunSetup,
        plan: RankPlan,
        rank: int,
        device_type: str,
        on_phase: Callable[[str], None] | None,
        collective_log: Any,
        checkpoint_dir: str | None,
        tracing: bool = False,
    ) -> None:
        self.setup, self.plan, self.rank, self.world_size = setup, plan, rank, setup.world_size
        self.tracing = tracing  # --trace: the profiler also records the device's activity
        self.collective_log, self.checkpoint_dir = collective_log, checkpoint_dir
        self.phases = Phases(sync=torch.cuda.synchronize if device_type == "cuda" else None, on_enter=on_phase)
        self.device_type = device_type
        self.device = (
            torch.device("cuda", torch.cuda.current_device()) if device_type == "cuda" else torch.device("cpu")
        )
        self.dtype = torch_dtype(setup.model.dtype)
        self.config = qwen3.get_config(setup.model.config, **dict(setup.model.overrides))
        self.mesh = build_mesh(setup, device_type)
        self.world_mesh = world_mesh(setup, device_type)  # expert_parallel: the non-expert units' 1-D mesh
        self.group_dims = group_dims(setup, self.mesh, self.world_mesh)
        self.coords = [int(c) for c in self.mesh.get_coordinate()]
        schedule = setup.schedule
        self.hooks = load_hooks(setup.hooks, rank, self.world_size)  # the spec's own functions (setup.hooks)
        base_loss = self.hooks.loss() or (
            make_loss(setup.model.body) if schedule is None else loss_function(schedule.loss_for(setup.model.body))
        )
        self.loss_fn = sequence_parallel_loss(  # a MoE config's output_router_logits; a sequence-parallel share
            with_router_aux_loss(base_loss, self.config), setup
        )
        self.got: dict[str, Any] = {}
        # unit -> the unit whose state made the comm context it holds before the root's lazy init;
        # the ids of the contexts the units made (FSDP makes no other later)
        self.comm_ctx_at_setup: dict[str, str | None] = {}
        self.comm_ctx_made_by: dict[int, str] = {}
        self.inputs: Any = None
        self.batches: list[torch.Tensor] | None = None
        self.steps: Any = None

    def make_inputs(self) -> None:
        """This rank's inputs, the schedule's global batches (None without one) and the step plan."""
        setup, simulated = self.setup, self.plan.simulated
        B, rows = setup.batch_per_rank, slice(*self.plan.rows)
        self.inputs = self.got["inputs"] = make_inputs(
            setup, self.config, self.rank, self.world_size, self.dtype, self.device, local_only=simulated
        )
        if setup.schedule is not None:
            self.batches = global_batches(
                setup, self.config, self.dtype, forward_count(setup.schedule), rows=B if simulated else None
            )
        self.steps = step_plan(
            setup, self.inputs.tensor, lambda n: [b[rows].clone().to(self.device) for b in self.batches]
        )

    def _materializer(self) -> Callable[..., Any] | None:
        """How ``apply_fsdp`` gives a meta-built model its shards' values; None for a full init
        and for a simulated rank (no values: ``harness.run.rank.fake`` gives it fake storage)."""
        if self.plan.simulated:
            return None
        if self.plan.init == "meta":
            return functools.partial(
                init_shards_like_full, device=self.device, seed=self.setup.seed, repair=self.setup.init_repair
            )
        if self.plan.meta_init:
            return functools.partial(
                init_local_shards,
                device=self.device,
                std=self.config.initializer_range,
                seed=self.setup.seed,
                rank=self.rank,
            )
        return None
