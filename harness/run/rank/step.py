"""One rank's FSDP2 training step, as a :class:`~harness.load.setup.RunSetup` describes it, observed.

:func:`run_step` plans the rank, then builds, makes the numerics reference, shards, enters the
instruments, runs the steps and makes the rank's entry, each stage in its own module
(docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Callable

import torch

from harness.contract.instrument_names import memory_tracker_blocker
from harness.load.setup import RunSetup
from harness.run.rank.body import RankBody, Trained
from harness.run.rank.build import attention_kernel, make_optimizer
from harness.run.rank.expert_parallel import apply_expert_parallel, unit_meshes
from harness.run.rank.instruments import Instruments, trace_device_activity
from harness.run.rank.loop import run_steps
from harness.run.rank.observe import compile_counts, environment, error_result, where_after_step
from harness.run.rank.parallelize import (
    ShardUnit,
    apply_fsdp,
    comm_ctx_ids,
    comm_ctx_owners,
    replicate_on_mesh,
    share_units_comm_ctx,
    unit_state,
    units_from_setup,
)
from harness.run.rank.plan import plan_rank
from harness.run.rank.recorders.collectives import dtype_name
from harness.run.rank.recorders.numerics import compare
from harness.run.rank.recorders.updates import ParamUpdates
from harness.run.rank.references import numerics_references
from harness.run.rank.strategies import RealRank, SimulatedRank, strategy_for
from harness.run.rank.tensor_parallel import apply_tensor_parallel, fsdp_mesh

__all__ = ["run_step", "RankStep"]


def spmd_steps(setup: RunSetup) -> contextlib.AbstractContextManager:
    """Under ``fsdp.dp_mesh_dims`` the steps run as full SPMD DTensor code: DTensor's
    ``implicit_replication`` takes the plain inputs and buffers (RoPE's tables) as replicated."""
    if setup.fsdp.dp_mesh_dims is None:
        return contextlib.nullcontext()
    from torch.distributed.tensor.experimental import implicit_replication

    return implicit_replication()


def run_step(
    setup: RunSetup,
    rank: int,
    world_size: int,
    device_type: str,
    *,
    simulated: bool = False,
    on_phase: Callable[[str], None] | None = None,
    collective_log: Any = None,
    trace_dir: str | None = None,
    checkpoint_dir: str | None = None,
) -> dict[str, Any]:
    """Run and record one rank's step; the default process group must be initialized.

    ``device_type``: "cpu" or "cuda" (the current device is this rank's GPU). ``simulated``: the fake
    process group is active (``FakeTensorMode``, no numerics). ``on_phase``: called with each phase
    name as it starts. ``collective_log``: told of each collective entered and completed
    (``harness.run.launch.hang``), or None. ``trace_dir``: a folder for the profiler's Chrome trace,
    ``rank<rank>.json``. ``checkpoint_dir``: a folder every rank shares for the state-dict round trip;
    None: rank 0 makes one. Returns ``{"entry", "fsdp_units", "environment"}``. ValueError where
    ``world_size`` is not the setup's, or for an unknown body or optimizer."""
    # MKL's conditional numerical reproducibility: without it a CPU matmul's last bit depends on
    # its operands' memory alignment, so the same chunk through the same replica could differ
    # by one float32 ulp from run to run (numerics fields would vary). Read at MKL's first call;
    # a value the user exported wins.
    os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
    t_start = time.perf_counter()
    plan = plan_rank(setup, rank, world_size, simulated=simulated)
    body = RankStep(setup, plan, rank, device_type, on_phase, collective_log, checkpoint_dir, trace_dir is not None)
    strategy = strategy_for(plan.mode)
    try:
        trained = body.train(strategy)
        t_observe = time.perf_counter()
        pieces, numerics = body.observe(trained, trace_dir)
    except Exception as exc:
        if not setup.record_errors:
            raise
        return error_result(
            exc, body.phases, body.got, rank, body.coords, t_start, environment(device_type, body.device)
        )
    return body.result(strategy, trained, pieces, numerics, observe_s=time.perf_counter() - t_observe, t_start=t_start)


class RankStep(RankBody):
    """The stages run on a :class:`RankBody`'s state: train, observe, the result."""

    def train(self, strategy: RealRank | SimulatedRank) -> Trained:
        """Build, reference, shard, instrument, run the steps; the recorders have stopped on return."""
        setup, phases = self.setup, self.phases
        with contextlib.ExitStack() as stack:
            with phases.phase("setup"):
                root = strategy.build(self)
                self.hooks.call("after_build", model=root)
            shard_units = units_from_setup(setup, root)
            references = numerics_references(self, root, shard_units)
            with phases.phase("setup"):  # outside the recorders: TP scatters nothing (src_data_rank=None)
                apply_tensor_parallel(root, self.mesh, setup)
                apply_expert_parallel(root, self.mesh, setup)
                if setup.fsdp.dp_mesh_dims is not None:
                    replicate_on_mesh(root, self.mesh)
            instruments = self.got["instruments"] = Instruments(
                phases,
                self.group_dims,
                self.collective_log,
                track_memory=setup.track_memory and memory_tracker_blocker(setup.to_dict()) is None,
                device_activity=trace_device_activity(self.tracing, self.device_type),
                instruments=self.plan.instruments,
            )
            strategy.before_sharding(self, stack, instruments)
            # a simulated rank's storage is the harness's choice: record what a real rank would hold
            stands_for = ("meta" if self.plan.init != "full" else self.device.type) if self.plan.simulated else None
            instruments.before_fully_shard(root, device=stands_for)

            def after_each(unit: ShardUnit, module: torch.nn.Module) -> None:
                # what the call did, before the spec's hook can change anything
                instruments.after_fully_shard(unit.path, root)
                self.hooks.call("after_fully_shard", model=root, unit=unit.path or "root", module=module)

            with phases.phase("setup"):
                units = self.got["units"] = apply_fsdp(
                    root,
                    fsdp_mesh(setup, self.mesh),
                    shard_units,
                    unit_mesh=unit_meshes(setup, self.mesh, self.world_mesh),
                    dp_mesh_dims=setup.fsdp.dp_mesh_dims,
                    materialize=self._materializer(),
                    forward_prefetch=setup.fsdp.forward_prefetch,
                    backward_prefetch=setup.fsdp.backward_prefetch,
                    freeze=setup.freeze.params,
                    freeze_after=setup.freeze.after_fully_shard,
                    grad_dtypes=setup.grad_dtype,
                    after_each=after_each,
                    call_hook=self.hooks.call_named,
                )
            self.comm_ctx_made_by = comm_ctx_ids(units)  # each unit's own, before any sharing
            if setup.fsdp.share_comm_ctx:
                share_units_comm_ctx(units, setup.fsdp.share_comm_ctx)
            self.comm_ctx_at_setup = comm_ctx_owners(units, self.comm_ctx_made_by)  # before the root's lazy init
            strategy.after_sharding(self, stack, instruments, root)
            with phases.phase("setup"):
                optimizer = make_optimizer(setup, root.parameters())
                sharded = list(root.named_parameters())
            updates = (
                ParamUpdates(root, setup.shard_count, setup.shard_index(self.coords))
                if self.plan.param_updates
                else None
            )
            with (
                instruments.observing(root, optimizer, units, inputs=(self.inputs.tensor,), updates=updates),
                attention_kernel(setup.model.attention_kernel),
                spmd_steps(setup),
            ):
                outcome = run_steps(self.steps, root, self.loss_fn, optimizer, phases, instruments, self.hooks)
        return Trained(root, shard_units, units, optimizer, sharded, instruments, references, updates, outcome)

    def observe(self, trained: Trained, trace_dir: str | None) -> tuple[dict[str, Any], Any]:
        """(the recorders' pieces of the entry, the numerics comparison or None)."""
        pieces = trained.instruments.pieces()
        where_after_step(pieces["params"], trained.sharded, trained.optimizer)
        if trace_dir is not None:  # the profiler's Chrome trace of this rank's step (report/trace.py merges them)
            trained.instruments.profiler.export_chrome_trace(os.path.join(trace_dir, f"rank{self.rank}.json"))
        reference, schedule_ref = trained.references
        outcome = trained.outcome
        # SGD and AdamW read .grad and leave it as backward left it: comparing after the
        # step is comparing the reduce-scattered gradients (kept out of the memory tracker).
        numerics = (
            compare(reference, trained.root, outcome.output, outcome.loss, params=trained.sharded)
            if reference is not None
            else None
        )
        if schedule_ref is not None:
            numerics = schedule_ref.numerics(trained.updates.params, outcome.output, outcome.loss)
            trained.updates.against(schedule_ref)
            for norm in pieces["grad_norms"]:
                norm["reference"] = schedule_ref.grad_norms.get(norm["step_index"])
                norm["reference_clip_coef"] = schedule_ref.clip_coefs.get(norm["step_index"])
                norm["shard_reference"] = schedule_ref.shard_norms.get(norm["step_index"])
        return pieces, numerics

    def result(
        self,
        strategy: RealRank | SimulatedRank,
        trained: Trained,
        pieces: dict[str, Any],
        numerics: Any,
        *,
        observe_s: float,
        t_start: float,
    ) -> dict[str, Any]:
        """``run_step``'s result: the entry, the FSDP units' states, the environment."""
        output = trained.outcome.output
        entry = {
            "rank": self.rank,
            "coords": self.coords,
            "input": self.inputs.describe(),
            **pieces,
            "numerics": numerics,
            "output": {
                "shape": list(output.shape),
                "dtype": dtype_name(output.dtype),
                "loss_dtype": dtype_name(trained.outcome.loss.dtype),
            },
        }
        entry.update(strategy.after_step(self, trained, pieces["collectives"]))
        entry["timings_s"] = {**self.phases.timings_s, "observe": observe_s, "total": time.perf_counter() - t_start}
        if self.setup.record_errors:
            entry["error"] = None
        if self.hooks.has("observe"):
            entry["custom"] = self.hooks.records
        if any(u.after is not None and u.after.compile for u in trained.shard_units):
            entry["compile"] = compile_counts()
        owners = comm_ctx_owners(trained.units, self.comm_ctx_made_by)
        fsdp_units = [
            {
                **u.describe(),
                "state": {
                    **unit_state(u),
                    "comm_ctx_unit": owners[u.name],
                    "comm_ctx_unit_at_setup": self.comm_ctx_at_setup.get(u.name),
                },
            }
            for u in trained.units
        ]
        return {"entry": entry, "fsdp_units": fsdp_units, "environment": environment(self.device_type, self.device)}
