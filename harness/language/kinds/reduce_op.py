"""``reduce_op``: how FSDP reduces gradients: the ReduceOp of each reduce-scatter and all-reduce.

FSDP2 (``foreach_reduce`` and ``_get_gradient_divide_factors`` in
``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``, torch 2.13) reduce-scatters with
``AVG`` by default (fp32/bf16 gradients), with ``SUM`` and a division before and after for
fp16 or when ``set_force_sum_reduction_for_comms(True)``, with ``PREMUL_SUM(1/f)`` when
``set_gradient_divide_factor(f)`` gives an f other than the shard-group size (gloo refuses
it); the HSDP all-reduce uses ``AVG`` by default, ``SUM`` with a divide factor. The op is read
from the dispatched c10d op (its ``ReduceOp`` object); the unit's divide factor and force-sum
switch from its FSDP state after the step (``fsdp_units[].state``). That the gradient is the
sum divided by the factor is a ``numerics`` check (the replica divides by the same factor).
"""

from __future__ import annotations

from typing import Any

from harness.language.kinds.common import LAYER, RANKS, ROLE, UNIT, check_phase
from harness.language.observed import CheckError, common, rank_docs, select_collectives, unit_names
from harness.language.vocabulary import BOOL, COUNT, CheckKind, Context, Field, Reads, RecordKey, Selector, ValueType

REDUCE_OP_NAMES = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM")
_OPS = ("reduce_scatter", "all_reduce")


def _check_op(value: Any, ctx: Context) -> str | None:
    values = value if isinstance(value, list) else [value]
    bad = [v for v in values if v not in _OPS]
    return f"expected one of {list(_OPS)} or a list of them, got {value!r}" if bad else None


def measure(sel, obs):
    select = {"op": sel.get("op", list(_OPS))}
    for key in ("layer", "unit", "role"):
        if key in sel:
            select[key] = sel[key]
    if "phase" in sel:
        select["phase"] = sel["phase"]
    names = unit_names(obs, sel)
    states = [u.get("state", {}) for u in obs["fsdp_units"] if names is None or u["name"] in names]
    states = [s for s in states if s.get("managed")]
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        cs = select_collectives(obs, r, select)
        out[r["rank"]] = {
            "count": len(cs),
            "reduce_op": common([c.get("reduce_op") for c in cs]),
            "divide_factor": common([s.get("gradient_divide_factor") for s in states]),
            "force_sum": common([s.get("force_sum_reduction_for_comms") for s in states]),
            "separate_group": common([s.get("separate_reduce_scatter_group") for s in states]),
            "max_input_buffers": common([s.get("reduce_scatter_max_input_buffers") for s in states]),
        }
    if not states and any(v["count"] == 0 for v in out.values()):
        raise CheckError(f"no FSDP unit with parameters selected by {dict(sel)}")
    return out


KIND = CheckKind(
    name="reduce_op",
    order=190,
    reads=(Reads("collectives"),),
    record_keys=(RecordKey("fsdp_units", ("name",)),),  # it selects units by name
    doc="how gradients are reduced: the ReduceOp of the selected reduce-scatters/all-reduces, the units' divide "
    "factor and force-sum switch",
    selectors=(
        LAYER,
        UNIT,
        ROLE,
        Selector("op", "reduce_scatter, all_reduce or a list (default both)", _check_op),
        Selector("phase", "a phase or a list of them (default every phase)", check_phase),
        RANKS,
    ),
    fields=(
        Field("count", COUNT, "reduce-scatters and all-reduces selected"),
        Field(
            "reduce_op",
            ValueType(
                "reduce op",
                f"one of {list(REDUCE_OP_NAMES)}, or a list of them (one per collective, when they differ)",
                lambda e: (
                    e.form == "exact"
                    and (
                        e.value in REDUCE_OP_NAMES
                        or (isinstance(e.value, list) and all(v in REDUCE_OP_NAMES for v in e.value))
                    )
                ),
            ),
            "the ReduceOp they were called with",
        ),
        Field(
            "divide_factor",
            ValueType(
                "number or null",
                "a number, a bound like '>= 1', or null",
                lambda e: (
                    e.form != "exact"
                    or e.value is None
                    or (isinstance(e.value, (int, float)) and not isinstance(e.value, bool))
                ),
            ),
            "the units' gradient divide factor in FSDP's state (null: FSDP divides by the data-parallel size)",
        ),
        Field("force_sum", BOOL, "the units' force-sum-reduction switch in FSDP's state"),
        Field(
            "separate_group",
            BOOL,
            "the units' reduce-scatter runs on a process group of its own (set_separate_reduce_scatter_group); "
            "its collectives then have mesh_dim null",
        ),
        Field("max_input_buffers", COUNT, "reduce-scatter input buffers the units keep in flight (torch: 1)"),
    ),
    measure=measure,
)
