"""``input``: the batch each rank holds (the document's per-rank input table)."""

from __future__ import annotations

from harness.language.kinds.common import RANKS, check_ranks
from harness.language.observed import rank_docs
from harness.language.vocabulary import DTYPE, INTS, SHAPE, TEXT, CheckKind, Field, Reads, Selector


def measure(sel, obs):
    out = {}
    for r in rank_docs(obs, sel.get("rank", sel.get("ranks"))):
        output = r.get("output") or {}
        out[r["rank"]] = {
            **r["input"],
            "output_shape": output.get("shape"),
            "output_dtype": output.get("dtype"),
            "loss_dtype": output.get("loss_dtype"),
        }
    return out


KIND = CheckKind(
    name="input",
    order=30,
    reads=(Reads("input"), Reads("output")),
    doc="the model input each rank holds: shape, dtype, which samples of the global batch; "
    "the model's output and loss dtypes",
    selectors=(
        Selector("rank", "the rank whose input this is", check_ranks),
        RANKS,
    ),
    fields=(
        Field("name", TEXT, "hidden_states (decoder layers) or input_ids (causal LM)"),
        Field("shape", SHAPE, "the local input's shape, e.g. [B, L, d]"),
        Field("dtype", DTYPE, "the local input's dtype"),
        Field("samples", INTS, "indices of the global batch's samples this rank holds, found by matching rows"),
        Field("output_shape", SHAPE, "the model output's shape (the last step's)"),
        Field("output_dtype", DTYPE, "the model output's dtype (a root MixedPrecisionPolicy's output_dtype applied)"),
        Field("loss_dtype", DTYPE, "the loss's dtype"),
    ),
    measure=measure,
)
