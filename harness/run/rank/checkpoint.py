"""The state-dict round trip: save the sharded model and optimizer, load them into a fresh one.

After the optimizer step every rank saves ``get_state_dict(model, optimizer)`` with
``torch.distributed.checkpoint.save``, loads it into a fresh model sharded the same way (another
seed) and compares each local shard bitwise with what was saved (docs/specs.md, "State-dict round
trip"). Source: torch 2.13's ``torch.distributed.checkpoint`` and its ``state_dict`` helpers.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import tempfile
import time
from typing import Any, Callable, Iterator, Mapping

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

import model as qwen3
from harness.load.setup import RunSetup
from harness.run.rank.build import build_model, make_optimizer, torch_dtype
from harness.run.rank.parallelize import apply_fsdp, build_mesh, init_local_shards, units_from_setup
from harness.run.rank.recorders.collectives import dtype_name
from harness.run.rank.recorders.phases import Phases
from harness.run.rank.recorders.tensor_diff import on_one_device

__all__ = [
    "DCP_FOLDER",
    "REFERENCE_FILE",
    "FRESH_SEED_OFFSET",
    "round_trip",
    "reload_step",
    "fresh_sharded",
    "sharded_model",
    "shared_folder",
]

DCP_FOLDER = "dcp"
"""The checkpoint's folder inside the run's temporary folder (what ``dcp.save`` writes)."""
REFERENCE_FILE = "reference.pt"
"""The saved model's and optimizer's full tensors (``torch.save`` by rank 0), for reloads."""
FRESH_SEED_OFFSET = 1000
"""The fresh model's shards are drawn with ``setup.seed + FRESH_SEED_OFFSET``: not the saved values."""

Fresh = Callable[[], "tuple[nn.Module, torch.optim.Optimizer]"]
Expected = Callable[[str, "str | None", torch.Tensor], torch.Tensor]
"""(fqn, optimizer state name or None for the parameter, the loaded tensor) -> the local values
it must hold."""


def _local(t: Any) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _where(t: torch.Tensor) -> tuple[list[int], list[int], int]:
    """(global offset, local shape, shard dim) of ``t``'s local shard in the full tensor."""
    if not isinstance(t, DTensor):
        return [0] * t.dim(), list(t.shape), 0
    local_shape, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
    dims = [p.dim for p in t.placements if isinstance(p, Shard)]
    return [int(o) for o in offset], [int(s) for s in local_shape], dims[0] if dims else 0


def _same(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, float | None]:
    """(bitwise equal: dtype, shape, values; largest |a - b|, None if not comparable), compared on the
    CPU: either side may be offloaded or on the GPU."""
    if a.shape != b.shape:
        return False, None
    if a.numel() == 0:
        return a.dtype == b.dtype, 0.0
    a64, b64 = on_one_device(a, b)  # float64 holds every value of the narrower dtypes exactly
    diff = float((a64 - b64).abs().max())
    return a.dtype == b.dtype and torch.equal(a64, b64), diff if math.isfinite(diff) else None


def _chunks(metadata: Any, key: str, dim: int) -> tuple[list[int], list[int]]:
    """The checkpoint's chunks of ``key`` along ``dim``: (offsets, lengths), sorted by offset."""
    meta = metadata.state_dict_metadata.get(key)
    chunks = getattr(meta, "chunks", None) or []
    pairs = sorted((int(c.offsets[dim]), int(c.sizes[dim])) for c in chunks if len(c.offsets) > dim)
    return [o for o, _ in pairs], [n for _, n in pairs]


def _snapshot(state: Mapping[str, Any], optim_state: Mapping[str, Any]) -> tuple[dict, dict]:
    """Copies of this rank's local shards: {fqn: tensor}, {fqn: {state name: tensor}}."""
    model = {k: _local(v).detach().clone() for k, v in state.items() if isinstance(v, torch.Tensor)}
    optim = {
        fqn: {name: _local(t).detach().clone() for name, t in entries.items() if isinstance(t, torch.Tensor)}
        for fqn, entries in optim_state["state"].items()
    }
    return model, optim


