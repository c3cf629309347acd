"""What each unit's module holds at each point of the run, and every parameter between ``fully_shard`` calls.

Points (:data:`harness.contract.names.PARAM_STATE_POINTS`) are taken by torch's public hooks right
after FSDP's own, or by the loop; docs/schedules.md describes them. No tensor is kept.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from torch import nn

from .backward_points import after_post_backward, after_pre_backward
from .collectives import dtype_name
from .params import Unit, flat_tensors, tensor_state

__all__ = ["ParamStateHooks", "FullyShardCalls"]

_LOOP_POINTS = ("after_backward", "after_optimizer_step", "after_zero_grad", "after_reset_iter_state")


class ParamStateHooks:
    """Hooks on every unit recording ``param_states`` in :attr:`states`; :meth:`install` after
    ``fully_shard`` and after entering ``FSDPMemTracker`` (which re-registers FSDP's hooks).

    ``is_backward``: True while autograd runs backward (a recomputation takes no forward point);
    ``position``: the (step index, microbatch), (None, None) outside steps.
    """

    def __init__(
        self,
        units: list[Unit],
        is_backward: Callable[[], bool] = lambda: False,
        position: Callable[[], tuple[int | None, int | None]] = lambda: (None, None),
    ) -> None:
        self.units = units
        self.states: list[dict[str, Any]] = []
        self._handles: list[Any] = []
        self._is_backward = is_backward
        self._position = position

    def _snapshot(self, unit: Unit, point: str, tensors: Any = ()) -> None:
        params, total = [], 0
        for fqn in unit.params:
            t = unit.get_parameter(fqn)
            row = tensor_state(fqn, t)
            del row["full_shape"]  # the params table has it
            params.append(row)
            total += math.prod(row["shape"]) * int(t.element_size())
        step_index, microbatch = self._position()
        state: dict[str, Any] = {
            "unit": unit.name,
            "point": point,
            "params": params,
            "bytes": total,
            "step_index": step_index,
            "microbatch": microbatch,
        }
        # the module's tensor inputs (after FSDP's pre-forward: cast_forward_inputs applied) or
        # outputs (after its post-forward: output_dtype applied)
        if point in ("pre_forward", "post_forward"):
            dtypes = [dtype_name(t.dtype) for t in flat_tensors(tensors)]
            state["input_dtypes" if point == "pre_forward" else "output_dtypes"] = dtypes
        self.states.append(state)

    def snapshot_all(self, point: str) -> None:
        """Take one of the loop's points for every unit that manages parameters (ValueError for another)."""
        if point not in _LOOP_POINTS:
            raise ValueError(f"{point!r} is not a point the loop takes; expected one of {list(_LOOP_POINTS)}")
        for unit in self.units:
            if unit.params:
                self._snapshot(unit, point)

    def _pre_forward(self, unit: Unit, args: tuple, kwargs: dict) -> None:
        if self._is_backward():
            return
        self._snapshot(unit, "pre_forward", (args, kwargs))  # keyword inputs too (schedule forward_input)
        after_post_backward(args, kwargs, lambda: self._snapshot(unit, "post_backward"))

    def _post_forward(self, unit: Unit, output: Any) -> None:
        if self._is_backward():
            return
        self._snapshot(unit, "post_forward", output)
        # once per call, on the first output that needs a gradient (FSDP unshards once)
        after_pre_backward(output, lambda: self._snapshot(unit, "pre_backward"), every_output=False)

    def install(self) -> "ParamStateHooks":
        for unit in self.units:
            if len(unit.modules) > 1:  # a unit of several modules has no one module to hook
                continue
            self._handles.append(
                unit.module.register_forward_pre_hook(
                    lambda m, args, kwargs, u=unit: self._pre_forward(u, args, kwargs), with_kwargs=True
                )
            )
            self._handles.append(
                unit.module.register_forward_hook(lambda m, args, out, u=unit: self._post_forward(u, out))
            )
        return self

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


class FullyShardCalls:
    """Every parameter of the root before the first ``fully_shard`` call, then those each call
    changed: ``record``, the schema's ``fully_shard_calls``."""

    def __init__(self) -> None:
        self.record: dict[str, Any] = {"before": [], "calls": []}
        self._last: dict[str, dict[str, Any]] = {}
        self._device: str | None = None

    def _states(self, root: nn.Module) -> list[dict[str, Any]]:
        rows = []
        for fqn, p in root.named_parameters():
            row = tensor_state(fqn, p)
            del row["grad"]  # no gradient exists before the first step
            if self._device is not None:
                row["device"] = self._device
            rows.append(row)
        return rows

    def before(self, root: nn.Module, *, device: str | None = None) -> None:
        """Take every parameter; ``device``: the device type to record instead (a simulated rank's storage)."""
        self._device = device
        rows = self._states(root)
        self.record = {"before": rows, "calls": []}
        self._last = {r["fqn"]: r for r in rows}

    def after(self, unit: str, root: nn.Module) -> None:
        """After the ``fully_shard`` call of ``unit``: keep the parameters whose state changed."""
        changed = []
        for row in self._states(root):
            if self._last.get(row["fqn"]) != row:
                changed.append(row)
                self._last[row["fqn"]] = row
        self.record["calls"].append({"unit": unit, "changed": changed})
