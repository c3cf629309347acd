"""Observing the walkthrough's steps inside a running model, without changing it.

Every :class:`StepObservable` module (``Qwen3DecoderLayer``, ``Qwen3Attention``, ``Qwen3MLP``)
has a ``_step_observer`` attribute, ``None`` unless :func:`observe_steps` is active. At each
step of its forward it does::

    if self._step_observer is not None:
        self._step_observer(self.layer_idx, "step2.q_heads", q)

so with no observer the cost is one attribute read and one ``is not None`` per step (23 per
layer; ``python benchmarks/bench_observe.py`` measures what that costs). The names are those of
:data:`model.steps.STEPS` and are emitted in that order; a sparse layer of a MoE model
(``model/qwen3_moe.py``) emits :data:`model.steps.MOE_LAYER_STEP_NAMES` instead (its Step 9 is
the router and experts'). Head tensors come in the document's (B, L, h, d_h) layout (possibly a
transposed, non-contiguous view).

Callbacks receive the live tensors: they may read, clone, ``.detach()`` or register autograd
hooks on them, but must not modify them in place (that would change the model's numerics).
Under activation checkpointing the forward is recomputed in backward, so callbacks fire twice.
"""

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
    """Mixin for modules that emit walkthrough steps.

    Attributes:
        layer_idx: index of the decoder layer the module belongs to (passed to callbacks).
        _step_observer: the active callback, or None (class default: observation off).
    """

    layer_idx: int
    _step_observer: StepCallback | None = None


class _Fanout:
    """Calls several callbacks in the order they were installed (nested ``observe_steps``)."""

    def __init__(self, first: StepCallback, second: StepCallback) -> None:
        self.callbacks = (first, second)

    def __call__(self, layer_idx: int, name: str, tensor: torch.Tensor) -> None:
        for callback in self.callbacks:
            callback(layer_idx, name, tensor)


@contextlib.contextmanager
def observe_steps(module: nn.Module, callback: StepCallback) -> Iterator[None]:
    """While active, every decoder layer in ``module`` reports its steps to ``callback``.

    Args:
        module: any module containing Qwen3 decoder layers (or a layer, attention or MLP
            itself); FSDP-wrapped modules work, as the hooks live on the modules' own forward.
        callback: ``callback(layer_idx: int, name: str, tensor: torch.Tensor)``, called for
            each name of :data:`model.steps.STEPS`, in that order, per layer forward.

    Nesting installs both callbacks (outer first); leaving a context restores exactly what
    was there before it.

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
    """A ready-made callback that records every step it sees.

    Example::

        rec = StepRecorder(keep_tensors=True)
        with observe_steps(model, rec):
            model(x)
        rec.get(0, "step2.q_heads").shape   # (B, L, h_q, d_h)

    Args:
        keep_tensors: store ``tensor.detach().clone()`` (costs memory); otherwise only
            shape and dtype are kept.
    """

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
