"""``numerics``: the FSDP step against a non-sharded replica with the same weights and batch.

With ``setup.schedule`` the reference is the single-process run of the same schedule
(``harness/run/rank/recorders/updates.py``), computing in the policy's ``param_dtype`` and reducing in
its ``reduce_dtype``; the last forward's output and loss and the gradients after the last step
are compared (a gradient None on both sides is left out). ``param``/``fqn``/``layer``/``unit``
narrow the ``grads_*`` fields to those parameters' gradients (default: every one)."""

from __future__ import annotations

from harness.language.kinds.common import LAYER, RANKS, UNIT, param_needs_layer
from harness.language.kinds.param import KIND as PARAM
from harness.language.observed import CheckError, rank_docs, selected_fqns
from harness.language.vocabulary import COUNT, DTYPE, NUMBER, CheckKind, Field, Reads


def _rel(diff):
    ref = diff["max_abs_ref"]
    return diff["max_abs_diff"] / ref if ref else diff["max_abs_diff"]


def measure(sel, obs):
    out = {}
    fqns = selected_fqns(obs, sel)
    for r in rank_docs(obs, sel.get("ranks")):
        n = r["numerics"]
        if n is None:
            raise CheckError(f"rank {r['rank']}: no numerics recorded (simulated run)")
        grads = [g for g in n["grads"] if fqns is None or g["fqn"] in fqns]
        worst = max(grads, key=lambda g: g["max_abs_diff"]) if grads else None
        out[r["rank"]] = {
            "forward_max_abs_diff": n["forward_output"]["max_abs_diff"],
            "forward_rel_diff": _rel(n["forward_output"]),
            "grads_max_abs_diff": worst["max_abs_diff"] if worst else 0.0,
            "grads_rel_diff": max((_rel(g) for g in grads), default=0.0),
            "grads_count": len(grads),
            "loss_max_abs_diff": (n.get("loss") or {}).get("max_abs_diff"),
            "forward_nonfinite": n["forward_output"].get("nonfinite"),
            "loss_nonfinite": (n.get("loss") or {}).get("nonfinite"),
            "grads_nonfinite": sum(bool(g.get("nonfinite")) for g in grads),
            "replica_dtype": n["replica_dtype"],
            "reduce_dtype": n.get("reduce_dtype", "float32"),
        }
    return out


KIND = CheckKind(
    name="numerics",
    order=80,
    reads=(Reads("numerics"),),
    replica=True,
    doc="the sharded step against a non-sharded replica: forward output and each gradient shard (real runs only)",
    selectors=(PARAM.selector_index["param"], PARAM.selector_index["fqn"], LAYER, UNIT, RANKS),
    fields=(
        Field("forward_max_abs_diff", NUMBER, "largest |output - replica output|"),
        Field("forward_rel_diff", NUMBER, "forward_max_abs_diff / largest |replica output|"),
        Field("grads_max_abs_diff", NUMBER, "largest |gradient shard - replica's mean gradient rows|"),
        Field("grads_rel_diff", NUMBER, "the worst gradient's max abs diff / its largest |reference|"),
        Field("grads_count", COUNT, "gradient shards compared"),
        Field("loss_max_abs_diff", NUMBER, "|loss - replica loss|"),
        Field("forward_nonfinite", COUNT, "elements of this rank's output that are NaN or infinite"),
        Field("loss_nonfinite", COUNT, "1 when this rank's loss is NaN or infinite, else 0"),
        Field("grads_nonfinite", COUNT, "gradient shards holding a NaN or infinite element"),
        Field("replica_dtype", DTYPE, "the dtype the replica computed in"),
        Field(
            "reduce_dtype",
            DTYPE,
            "the dtype the reference summed gradients over ranks in (with a schedule the "
            "policy's reduce_dtype, else float32)",
        ),
    ),
    measure=measure,
    rules=(param_needs_layer("numerics"),),
)
