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
    values = {
        "count": len(chosen),
        "names": [u["name"] or "root" for u in chosen],
        "param_counts": [len(u["params"]) for u in chosen],
        "params": sum(len(u["params"]) for u in chosen),
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
    ),
    measure=measure,
)
