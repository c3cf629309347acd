"""``grad_norm``: what ``torch.nn.utils.clip_grad_norm_`` returned on each rank (its type,
placements, full and local value) and the factor it scaled the gradients by, against the
single-process reference at the same step.

The local value is the rank's own ``DTensor.to_local()``: for a ``Replicate()`` norm (``norm_type``
2, 1: the partial norms all-reduced inside ``clip_grad_norm_``) the full norm on every rank; for a
``Partial(max)`` norm (``norm_type: inf``) only the rank's own maximum, the norm of its shard
(``shard_reference``: the reference's norm of this rank's rows alone). torch 2.13's
``clip_grad_norm_`` scales every gradient by ``min(1, max_norm / (total_norm + 1e-6))``
(``torch.nn.utils.clip_grad._clip_grads_with_norm_``): ``clip_coef`` is what the gradients show."""

from __future__ import annotations

from harness.language.kinds.common import RANKS, STEP_INDEX, position_matches
from harness.language.observed import CheckError, common, rank_docs
from harness.language.vocabulary import BOOL, COUNT, DTYPE, NUMBER, TEXTS, CheckKind, Field, Reads


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
        values.update(_local_fields(chosen))
        if all(g["reference"] is not None and g["value"] is not None for g in chosen):
            diffs = [abs(g["value"] - g["reference"]) for g in chosen]
            values.update(
                reference=common([g["reference"] for g in chosen]),
                abs_diff=max(diffs),
                rel_diff=max(d / abs(g["reference"]) if g["reference"] else d for d, g in zip(diffs, chosen)),
            )
        out[r["rank"]] = values
    return out


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else abs(a - b)


def _local_fields(chosen: list) -> dict:
    """local_value and clip_coef, and where the records hold them their references; keys left out
    where no record has a value (a simulated run, no numerics)."""
    out = {}
    local = [g.get("local_value") for g in chosen]
    if all(v is not None for v in local):
        out["local_value"] = common(local)
        if all(g["value"] is not None for g in chosen):
            out["local_equals_value"] = common([v == g["value"] for v, g in zip(local, chosen)])
        shard = [g.get("shard_reference") for g in chosen]
        if all(v is not None for v in shard):
            out["shard_reference"] = common(shard)
            out["local_shard_rel_diff"] = max(_rel(v, s) for v, s in zip(local, shard))
    coefs = [g.get("clip_coef") for g in chosen]
    if all(c is not None for c in coefs):
        out["clip_coef"] = common(coefs)
        refs = [g.get("reference_clip_coef") for g in chosen]
        if all(r is not None for r in refs):
            out["reference_clip_coef"] = common(refs)
            out["clip_coef_rel_diff"] = max(_rel(c, r) for c, r in zip(coefs, refs))
    return out


KIND = CheckKind(
    name="grad_norm",
    order=110,
    reads=(
        Reads("grad_norms"),
        Reads("grad_norms.value", ("value", "clipped", "abs_diff", "rel_diff")),
        Reads("grad_norms.local_value", ("local_value", "local_equals_value")),
        Reads("grad_norms.reference", ("reference", "abs_diff", "rel_diff")),
        Reads("grad_norms.clip_coef", ("clip_coef", "clip_coef_rel_diff")),
        Reads("grad_norms.reference_clip_coef", ("reference_clip_coef", "clip_coef_rel_diff")),
        Reads("grad_norms.shard_reference", ("shard_reference", "local_shard_rel_diff")),
    ),
    replica=True,
    doc="the total norm clip_grad_norm_ returned (DTensor placements, full and local value) and the factor it "
    "scaled the gradients by, against the reference's at the same step",
    selectors=(STEP_INDEX, RANKS),
    fields=(
        Field("count", COUNT, "clip_grad_norm_ calls selected"),
        Field("value", NUMBER, "the returned total norm (its full_tensor() when a DTensor)"),
        Field("is_dtensor", BOOL, "the returned norm is a DTensor"),
        Field("placements", TEXTS, "its DTensor placements, e.g. ['Replicate()']"),
        Field("dtype", DTYPE, "its dtype"),
        Field("clipped", BOOL, "value > max_norm: the gradients were scaled down"),
        Field(
            "local_value",
            NUMBER,
            "this rank's local value of the returned norm (to_local(); read with no collective): the full norm "
            "for Replicate(), the rank's own maximum for Partial(max)",
        ),
        Field("local_equals_value", BOOL, "local_value == value (the rank holds the full norm)"),
        Field(
            "shard_reference",
            NUMBER,
            "the reference's norm of this rank's shard alone (its dim-0 rows of every gradient, before clipping; "
            "needs numerics)",
        ),
        Field("local_shard_rel_diff", NUMBER, "|local_value - shard_reference| / shard_reference"),
        Field(
            "clip_coef",
            NUMBER,
            "the factor clip_grad_norm_ scaled this rank's gradients by: largest |element| of its local gradients "
            "after over before (1: not scaled); torch: min(1, max_norm / (norm + 1e-6))",
        ),
        Field("reference_clip_coef", NUMBER, "the same factor for the reference's gradients (needs numerics)"),
        Field("clip_coef_rel_diff", NUMBER, "|clip_coef - reference_clip_coef| / reference_clip_coef"),
        Field("reference", NUMBER, "the reference's total norm (needs numerics)"),
        Field("abs_diff", NUMBER, "|value - reference|"),
        Field("rel_diff", NUMBER, "|value - reference| / reference"),
    ),
    measure=measure,
)
