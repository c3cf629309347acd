"""``step``: a named tensor of the document's Steps 1-10 (model/steps.py), per layer and rank."""

from __future__ import annotations

from typing import Any

from harness.language.kinds.common import LAYER, MICROBATCH, RANKS, STEP_INDEX, position_matches
from harness.language.observed import CheckError, common, rank_docs
from harness.language.suggest import closest_first, did_you_mean
from harness.language.vocabulary import COUNT, DTYPE, SHAPE, CheckKind, Context, Field, Reads, Selector
from model.steps import ALL_STEPS_BY_NAME

_STEP_NAMES = tuple(ALL_STEPS_BY_NAME)  # the dense layer's Steps, then a sparse layer's Step 9 (MOE_STEPS)


def _check_step(value: Any, ctx: Context) -> str | None:
    if value in _STEP_NAMES:
        return None
    return f"unknown step {value!r}; {did_you_mean(value, _STEP_NAMES)}steps: {closest_first(value, _STEP_NAMES)}"


def _names_step(values, ctx):
    return [] if "step" in values else [(None, f"a 'step' entry names its 'step', one of {list(_STEP_NAMES)}")]


def measure(sel, obs):
    name = sel["step"]
    layers = sel.get("layer", "all")
    wanted = layers if isinstance(layers, list) else [layers]
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        found = [
            s
            for s in r["steps"]
            if s["name"] == name and (layers == "all" or s["layer"] in wanted) and position_matches(s, sel)
        ]
        if not found:
            names = sorted({s["name"] for s in r["steps"]})
            raise CheckError(f"rank {r['rank']}: step {name!r} (layer {layers}) not observed; observed steps: {names}")
        # one value when every selected layer agrees, else the per-layer values (a failure shows them)
        out[r["rank"]] = {
            "shape": common([s["shape"] for s in found]),
            "dtype": common([s["dtype"] for s in found]),
            "dim0": common([s["shape"][0] for s in found]),
            "layers": len(found),
        }
    return out


KIND = CheckKind(
    name="step",
    order=40,
    reads=(Reads("steps"),),
    doc="a named tensor of Steps 1-10 (model/steps.py) in the selected layers (default: all)",
    selectors=(
        Selector("step", "a step tensor's name from model/steps.py, e.g. step2.q_heads", _check_step),
        LAYER,
        STEP_INDEX,
        MICROBATCH,
        RANKS,
    ),
    fields=(
        Field("shape", SHAPE, "the tensor's shape (the same in every selected layer)"),
        Field("dtype", DTYPE, "the tensor's dtype"),
        Field("dim0", COUNT, "the tensor's first dimension"),
        Field("layers", COUNT, "how many times the selected layers produced the tensor (once per layer per forward)"),
    ),
    measure=measure,
    rules=(_names_step,),
)
