"""The two ways a rank runs: :class:`RealRank` (a gloo/NCCL world) and :class:`SimulatedRank` (the fake
process group under ``FakeTensorMode``), behind the four hooks ``harness.run.rank.step`` calls."""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch
import torch.distributed as dist

from harness.run.rank.body import RankBody, Trained
from harness.run.rank.build import build_model, torch_dtype
from harness.run.rank.fake import materialize_fake, storage_for_sharding
from harness.run.rank.instruments import Instruments
from harness.run.rank.process_group import device_backend
from harness.run.rank.recorders.environment import rank_environment

__all__ = ["RealRank", "SimulatedRank", "strategy_for"]


class RealRank:
    """Real data on a real device: inputs made with the model (the replica needs them), every
    recorder on from ``fully_shard`` on, then the state-dict round trip, the bandwidth rows and
    the rank's host and device."""

    def build(self, body: RankBody) -> torch.nn.Module:
        meta = body.plan.meta_init
        root = build_model(
            body.setup, body.config, body.dtype, torch.device("meta") if meta else body.device, init=not meta
        )
        body.make_inputs()
        return root

    def before_sharding(self, body: RankBody, stack: contextlib.ExitStack, instruments: Instruments) -> None:
        stack.enter_context(instruments)  # fully_shard's collectives and meta init's recorded

    def after_sharding(
        self, body: RankBody, stack: contextlib.ExitStack, instruments: Instruments, root: torch.nn.Module
    ) -> None:
        pass

    def after_step(self, body: RankBody, trained: Trained, collectives: list[dict[str, Any]]) -> dict[str, Any]:
        """The state-dict round trip, the state-dict options calls and the bandwidth rows where the
        setup asks, and ``environment``."""
        setup, phases, parts = body.setup, body.phases, {}
        if setup.state_dict.round_trip:
            from harness.run.rank.checkpoint import fresh_sharded, round_trip, shared_folder

            fresh = functools.partial(fresh_sharded, setup, body.mesh, body.device, body.rank)
            with phases.phase("state_dict"), shared_folder(body.checkpoint_dir) as folder:
                parts["state_dict"] = round_trip(
                    trained.root,
                    trained.optimizer,
                    fresh,
                    folder,
                    write_reference=bool(setup.state_dict.reload_world_sizes),
                )
        if setup.state_dict.get_model or setup.state_dict.set_model:
            from harness.run.rank.checkpoint import sharded_model
            from harness.run.rank.state_dict_options import state_dict_options

            def fresh(into: str) -> torch.nn.Module:
                return sharded_model(setup, body.mesh, body.device, body.rank, materialize=into == "sharded")

            with phases.phase("state_dict"):
                parts["state_dict_options"] = state_dict_options(trained.root, setup.state_dict, fresh, body.rank)
        if setup.bandwidth is not None:
            with phases.phase("bandwidth"):
                parts["bandwidth"] = _time_collectives(body, collectives)
        parts["environment"] = rank_environment(
            body.rank, body.world_size, body.device, device_backend(str(dist.get_backend()), body.device.type)
        )
        return parts


class SimulatedRank:
    """No data: ``fully_shard`` outside ``FakeTensorMode`` on a model without data (inside the
    fake mode its per-rank ops cost ~10x, ``harness.run.rank.fake``), then the fake mode, the
    recorders on top of it, fake storage and this rank's inputs."""

    def build(self, body: RankBody) -> torch.nn.Module:
        root = build_model(body.setup, body.config, body.dtype, torch.device("meta"), init=False)
        storage_for_sharding(root, body.setup.shard_count * body.setup.tp_size)
        # made before fully_shard as on a real rank, so a run that fails in it records its input
        # as a real one does; after_sharding makes them again as fake tensors for the step
        body.make_inputs()
        return root

    def before_sharding(self, body: RankBody, stack: contextlib.ExitStack, instruments: Instruments) -> None:
        # FSDP2 issues no collective in fully_shard (tests/test_simulated_agrees.py compares
        # every collective of 8 real ranks, whose recorder covers it, with the simulated ones)
        pass

    def after_sharding(
        self, body: RankBody, stack: contextlib.ExitStack, instruments: Instruments, root: torch.nn.Module
    ) -> None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        stack.enter_context(instruments)  # on top of FakeTensorMode: sees each c10d op first
        with body.phases.phase("setup"):
            materialize_fake(root, body.device)
            body.make_inputs()

    def after_step(self, body: RankBody, trained: Trained, collectives: list[dict[str, Any]]) -> dict[str, Any]:
        return {}  # one process simulates every rank: it has no per-rank host or device


def strategy_for(mode: str) -> RealRank | SimulatedRank:
    """The strategy of a ``RankPlan.mode``."""
    return SimulatedRank() if mode == "simulated" else RealRank()


def _time_collectives(body: RankBody, collectives: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``setup.bandwidth``'s rows timed on this rank (``harness.run.rank.collective_timing``), after the step."""
    from harness.run.rank.collective_timing import plan_rows, run_bandwidth

    setup, device = body.setup, body.device
    mp = setup.fsdp.mixed_precision
    gather_dtype = torch_dtype(mp.param_dtype) if mp is not None and mp.param_dtype else body.dtype
    rows = plan_rows(
        setup.bandwidth, collectives, world_size=body.world_size, default_dtype=gather_dtype, device_type=device.type
    )
    return run_bandwidth(
        rows,
        rank=body.rank,
        device=device,
        warmup=setup.bandwidth.warmup,
        iterations=setup.bandwidth.iterations,
        group_of=lambda dim: None if dim is None else body.mesh.get_group(dim),
    )
