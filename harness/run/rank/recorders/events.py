"""FSDP's own event order: its profiler labels, the units' shard-state changes, per step and microbatch.

Read after the run from three kinds of profiler events: FSDP's ``record_function`` labels (torch
2.13), the ``HARNESS::reshard``/``unshard`` markers of :class:`ShardStateProbe`, and the loop's
``HARNESS::phase`` spans, which give every event its phase, whatever thread recorded it
(docs/schedules.md).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from .attribution import CALL_MARK, call_span_name, called_unit, host_events
from .backward_points import after_post_backward, after_pre_backward
from .collectives import parse_fsdp_label
from .params import Unit

__all__ = ["MARK", "TRAINING_STATES", "ShardStateProbe", "call_span", "phase_span", "events_from_profiler"]

MARK = "HARNESS::"

TRAINING_STATES: dict[str, str] = {
    "FSDP::root_pre_forward": "FORWARD",
    "FSDP::pre_forward": "FORWARD",
    "FSDP::post_forward": "FORWARD",
    "FSDP::forward_prefetch": "FORWARD",
    "FSDP::pre_backward": "PRE_BACKWARD",
    "FSDP::backward_prefetch": "PRE_BACKWARD",
    "FSDP::post_backward": "POST_BACKWARD",
    "FSDP::post_backward_accumulate": "POST_BACKWARD",
    "FSDP::post_backward_reshard": "POST_BACKWARD",
    "FSDP::post_backward_reduce": "POST_BACKWARD",
    "FSDP::post_backward_rs_wait": "POST_BACKWARD",
    "FSDP::root_post_backward_callback": "POST_BACKWARD",
}
"""The ``TrainingState`` (torch 2.13 ``_fsdp_common.TrainingState``) FSDP sets inside each hook
label: ``pre_forward`` sets FORWARD and ``post_forward`` leaves it at FORWARD until it returns
(then IDLE); ``pre_backward`` PRE_BACKWARD; ``post_backward`` POST_BACKWARD; prefetching runs
the target group under the caller's state."""

_DATA_LABELS = ("FSDP::all_gather", "FSDP::all_gather_copy_out")
_PHASE = re.compile(r"^HARNESS::phase (?P<phase>\S+) (?P<step>-?\d+) (?P<mb>-?\d+)$")


def _marker(name: str) -> None:
    """An instant profiler event named ``HARNESS::<name>`` (a span of no work)."""
    with torch.autograd.profiler.record_function(MARK + name):
        pass


@contextlib.contextmanager
def phase_span(phase: str, step_index: int | None, microbatch: int | None) -> Iterator[None]:
    """A profiler span ``HARNESS::phase <phase> <step> <microbatch>`` (-1 for None) around a block."""
    s = -1 if step_index is None else step_index
    m = -1 if microbatch is None else microbatch
    with torch.autograd.profiler.record_function(f"{MARK}phase {phase} {s} {m}"):
        yield


@contextlib.contextmanager
def call_span(method: str, unit: str) -> Iterator[None]:
    """A profiler span around the loop's ``unit.<method>()``: it names the unit of FSDP labels inside it
    that carry no FQN (before the root's lazy init); not itself an event."""
    with torch.autograd.profiler.record_function(call_span_name(method, unit)):
        yield


def _unit_label(unit: str) -> str:
    return unit or "root"


