"""``param_update``: which rows of each rank's shard a step changed, and the shard against the
single-process reference of the same schedule (``harness/run/rank/recorders/updates.py``).

A row is an index along dim 0 (FSDP2's ``Shard(0)`` dim; a 1-D parameter's elements). Select
one parameter (``param`` with ``layer``, or ``fqn``), or every parameter of some units
(``layer``/``unit`` alone), or all; ``step_index`` chooses steps (default: every step). Counts
add up over the selected parameters and steps, differences take their largest.
"""

from __future__ import annotations

from harness.language.kinds.common import LAYER, RANKS, STEP_INDEX, UNIT, param_needs_layer, position_matches
from harness.language.kinds.param import KIND as PARAM
from harness.language.observed import CheckError, rank_docs, selected_fqns
from harness.language.vocabulary import BOOL, COUNT, INTS, NUMBER, CheckKind, Field, Reads


def measure(sel, obs):
    fqns = selected_fqns(obs, sel)
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        if "param_updates" not in r:
            raise CheckError(
                f"rank {r['rank']}: no parameter updates recorded (they are recorded with a "
                f"setup.schedule, on real ranks)"
            )
        chosen = [u for u in r["param_updates"] if (fqns is None or u["fqn"] in fqns) and position_matches(u, sel)]
        if not chosen:
            raise CheckError(
                f"rank {r['rank']}: no parameter update for {sorted(fqns) if fqns else 'any parameter'}"
                f"{' at step ' + str(sel['step_index']) if 'step_index' in sel else ''}"
            )
        rows = sum(u["rows"] for u in chosen)
        changed = sum(u["rows_changed"] for u in chosen)
        values = {
            "params": len({u["fqn"] for u in chosen}),
            "rows": rows,
            "rows_changed": changed,
            "rows_unchanged": rows - changed,
            "all_rows_changed": changed == rows,
            "unchanged_rows": sorted({i for u in chosen for i in u["unchanged_rows"]}),
        }
        if all("max_abs_diff" in u for u in chosen):
            diff = max(u["max_abs_diff"] for u in chosen)
            ref = max(u["max_abs_ref"] for u in chosen)
            values.update(
                max_abs_diff=diff,
                rel_diff=diff / ref if ref else diff,
                ref_rows_changed=sum(u["ref_rows_changed"] for u in chosen),
                same_rows_as_reference=all(u["same_rows_as_reference"] for u in chosen),
            )
        out[r["rank"]] = values
    return out


KIND = CheckKind(
    name="param_update",
    order=100,
    reads=(
        Reads("param_updates"),
        Reads("param_updates.max_abs_diff", ("max_abs_diff", "rel_diff")),
        Reads("param_updates.max_abs_ref", ("rel_diff",)),
    ),
    replica=True,
    doc="rows of each rank's shard a step changed, and the shard against a single-process reference of the "
    "same schedule",
    selectors=(
        PARAM.selector_index["param"],
        PARAM.selector_index["fqn"],
        LAYER,
        UNIT,
        STEP_INDEX,
        RANKS,
    ),
    fields=(
        Field("params", COUNT, "parameters selected"),
        Field("rows", COUNT, "rows of the selected shards (summed over parameters and steps)"),
        Field("rows_changed", COUNT, "rows in which any element changed over the step"),
        Field("rows_unchanged", COUNT, "rows - rows_changed"),
        Field("all_rows_changed", BOOL, "every selected row changed"),
        Field("unchanged_rows", INTS, "global row indices that did not change (the first 64 per parameter and step)"),
        Field("max_abs_diff", NUMBER, "largest |shard - reference rows| after the step (needs numerics)"),
        Field("rel_diff", NUMBER, "max_abs_diff / largest |reference rows|"),
        Field("ref_rows_changed", COUNT, "rows of the same shards the reference's step changed"),
        Field("same_rows_as_reference", BOOL, "the changed rows are exactly the reference's, for every selected shard"),
    ),
    measure=measure,
    rules=(param_needs_layer("param_update"),),
)
