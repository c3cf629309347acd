"""``collectives``: the c10d collectives a rank issued, selected by phase, op, unit, hook, mesh dim...

Byte figures follow nccl-tests: ``buffer_bytes`` is S, the full buffer (all-gather output,
reduce-scatter input, all-reduce buffer); ``ring_bytes`` is what each rank sends under the ring
model, S x (N-1)/N for all-gather and reduce-scatter, 2 x S x (N-1)/N for all-reduce, with N the
process-group size (the document's "3.54 MB" per all-gather, section "Step 0").
"""

from __future__ import annotations

from typing import Any, Mapping

from harness.contract.names import COLLECTIVE_OPS, PHASES
from harness.language.kinds.common import RANKS, check_layer, check_microbatch, check_role, check_step_index, check_unit
from harness.language.observed import COLLECTIVE_MATCH_KEYS, common, rank_docs, ring_bytes, select_collectives
from harness.language.vocabulary import (
    BYTES,
    COUNT,
    DTYPE,
    DTYPE_NAMES,
    OPTIONAL_TEXT,
    TEXTS,
    CheckKind,
    Context,
    Field,
    Reads,
    RecordKey,
    Selector,
    one_of,
)

_SELECT_KEYS = COLLECTIVE_MATCH_KEYS + ("layer", "unit", "role", "not")


def _one_or_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _in(allowed, what: str):
    def check(value: Any, ctx: Context) -> str | None:
        bad = [v for v in _one_or_list(value) if v not in allowed]
        return f"{what} {', '.join(map(repr, bad))} cannot occur; expected one of {list(allowed)}" if bad else None

    return check


def _check_mesh_dim(value: Any, ctx: Context) -> str | None:
    if not ctx.mesh_dim_names:
        return None
    return _in((*ctx.mesh_dim_names, None), "mesh dim")(value, ctx)  # null: a group outside the mesh


def _check_group_size(value: Any, ctx: Context) -> str | None:
    sizes = _one_or_list(value)
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes):
        return f"expected a group size >= 1 or a list of them, got {value!r}"
    if ctx.world_size is not None and any(s > ctx.world_size for s in sizes):
        return f"group size {value!r} exceeds the world size {ctx.world_size}"
    return None


def _check_optional_text(value: Any, ctx: Context) -> str | None:
    """A string, or null for a collective issued outside any FSDP hook (the observation writes null)."""
    if all(v is None or isinstance(v, str) for v in _one_or_list(value)):
        return None
    return f"expected a string, null or a list of them, got {value!r}"


def _check_select_unit(value: Any, ctx: Context) -> str | None:
    """A unit as ``check_unit`` takes it, or null for a collective outside every FSDP unit."""
    named = [v for v in _one_or_list(value) if v is not None]
    return check_unit(named, ctx) if named else None


_SELECT_CHECKS = {
    "phase": _in(PHASES, "phase"),
    "op": _in(COLLECTIVE_OPS, "op"),
    "dtype": _in(DTYPE_NAMES, "dtype"),
    "mesh_dim": _check_mesh_dim,
    "fsdp_label": _check_optional_text,
    "hook": _check_optional_text,
    "group_size": _check_group_size,
    "reduce_op": _check_optional_text,
    "step_index": check_step_index,
    "microbatch": check_microbatch,
    "layer": check_layer,
    "unit": _check_select_unit,
    "role": check_role,
}


def check_select(value: Any, ctx: Context, *, nested: bool = False) -> str | None:
    """Why a ``select`` mapping can match nothing in a run of this setup (None when it can)."""
    if not isinstance(value, Mapping):
        return "'select' must be a mapping, e.g. {phase: forward, op: all_gather, layer: 0}"
    for key, sub in value.items():
        if key == "not" and not nested:
            problem = check_select(sub, ctx, nested=True)  # its keys come back prefixed 'not.'

        elif key in _SELECT_CHECKS:
            problem = _SELECT_CHECKS[key](sub, ctx)
        else:
            keys = [k for k in _SELECT_KEYS if not (nested and k == "not")]
            problem = f"{key!r} is not a key of 'select'; keys: {keys}"
        if problem:
            return problem if key == "not" else f"{'not.' if nested else ''}{key}: {problem}"
    return None


_FIELDS_PER_COLLECTIVE = (
    "op",
    "dtype",
    "numel_in",
    "numel_out",
    "buffer_bytes",
    "group_size",
    "mesh_dim",
    "fsdp_label",
    "hook",
    "unit",
    "phase",
    "element_size",
    "reduce_op",
)


