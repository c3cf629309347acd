"""How the root's forward receives its inputs: the structure a schedule step names, and what arrived.

FSDP2's pre-forward hooks cast the floating-point tensors of a forward's arguments to
``MixedPrecisionPolicy.param_dtype`` (``cast_forward_inputs``), at the root and again at every
unit, through ``torch.distributed.utils._apply_to_tensors``. That walks tensors, lists, tuples,
dicts, dataclasses and ``OrderedDict``, but not other mappings (``collections.UserDict``, such as
transformers' ``BatchEncoding``): a tensor inside one is passed on as it is.

:func:`call_root` packs the rank's input tensor as ``structure`` says, calls the root, and in a
forward pre-hook registered after FSDP's (so it runs after the cast) records what arrived and
unpacks it to the one positional tensor the model's forward takes.
Source: torch 2.13 ``FSDPState._pre_forward`` / ``_cast_forward_inputs``,
``torch.distributed.utils._apply_to_tensors``.
"""

from __future__ import annotations

from collections import UserDict
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from harness.run.rank.recorders.collectives import dtype_name
from harness.run.rank.step_plan import call_model

__all__ = ["ForwardBatch", "KEYWORD", "call_root", "pack"]

KEYWORD = "inputs"
"""The name the tensor goes by under ``keyword``, ``dict`` and ``user_dict``."""


@dataclass
class ForwardBatch:
    """The ``dataclass`` structure: the input tensor as a field."""

    inputs: torch.Tensor


def pack(x: torch.Tensor, structure: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The root's (args, kwargs) for ``x`` under ``structure`` (``harness.load.schedule.FORWARD_INPUTS``).

    Raises:
        ValueError: an unknown structure.
    """
    if structure == "positional":
        return (x,), {}
    if structure == "keyword":
        return (), {KEYWORD: x}
    if structure == "dataclass":
        return (ForwardBatch(x),), {}
    if structure == "dict":
        return ({KEYWORD: x},), {}
    if structure == "user_dict":
        return (UserDict({KEYWORD: x}),), {}
    raise ValueError(f"forward_input: unknown structure {structure!r}")


def _received(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any, torch.Tensor]:
    """(how it was passed, the container as received, the tensor inside it)."""
    if KEYWORD in kwargs:
        return "keyword", kwargs[KEYWORD], kwargs[KEYWORD]
    held = args[0]
    if isinstance(held, ForwardBatch):
        return "positional", held, held.inputs
    if isinstance(held, (dict, UserDict)):
        return "positional", held, held[KEYWORD]
    return "positional", held, held


def call_root(
    root: nn.Module,
    x: torch.Tensor,
    structure: str,
    record: Callable[[dict[str, Any]], None] | None = None,
    *,
    method: str = "forward",
    skip_layers: tuple = (),
) -> Any:
    """``root``'s output for input ``x`` passed as ``structure``, with ``skip_layers`` where there are any.

    ``method`` other than ``forward`` (schedule ``forward_method``): ``root.<method>(x)``, positional
    only; no forward pre-hook runs, so nothing is recorded.

    ``record``, where given, gets what the root's forward received once FSDP's pre-forward hook
    has run: ``argument`` (positional or keyword), ``container`` (the type name of what held the
    tensor: ``Tensor``, ``ForwardBatch``, ``dict``, ``UserDict``), the tensor's ``dtype`` and
    ``shape``. It keeps no reference to the tensor.
    """
    if method != "forward" or (structure == "positional" and record is None):
        return call_model(root, x, method, skip_layers)
    args, packed = pack(x, structure)
    kwargs = {"skip_layers": skip_layers} if skip_layers else {}

    def unpack(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple, dict]:
        argument, held, tensor = _received(args, kwargs)
        if record is not None:
            record(
                {
                    "argument": argument,
                    # a fake or other subclass (the simulated backend's FakeTensor) is a Tensor all the same
                    "container": "Tensor" if isinstance(held, torch.Tensor) else type(held).__name__,
                    "dtype": dtype_name(tensor.dtype),
                    "shape": list(tensor.shape),
                }
            )
        rest = {k: v for k, v in kwargs.items() if k != KEYWORD}
        return (tensor, *args[1:]) if argument == "positional" else (tensor, *args), rest

    handle = root.register_forward_pre_hook(unpack, with_kwargs=True)  # after FSDP's (prepended)
    try:
        return root(*args, **packed, **kwargs)
    finally:
        handle.remove()
