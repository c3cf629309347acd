"""The names the recorders write into an observation, importable without torch.

The loader validates spec selectors against these (a spec naming a state or phase that no run
can produce is a load error), so they live here, beside the recorders that produce them, in a
module that imports nothing heavy.
"""

from __future__ import annotations

BACKENDS: tuple[str, ...] = ("auto", "gloo", "nccl", "fake")
"""Backends a run takes (``setup.backend``, ``--backend``): ``auto`` is NCCL with one GPU per
rank when enough are visible, else gloo on CPU; ``fake`` is torch's fake process group in one
process (nothing is moved)."""

TORCH_BUILDS: tuple[str, ...] = ("cpu", "cuda")
"""The torch builds a spec's ``torch_build`` names: ``cpu`` (``torch.version.cuda`` is None) or ``cuda``."""


def torch_build_of(cuda_version: str | None) -> str:
    """The build of a torch whose ``torch.version.cuda`` is ``cuda_version``: "cpu" when None, else "cuda"."""
    return "cpu" if cuda_version is None else "cuda"


PHASES: tuple[str, ...] = (
    "setup",
    "zero_grad",
    "unshard",
    "forward",
    "reshard",
    "backward",
    "reset_iter_state",
    "clip_grad_norm",
    "optimizer",
)
"""Phases of a rank's step, in order (recorders.phases; the schedule's runtime calls have their own:
``zero_grad``, ``unshard``, ``reshard``, ``reset_iter_state`` after an aborted backward,
``clip_grad_norm``); a collective records the phase it ran in."""

RANK_PHASES: tuple[str, ...] = (
    "starting",
    "init_process_group",
    PHASES[0],
    "replica",
    *PHASES[1:],
    "state_dict",
    "bandwidth",
    "done",
)
"""Every phase a rank process is in, in order: the one table the launcher reports (its shared-memory
codes are indices into it), the progress line shows and the rank's timings name.

- ``starting``, ``init_process_group``: before the rank body (the launcher's own);
- :data:`PHASES`, the step's phases, with ``replica`` after ``setup``: the numerics reference,
  timed like a phase but not of the FSDP step (nothing is recorded while it runs);
- ``state_dict``, ``bandwidth``: after the recorders stopped (the state-dict round trip, the
  bandwidth sweep), then ``done``.
"""

BODY_PHASES: tuple[str, ...] = RANK_PHASES[RANK_PHASES.index(PHASES[0]) : RANK_PHASES.index("done")]
"""The phases the rank body enters (recorders.phases.Phases); an error names one as the phase it left."""


def rank_phase_code(name: str) -> int:
    """The index of ``name`` in :data:`RANK_PHASES` (what the launcher's shared memory holds);
    ValueError for a phase the table lacks (add it there, never report it as another)."""
    try:
        return RANK_PHASES.index(name)
    except ValueError:
        raise ValueError(f"phase {name!r} is not in harness.contract.names.RANK_PHASES {RANK_PHASES}") from None


COLLECTIVE_OPS: tuple[str, ...] = (
    "all_gather",
    "reduce_scatter",
    "all_reduce",
    "broadcast",
    "all_to_all",
    "barrier",
    "send",
    "recv",
    "other",
)
"""Logical collective ops a record's ``op`` takes (recorders.collectives maps c10d ops to these)."""

BANDWIDTH_OPS: tuple[str, ...] = ("all_gather", "reduce_scatter", "all_reduce")
"""Collectives a bandwidth sweep can time (setup.bandwidth.ops): ``dist.all_gather_into_tensor``,
``dist.reduce_scatter_tensor`` (sum) and ``dist.all_reduce`` (sum)."""

MEMORY_CATEGORIES: dict[str, str] = {
    "Sharded Param": "sharded_param",
    "Unsharded Param": "unsharded_param",
    "Buffer": "buffer",
    "Sharded Grad": "sharded_grad",
    "Unsharded Grad": "unsharded_grad",
    "Activation": "activation",
    "Temp": "temp",
    "All Gather": "all_gather",
    "Reduce Scatter": "reduce_scatter",
    "OptState": "optstate",
    "Inputs": "inputs",
    "Total": "total",
}
"""FSDPMemTracker's reference types (``_FSDPRefType`` values, torch 2.13) -> the observation's
category names (bytes per category in a memory snapshot)."""

# The per-unit states are the values of torch.distributed._tools.fsdp2_mem_tracker._FSDPModState
# (torch 2.13) that the tracker records without activation checkpointing (not "Pre-Forward AC");
# the plain mem_tracker._ModState names like "Pre-Forward" are not FSDPMemTracker's.
MEMORY_UNIT_STATES: tuple[str, ...] = (
    "Before Pre-Forward",
    "After Pre-Forward",
    "Before Post-Forward",
    "After Post-Forward",
    "Before Pre-Backward",
    "After Pre-Backward",
    "Before Post-Backward",
    "After Post-Backward",
    "Peak Forward",
    "Peak Backward",  # _FSDPModState.PEAK_FW, PEAK_BW
)
"""States at which FSDPMemTracker snapshots a unit that owns parameters."""

MEMORY_ROOT_STATES: tuple[str, ...] = MEMORY_UNIT_STATES + (
    "After fully_shard",  # MemoryRecorder.__enter__: after every fully_shard, before the first step
    "After Optimizer Step",  # MemoryRecorder.mark_after_step
    "After Zero Grad",  # MemoryRecorder.mark_state, after optimizer.zero_grad() between steps
    "Peak",  # MemoryRecorder.snapshots: the tracker's peak over the step
)
"""States recorded under the root unit (module ""): the unit states plus three whole-rank snapshots."""

PARAM_STATE_POINTS: tuple[str, ...] = (
    "pre_forward",
    "post_forward",
    "pre_backward",
    "post_backward",
    "after_backward",
    "after_optimizer_step",
    "after_zero_grad",
    "after_reset_iter_state",
    "after_fully_shard",
)
"""Where a unit's parameters are looked at (``harness/run/rank/recorders/param_states.py``): after a
``fully_shard`` call (the ``fully_shard_calls`` record); right after FSDP's pre-forward hook (the
document's Step 0), its post-forward hook (Step 11), its pre-backward hook and its post-backward;
after ``loss.backward()``, ``optimizer.step()``, ``optimizer.zero_grad()`` and an aborted step's
``reset_iter_state()`` return."""

PARAM_STATE_STEP_POINTS: tuple[str, ...] = ("after_optimizer_step", "after_zero_grad", "after_reset_iter_state")
"""The points a step takes once, outside its microbatches (their ``microbatch`` is null)."""

UNIT_ROLES: tuple[str, ...] = ("layer", "root", "module")
"""What an FSDP unit is: a decoder layer, the root module (the last ``fully_shard`` call), or any
other module or group of modules (``setup.fsdp.units``)."""

EVENT_NAMES: tuple[str, ...] = (
    "root_pre_forward",
    "inputs_to_device",
    "cast_forward_inputs",
    "cast_forward_outputs",
    "pre_forward",
    "all_gather",
    "all_gather_copy_out",
    "post_forward",
    "forward_prefetch",
    "pre_backward",
    "backward_prefetch",
    "post_backward",
    "post_backward_accumulate",
    "post_backward_reshard",
    "post_backward_rs_wait",
    "post_backward_reduce",
    "root_post_backward_callback",
    "reshard",
    "unshard",
)
"""Events recorders.events writes: FSDP's profiler labels without ``FSDP::`` (torch 2.13
``_fsdp_param_group.py``, ``_fsdp_state.py``), and ``reshard``/``unshard``, the shard-state
changes the harness sees."""
