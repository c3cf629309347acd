"""``memory``: FSDPMemTracker's snapshot of a rank's bytes by category at a unit's state.

The bytes are the tracked storages' real sizes (a snapshot's ``unrounded_bytes``), the same on
every device: on CUDA the tracker's own figure (``bytes``) rounds each storage up to 512 B, so
a spec written on CPU ranks would not hold on GPUs against it. A document written before
``unrounded_bytes`` existed (CPU ranks only) is read from ``bytes``, which equals it there.

With several steps or microbatches a state is snapshotted again each time: ``step_index`` and
``microbatch`` choose one; without them the first is measured."""

from __future__ import annotations

from typing import Any

from harness.contract.instrument_names import memory_tracker_blocker
from harness.contract.names import MEMORY_CATEGORIES, MEMORY_ROOT_STATES, MEMORY_UNIT_STATES
from harness.language.kinds.common import LAYER, MICROBATCH, RANKS, STEP_INDEX, UNIT, position_matches
from harness.language.observed import CheckError, rank_docs, unit_name
from harness.language.suggest import closest_first, did_you_mean
from harness.language.vocabulary import BYTES, CheckKind, Context, Field, Reads, RecordKey, Selector


def _check_module(value: Any, ctx: Context) -> str | None:
    if not isinstance(value, str):
        return f"expected an FSDP unit's module FQN ('' for the root), got {value!r}"
    if ctx.unit_names is not None and value not in ctx.unit_names:
        return (
            f"no FSDP unit with module {value!r} in this setup; {did_you_mean(value, ctx.unit_names)}"
            f"units: {closest_first(value, ctx.unit_names)}"
        )
    return None


def _names_module_and_state(values, ctx):
    out = []
    if "state" not in values:
        out.append((None, "a 'memory' entry names an FSDPMemTracker 'state', e.g. 'After Pre-Forward'"))
    if not any(k in values for k in ("layer", "unit", "module")):
        out.append(
            (
                None,
                "a 'memory' entry names its module: 'layer' (decoder layer index), 'unit' ('root' or a name) "
                "or 'module' (FQN)",
            )
        )
    return out


def _tracker_runs(values, ctx):
    """The setup runs FSDPMemTracker: not switched off, and nothing in it that the tracker would break."""
    switch = ctx.known_setup("track_memory")
    if switch is not None and switch.get("track_memory") is False:
        return [(None, "setup.track_memory is false: no memory is recorded; expected it true or no memory entry")]
    setup = ctx.known_setup("schedule")
    blocker = memory_tracker_blocker(setup) if setup is not None else None
    return [] if blocker is None else [(None, f"FSDPMemTracker does not run here: {blocker}; expected no memory entry")]


def _state_of_its_unit(values, ctx):
    """A decoder layer's unit has the per-unit states only; the root also the whole-rank ones."""
    if "state" not in values:
        return []
    state = values["state"]
    if "module" in values:
        root, what = values["module"] == "", f"module {values['module']!r}"
    elif "unit" in values:
        root, what = values["unit"] in ("root", ""), f"unit {values['unit']!r}"
    else:
        root, what = False, "a decoder layer's unit"
    valid = MEMORY_ROOT_STATES if root else MEMORY_UNIT_STATES
    if state in valid:
        return []
    hint = ""
    if state in MEMORY_ROOT_STATES:
        hint = f" ({state!r} is a whole-rank snapshot recorded under the root unit: unit: root)"
    return [
        (
            "state",
            f"{state!r} is not an FSDPMemTracker state of {what}; {did_you_mean(state, valid)}"
            f"states: {closest_first(state, valid)}{hint}",
        )
    ]


# Which categories depend on thread timing is written once, in the observation schema; the loader
# refuses them in a real-backend spec (harness/load/timing.py).
_TIMING = {
    "temp": "; depends on thread timing on a real backend: backend: fake specs only",
    "total": "; includes temp: backend: fake specs only",
}


def _where(name: tuple) -> list[str]:
    """A snapshot's name in words: its unit, state, step, microbatch and occurrence (when repeated)."""
    module, state, step, microbatch, occurrence = name
    out = [module or "root/whole rank", state]
    out += [f"step {step}"] if step is not None else []
    out += [f"microbatch {microbatch}"] if microbatch is not None else []
    return out + ([f"occurrence {occurrence}"] if occurrence else [])


def measure(sel, obs):
    module = sel["module"] if "module" in sel else unit_name(obs, layer=sel.get("layer"), unit=sel.get("unit"))
    state = sel["state"]
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        snaps = [m for m in r["memory"] if m["module"] == module and m["state"] == state and position_matches(m, sel)]
        if not snaps:
            states = sorted({m["state"] for m in r["memory"] if m["module"] == module})
            where = {k: sel[k] for k in ("step_index", "microbatch") if k in sel}
            raise CheckError(
                f"rank {r['rank']}: no memory snapshot {state!r} for module {module!r}"
                f"{' at ' + str(where) if where else ''}; states: {states}"
            )
        out[r["rank"]] = dict(snaps[0].get("unrounded_bytes", snaps[0]["bytes"]))
    return out


KIND = CheckKind(
    name="memory",
    order=70,
    reads=(Reads("memory"),),
    record_keys=(RecordKey("memory", ("module", "state", "step_index", "microbatch"), True, "bytes", _where),),
    doc=(
        "FSDPMemTracker's whole-rank bytes by category at a unit's state (a snapshot counts the whole rank; "
        "storages at their real sizes, without CUDA's 512-B rounding)"
    ),
    selectors=(
        Selector("module", "the unit's module FQN ('' for the root)", _check_module),
        LAYER,
        UNIT,
        Selector(
            "state",
            "Before/After + Pre-Forward, Post-Forward, Pre-Backward, Post-Backward, or Peak Forward/Backward; "
            "on the root also 'After fully_shard', 'After Optimizer Step', 'After Zero Grad' and 'Peak'",
        ),
        STEP_INDEX,
        MICROBATCH,
        RANKS,
    ),
    fields=tuple(
        Field(name, BYTES, f"bytes of FSDPMemTracker's {label!r} category" + _TIMING.get(name, ""))
        for label, name in MEMORY_CATEGORIES.items()
    ),
    measure=measure,
    rules=(_names_module_and_state, _state_of_its_unit, _tracker_runs),
)
