"""``param_state``: what a unit's parameters are at a point of the run, per rank.

The points (:data:`harness.contract.names.PARAM_STATE_POINTS`; ``harness/run/rank/recorders/param_states.py``
says how each is taken): ``after_fully_shard`` (with ``call``: after that unit's ``fully_shard``
call, before the next one), right after FSDP's ``pre_forward`` (the document's Step 0, all-gathered),
``post_forward`` (Step 11, resharded), ``pre_backward`` and ``post_backward`` hooks, and when
``loss.backward()`` (``after_backward``), ``optimizer.step()`` (``after_optimizer_step``) and
``optimizer.zero_grad()`` (``after_zero_grad``) return. ``step_index`` and ``microbatch`` choose
the step and microbatch (default: every one the point was taken in).
"""

from __future__ import annotations

import math
from typing import Any

from harness.contract.names import PARAM_STATE_POINTS, PARAM_STATE_STEP_POINTS
from harness.language.kinds.common import LAYER, MICROBATCH, RANKS, STEP_INDEX, UNIT, check_unit, position_matches
from harness.language.observed import CheckError, common, rank_docs, unit_name, unit_names
from harness.language.vocabulary import BOOL, BYTES, COUNT, TEXT, TEXTS, CheckKind, Context, Field, Reads, Selector

AFTER_FULLY_SHARD = "after_fully_shard"


def _check_point(value: Any, ctx: Context) -> str | None:
    return None if value in PARAM_STATE_POINTS else f"expected one of {list(PARAM_STATE_POINTS)}, got {value!r}"


def _check_call(value: Any, ctx: Context) -> str | None:
    if not isinstance(value, str):
        return f"expected the unit whose fully_shard call it follows: its module FQN or 'root', got {value!r}"
    return check_unit(value, ctx)


def _rules(values, ctx):
    point = values.get("point")
    if point is None:
        return [(None, f"a 'param_state' entry names its 'point', one of {list(PARAM_STATE_POINTS)}")]
    problems = []
    if point == AFTER_FULLY_SHARD:
        if "call" not in values:
            problems.append(
                ("point", "after_fully_shard names the 'call' it follows: a unit's module FQN or 'root', e.g. layers.0")
            )
        for key in ("step_index", "microbatch"):
            if key in values:
                problems.append((key, "after_fully_shard is before the first step: no step_index or microbatch"))
    elif "call" in values:
        problems.append(("call", f"'call' goes with point: after_fully_shard only, not {point!r}"))
    if point in PARAM_STATE_STEP_POINTS and "microbatch" in values:
        problems.append(("microbatch", f"{point} is taken once per step, outside its microbatches: no microbatch"))
    return problems


def _after_call(r: dict, obs: dict, call: str) -> dict[str, dict]:
    """Every parameter's state after the fully_shard call of unit ``call`` (FQN -> state)."""
    record = r.get("fully_shard_calls")
    if record is None:
        raise CheckError(f"rank {r['rank']}: no fully_shard calls recorded (an observation from before they were)")
    name = unit_name(obs, unit=call)
    made = [c["unit"] for c in record["calls"]]
    if name not in made:
        raise CheckError(f"rank {r['rank']}: no fully_shard call of unit {call!r}; calls: {made}")
    states = {s["fqn"]: s for s in record["before"]}
    for c in record["calls"][: made.index(name) + 1]:
        states.update({s["fqn"]: s for s in c["changed"]})
    return states


def _states(r: dict, obs: dict, sel: dict, units: set[str] | None) -> list[dict]:
    """The selected units' states at the entry's point: [{params, bytes, input_dtypes, output_dtypes}]."""
    point = sel["point"]
    if point != AFTER_FULLY_SHARD:
        return [
            s
            for s in r["param_states"]
            if s["point"] == point and (units is None or s["unit"] in units) and position_matches(s, sel)
        ]
    states = _after_call(r, obs, sel["call"])
    sizes = {p["fqn"]: p["element_size"] for p in r["params"]}
    chosen = [u["name"] for u in obs["fsdp_units"] if units is None or u["name"] in units]
    out = []
    for unit in chosen:
        ps = [states[p["fqn"]] for p in r["params"] if p["unit"] == unit and p["fqn"] in states]
        nbytes = sum(math.prod(p["shape"]) * sizes[p["fqn"]] for p in ps)
        out.append({"unit": unit, "params": ps, "bytes": nbytes})
    return out


