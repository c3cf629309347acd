"""``all_gather_extension``: what a parameter's ``fsdp_pre_all_gather`` / ``fsdp_post_all_gather``
received and gave back (rank ``all_gather_extensions``,
``harness/run/rank/recorders/all_gather_extensions.py``).

A parameter whose local tensor defines both (a tensor subclass: the float8 pattern) chooses what
FSDP all-gathers in place of its shard (pre) and builds the unsharded parameter from what was
gathered (post; torch 2.13 ``FSDPParam.all_gather_inputs`` and ``init_unsharded_param``). Select
a ``call``, parameters (``param`` with ``layer``, ``fqn``, ``layer``/``unit``), steps and phases; a value is
the one every selected call shares (a list of the values when they differ).
"""

from __future__ import annotations

from harness.language.kinds.common import (
    LAYER,
    MICROBATCH,
    RANKS,
    STEP_INDEX,
    UNIT,
    check_phase,
    param_needs_layer,
    phase_matches,
    position_matches,
)
from harness.language.kinds.param import KIND as PARAM
from harness.language.observed import CheckError, common, rank_docs, selected_fqns
from harness.language.vocabulary import (
    COUNT,
    JSON,
    OPTIONAL_BOOL,
    OPTIONAL_DTYPE,
    TEXTS,
    CheckKind,
    Field,
    Reads,
    Selector,
)


def _check_call(value, ctx):
    return None if value in ("pre", "post") else f"expected pre or post, got {value!r}"


def measure(sel, obs):
    fqns = selected_fqns(obs, sel)
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        chosen = [
            c
            for c in r.get("all_gather_extensions") or []
            if c["call"] == sel["call"]
            and (fqns is None or c["fqn"] in fqns)
            and position_matches(c, sel)
            and phase_matches(c, sel)
        ]
        if not chosen:
            which = "any parameter" if fqns is None else (sorted(fqns) or "the selected units (they manage none)")
            raise CheckError(
                f"rank {r['rank']}: no fsdp_{sel['call']}_all_gather call recorded for {which} (only parameters "
                f"whose local tensor defines both extension methods have one)"
            )
        out[r["rank"]] = {
            "calls": len(chosen),
            "params": len({c["fqn"] for c in chosen}),
            "received_dtypes": common([c["received_dtypes"] for c in chosen]),
            "received_shapes": common([c["received_shapes"] for c in chosen]),
            "returned_dtypes": common([c.get("returned_dtypes") for c in chosen]),
            "returned_shapes": common([c.get("returned_shapes") for c in chosen]),
            "param_dtype": common([c.get("param_dtype") for c in chosen]),
            "into_out": common([c.get("into_out") for c in chosen]),
        }
    return out


def _names_call(values, ctx):
    return [] if "call" in values else [(None, "an 'all_gather_extension' entry names its 'call': pre or post")]


KIND = CheckKind(
    name="all_gather_extension",
    order=65,
    reads=(Reads("all_gather_extensions"),),
    doc="what a parameter's all-gather extension (fsdp_pre_all_gather / fsdp_post_all_gather) received and returned",
    selectors=(
        Selector("call", "pre (fsdp_pre_all_gather) or post (fsdp_post_all_gather)", _check_call),
        PARAM.selector_index["param"],
        PARAM.selector_index["fqn"],
        LAYER,
        UNIT,
        STEP_INDEX,
        MICROBATCH,
        Selector("phase", "the phase the call ran in (forward, backward, ...), a value or a list", check_phase),
        RANKS,
    ),
    fields=(
        Field("calls", COUNT, "calls selected"),
        Field("params", COUNT, "distinct parameters among them"),
        Field("received_dtypes", TEXTS, "pre: [the local shard's dtype]; post: the all-gather outputs' dtypes"),
        Field("received_shapes", JSON, "pre: [the local shard's shape]; post: the all-gather outputs' shapes"),
        Field(
            "returned_dtypes",
            TEXTS,
            "pre: the dtypes it hands FSDP to all-gather; post: [the unsharded parameter's] ([] when written into out)",
        ),
        Field("returned_shapes", JSON, "pre: the all-gather inputs' shapes; post: the unsharded parameter's"),
        Field(
            "param_dtype",
            OPTIONAL_DTYPE,
            "post: the dtype FSDP passed (param_dtype, else the parameter's own); null for pre",
        ),
        Field(
            "into_out",
            OPTIONAL_BOOL,
            "post: FSDP passed out= (the unsharded buffer from an earlier all-gather, reused)",
        ),
    ),
    measure=measure,
    rules=(param_needs_layer("all_gather_extension"), _names_call),
)
