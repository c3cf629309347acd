"""Observing the walkthrough's steps inside a running model, without changing it: each
:class:`StepObservable` module calls its ``_step_observer`` (None: off) with the live tensor of
every step, which callbacks must not modify in place (docs/architecture.md, "How model/ mirrors
transformers")."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from torch import nn

__all__ = ["StepCallback", "StepObservable", "observe_steps", "StepRecord", "StepRecorder"]

StepCallback = Callable[[int, str, torch.Tensor], None]
"""``callback(layer_idx, step_name, tensor)``."""


class StepObservable:
    """Mixin for modules that emit walkthrough steps, with their ``layer_idx``."""

    layer_idx: int
    _step_observer: StepCallback | None = None


class _Fanout:
    """Calls two callbacks in the order they were installed (nested ``observe_steps``)."""

    def __init__(self, first: StepCallback, second: StepCallback) -> None:
        self.callbacks = (first, second)

    def __call__(self, layer_idx: int, name: str, tensor: torch.Tensor) -> None:
        for callback in self.callbacks:
            callback(layer_idx, name, tensor)


@contextlib.contextmanager
def observe_steps(module: nn.Module, callback: StepCallback) -> Iterator[None]:
    """While active, every observable module in ``module`` (FSDP-wrapped too) calls
    ``callback(layer_idx, name, tensor)`` for each step, in :data:`model.steps.STEPS` order.
    Nesting calls both (outer first); leaving restores what was there.

    Raises:
        ValueError: ``module`` contains no observable module.
    """
    targets = [m for m in module.modules() if isinstance(m, StepObservable)]
    if not targets:
        raise ValueError(
            f"observe_steps: {type(module).__name__} contains no Qwen3 decoder layer, attention or MLP to observe"
        )
    absent = object()
    saved = [(m, m.__dict__.get("_step_observer", absent)) for m in targets]
    for m, previous in saved:
        m._step_observer = callback if previous is absent or previous is None else _Fanout(previous, callback)
    try:
        yield
    finally:
        for m, previous in reversed(saved):
            if previous is absent:
                del m._step_observer  # back to the class default (None)
            else:
                m._step_observer = previous


@dataclass(frozen=True)
class StepRecord:
    """One observed step: where, what shape/dtype, and (if kept) a detached clone."""

    layer_idx: int
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    tensor: torch.Tensor | None


class StepRecorder:
    """A callback recording every step's shape and dtype, and with ``keep_tensors`` a
    ``tensor.detach().clone()``: ``rec.get(0, "step2.q_heads").shape`` is (B, L, h_q, d_h)."""

    def __init__(self, keep_tensors: bool = False) -> None:
        self.keep_tensors = keep_tensors
        self.records: list[StepRecord] = []

    def __call__(self, layer_idx: int, name: str, tensor: torch.Tensor) -> None:
        kept = tensor.detach().clone() if self.keep_tensors else None
        self.records.append(StepRecord(layer_idx, name, tuple(tensor.shape), tensor.dtype, kept))

    def get(self, layer_idx: int, name: str) -> StepRecord:
        """The last record of ``name`` in layer ``layer_idx`` (KeyError if none)."""
        for record in reversed(self.records):
            if record.layer_idx == layer_idx and record.name == name:
                return record
        raise KeyError((layer_idx, name))

    def names(self, layer_idx: int) -> list[str]:
        """Names recorded for one layer, in order."""
        return [r.name for r in self.records if r.layer_idx == layer_idx]
