"""``grads``: each parameter's gradient after a step: whether it requires one, has one, its dtype,
its local shape, and the ``Parameter.grad_dtype`` autograd was asked for (rank ``grads``,
``harness/run/rank/recorders/grads.py``).

Select one parameter (``param`` with ``layer``, or ``fqn``), every parameter of some units
(``layer``/``unit`` alone), or all; ``step_index`` chooses steps (default: every recorded step).
Counts add up over the selected parameters and steps; a dtype or shape is the one every selected
record shares (a list of the values when they differ).
"""

from __future__ import annotations

from harness.language.kinds.common import LAYER, RANKS, STEP_INDEX, UNIT, param_needs_layer, position_matches
from harness.language.kinds.param import KIND as PARAM
from harness.language.observed import CheckError, common, rank_docs, selected_fqns
from harness.language.vocabulary import COUNT, OPTIONAL_DTYPE, OPTIONAL_SHAPE, CheckKind, Field, Reads


def measure(sel, obs):
    fqns = selected_fqns(obs, sel)
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        chosen = [g for g in r.get("grads") or [] if (fqns is None or g["fqn"] in fqns) and position_matches(g, sel)]
        if not chosen:
            raise CheckError(
                f"rank {r['rank']}: no gradient record for {sorted(fqns) if fqns else 'any parameter'}"
                f"{' at step ' + str(sel['step_index']) if 'step_index' in sel else ''} "
                f"(recorded after each step that completes)"
            )
        with_grad = [g for g in chosen if g["grad_dtype"] is not None]
        out[r["rank"]] = {
            "params": len({g["fqn"] for g in chosen}),
            "trainable": sum(g["requires_grad"] for g in chosen),
            "with_grad": len(with_grad),
            "grad_dtype": common([g["grad_dtype"] for g in with_grad]),
            "param_grad_dtype": common([g["param_grad_dtype"] for g in chosen]),
            "grad_local_shape": common([g["grad_local_shape"] for g in chosen]),
        }
    return out


KIND = CheckKind(
    name="grads",
    order=120,
    reads=(Reads("grads"),),
    doc="each parameter's gradient after a step: requires_grad, has one, its dtype and local shape, and its "
    "Parameter.grad_dtype",
    selectors=(
        PARAM.selector_index["param"],
        PARAM.selector_index["fqn"],
        LAYER,
        UNIT,
        STEP_INDEX,
        RANKS,
    ),
    fields=(
        Field("params", COUNT, "parameters selected"),
        Field("trainable", COUNT, "selected parameters with requires_grad (summed over the selected steps)"),
        Field("with_grad", COUNT, "selected parameters holding a .grad after the step (summed over the steps)"),
        Field(
            "grad_dtype",
            OPTIONAL_DTYPE,
            "the dtype of their gradients (null: none has a gradient; a list when they differ)",
        ),
        Field(
            "param_grad_dtype",
            OPTIONAL_DTYPE,
            "their Parameter.grad_dtype: the dtype autograd is asked to accumulate the gradient in (null: this torch "
            "has none)",
        ),
        Field(
            "grad_local_shape",
            OPTIONAL_SHAPE,
            "the shape of the gradient's local tensor (DTensor.to_local()), null without a gradient",
        ),
    ),
    measure=measure,
    rules=(param_needs_layer("grads"),),
)