@contextlib.contextmanager
def shared_folder(folder: str | None) -> Iterator[str]:
    """The folder every rank saves into: ``folder`` (the launcher's), or one rank 0 makes, broadcasts and
    removes after the last rank is done (joined runs)."""
    if folder is not None:
        yield folder
        return
    made = [tempfile.mkdtemp(prefix="fsdp2-checkpoint-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(made, src=0)
    try:
        yield made[0]
        dist.barrier()
    finally:
        if dist.get_rank() == 0:
            shutil.rmtree(made[0], ignore_errors=True)


def round_trip(
    root: nn.Module, optimizer: torch.optim.Optimizer, fresh: Fresh, folder: str, *, write_reference: bool
) -> dict[str, Any]:
    """Save ``root``'s and ``optimizer``'s sharded state into ``folder/DCP_FOLDER``; load it into ``fresh()``.
    Collective, after the optimizer step. ``write_reference``: rank 0 also writes the full tensors to
    ``folder/REFERENCE_FILE`` for :func:`reload_step`. Returns this rank's record."""
    path = os.path.join(folder, DCP_FOLDER)
    model_state, optim_state = get_state_dict(root, optimizer)
    saved_model, saved_optim = _snapshot(model_state, optim_state)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)
    if write_reference:
        full_model = {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in model_state.items()}
        full_optim = {
            fqn: {n: t.full_tensor() if isinstance(t, DTensor) else t for n, t in entries.items()}
            for fqn, entries in optim_state["state"].items()
        }
        if dist.get_rank() == 0:
            torch.save({"model": full_model, "optim": full_optim}, os.path.join(folder, REFERENCE_FILE))
        dist.barrier()

    def expected(fqn: str, name: str | None, loaded: torch.Tensor) -> torch.Tensor:
        return saved_model[fqn] if name is None else saved_optim[fqn][name]

    world = dist.get_world_size()
    return _load_and_compare(fresh, path, expected, saved_world_size=world)


def _load_and_compare(fresh: Fresh, path: str, expected: Expected, *, saved_world_size: int) -> dict[str, Any]:
    """Load the checkpoint at ``path`` into ``fresh()``; compare each shard with ``expected``."""
    new_root, new_optimizer = fresh()
    # get_state_dict creates the optimizer's state (a step with zero gradients and lr 0), so
    # that dcp.load has tensors of the right shards to load into.
    model_state, optim_state = get_state_dict(new_root, new_optimizer)
    before: dict[tuple[str, str | None], bool] = {}
    for fqn, t in model_state.items():
        before[fqn, None] = _same(_local(t), expected(fqn, None, t))[0]
    for fqn, entries in optim_state["state"].items():
        for name, t in entries.items():
            before[fqn, name] = _same(_local(t), expected(fqn, name, t))[0]
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(new_root, new_optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])

    # What the fresh model and optimizer now hold, read back from them (not the loaded dicts).
    model_after, optim_after = get_state_dict(new_root, new_optimizer)
    metadata = dcp.FileSystemReader(path).read_metadata()
    entries = []
    for fqn, t in model_after.items():
        offset, _, dim = _where(t)
        local = _local(t)
        equal, diff = _same(local, expected(fqn, None, t))
        ck_offsets, ck_lengths = _chunks(metadata, f"model.{fqn}", dim)
        optimizer = []
        for name, s in sorted(optim_after["state"].get(fqn, {}).items()):
            s_equal, s_diff = _same(_local(s), expected(fqn, name, s))
            optimizer.append(
                {
                    "name": name,
                    "equal": s_equal,
                    "equal_before_load": before.get((fqn, name), False),
                    "max_abs_diff": s_diff,
                }
            )
        entries.append(
            {
                "fqn": fqn,
                "full_shape": list(t.shape),
                "dtype": dtype_name(t.dtype),
                "placements": [repr(p) for p in t.placements] if isinstance(t, DTensor) else [],
                "local_shape": list(local.shape),
                "global_offset": offset,
                "local_length": int(local.shape[dim]) if local.dim() else 1,
                "local_numel": local.numel(),
                "equal_before_load": before[fqn, None],
                "round_trip_equal": equal,
                "max_abs_diff": diff,
                "checkpoint_offsets": ck_offsets,
                "checkpoint_lengths": ck_lengths,
                "optimizer": optimizer,
            }
        )
    return {"saved_world_size": saved_world_size, "world_size": dist.get_world_size(), "entries": entries}


def sharded_model(setup: RunSetup, mesh: Any, device: torch.device, rank: int, *, materialize: bool) -> nn.Module:
    """The setup's model built on meta and ``fully_shard``-ed on ``mesh``; with ``materialize`` each rank's
    shards drawn on ``device`` from ``setup.seed + FRESH_SEED_OFFSET``, else left on meta."""
    config = qwen3.get_config(setup.model.config, **dict(setup.model.overrides))
    root = build_model(setup, config, torch_dtype(setup.model.dtype), torch.device("meta"), init=False)
    fill = None
    if materialize:
        fill = functools.partial(
            init_local_shards,
            device=device,
            std=config.initializer_range,
            seed=setup.seed + FRESH_SEED_OFFSET,
            rank=rank,
        )
    apply_fsdp(root, mesh, units_from_setup(setup, root), materialize=fill)
    return root


def fresh_sharded(
    setup: RunSetup, mesh: Any, device: torch.device, rank: int
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A model and the setup's optimizer, sharded as the run's, values from another seed."""
    root = sharded_model(setup, mesh, device, rank, materialize=True)
    return root, make_optimizer(setup, root.parameters())


def reload_step(
    setup: RunSetup,
    rank: int,
    world_size: int,
    device_type: str,
    *,
    checkpoint_dir: str,
    saved_world_size: int,
    on_phase: Callable[[str], None] | None = None,
    collective_log: Any = None,
) -> dict[str, Any]:
    """A rank of a second launch: load the run's checkpoint on this world (``setup``: the run's on a 1-D
    mesh) and compare each shard with the saved full tensor at its global offset; ``collective_log`` is
    unused. Returns ``{"rank", "state_dict": <record>, "timings_s": {"setup", "state_dict", "total"}}``."""
    t_start = time.perf_counter()
    phases = Phases(sync=torch.cuda.synchronize if device_type == "cuda" else None, on_enter=on_phase)
    device = torch.device("cuda", torch.cuda.current_device()) if device_type == "cuda" else torch.device("cpu")
    with phases.phase("setup"):
        mesh = build_mesh(setup, device_type)
        reference = torch.load(os.path.join(checkpoint_dir, REFERENCE_FILE), map_location=device, weights_only=True)

    def expected(fqn: str, name: str | None, loaded: torch.Tensor) -> torch.Tensor:
        full = reference["model"][fqn] if name is None else reference["optim"][fqn][name]
        offset, shape, _ = _where(loaded)
        return full[tuple(slice(o, o + n) for o, n in zip(offset, shape))]

    with phases.phase("state_dict"):
        record = _load_and_compare(
            functools.partial(fresh_sharded, setup, mesh, device, rank),
            os.path.join(checkpoint_dir, DCP_FOLDER),
            expected,
            saved_world_size=saved_world_size,
        )
    timings = dict(phases.timings_s, total=time.perf_counter() - t_start)
    return {"rank": rank, "state_dict": record, "timings_s": timings}
