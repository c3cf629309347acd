"""``param``: one parameter after ``fully_shard``, per rank (the document's parameter and shard tables)."""

from __future__ import annotations

import re
from typing import Any

from harness.language.kinds.common import LAYER, RANKS
from harness.language.observed import find_param, param_fqn, rank_docs
from harness.language.suggest import closest_first, did_you_mean
from harness.language.vocabulary import (
    BOOL,
    BYTES,
    COUNT,
    DTYPE,
    OPTIONAL_BOOL,
    OPTIONAL_TEXT,
    SHAPE,
    TEXT,
    TEXTS,
    CheckKind,
    Context,
    Field,
    Reads,
    RecordKey,
    Selector,
)
from model.names import LAYER_PARAM_NAMES_REGISTRATION, MOE_LAYER_PARAM_NAMES_REGISTRATION

# a dense layer's names, then a sparse (MoE) layer's own: its experts and router
_LAYER_PARAM_NAMES = tuple(dict.fromkeys(LAYER_PARAM_NAMES_REGISTRATION + MOE_LAYER_PARAM_NAMES_REGISTRATION))


def _layer_names(ctx: Context) -> tuple[str, ...]:
    """The names a decoder layer of this setup's model has (a dense or a sparse layer's), or
    every layer name when the model is unknown."""
    if ctx.param_fqns is None:
        return _LAYER_PARAM_NAMES
    found = {m.group(1) for m in map(_IN_LAYER.match, ctx.param_fqns) if m}
    return tuple(n for n in _LAYER_PARAM_NAMES if n in found)


_IN_LAYER = re.compile(r"(?:.*\.)?layers\.\d+\.(.+)$")


def _check_param(value: Any, ctx: Context) -> str | None:
    names = _layer_names(ctx)
    if value in names:
        return None
    return (
        f"{value!r} is not the name of a parameter inside a decoder layer; {did_you_mean(value, names)}names: "
        f"{closest_first(value, names)} (outside the layers, name the full 'fqn')"
    )


def _check_fqn(value: Any, ctx: Context) -> str | None:
    if not isinstance(value, str):
        return f"expected a parameter's fully qualified name, got {value!r}"
    if ctx.param_fqns is not None and value not in ctx.param_fqns:
        return (
            f"the model of this setup has no parameter {value!r}; {did_you_mean(value, ctx.param_fqns)}"
            f"e.g. {closest_first(value, ctx.param_fqns)[:4]}"
        )
    return None


def _names_one(values, ctx):
    if "fqn" in values or ("param" in values and "layer" in values):
        return []
    return [(None, "a 'param' entry names 'param' with its 'layer' (e.g. with: {layer: 0}), or a full 'fqn'")]


def measure(sel, obs):
    fqn = param_fqn(obs, sel)
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        p = find_param(r, fqn)
        out[r["rank"]] = {
            **{
                k: p[k]
                for k in (
                    "full_shape",
                    "local_shape",
                    "numel",
                    "local_numel",
                    "dtype",
                    "element_size",
                    "is_dtensor",
                    "placements",
                    "mesh_dim_names",
                )
            },
            "bytes": p["numel"] * p["element_size"],
            "local_bytes": p["local_numel"] * p["element_size"],
            "requires_grad": p.get("requires_grad"),
            "device": p.get("device"),
            "grad_device": p.get("grad_device"),
            "optstate_device": p.get("optstate_device"),
            "pinned": p.get("pinned"),
            "grad_pinned": p.get("grad_pinned"),
            "finite": p.get("finite"),
            "unit": p.get("unit"),
        }
    return out


KIND = CheckKind(
    name="param",
    order=10,
    reads=(Reads("params"),),
    record_keys=(RecordKey("params", ("fqn",)),),
    doc="one parameter after fully_shard: full and local (shard) shape, elements, bytes, DTensor placements",
    selectors=(
        Selector(
            "param",
            "a parameter's name inside a decoder layer, e.g. self_attn.q_proj.weight (with 'layer')",
            _check_param,
        ),
        Selector("fqn", "a parameter's fully qualified name, e.g. model.embed_tokens.weight", _check_fqn),
        LAYER,
        RANKS,
    ),
    fields=(
        Field("full_shape", SHAPE, "the unsharded shape"),
        Field("local_shape", SHAPE, "this rank's shard shape (DTensor.to_local())"),
        Field("numel", COUNT, "elements of the full parameter"),
        Field("local_numel", COUNT, "elements of this rank's shard"),
        Field("dtype", DTYPE, "the parameter's dtype"),
        Field("element_size", COUNT, "bytes per element"),
        Field("bytes", BYTES, "bytes of the full parameter"),
        Field("local_bytes", BYTES, "bytes of this rank's shard"),
        Field("is_dtensor", BOOL, "the parameter is a DTensor"),
        Field("placements", TEXTS, "DTensor placements, e.g. ['Shard(dim=0)']"),
        Field("mesh_dim_names", TEXTS, "the DeviceMesh dims the placements refer to"),
        Field("requires_grad", BOOL, "false for a frozen parameter (setup.freeze)"),
        Field("unit", OPTIONAL_TEXT, "the FSDP unit managing it ('' the root); null: none (ignored_params)"),
        Field("device", TEXT, "device type of the shard: cpu, cuda (CPUOffloadPolicy: cpu)"),
        Field("grad_device", OPTIONAL_TEXT, "after the step: device type of its sharded gradient (null: none)"),
        Field(
            "optstate_device",
            OPTIONAL_TEXT,
            "after the step: device type of its optimizer state (null: none, e.g. SGD)",
        ),
        Field(
            "pinned",
            OPTIONAL_BOOL,
            "before the first step: the shard's storage is pinned host memory (Tensor.is_pinned(); "
            "CPUOffloadPolicy(pin_memory=True)); false on a device; null on meta or simulated",
        ),
        Field(
            "grad_pinned",
            OPTIONAL_BOOL,
            "after the step: its sharded gradient's storage is pinned host memory (null: no gradient)",
        ),
        Field(
            "finite",
            OPTIONAL_BOOL,
            "before the first step: every element of the shard is finite (false: NaN or inf, e.g. memory "
            "to_empty left uninitialized); null on meta or simulated",
        ),
    ),
    measure=measure,
    rules=(_names_one,),
)
