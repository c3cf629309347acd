"""Selectors several check kinds share (layer, unit, role, ranks), with their load-time rules."""

from __future__ import annotations

from typing import Any

from harness.judge.vocabulary import Context, Selector
from harness.run.recorders.names import UNIT_ROLES

def _ints(value: Any) -> list | None:
    values = value if isinstance(value, list) else [value]
    return values if all(isinstance(v, int) and not isinstance(v, bool) for v in values) else None


def check_layer(value: Any, ctx: Context) -> str | None:
    if value == "all":
        return None
    layers = _ints(value)
    if layers is None or any(v < 0 for v in layers):
        return f"expected a decoder layer index >= 0, a list of them, or 'all', got {value!r}"
    if ctx.num_layers is not None:
        outside = [v for v in layers if v >= ctx.num_layers]
        if outside:
            return (f"layer(s) {outside} do not exist: the model has {ctx.num_layers} decoder layer"
                    f"{'s' if ctx.num_layers != 1 else ''} (0-{ctx.num_layers - 1})")
    return None


def check_unit(value: Any, ctx: Context) -> str | None:
    names = value if isinstance(value, list) else [value]
    if not all(isinstance(n, str) for n in names):
        return f"expected an FSDP unit's module FQN, 'root', or a list of them, got {value!r}"
    if ctx.unit_names is not None:
        unknown = [n for n in names if n != "root" and n not in ctx.unit_names]
        if unknown:
            return (f"no FSDP unit named {', '.join(map(repr, unknown))} in this setup; units: "
                    f"{['root' if u == '' else u for u in ctx.unit_names]}")
    return None


def check_role(value: Any, ctx: Context) -> str | None:
    return None if value in UNIT_ROLES else f"expected one of {list(UNIT_ROLES)}, got {value!r}"


def check_ranks(value: Any, ctx: Context) -> str | None:
    """Why a 'rank'/'ranks' selector does not name ranks of the world (None when it does)."""
    if ctx.world_size is None:
        return None
    valid = f"a rank 0-{ctx.world_size - 1} (world size {ctx.world_size}), a list of them, or 'all'"
    if value == "all":
        return None
    ranks = _ints(value)
    if ranks is None:
        return f"expected {valid}, got {value!r}"
    outside = [r for r in ranks if not 0 <= r < ctx.world_size]
    if outside:
        return f"rank(s) {outside} outside the world; expected {valid}"
    return None


LAYER = Selector("layer", "decoder layer index, a list of them, or 'all'", check_layer)
UNIT = Selector("unit", "an FSDP unit: its module FQN, 'root', or a list of them", check_unit)
ROLE = Selector("role", "units by role: 'layer' (decoder layers), 'root', or 'module' (any other unit)", check_role)
RANKS = Selector("ranks", "which ranks must meet the entry (default: every observed rank)", check_ranks)
