"""The rank's instruments by name, and the fields of a rank's entry each one records.

A run turns on a subset of them (``RunSetup.instruments``; None: every one, the default, so no
observed value changes). The table lives here, below the loader and the judge, so that the layers
that cannot import torch can choose instruments from what a spec's entries read; the recorders
themselves are ``harness.run.rank.instruments``. A field of an instrument that is off stays in the entry,
empty (``[]``, ``None`` for ``numerics``; ``experts`` and ``param_updates`` are left out).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

__all__ = ["INSTRUMENTS", "chosen_instruments", "instruments_filling", "memory_tracker_blocker", "recorded_instruments"]

INSTRUMENTS: dict[str, tuple[str, ...]] = {
    # the dispatch-level recorder (every c10d op, its tensors and group) with the profiler's FSDP
    # labels that attribute each collective to a unit and hook; hang progress rides on it
    # (and what parameters' all-gather extensions, fsdp_pre/post_all_gather, received and returned)
    "collectives": ("collectives", "all_gather_extensions"),
    # the profiler's FSDP labels and the shard-state probe's reshard/unshard markers
    "events": ("events",),
    # FSDPMemTracker over the steps (and only where setup.track_memory is true)
    "memory": ("memory",),
    # what each unit holds after FSDP's forward and backward hooks, the backward, the step, zero_grad
    "param_states": ("param_states",),
    # every parameter before the first fully_shard call and after each call
    "fully_shard_calls": ("fully_shard_calls",),
    # the parameter and buffer tables, sharded, before the first step
    "params": ("params", "buffers"),
    # the walkthrough's Steps 1-10 (name, layer, shape, dtype) of every forward, and what the root's
    # forward received (argument, container, dtype, shape)
    "steps": ("steps", "forward_inputs"),
    # a MoE layer's routing and expert gradients
    "experts": ("experts",),
    # gradient dtypes after each step, units' resolved dtypes after each forward, clip_grad_norm_'s return
    "grads": ("grads", "unit_dtypes", "grad_norms"),
    # which rows of each shard each step changed (a real run with a schedule)
    "updates": ("param_updates",),
    # the non-sharded replica the step is compared with (a real run with setup.numerics), and what
    # other parts hold of it: the reference's norms and the rows its steps changed
    "numerics": (
        "numerics",
        "grad_norms.reference",
        "grad_norms.reference_clip_coef",
        "grad_norms.shard_reference",
        "param_updates.max_abs_diff",
        "param_updates.max_abs_ref",
        "param_updates.ref_rows_changed",
        "param_updates.same_rows_as_reference",
    ),
}
"""Instrument name -> the fields of the rank entry (``observation.schema.json``, ``$defs/rank``) it
fills: a whole part (``collectives``) or a field inside another's part (``grad_norms.reference``)."""


def chosen_instruments(names: Iterable[str] | None) -> frozenset[str]:
    """The set of instruments ``names`` turns on: every one for None.

    Raises:
        ValueError: a name that is not a key of :data:`INSTRUMENTS` (the message lists them).
    """
    if names is None:
        return frozenset(INSTRUMENTS)
    chosen = frozenset(names)
    unknown = sorted(chosen - INSTRUMENTS.keys())
    if unknown:
        raise ValueError(f"setup.instruments: unknown instrument(s) {unknown}; expected some of {sorted(INSTRUMENTS)}")
    return chosen


def instruments_filling(path: str) -> frozenset[str]:
    """The instruments without which field ``path`` of a rank entry (dotted, as
    :mod:`harness.contract.fields` names it: ``grad_norms.reference``) is left empty: the one
    filling its part and any filling it within that part."""
    return frozenset(
        name
        for name, filled in INSTRUMENTS.items()
        if any(path == field or path.startswith(field + ".") for field in filled)
    )


def recorded_instruments(setup: Mapping[str, Any]) -> frozenset[str]:
    """The instruments an observation document's ``setup`` (its resolved setup) ran: its
    ``instruments``, or every one where the key is absent (a run with all of them)."""
    names = setup.get("instruments")
    return frozenset(INSTRUMENTS) if names is None else frozenset(names)


def memory_tracker_blocker(setup: Mapping[str, Any]) -> str | None:
    """Why FSDPMemTracker cannot observe the run of ``setup`` (``RunSetup.to_dict()``) without
    changing it, or None where it can (docs/known-limits.md, "The memory tracker"): a loss that
    differentiates the inputs (the tracker's multi-grad hooks on module inputs make
    ``torch.autograd.grad`` raise in the forward), or a forward calling a method other than
    ``forward`` (the tracker sees no pre-forward there and fails in the backward)."""
    schedule = setup.get("schedule") or {}
    if schedule.get("loss") == "input_grad_penalty":
        return "schedule.loss input_grad_penalty calls torch.autograd.grad, which the tracker's hooks break"
    if any(step.get("forward_method", "forward") != "forward" for step in schedule.get("steps") or ()):
        return "a schedule step's forward_method calls a method the tracker does not follow"
    return None
