"""``param_state``: what a unit holds right after Step 0 (all-gathered) and Step 11 (resharded)."""

from __future__ import annotations

from typing import Any

from harness.contract.names import PARAM_STATE_POINTS
from harness.language.kinds.common import LAYER, RANKS, UNIT
from harness.language.observed import CheckError, common, rank_docs, unit_names
from harness.language.vocabulary import BOOL, BYTES, COUNT, TEXTS, CheckKind, Context, Field, Selector


def _check_point(value: Any, ctx: Context) -> str | None:
    return None if value in PARAM_STATE_POINTS else f"expected one of {list(PARAM_STATE_POINTS)}, got {value!r}"


def _names_point(values, ctx):
    return (
        []
        if "point" in values
        else [(None, f"a 'param_state' entry names its 'point', one of {list(PARAM_STATE_POINTS)}")]
    )


def measure(sel, obs):
    units = unit_names(obs, sel)
    point = sel["point"]
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        states = [s for s in r["param_states"] if s["point"] == point and (units is None or s["unit"] in units)]
        if not states:
            raise CheckError(f"rank {r['rank']}: no param state at {point!r} for units {sorted(units or [])}")
        full = {p["fqn"]: p["full_shape"] for p in r["params"]}
        local = {p["fqn"]: p["local_shape"] for p in r["params"]}
        per_unit = []
        for state in states:
            ps = state["params"]
            per_unit.append(
                {
                    "count": len(ps),
                    "plain_tensors": sum(not p["is_dtensor"] for p in ps),
                    "dtensors": sum(p["is_dtensor"] for p in ps),
                    "full_shapes": all(p["shape"] == full.get(p["fqn"]) for p in ps),
                    "local_shapes": all(p["shape"] == local.get(p["fqn"]) for p in ps),
                    "bytes": state["bytes"],
                    "input_dtypes": state.get("input_dtypes"),
                    "output_dtypes": state.get("output_dtypes"),
                }
            )
        # several units (layer: all): a field's common value, or the per-unit list when they differ
        out[r["rank"]] = {k: common([u[k] for u in per_unit]) for k in per_unit[0]}
    return out


KIND = CheckKind(
    name="param_state",
    doc="what a unit's parameters are right after FSDP's pre-forward hook (Step 0) or post-forward hook (Step 11)",
    selectors=(
        LAYER,
        UNIT,
        Selector(
            "point", "pre_forward (after Step 0's all-gather) or post_forward (after Step 11's reshard)", _check_point
        ),
        RANKS,
    ),
    fields=(
        Field("count", COUNT, "parameters of the unit"),
        Field("plain_tensors", COUNT, "parameters that are plain tensors (unsharded)"),
        Field("dtensors", COUNT, "parameters that are DTensors (sharded)"),
        Field("full_shapes", BOOL, "every parameter has its full shape"),
        Field("local_shapes", BOOL, "every parameter has its shard's shape"),
        Field("bytes", BYTES, "bytes the unit's parameters occupy on this rank then"),
        Field(
            "input_dtypes",
            TEXTS,
            "pre_forward: dtypes of the unit's tensor inputs after FSDP's pre-forward (cast_forward_inputs)",
        ),
        Field(
            "output_dtypes",
            TEXTS,
            "post_forward: dtypes of the unit's tensor outputs after FSDP's post-forward (output_dtype)",
        ),
    ),
    measure=measure,
    rules=(_names_point,),
)