class ShardStateProbe:
    """Emits ``HARNESS::reshard U`` / ``unshard U`` when a unit's parameters change between
    ``DTensor`` and plain, looked at right after FSDP's hooks."""

    def __init__(self, units: Sequence[Unit]) -> None:
        self.units = [u for u in units if u.params]
        self._last = {u.name: self._state(u) for u in self.units}
        self._handles: list[Any] = []

    @staticmethod
    def _state(unit: Unit) -> str:
        return "sharded" if isinstance(unit.get_parameter(unit.params[0]), DTensor) else "unsharded"

    def probe(self) -> None:
        """Look at every unit; emit a marker for each whose state changed since the last look."""
        for unit in self.units:
            state = self._state(unit)
            if state != self._last[unit.name]:
                self._last[unit.name] = state
                _marker(f"{'reshard' if state == 'sharded' else 'unshard'} {_unit_label(unit.name)}")

    def _after_pre_forward(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.probe()
        after_post_backward(args, kwargs, self.probe)  # the unit's post-backward: look right after it

    def _after_post_forward(self, module: nn.Module, args: tuple, output: Any) -> None:
        self.probe()
        after_pre_backward(output, self.probe)  # and right after its pre-backward

    def install(self) -> "ShardStateProbe":
        """Register the forward hooks (after FSDP's: install after ``FSDPMemTracker`` is entered)."""
        for unit in self.units:
            self._handles.append(unit.module.register_forward_pre_hook(self._after_pre_forward, with_kwargs=True))
            self._handles.append(unit.module.register_forward_hook(self._after_post_forward))
        return self

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


@dataclass(frozen=True)
class _Span:
    name: str
    start: int
    end: int
    thread: int

    def spans_in_time(self, other: "_Span") -> bool:
        """``other`` ran while this span was open, on whichever thread."""
        return self.start <= other.start and other.end <= self.end

    def contains(self, other: "_Span") -> bool:
        """``other`` is nested in this span: inside it in time and on its thread."""
        return self.thread == other.thread and self.spans_in_time(other)


def events_from_profiler(prof: Any) -> list[dict[str, Any]]:
    """The schema's ``events`` list from a finished profile, in start order.

    ``training_state``: :data:`TRAINING_STATES` (a data label takes its hook's, IDLE without one;
    None for markers); ``phase``, ``step_index``, ``microbatch``: of the innermost
    ``HARNESS::phase`` span open over it ("other", None, None outside all).
    """
    spans = []
    for ev in host_events(prof):  # a trace of a CUDA rank also holds GPU copies of the ranges
        name = ev.name()
        if name.startswith("FSDP::") or name.startswith(MARK):
            spans.append(_Span(name, ev.start_ns(), ev.end_ns(), ev.start_thread_id()))
    spans.sort(key=lambda sp: (sp.start, -sp.end))
    phases = [sp for sp in spans if _PHASE.match(sp.name)]
    calls = [sp for sp in spans if sp.name.startswith(CALL_MARK)]
    labels = [sp for sp in spans if sp.name.startswith("FSDP::")]
    phase_ids = {id(sp) for sp in phases + calls}
    out = []
    for sp in spans:
        if id(sp) in phase_ids:
            continue
        # By wall time, not by thread: on CUDA backward runs on the autograd engine's device
        # thread while the loop's thread holds the backward span open.
        around = [p for p in phases if p.spans_in_time(sp)]
        phase, step, mb = "other", None, None
        if around:
            m = _PHASE.match(around[-1].name)
            phase = m["phase"]
            step = int(m["step"]) if int(m["step"]) >= 0 else None
            mb = int(m["mb"]) if int(m["mb"]) >= 0 else None
        if sp.name.startswith(MARK):
            event, _, unit = sp.name[len(MARK) :].partition(" ")
            unit = "" if unit == "root" else unit
            source, state = "harness", None
        else:
            label, unit = parse_fsdp_label(sp.name)
            if unit == "":  # no FQN: the root's label, or a called unit's before the root's lazy init
                unit = called_unit(sp, calls) or ""
            event, source = label.removeprefix("FSDP::"), "fsdp"
            state = TRAINING_STATES.get(label)
            if label in _DATA_LABELS:
                hooks = [
                    lab
                    for lab in labels
                    if lab is not sp and lab.contains(sp) and parse_fsdp_label(lab.name)[0] not in _DATA_LABELS
                ]
                state = TRAINING_STATES.get(parse_fsdp_label(hooks[-1].name)[0], "IDLE") if hooks else "IDLE"
        out.append(
            {
                "event": event,
                "unit": unit,
                "source": source,
                "training_state": state,
                "phase": phase,
                "step_index": step,
                "microbatch": mb,
            }
        )
    return out
