"""``params_total``: sums over the parameters of some FSDP units, per rank (the tables' totals)."""

from __future__ import annotations

from harness.language.kinds.common import LAYER, RANKS, ROLE, UNIT
from harness.language.observed import rank_docs, unit_names
from harness.language.vocabulary import BYTES, COUNT, CheckKind, Field, Reads


def _params_of(obs, sel, rank_doc):
    # unit_names raises CheckError for a unit or layer the run does not have; a unit that holds no
    # parameters (a root above its layers) is a selection of zero parameters, checked as such.
    names = unit_names(obs, sel)
    params = rank_doc["params"]
    if names is not None:
        params = [p for p in params if p["unit"] in names]
    return params


def measure(sel, obs):
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        params = _params_of(obs, sel, r)
        out[r["rank"]] = {
            "count": len(params),
            "numel": sum(p["numel"] for p in params),
            "local_numel": sum(p["local_numel"] for p in params),
            "bytes": sum(p["numel"] * p["element_size"] for p in params),
            "local_bytes": sum(p["local_numel"] * p["element_size"] for p in params),
        }
    return out


KIND = CheckKind(
    name="params_total",
    order=20,
    reads=(Reads("params"),),
    doc="totals over the parameters of the selected units (default: all): count, elements, bytes, per-rank shares",
    selectors=(LAYER, UNIT, ROLE, RANKS),
    fields=(
        Field("count", COUNT, "number of parameters"),
        Field("numel", COUNT, "elements of the full parameters"),
        Field("local_numel", COUNT, "elements this rank holds"),
        Field("bytes", BYTES, "bytes of the full parameters"),
        Field("local_bytes", BYTES, "bytes this rank holds"),
    ),
    measure=measure,
)
