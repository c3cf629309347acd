"""``events``: FSDP's own event order per rank: its hook labels and the units' reshard/unshard.

An event is named ``"<event> <unit>"`` (``all_gather layers.1``, ``reshard layers.0``,
``post_backward_reduce root``) or just ``"<event>"`` for labels that name no unit
(``root_pre_forward``, ``root_post_backward_callback``); see ``harness/run/rank/recorders/events.py``.
The ``events`` selector takes names or shell-style patterns (``"reshard *"``); ``order`` is
the selected names in the order of their first occurrence, so ``{events: ["reshard layers.0",
"all_gather layers.1"], order: ["reshard layers.0", "all_gather layers.1"]}`` says that layer
0 is resharded before layer 1 is all-gathered.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from harness.contract.names import EVENT_NAMES
from harness.language.kinds.common import MICROBATCH, RANKS, STEP_INDEX, check_phase, position_matches
from harness.language.observed import CheckError, common, rank_docs
from harness.language.vocabulary import COUNT, OPTIONAL_TEXT, TEXTS, CheckKind, Context, Field, Reads, Selector

_GLOB = set("*?[")


def event_name(e: dict) -> str:
    """``"all_gather layers.1"``; the root unit is ``root``; a label naming no unit is its event alone."""
    if e["unit"] is None:
        return e["event"]
    return f"{e['event']} {e['unit'] or 'root'}"


def _patterns(value: Any) -> list | None:
    values = value if isinstance(value, list) else [value]
    return values if values and all(isinstance(v, str) and v for v in values) else None


def _check_events(value: Any, ctx: Context) -> str | None:
    patterns = _patterns(value)
    if patterns is None:
        return (
            "expected an event name like 'reshard layers.0' (or a pattern like 'reshard *') or a list of them, "
            f"got {value!r}"
        )
    units = None if ctx.unit_names is None else ["root" if u == "" else u for u in ctx.unit_names]
    for pattern in patterns:
        event, _, unit = pattern.partition(" ")
        if not any(fnmatch.fnmatchcase(name, event) for name in EVENT_NAMES):
            return f"{pattern!r}: no event {event!r}; events: {list(EVENT_NAMES)}"
        if unit and units is not None and not _GLOB & set(unit) and unit not in units:
            return f"{pattern!r}: no FSDP unit {unit!r} in this setup; units: {units}"
    return None


def _check_source(value: Any, ctx: Context) -> str | None:
    return None if value in ("fsdp", "harness") else f"expected 'fsdp' or 'harness', got {value!r}"


def measure(sel, obs):
    patterns = _patterns(sel.get("events", "*")) or ["*"]
    phases = sel.get("phase")
    phases = None if phases is None else (phases if isinstance(phases, list) else [phases])
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        if "events" not in r:
            raise CheckError(f"rank {r['rank']}: no events recorded (an observation from before events were recorded)")
        chosen = [
            e
            for e in r["events"]
            if position_matches(e, sel)
            and (phases is None or e["phase"] in phases)
            and ("source" not in sel or e["source"] == sel["source"])
            and any(fnmatch.fnmatchcase(event_name(e), p) for p in patterns)
        ]
        names = [event_name(e) for e in chosen]
        out[r["rank"]] = {
            "sequence": names,
            "order": list(dict.fromkeys(names)),
            "count": len(names),
            "training_state": common([e.get("training_state") for e in chosen]),
        }
    return out


KIND = CheckKind(
    name="events",
    order=90,
    reads=(Reads("events"),),
    doc="FSDP's own event order: its hook labels (pre_forward, all_gather, post_backward_reduce, ...) and each unit's "
    "reshard/unshard, per step and microbatch",
    selectors=(
        Selector(
            "events",
            "event names 'all_gather layers.1' or patterns 'reshard *', a list of them (default: all)",
            _check_events,
        ),
        Selector("phase", "the phase they ran in, a value or a list", check_phase),
        Selector(
            "source", "fsdp (FSDP's profiler labels) or harness (reshard/unshard seen by the harness)", _check_source
        ),
        STEP_INDEX,
        MICROBATCH,
        RANKS,
    ),
    fields=(
        Field("sequence", TEXTS, "every selected event's name, in the order they happened"),
        Field("order", TEXTS, "the selected names in the order of their first occurrence"),
        Field("count", COUNT, "events selected"),
        Field(
            "training_state",
            OPTIONAL_TEXT,
            "the FSDP TrainingState inside the selected events' hook (FORWARD, PRE_BACKWARD, POST_BACKWARD, IDLE)",
        ),
    ),
    measure=measure,
)
