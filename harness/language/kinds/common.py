"""Selectors several check kinds share (layer, unit, role, ranks), with their load-time rules."""

from __future__ import annotations

from typing import Any

from harness.contract.names import PHASES, UNIT_ROLES
from harness.language.vocabulary import Context, Selector


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
            return (
                f"layer(s) {outside} do not exist: the model has {ctx.num_layers} decoder layer"
                f"{'s' if ctx.num_layers != 1 else ''} (0-{ctx.num_layers - 1})"
            )
    return None


def check_unit(value: Any, ctx: Context) -> str | None:
    names = value if isinstance(value, list) else [value]
    if not all(isinstance(n, str) for n in names):
        return f"expected an FSDP unit's module FQN, 'root', or a list of them, got {value!r}"
    if ctx.unit_names is not None:
        unknown = [n for n in names if n != "root" and n not in ctx.unit_names]
        if unknown:
            return (
                f"no FSDP unit named {', '.join(map(repr, unknown))} in this setup; units: "
                f"{['root' if u == '' else u for u in ctx.unit_names]}"
            )
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


def check_step_index(value: Any, ctx: Context) -> str | None:
    """Why a 'step_index' selector names no step of the schedule (None when it does)."""
    indices = _ints(value)
    if indices is None or any(v < 0 for v in indices):
        return (
            f"expected a step index >= 0 (0-based over the schedule's repeated steps) or a list of them, got {value!r}"
        )
    if ctx.microbatches is not None:
        outside = [v for v in indices if v >= len(ctx.microbatches)]
        if outside:
            n = len(ctx.microbatches)
            return f"step(s) {outside} do not exist: the schedule runs {n} step{'s' if n != 1 else ''} (0-{n - 1})"
    return None


def check_microbatch(value: Any, ctx: Context) -> str | None:
    """Why a 'microbatch' selector names no microbatch of any step (None when it can)."""
    indices = _ints(value)
    if indices is None or any(v < 0 for v in indices):
        return f"expected a microbatch index >= 0 or a list of them, got {value!r}"
    if ctx.microbatches is not None:
        most = max(ctx.microbatches)
        outside = [v for v in indices if v >= most]
        if outside:
            return (
                f"microbatch(es) {outside} do not exist: no step of the schedule has more than {most} "
                f"microbatch{'es' if most != 1 else ''} (0-{most - 1})"
            )
    return None


STEP_INDEX = Selector(
    "step_index",
    "the schedule's step (0-based, repeats counted), a list of them; default: every step "
    "(named step_index: 'step' names a step tensor)",
    check_step_index,
)
MICROBATCH = Selector(
    "microbatch", "the microbatch within its step (0-based), a list of them; default: every one", check_microbatch
)


def check_phase(value: Any, ctx: Context) -> str | None:
    """A phase selector's value: a phase of ``harness.contract.names.PHASES`` or a list of them."""
    values = value if isinstance(value, list) else [value]
    bad = [v for v in values if v not in PHASES]
    return f"phase {', '.join(map(repr, bad))} cannot occur; expected one of {list(PHASES)}" if bad else None


def phase_matches(record: Any, sel: Any) -> bool:
    """Whether an observation record's phase meets the entry's ``phase`` selector (if any)."""
    if "phase" not in sel:
        return True
    return record.get("phase") in (sel["phase"] if isinstance(sel["phase"], list) else [sel["phase"]])


def position_matches(record: Any, sel: Any) -> bool:
    """Whether an observation record's step_index and microbatch meet the entry's selectors."""
    for key in ("step_index", "microbatch"):
        if key in sel:
            wanted = sel[key] if isinstance(sel[key], list) else [sel[key]]
            if record.get(key) not in wanted:
                return False
    return True


def param_needs_layer(kind: str):
    """An entry rule of kind ``kind``: a ``param`` (a name inside a decoder layer) needs its ``layer``."""

    def rule(values: Any, ctx: Context) -> list:
        if "param" in values and "layer" not in values:
            return [(None, f"a {kind!r} entry naming 'param' names its 'layer' too (or a full 'fqn')")]
        return []

    return rule
