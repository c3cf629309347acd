"""``forward_input``: what the root's forward received, per forward, once FSDP's pre-forward hook ran.

Schedule ``forward_input`` passes the rank's input tensor positionally, by keyword, in a
dataclass, a dict or a ``collections.UserDict``; FSDP2's ``cast_forward_inputs`` reaches the
tensor in each but the last (torch 2.13 ``torch.distributed.utils._apply_to_tensors``). Recorded
by ``harness/run/rank/forward_input.py`` (rank ``forward_inputs``).
"""

from __future__ import annotations

from harness.language.kinds.common import MICROBATCH, RANKS, STEP_INDEX, position_matches
from harness.language.observed import CheckError, common, rank_docs
from harness.language.vocabulary import COUNT, DTYPE, SHAPE, CheckKind, Field, Reads, one_of


def measure(sel, obs):
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        chosen = [f for f in r.get("forward_inputs") or [] if position_matches(f, sel)]
        if not chosen:
            raise CheckError(
                f"rank {r['rank']}: no forward recorded"
                f"{' at step ' + str(sel['step_index']) if 'step_index' in sel else ''}"
                f"{' microbatch ' + str(sel['microbatch']) if 'microbatch' in sel else ''}"
            )
        out[r["rank"]] = {
            "forwards": len(chosen),
            "argument": common([f["argument"] for f in chosen]),
            "container": common([f["container"] for f in chosen]),
            "dtype": common([f["dtype"] for f in chosen]),
            "shape": common([f["shape"] for f in chosen]),
        }
    return out


KIND = CheckKind(
    name="forward_input",
    order=35,
    reads=(Reads("forward_inputs"),),
    doc="what the root's forward received (schedule forward_input), after FSDP's pre-forward cast",
    selectors=(STEP_INDEX, MICROBATCH, RANKS),
    fields=(
        Field("forwards", COUNT, "forwards selected"),
        Field("argument", one_of("argument", ("positional", "keyword")), "how the input tensor was passed"),
        Field(
            "container",
            one_of("container", ("Tensor", "ForwardBatch", "dict", "UserDict")),
            "what held the tensor: Tensor (positional, keyword), ForwardBatch (dataclass), dict, UserDict",
        ),
        Field("dtype", DTYPE, "the tensor's dtype as the root's forward received it (param_dtype where FSDP cast it)"),
        Field("shape", SHAPE, "the tensor's shape, e.g. [B, L, d]"),
    ),
    measure=measure,
)
