"""What a parameter's all-gather extension received and gave back, per call.

A sharded parameter whose local tensor defines ``fsdp_pre_all_gather`` and
``fsdp_post_all_gather`` (a tensor subclass, the float8 pattern; torch 2.13
``FSDPParam.all_gather_inputs`` and ``init_unsharded_param``) hands FSDP what to all-gather in
place of its shard, and rebuilds the unsharded parameter from what was gathered. The recorder
wraps those two methods on each such local tensor, as instance attributes that call the tensor's
own methods, and removes them when it stops. It records dtypes and shapes only.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import torch
from torch import nn

from .collectives import dtype_name

__all__ = ["AllGatherExtensions"]

_METHODS = ("fsdp_pre_all_gather", "fsdp_post_all_gather")


def _described(tensors: Any) -> tuple[list[str], list[list[int]]]:
    """(dtypes, shapes) of a tensor or a sequence of them (an empty pair for None)."""
    if tensors is None:
        return [], []
    seq = (tensors,) if isinstance(tensors, torch.Tensor) else tuple(tensors)
    return [dtype_name(t.dtype) for t in seq], [list(t.shape) for t in seq]


class AllGatherExtensions:
    """Records each call of the all-gather extension of the parameters ``params`` ({FQN: parameter},
    the sharded DTensors) at ``position()`` (step index, microbatch, phase)."""

    def __init__(self, params: dict[str, nn.Parameter], position: Callable[[], tuple[Any, Any, str]]) -> None:
        self.records: list[dict[str, Any]] = []
        self._position = position
        self._wrapped: list[torch.Tensor] = []
        for fqn, param in params.items():
            local = getattr(param, "_local_tensor", None)
            if local is not None and all(hasattr(local, m) for m in _METHODS):
                self._wrap(fqn, local)
        self.active = bool(self._wrapped)  # some parameter has an extension (kept after remove())

    def _wrap(self, fqn: str, local: torch.Tensor) -> None:
        pre, post = local.fsdp_pre_all_gather, local.fsdp_post_all_gather  # bound to the tensor

        # functools.wraps: FSDP reads the method's signature (1 or 5 parameters) through __wrapped__
        @functools.wraps(pre)
        def fsdp_pre_all_gather(*args: Any, **kwargs: Any) -> Any:
            gathered, metadata = pre(*args, **kwargs)
            self._record(fqn, "pre", _described(local), _described(gathered), metadata=metadata)
            return gathered, metadata

        @functools.wraps(post)
        def fsdp_post_all_gather(
            outputs: Sequence[torch.Tensor], metadata: Any, param_dtype: Any, **kwargs: Any
        ) -> Any:
            returned = post(outputs, metadata, param_dtype, **kwargs)
            unsharded = returned[0] if returned is not None else None
            self._record(
                fqn,
                "post",
                _described(outputs),
                _described(unsharded),
                param_dtype=dtype_name(param_dtype) if param_dtype is not None else None,
                into_out=kwargs.get("out") is not None,
            )
            return returned

        local.fsdp_pre_all_gather = fsdp_pre_all_gather
        local.fsdp_post_all_gather = fsdp_post_all_gather
        self._wrapped.append(local)

    def _record(self, fqn: str, call: str, received: tuple, returned: tuple, **extra: Any) -> None:
        step_index, microbatch, phase = self._position()
        self.records.append(
            {
                "fqn": fqn,
                "call": call,
                "step_index": step_index,
                "microbatch": microbatch,
                "phase": phase,
                "received_dtypes": received[0],
                "received_shapes": received[1],
                "returned_dtypes": returned[0],
                "returned_shapes": returned[1],
                "metadata": None if extra.get("metadata") is None else repr(extra["metadata"]),
                "param_dtype": extra.get("param_dtype"),
                "into_out": extra.get("into_out"),
            }
        )

    def remove(self) -> None:
        """Take the wrappers off: each tensor's own methods answer again."""
        for local in self._wrapped:
            for name in _METHODS:
                local.__dict__.pop(name, None)
        self._wrapped = []
