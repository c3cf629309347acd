"""One rank's FSDP2 training step, as a :class:`~harness.load.setup.RunSetup` describes it, observed.

Given an initialized default process group (gloo, NCCL or the fake one), :func:`run_step`
decides the rank's plan (``harness.run.rank.plan.plan_rank``: real or simulated, the init, the
numerics) and then goes through the stages, each in its own module:

1. build (``harness.run.rank.build``): the model with the setup's seed, identically on every rank
   (same full weights), in ``setup.model.dtype`` at construction (with ``setup.numerics`` off:
   on the meta device, materialized after ``fully_shard`` with only this rank's shards); the
   global batch (seeded) and this rank's samples ``r*B .. r*B+B-1``; the loss; the optimizer;
2. the numerics reference, if the plan has one (``harness.run.rank.references``, phase replica);
3. shard (``harness.run.rank.parallelize``): the device mesh and ``fully_shard`` on each decoder
   layer, then on the root (the walkthrough's section "FSDP2 设置"); a 2-D mesh is HSDP;
4. instruments (``harness.run.rank.instruments``): the recorders, entered in their one working order,
   those of the instruments ``setup.instruments`` names (every one by default);
5. steps (``harness.run.rank.loop``): the steps of ``harness.run.rank.step_plan.step_plan``, phases marked;
   with a schedule and numerics each step's parameter updates are compared with the
   schedule's single-process reference;
6. observation (``harness.run.rank.observe``): the rank's entry; a real rank then adds, after
   the recorders have stopped, the state-dict round trip (phase ``state_dict``), the bandwidth
   rows (phase ``bandwidth``) and its host and device.

A real and a simulated rank differ only where ``harness.run.rank.strategies`` says: a simulated
rank (the fake backend) shards a model without data, then runs inside ``FakeTensorMode`` (no
data, no numerics, only this rank's inputs); the mesh is built before entering the fake mode
(``DeviceMesh`` reads its rank map as real values).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Callable

import torch

from harness.load.setup import RunSetup
from harness.run.rank.body import RankBody, Trained
from harness.run.rank.build import make_optimizer
from harness.run.rank.instruments import Instruments, trace_device_activity
from harness.run.rank.loop import run_steps
from harness.run.rank.observe import compile_counts, environment, error_result, where_after_step
from harness.run.rank.parallelize import (
    ShardUnit,
    apply_fsdp,
    unit_state,
    units_from_setup,
)
from harness.run.rank.plan import plan_rank
from harness.run.rank.recorders.collectives import dtype_name
from harness.run.rank.recorders.numerics import compare
from harness.run.rank.recorders.updates import ParamUpdates
from harness.run.rank.references import numerics_references
from harness.run.rank.strategies import RealRank, SimulatedRank, strategy_for

__all__ = ["run_step", "RankStep"]


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

    Args:
        setup: what to run.
        rank: this rank (``dist.get_rank()``).
        world_size: ``setup.world_size`` (``dist.get_world_size()``).
        device_type: "cpu" or "cuda" (for CUDA, the current device is this rank's GPU).
        simulated: the fake process group is active: run under ``FakeTensorMode``, no numerics.
        on_phase: called with each phase name (``harness.contract.names.RANK_PHASES``) as it
            starts (the launcher reports a hung rank's last phase).
        collective_log: receives each collective as entered and completed
            (``harness.run.launch.hang``: the launcher says which rank is stuck in which
            collective); None for nowhere.
        trace_dir: if given, an existing folder: the profiler's Chrome trace of the step
            (forward, backward, optimizer; FSDP:: labels and c10d ops) is written there as
            ``rank<rank>.json`` (``torch.autograd.profiler.profile.export_chrome_trace``).
        checkpoint_dir: for ``setup.state_dict.round_trip``: a folder every rank shares, made
            and removed by the launcher; None: rank 0 makes one and removes it
            (``harness.run.rank.checkpoint.shared_folder``).

    Returns:
        ``{"entry": <the rank's entry of the document>, "fsdp_units": [...],
        "environment": {torch_version, python_version, backend, device_type, device_name}}``;
        the entry has ``state_dict`` when the setup asks for the round trip (not simulated).

    Raises:
        ValueError: ``world_size`` is not the setup's, or the setup names an unknown body or
            optimizer.
    """
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
            instruments = self.got["instruments"] = Instruments(
                phases,
                self.group_dims,
                self.collective_log,
                track_memory=setup.track_memory,
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
                    self.mesh,
                    shard_units,
                    materialize=self._materializer(),
                    forward_prefetch=setup.fsdp.forward_prefetch,
                    backward_prefetch=setup.fsdp.backward_prefetch,
                    freeze=setup.freeze.params,
                    freeze_after=setup.freeze.after_fully_shard,
                    grad_dtypes=setup.grad_dtype,
                    after_each=after_each,
                )
            strategy.after_sharding(self, stack, instruments, root)
            with phases.phase("setup"):
                optimizer = make_optimizer(setup, root.parameters())
                sharded = list(root.named_parameters())
            updates = ParamUpdates(root, setup.mesh_shape[-1], self.coords[-1]) if self.plan.param_updates else None
            with instruments.observing(root, optimizer, units, inputs=(self.inputs.tensor,), updates=updates):
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
        fsdp_units = [{**u.describe(), "state": unit_state(u)} for u in trained.units]
        return {"entry": entry, "fsdp_units": fsdp_units, "environment": environment(self.device_type, self.device)}
