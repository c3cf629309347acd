"""``grad_norm``: what ``torch.nn.utils.clip_grad_norm_`` returned on each rank (its type,
placements and value) against the single-process reference's total norm at the same step."""

from __future__ import annotations

from harness.language.kinds.common import RANKS, STEP_INDEX, position_matches
from harness.language.observed import CheckError, common, rank_docs
from harness.language.vocabulary import BOOL, COUNT, DTYPE, NUMBER, TEXTS, CheckKind, Field


def measure(sel, obs):
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        chosen = [g for g in r.get("grad_norms", []) if position_matches(g, sel)]
        if not chosen:
            raise CheckError(
                f"rank {r['rank']}: no clip_grad_norm_ recorded"
                f"{' at step ' + str(sel['step_index']) if 'step_index' in sel else ''} "
                f"(a schedule step with clip_grad_norm records one)"
            )
        values = {
            "count": len(chosen),
            "value": common([g["value"] for g in chosen]),
            "is_dtensor": common([g["is_dtensor"] for g in chosen]),
            "placements": common([g["placements"] for g in chosen]),
            "dtype": common([g["dtype"] for g in chosen]),
            "clipped": common([g["value"] > g["max_norm"] if g["value"] is not None else None for g in chosen]),
        }
        if all(g["reference"] is not None and g["value"] is not None for g in chosen):
            diffs = [abs(g["value"] - g["reference"]) for g in chosen]
            values.update(
                reference=common([g["reference"] for g in chosen]),
                abs_diff=max(diffs),
                rel_diff=max(d / abs(g["reference"]) if g["reference"] else d for d, g in zip(diffs, chosen)),
            )
        out[r["rank"]] = values
    return out


KIND = CheckKind(
    name="grad_norm",
    doc="the total norm clip_grad_norm_ returned (DTensor placements, value) against the reference's at the same step",
    selectors=(STEP_INDEX, RANKS),
    fields=(
        Field("count", COUNT, "clip_grad_norm_ calls selected"),
        Field("value", NUMBER, "the returned total norm (its full_tensor() when a DTensor)"),
        Field("is_dtensor", BOOL, "the returned norm is a DTensor"),
        Field("placements", TEXTS, "its DTensor placements, e.g. ['Replicate()']"),
        Field("dtype", DTYPE, "its dtype"),
        Field("clipped", BOOL, "value > max_norm: the gradients were scaled down"),
        Field("reference", NUMBER, "the reference's total norm (needs numerics)"),
        Field("abs_diff", NUMBER, "|value - reference|"),
        Field("rel_diff", NUMBER, "|value - reference| / reference"),
    ),
    measure=measure,
)
