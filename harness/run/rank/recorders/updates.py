"""Parameter updates per step against a single-process reference run of the same schedule.

:class:`ParamUpdates` records which rows (dim 0: ``Shard(0)``) of this rank's shard each step
changed; :func:`schedule_reference` runs the plan on one full copy of the model in the ranks'
compute and reduce dtypes, so each rank's step has the reference it should equal within rounding.
Every rank computes it (W chunk passes per microbatch): for small models (docs/schedules.md).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import _disable_current_modes

import model as qwen3
from harness.load.schedule import ScheduleStep
from harness.run.rank.parallelize import step_requires_grad
from harness.run.rank.step_plan import StepCapture, call_model, forward_inputs

from .collectives import dtype_name
from .numerics import nonfinite
from .tensor_diff import max_abs_diff

__all__ = ["ParamUpdates", "ScheduleReference", "schedule_reference", "shard_rows"]


def shard_rows(t: torch.Tensor, count: int, index: int) -> torch.Tensor:
    """Rows of shard ``index`` of ``count`` along dim 0 (``torch.chunk``, FSDP2's ``Shard(0)``)."""
    chunks = torch.chunk(t, count, dim=0)
    return chunks[index] if index < len(chunks) else t[:0]


def _row_offset(rows: int, count: int, index: int) -> int:
    """Global index of the first row of shard ``index`` (``torch.chunk``: ceil(rows / count) each)."""
    per = -(-rows // count) if rows else 0
    return min(rows, per * index)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


@contextlib.contextmanager
def _unobserved() -> Iterator[None]:
    """No grad, no dispatch mode: FSDPMemTracker and the collective recorder do not see the copies."""
    with torch.no_grad(), _disable_current_modes():
        yield


def _changed_rows(after: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    """Bool [rows] on the CPU (the other side may be on another device): rows where any element differs."""
    if after.numel() == 0:
        return torch.zeros(after.shape[0] if after.dim() else 0, dtype=torch.bool)
    return (after != before).reshape(after.shape[0], -1).any(dim=1).cpu()


@dataclass
class ScheduleReference:
    """What the single-process reference computed, for this rank's shard: its rows before and after
    each step, per step the total norm ``clip_grad_norm_`` returned, the clip factor (None: all
    gradients 0) and this shard's norm before clipping, the last forward's output and loss, and the
    last gradient rows."""

    rows_before: dict[str, torch.Tensor] = field(default_factory=dict)
    rows_after: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)
    grad_norms: dict[int, float] = field(default_factory=dict)
    clip_coefs: dict[int, float | None] = field(default_factory=dict)
    shard_norms: dict[int, float] = field(default_factory=dict)
    output: torch.Tensor | None = None
    loss: torch.Tensor | None = None
    grad_rows: dict[str, torch.Tensor | None] = field(default_factory=dict)
    compute_dtype: torch.dtype = torch.float32
    reduce_dtype: torch.dtype = torch.float32

    def numerics(
        self, params: Sequence[tuple[str, nn.Parameter]], output: torch.Tensor, loss: torch.Tensor
    ) -> dict[str, Any]:
        """The schema's ``numerics`` object against the reference (None on one side counts as zeros)."""
        grads = []
        for fqn, p in params:
            expected = self.grad_rows.get(fqn)
            grad = p.grad
            if grad is None and expected is None:
                continue
            actual = _local(grad) if grad is not None else torch.zeros_like(expected)
            expected = expected if expected is not None else torch.zeros_like(actual)
            grads.append({"fqn": fqn, **max_abs_diff(actual, expected), "nonfinite": nonfinite(actual)})
        return {
            "replica_dtype": dtype_name(self.compute_dtype),
            "reduce_dtype": dtype_name(self.reduce_dtype),
            "forward_output": {**max_abs_diff(output, self.output), "nonfinite": nonfinite(output)},
            "loss": {**max_abs_diff(loss.reshape(1), self.loss.reshape(1)), "nonfinite": nonfinite(loss)},
            "grads": grads,
        }


def _grad_peak(params: Any) -> float:
    """The largest |element| of the parameters' gradients (float64); 0 without any."""
    peaks = [float(p.grad.detach().abs().max().double()) for p in params if p.grad is not None and p.grad.numel()]
    return max(peaks, default=0.0)


def _shard_norm(params: Any, norm_type: float, shard_count: int, shard_index: int) -> float:
    """The ``norm_type``-norm of this shard's rows of every gradient, combined as ``clip_grad_norm_`` does."""
    rows = [shard_rows(p.grad.detach(), shard_count, shard_index) for p in params if p.grad is not None]
    norms = [torch.linalg.vector_norm(r, norm_type) for r in rows if r.numel()]
    return float(torch.linalg.vector_norm(torch.stack(norms), norm_type)) if norms else 0.0


def schedule_reference(
    model: nn.Module,
    plan: Sequence[Any],
    batches: Sequence[torch.Tensor],
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    make_optimizer: Callable[[Any], torch.optim.Optimizer],
    world_size: int,
    rank: int,
    shard_count: int,
    shard_index: int,
    compute_dtype: torch.dtype,
    reduce_dtype: torch.dtype,
    on_step: Callable[..., None] | None = None,
) -> ScheduleReference:
    """Run the plan (``harness.run.rank.step_plan.step_plan``'s steps) on one full copy of ``model``.

    ``batches``: the global batches by forward index, [W*B, ...] each;
    ``on_step(point, model, step[, microbatch])``: the spec's hooks at "before_step",
    "before_microbatch", "after_microbatch", "after_step".
    """
    master = copy.deepcopy(model)
    params = dict(master.named_parameters())
    optimizer = make_optimizer(master.parameters())
    B = batches[0].shape[0] // world_size
    ref = ScheduleReference(compute_dtype=compute_dtype, reduce_dtype=reduce_dtype)
    ref.rows_before = {fqn: shard_rows(p.detach(), shard_count, shard_index).clone() for fqn, p in params.items()}
    for step in plan:
        spec: ScheduleStep = step.step
        step_requires_grad(master, spec)  # the step's freeze / unfreeze, as the sharded run does
        if on_step is not None:
            on_step("before_step", master, step.index)
        if step.index > 0 and spec.zero_grad is not False:
            optimizer.zero_grad(set_to_none=spec.zero_grad is True)
        if spec.abort_backward_at is not None:  # its gradients are lost and the next step clears them
            if on_step is not None:  # the hooks the sharded run calls: before its one microbatch, after the step
                on_step("before_microbatch", master, step.index, 0)
                on_step("after_step", master, step.index)
            ref.rows_after[step.index] = {
                fqn: shard_rows(p.detach(), shard_count, shard_index).clone() for fqn, p in params.items()
            }
            continue
        pending: list[dict[str, torch.Tensor]] = [{} for _ in range(world_size)]  # per chunk, reduce dtype
        n_mb = len(step.microbatches)
        for mb in step.microbatches:
            if on_step is not None:
                on_step("before_microbatch", master, step.index, mb.index)
            replica = copy.deepcopy(master).to(compute_dtype)  # FSDP gathers the current weights each microbatch
            for p in replica.parameters():
                p.grad = None
            for c in range(world_size):
                losses = []
                with torch.no_grad() if not spec.backward else torch.enable_grad():
                    for fwd in mb.forwards:
                        x = batches[fwd.index][c * B : (c + 1) * B]
                        if x.is_floating_point():
                            x = forward_inputs(x.to(compute_dtype), loss_fn)
                        target = spec.loss_target()
                        capture = StepCapture(target) if target else None
                        if capture is not None:
                            with qwen3.observe_steps(replica, capture):
                                out = call_model(replica, x, spec.forward_method, mb.skip_layers)
                            out = capture.tensor
                        else:
                            out = call_model(replica, x, spec.forward_method, mb.skip_layers)
                        losses.append(loss_fn(out, x))
                        if c == rank:
                            ref.output, ref.loss = out.detach().clone(), losses[-1].detach().clone()
                if not spec.backward:
                    continue
                scale = len(losses) * n_mb
                loss = losses[0] if scale == 1 else torch.stack(losses).sum() / scale
                (loss * spec.loss_scale if spec.loss_scale != 1.0 else loss).backward()
                for fqn, p in replica.named_parameters():
                    if p.grad is not None:
                        g = p.grad.to(reduce_dtype)
                        pending[c][fqn] = pending[c][fqn] + g if fqn in pending[c] else g
                    p.grad = None
            sync = mb.sync is not False  # None (always synced) or True (the last)
            if spec.backward and sync:
                for fqn, p in params.items():
                    parts = [pending[c][fqn] for c in range(world_size) if fqn in pending[c]]
                    if not parts:
                        continue
                    total = parts[0].clone()
                    for part in parts[1:]:
                        total += part
                    reduced = (total / world_size).to(p.dtype)
                    p.grad = reduced if p.grad is None else p.grad + reduced
                pending = [{} for _ in range(world_size)]
            del replica
            if on_step is not None:
                on_step("after_microbatch", master, step.index, mb.index)
        if spec.clip_grad_norm is not None:
            norm_type = spec.clip_grad_norm.norm_type
            ref.shard_norms[step.index] = _shard_norm(params.values(), norm_type, shard_count, shard_index)
            peak_before = _grad_peak(params.values())
            norm = torch.nn.utils.clip_grad_norm_(
                master.parameters(), spec.clip_grad_norm.max_norm, norm_type=norm_type
            )
            ref.grad_norms[step.index] = float(norm)
            peak_after = _grad_peak(params.values())
            ref.clip_coefs[step.index] = peak_after / peak_before if peak_before else None
        if spec.steps_optimizer:
            optimizer.step()
        if on_step is not None:
            on_step("after_step", master, step.index)
        ref.rows_after[step.index] = {
            fqn: shard_rows(p.detach(), shard_count, shard_index).clone() for fqn, p in params.items()
        }
    ref.grad_rows = {
        fqn: shard_rows(p.grad, shard_count, shard_index).clone() if p.grad is not None else None
        for fqn, p in params.items()
    }
    return ref


class ParamUpdates:
    """Which rows of this rank's shard of each parameter each step changed: :attr:`records`
    (``unchanged_rows``: global indices, at most 64), completed by :meth:`against`."""

    _SHOWN = 64

    def __init__(self, root: nn.Module, shard_count: int, shard_index: int) -> None:
        # The sharded parameters themselves (what the optimizer steps), taken while sharded: a
        # unit left unsharded (no reshard after a forward) registers its unsharded tensors.
        self.params = list(root.named_parameters())
        self.shard_count, self.shard_index = shard_count, shard_index
        self.records: list[dict[str, Any]] = []
        self._before: dict[int, dict[str, torch.Tensor]] = {}
        self._after: dict[int, dict[str, torch.Tensor]] = {}

    def before_step(self, step_index: int) -> None:
        with _unobserved():
            self._before[step_index] = {fqn: _local(p).detach().clone() for fqn, p in self.params}

    def after_step(self, step_index: int) -> None:
        after = {}
        with _unobserved():
            for fqn, p in self.params:
                now, before = _local(p).detach(), self._before[step_index][fqn]
                changed = _changed_rows(now, before)
                offset = _row_offset(int(p.shape[0]) if p.dim() else 0, self.shard_count, self.shard_index)
                unchanged = [offset + int(i) for i in torch.nonzero(~changed).flatten()[: self._SHOWN]]
                update = float((now.double() - before.double()).abs().max()) if now.numel() else 0.0
                self.records.append(
                    {
                        "step_index": step_index,
                        "fqn": fqn,
                        "rows": int(changed.numel()),
                        "rows_changed": int(changed.sum()),
                        "unchanged_rows": unchanged,
                        "max_abs_update": update,
                    }
                )
                after[fqn] = now.clone()
        self._after[step_index] = after

    def against(self, reference: ScheduleReference) -> None:
        """Add the comparison with ``reference`` (same plan, same shard) to every record."""
        for record in self.records:
            s, fqn = record["step_index"], record["fqn"]
            expected = reference.rows_after[s][fqn]
            before = reference.rows_before[fqn] if s == 0 else reference.rows_after[s - 1][fqn]
            actual = self._after[s][fqn]
            ref_changed = _changed_rows(expected, before)
            ours = _changed_rows(actual, self._before[s][fqn])
            record.update(max_abs_diff(actual, expected))
            record["ref_rows_changed"] = int(ref_changed.sum())
            record["same_rows_as_reference"] = bool(torch.equal(ref_changed, ours))
