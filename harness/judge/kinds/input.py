"""``input``: the batch each rank holds (the document's per-rank input table)."""

from __future__ import annotations

from harness.judge.kinds.common import RANKS, check_ranks
from harness.judge.observed import rank_docs
from harness.judge.vocabulary import DTYPE, INTS, SHAPE, TEXT, CheckKind, Field, Selector


def measure(sel, obs):
    return {r["rank"]: dict(r["input"]) for r in rank_docs(obs, sel.get("rank", sel.get("ranks")))}


KIND = CheckKind(
    name="input",
    doc="the model input each rank holds: shape, dtype, which samples of the global batch",
    selectors=(
        Selector("rank", "the rank whose input this is", check_ranks),
        RANKS,
    ),
    fields=(
        Field("name", TEXT, "hidden_states (decoder layers) or input_ids (causal LM)"),
        Field("shape", SHAPE, "the local input's shape, e.g. [B, L, d]"),
        Field("dtype", DTYPE, "the local input's dtype"),
        Field("samples", INTS, "indices of the global batch's samples this rank holds, found by matching rows"),
    ),
    measure=measure,
)
