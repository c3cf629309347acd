"""``buffer``: one buffer of the model before the first step, per rank (RoPE's ``inv_freq``).

FSDP2 does not shard buffers: each rank holds the whole buffer as the model registered it. A
model built on ``meta`` and materialized with ``to_empty()`` holds uninitialized memory there
until its init recomputes it (``setup.init: {device: meta, repair: false}`` leaves it, NaN).
"""

from __future__ import annotations

from typing import Any

from harness.language.kinds.common import RANKS
from harness.language.observed import CheckError, rank_docs
from harness.language.vocabulary import DTYPE, OPTIONAL_BOOL, SHAPE, TEXT, CheckKind, Context, Field, Reads, Selector


def _check_fqn(value: Any, ctx: Context) -> str | None:
    return None if isinstance(value, str) and value else f"expected a buffer's fully qualified name, got {value!r}"


def _names_fqn(values, ctx):
    return [] if "fqn" in values else [(None, "a 'buffer' entry names the buffer's 'fqn', e.g. rotary_emb.inv_freq")]


def measure(sel, obs):
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        if "buffers" not in r:
            raise CheckError(f"rank {r['rank']}: no buffers recorded (an observation from before they were)")
        found = [b for b in r["buffers"] if b["fqn"] == sel["fqn"]]
        if not found:
            raise CheckError(f"rank {r['rank']}: no buffer {sel['fqn']!r}; buffers: {[b['fqn'] for b in r['buffers']]}")
        b = found[0]
        out[r["rank"]] = {k: b[k] for k in ("shape", "dtype", "device", "finite")}
    return out


KIND = CheckKind(
    name="buffer",
    order=230,
    reads=(Reads("buffers"),),
    doc="one buffer of the model before the first step (not sharded: RoPE's inv_freq): shape, dtype, device, finite",
    selectors=(
        Selector("fqn", "the buffer's fully qualified name, e.g. model.rotary_emb.inv_freq", _check_fqn),
        RANKS,
    ),
    fields=(
        Field("shape", SHAPE, "the buffer's shape (whole on every rank)"),
        Field("dtype", DTYPE, "its dtype"),
        Field("device", TEXT, "its device type"),
        Field("finite", OPTIONAL_BOOL, "every element is finite (false: a NaN or inf; null: meta or simulated)"),
    ),
    measure=measure,
    rules=(_names_fqn,),
)
