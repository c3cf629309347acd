"""``unit_dtypes``: the mixed-precision dtypes each FSDP unit resolved at lazy init, per forward.

torch 2.13's ``FSDPParamGroup._init_mp_dtypes`` (run once, at the root's first forward) resolves a
unit's ``_orig_dtype`` (what reduced gradients are cast back to) and ``_reduce_dtype`` (the
reduce-scatter's dtype) from the parameters that require a gradient *then*; a unit all frozen at
that point keeps None for both, whatever is unfrozen later (pytorch/pytorch#186998). Recorded after
every forward phase (rank ``unit_dtypes``, ``harness/run/rank/recorders/grads.py``), with how many of the
unit's parameters are trainable at that point. The policy's own dtypes are ``fsdp_units[].state``'s.
"""

from __future__ import annotations

from harness.language.kinds.common import LAYER, MICROBATCH, RANKS, ROLE, STEP_INDEX, UNIT, position_matches
from harness.language.observed import CheckError, common, rank_docs, unit_names
from harness.language.vocabulary import COUNT, OPTIONAL_DTYPE, CheckKind, Field, Reads


def measure(sel, obs):
    names = unit_names(obs, sel)
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        chosen = [
            u for u in r.get("unit_dtypes") or [] if (names is None or u["unit"] in names) and position_matches(u, sel)
        ]
        if not chosen:
            raise CheckError(
                f"rank {r['rank']}: no resolved unit dtypes for {sorted(names) if names else 'any unit'}"
                f"{' at step ' + str(sel['step_index']) if 'step_index' in sel else ''} "
                f"(recorded after each forward, for units that manage parameters)"
            )
        positions: dict[tuple, int] = {}
        for u in chosen:
            key = (u["step_index"], u["microbatch"])
            positions[key] = positions.get(key, 0) + u["trainable"]
        out[r["rank"]] = {
            "units": len({u["unit"] for u in chosen}),
            "orig_dtype": common([u["orig_dtype"] for u in chosen]),
            "reduce_dtype": common([u["reduce_dtype"] for u in chosen]),
            "trainable": common(list(positions.values())),
        }
    return out


KIND = CheckKind(
    name="unit_dtypes",
    order=130,
    reads=(Reads("unit_dtypes"),),
    doc="the dtypes each FSDP unit's parameter group resolved at lazy init (orig, reduce), after each forward",
    selectors=(LAYER, UNIT, ROLE, STEP_INDEX, MICROBATCH, RANKS),
    fields=(
        Field("units", COUNT, "units selected (those that manage parameters)"),
        Field(
            "orig_dtype",
            OPTIONAL_DTYPE,
            "FSDPParamGroup._orig_dtype: the dtype reduced gradients are cast back to (null: unresolved, the unit "
            "had no trainable parameter at lazy init)",
        ),
        Field(
            "reduce_dtype",
            OPTIONAL_DTYPE,
            "FSDPParamGroup._reduce_dtype: the dtype gradients are reduce-scattered in (null: the gradients' own "
            "dtype, or unresolved)",
        ),
        Field(
            "trainable",
            COUNT,
            "the selected units' parameters with requires_grad after the forward (summed over units, per forward)",
        ),
    ),
    measure=measure,
)
