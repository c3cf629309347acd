"""``fsdp_units``: which FSDP units ``fully_shard`` made, in the order it was applied, and the
parameters each manages, from the run's ``fsdp_units`` records (the same on every rank)."""

from __future__ import annotations

from harness.language.kinds.common import LAYER, RANKS, ROLE, UNIT
from harness.language.observed import rank_docs, unit_names, units
from harness.language.vocabulary import COUNT, INTS, TEXTS, CheckKind, Field, Reads, RecordKey


def measure(sel, obs):
    # unit_names raises CheckError for a unit or layer the run does not have
    names = unit_names(obs, sel)
    chosen = [u for u in units(obs) if names is None or u["name"] in names]

    def contexts(key: str) -> list[str]:  # the distinct comm contexts, each named by the unit that made it
        owners = [u.get("state", {}).get(key) for u in chosen]
        return [("root" if o == "" else o) for o in dict.fromkeys(owners) if o is not None]

    values = {
        "count": len(chosen),
        "names": [u["name"] or "root" for u in chosen],
        "param_counts": [len(u["params"]) for u in chosen],
        "params": sum(len(u["params"]) for u in chosen),
        "comm_contexts": contexts("comm_ctx_unit"),
        "comm_contexts_at_setup": contexts("comm_ctx_unit_at_setup"),
    }
    return {r["rank"]: dict(values) for r in rank_docs(obs, sel.get("ranks"))}


KIND = CheckKind(
    name="fsdp_units",
    order=240,
    reads=(Reads("fsdp_units"),),
    record_keys=(RecordKey("fsdp_units", ("name",)),),
    doc="the FSDP units fully_shard made (default: all), in the order it was applied: how many, their module "
    "names, the parameters each manages",
    selectors=(LAYER, UNIT, ROLE, RANKS),
    fields=(
        Field("count", COUNT, "number of units"),
        Field("names", TEXTS, "their module FQNs in fully_shard order ('root' for the root module)"),
        Field("param_counts", INTS, "parameters each unit manages, in the same order"),
        Field("params", COUNT, "parameters the units manage together"),
        Field(
            "comm_contexts",
            TEXTS,
            "the distinct FSDPCommContexts (CUDA streams, FSDP's comm state) the units hold after the step, each "
            "named by the unit whose state made it ('root' for the root): one root hands its own to every unit",
        ),
        Field(
            "comm_contexts_at_setup",
            TEXTS,
            "the same right after the fully_shard calls and setup.fsdp.share_comm_ctx, before the root's lazy init",
        ),
    ),
    measure=measure,
)