LABEL_CHAIN_SEPARATOR = " > "
"""Joins a collective's enclosing ``FSDP::`` labels, outermost first, in a ``label_chains`` item."""


def _unit_label(unit: str | None) -> str:
    """How a sequence names a collective's unit: its FQN, 'root' for the root ('') and '-' for none."""
    if unit is None:
        return "-"
    return unit or "root"


def measure(sel, obs):
    select = sel.get("select", {})
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        cs = select_collectives(obs, r, select)
        values = {
            "count": len(cs),
            "total_buffer_bytes": sum(c["buffer_bytes"] for c in cs),
            "total_ring_bytes": sum(ring_bytes(c) for c in cs),
            "sequence": [f"{c['op']} {_unit_label(c['unit'])}" for c in cs],
            "fsdp_labels": common([list(c.get("fsdp_labels") or []) for c in cs]),
            "label_chains": [LABEL_CHAIN_SEPARATOR.join(c.get("fsdp_labels") or []) or "-" for c in cs],
        }
        # per-collective fields: the common value, or the list when they differ
        for key in _FIELDS_PER_COLLECTIVE + ("ring_bytes",):
            values[key] = common([ring_bytes(c) if key == "ring_bytes" else c.get(key) for c in cs])
        out[r["rank"]] = values
    return out


KIND = CheckKind(
    name="collectives",
    # by issue index and op, so a record condition on the op (harness/contract/fields.py, ROUTED) can
    # see which records it holds for; a different op at one index is a record missing on each side
    record_keys=(RecordKey("collectives", ("index", "op")),),
    order=60,
    reads=(Reads("collectives"),),
    doc="the collectives matching 'select': how many, op, dtype, elements, bytes (nccl-tests' S and ring bytes)",
    selectors=(
        Selector(
            "select",
            "which collectives: {phase, op, dtype, mesh_dim, fsdp_label, hook, group_size, reduce_op, "
            "layer, unit, role, step_index, microbatch, not: {...}} (a value or a list each; null matches a "
            "collective outside every FSDP hook or unit)",
            check_select,
        ),
        RANKS,
    ),
    fields=(
        Field("count", COUNT, "collectives selected"),
        Field("op", one_of("op", COLLECTIVE_OPS), "the logical op (all_gather, reduce_scatter, all_reduce, ...)"),
        Field("dtype", DTYPE, "the dtype they move"),
        Field("numel_in", COUNT, "elements of each rank's input"),
        Field("numel_out", COUNT, "elements of each rank's output"),
        Field("buffer_bytes", BYTES, "S: the full buffer (all-gather output, reduce-scatter input)"),
        Field("ring_bytes", BYTES, "bytes each rank sends under the ring model: S x (N-1)/N (2x for all-reduce)"),
        Field("total_buffer_bytes", BYTES, "sum of S over the selected collectives"),
        Field("total_ring_bytes", BYTES, "sum of ring bytes over the selected collectives"),
        Field("group_size", COUNT, "N: ranks in the collective's process group"),
        Field(
            "mesh_dim",
            OPTIONAL_TEXT,
            "the DeviceMesh dim whose group ran it (null: a group outside the mesh)",
            _check_mesh_dim,
        ),
        Field("fsdp_label", OPTIONAL_TEXT, "the innermost FSDP:: profiler label around it, without the unit"),
        Field(
            "hook",
            OPTIONAL_TEXT,
            "the FSDP hook that issued it (pre_forward, backward_prefetch, post_backward_reduce, ...)",
        ),
        Field("unit", OPTIONAL_TEXT, "the FSDP unit it belongs to ('' for the root)"),
        Field("phase", one_of("phase", PHASES), "the step phase it ran in"),
        Field("element_size", COUNT, "bytes per element"),
        Field("reduce_op", OPTIONAL_TEXT, "the ReduceOp it was called with (SUM, AVG, PREMUL_SUM, ...; null for none)"),
        Field("sequence", TEXTS, "'op unit' of each selected collective in issue order"),
        Field(
            "fsdp_labels",
            TEXTS,
            "every FSDP:: profiler label enclosing them, outermost first, verbatim (e.g. ['FSDP::pre_backward "
            "(layers.1)', 'FSDP::backward_prefetch for layers.0', 'FSDP::all_gather (layers.0)']); the list of "
            "chains when the selected collectives' chains differ",
        ),
        Field(
            "label_chains",
            TEXTS,
            "each selected collective's label chain in issue order, its labels joined by ' > ' "
            "('-' for one outside every FSDP label)",
        ),
    ),
    measure=measure,
)