def measure(sel, obs):
    units = unit_names(obs, sel)
    point = sel["point"]
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        states = _states(r, obs, sel, units)
        if not states:
            where = "".join(f", {k} {sel[k]}" for k in ("step_index", "microbatch") if k in sel)
            raise CheckError(f"rank {r['rank']}: no param state at {point!r} for units {sorted(units or [])}{where}")
        full = {p["fqn"]: p["full_shape"] for p in r["params"]}
        local = {p["fqn"]: p["local_shape"] for p in r["params"]}
        per_state = []
        for state in states:
            ps = state["params"]
            per_state.append(
                {
                    "count": len(ps),
                    "plain_tensors": sum(not p["is_dtensor"] for p in ps),
                    "dtensors": sum(p["is_dtensor"] for p in ps),
                    "full_shapes": all(p["shape"] == full.get(p["fqn"]) for p in ps),
                    "local_shapes": all(p["shape"] == local.get(p["fqn"]) for p in ps),
                    "bytes": state["bytes"],
                    "with_grad": sum(bool(p.get("grad")) for p in ps),
                    "placements": common([p.get("placements") for p in ps]),
                    "device": common([p.get("device") for p in ps]),
                    "input_dtypes": state.get("input_dtypes"),
                    "output_dtypes": state.get("output_dtypes"),
                }
            )
        # several units or steps: a field's common value, or the list when they differ
        out[r["rank"]] = {k: common([u[k] for u in per_state]) for k in per_state[0]}
    return out


KIND = CheckKind(
    name="param_state",
    order=50,
    reads=(Reads("params"), Reads("param_states"), Reads("fully_shard_calls")),
    doc="what a unit's parameters are at a point: after a fully_shard call, at FSDP's forward and backward hooks, "
    "after backward, the optimizer step and zero_grad",
    selectors=(
        LAYER,
        UNIT,
        Selector(
            "point",
            "after_fully_shard (with 'call'), pre_forward (after Step 0's all-gather), post_forward (after Step "
            "11's reshard), pre_backward, post_backward (right after FSDP's hooks), after_backward, "
            "after_optimizer_step, after_zero_grad, after_reset_iter_state (an aborted step's recovery)",
            _check_point,
        ),
        Selector(
            "call",
            "with point after_fully_shard: the unit whose fully_shard call it follows (module FQN or 'root'), "
            "before the next call",
            _check_call,
        ),
        STEP_INDEX,
        MICROBATCH,
        RANKS,
    ),
    fields=(
        Field("count", COUNT, "parameters of the unit"),
        Field("plain_tensors", COUNT, "parameters that are plain tensors (unsharded)"),
        Field("dtensors", COUNT, "parameters that are DTensors (sharded)"),
        Field("full_shapes", BOOL, "every parameter has its full shape"),
        Field("local_shapes", BOOL, "every parameter has its shard's shape (as after fully_shard)"),
        Field("bytes", BYTES, "bytes the unit's parameters occupy on this rank then"),
        Field(
            "with_grad",
            COUNT,
            "parameters whose tensor then has a gradient attached (.grad is not None; 0 after zero_grad(set_to_none))",
        ),
        Field(
            "placements",
            TEXTS,
            "the parameters' DTensor placements, e.g. ['Shard(dim=0)'] ([] for plain tensors; the list per "
            "parameter when they differ)",
        ),
        Field("device", TEXT, "the parameters' device type: cpu, cuda, meta (before materialization)"),
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
    rules=(_rules,),
)
