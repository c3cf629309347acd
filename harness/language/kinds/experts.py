"""``experts``: a sparse (MoE) layer's experts on each rank: which experts its shard of a fused
expert parameter holds, how many of its tokens the router sent to each, and which experts'
gradient rows are zero after backward (``rank.experts``, harness/run/rank/recorders/experts.py)."""

from __future__ import annotations

from typing import Any

from harness.language.kinds.common import MICROBATCH, RANKS, STEP_INDEX, check_layer, position_matches
from harness.language.observed import CheckError, rank_docs
from harness.language.vocabulary import BOOL, COUNT, INTS, TEXTS, CheckKind, Context, Field, Reads, Selector

FUSED = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")


def _check_layer(value: Any, ctx: Context) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"expected one decoder layer index (a sparse layer), got {value!r}"
    return check_layer(value, ctx)


def _check_param(value: Any, ctx: Context) -> str | None:
    return None if value in FUSED else f"expected a fused expert parameter, one of {list(FUSED)}, got {value!r}"


def _names_layer(values, ctx):
    return [] if "layer" in values else [(None, "an 'experts' entry names its sparse 'layer' (e.g. with: {layer: 0})")]


def _section(r: Any) -> dict[str, Any]:
    experts = r.get("experts")
    if experts is None:
        raise CheckError(f"rank {r['rank']}: no experts recorded (the model has no sparse MoE layer)")
    return experts


def _counts(r: Any, layer: int, sel: Any) -> list[int]:
    """This rank's tokens per expert in the selected forwards of ``layer``, summed."""
    rows = [t for t in _section(r)["tokens"] if t["layer"] == layer and position_matches(t, sel)]
    if not rows:
        raise CheckError(
            f"rank {r['rank']}: layer {layer} routed no tokens in the selected forwards "
            f"(is it a sparse layer, and did it run?)"
        )
    if any(t["counts"] is None for t in rows):
        raise CheckError("token counts are not measured in a simulated run (fake tensors hold no data)")
    return [sum(col) for col in zip(*(t["counts"] for t in rows))]


def measure(sel, obs):
    layer, param = sel["layer"], sel.get("param", FUSED[0])
    world = obs.get("environment", {}).get("world_size")
    routed: list[int] | None = None
    if world is not None and len(obs["ranks"]) == world:  # every rank observed: the layer's global routing
        try:
            routed = [sum(col) for col in zip(*(_counts(r, layer, sel) for r in obs["ranks"]))]
        except CheckError:
            routed = None
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        shard = [s for s in _section(r)["shards"] if s["layer"] == layer and s["param"] == param]
        if not shard:
            raise CheckError(f"rank {r['rank']}: layer {layer} has no {param} (not a sparse layer?)")
        held = shard[0]["experts"]
        values: dict[str, Any] = {"held": held, "held_count": len(held), "placements": shard[0]["placements"]}
        tokens = [t for t in _section(r)["tokens"] if t["layer"] == layer and position_matches(t, sel)]
        if tokens and all(t["counts"] is not None for t in tokens):
            counts = _counts(r, layer, sel)
            values.update(tokens=counts, tokens_total=sum(counts), unrouted_here=sum(1 for c in counts if c == 0))
        if routed is not None:
            values["unrouted_anywhere"] = sum(1 for c in routed if c == 0)
        grads = [
            g
            for g in _section(r)["zero_grad_rows"]
            if g["layer"] == layer and g["param"] == param and position_matches(g, sel)
        ]
        if grads and all(g["zero_rows"] is not None for g in grads):
            zero = grads[-1]["zero_rows"]  # the selected backward's (the last, if several)
            values["zero_grad_rows"] = zero
            if routed is not None:
                values["zero_grad_rows_are_unrouted"] = zero == [e for e in held if routed[e] == 0]
        out[r["rank"]] = values
    return out


KIND = CheckKind(
    name="experts",
    order=210,
    reads=(
        Reads("experts"),
        Reads("experts.tokens.counts", ("tokens", "tokens_total", "unrouted_here", "unrouted_anywhere")),
        Reads("experts.zero_grad_rows.zero_rows", ("zero_grad_rows", "zero_grad_rows_are_unrouted")),
    ),
    doc="a sparse layer's experts per rank: those its shard holds, the tokens routed to each, the zero gradient rows",
    selectors=(
        Selector("layer", "the sparse decoder layer (one index)", _check_layer),
        Selector(
            "param",
            f"the fused expert parameter whose shard is looked at, one of {list(FUSED)} (default {FUSED[0]})",
            _check_param,
        ),
        STEP_INDEX,
        MICROBATCH,
        RANKS,
    ),
    fields=(
        Field(
            "held",
            INTS,
            "experts whose rows the rank's shard holds (Shard(0): whole experts; Shard(d>0): a slice "
            "of every expert), ascending",
        ),
        Field("held_count", COUNT, "how many experts the shard holds rows of (0: an empty expert shard)"),
        Field("placements", TEXTS, "the fused parameter's DTensor placements, e.g. ['Shard(dim=0)']"),
        Field(
            "tokens",
            INTS,
            "(token, slot) pairs of this rank's tokens the router sent to each expert, E counts (real runs)",
        ),
        Field("tokens_total", COUNT, "their sum: B*L*k per forward"),
        Field("unrouted_here", COUNT, "experts none of this rank's tokens went to"),
        Field("unrouted_anywhere", COUNT, "experts no rank's token went to (needs every rank observed)"),
        Field("zero_grad_rows", INTS, "held experts whose rows of the sharded gradient are all zero after backward"),
        Field(
            "zero_grad_rows_are_unrouted",
            BOOL,
            "the zero gradient rows are exactly the held experts no rank routed a token to",
        ),
    ),
    measure=measure,
    rules=(_names_layer,),
)
