"""The training loop: a step plan run phase by phase, every phase marked with its step and microbatch.

Each step in the order docs/schedules.md gives; without a schedule, the walkthrough's one forward,
loss, backward and ``optimizer.step()``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

import model as qwen3
from harness.run.rank.forward_input import call_root
from harness.run.rank.hooks import RunHooks
from harness.run.rank.instruments import Instruments
from harness.run.rank.parallelize import step_requires_grad
from harness.run.rank.recorders.events import call_span
from harness.run.rank.recorders.phases import Phases
from harness.run.rank.step_plan import PlannedMicrobatch, PlannedStep, StepCapture, forward_inputs

__all__ = ["BackwardAborted", "PlannedStep", "StepOutcome", "run_steps", "local_grad_peak"]


@dataclass(frozen=True)
class StepOutcome:
    """What the last forward computed: its output (or ``loss_on`` tensor) and float32 scalar loss."""

    output: torch.Tensor
    loss: torch.Tensor
    aborted: bool = False  # its backward raised BackwardAborted (abort_backward_at)


def _module(root: nn.Module, unit: str) -> nn.Module:
    return root if unit in ("", "root") else root.get_submodule(unit)


def run_steps(
    plan: Sequence[PlannedStep],
    root: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    phases: Phases,
    instruments: Instruments,
    hooks: RunHooks | None = None,
) -> StepOutcome:
    """Run every planned step inside ``instruments.observing(...)``; the last forward's outcome.
    ``hooks``: the spec's ``setup.hooks`` (``observe`` with no grad, outside the recorders' dispatch
    modes). ValueError: an empty plan, or ``loss_on`` names a tensor the forward never emitted."""
    if not plan:
        raise ValueError("step plan is empty: expected at least one step")
    outcome = None
    for step in plan:
        spec = step.step
        instruments.begin_step(step.index)
        step_requires_grad(root, spec)
        if hooks is not None:
            hooks.call("before_step", model=root, step_index=step.index)
            if spec.call is not None:
                hooks.call_named(spec.call, model=root, step_index=step.index)
        if step.index > 0 and spec.zero_grad is not False:
            with instruments.phase("zero_grad", step.index):
                optimizer.zero_grad(set_to_none=spec.zero_grad is True)
            instruments.after_zero_grad(step.index)
        for mb in step.microbatches:
            if hooks is not None:
                hooks.call("before_microbatch", model=root, step_index=step.index, microbatch=mb.index)
            outcome = _run_microbatch(step, mb, root, loss_fn, instruments)
            if outcome.aborted:  # abort_backward_at: FSDP's recovery after an exception mid-backward
                with instruments.phase("reset_iter_state", step.index):
                    root.reset_iter_state()
                instruments.after_reset_iter_state()
                break
            if hooks is not None:
                hooks.call("after_microbatch", model=root, step_index=step.index, microbatch=mb.index)
        else:
            _finish_step(step, root, optimizer, instruments)
        if hooks is not None:
            hooks.call("after_step", model=root, step_index=step.index)
            with torch.no_grad(), _disable_current_modes():
                hooks.observe(root, step.index)
        instruments.end_step(step.index)
    return outcome


class BackwardAborted(Exception):
    """Raised in a step's backward where ``abort_backward_at`` says; the loop recovers with ``reset_iter_state``."""


@contextlib.contextmanager
def _abort_backward_at(module: nn.Module, unit: str) -> Iterator[None]:
    """While the forward runs: a gradient hook on ``module``'s output that raises :class:`BackwardAborted`.
    Registered after ``fully_shard``, it runs after FSDP's pre-backward hook on the same output."""

    def arm(_module: nn.Module, _args: Any, output: Any) -> None:
        for t in output if isinstance(output, (tuple, list)) else (output,):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t.register_hook(_raise)
                return

    def _raise(_grad: torch.Tensor) -> None:
        raise BackwardAborted(f"the backward was aborted at {unit} (abort_backward_at)")

    handle = module.register_forward_hook(arm)
    try:
        yield
    finally:
        handle.remove()


def _finish_step(
    step: PlannedStep, root: nn.Module, optimizer: torch.optim.Optimizer, instruments: Instruments
) -> None:
    """A step whose microbatches all ran: ``clip_grad_norm``, then the optimizer step."""
    spec = step.step
    if spec.clip_grad_norm is not None:
        peak_before = local_grad_peak(root)
        with instruments.phase("clip_grad_norm", step.index):
            norm = torch.nn.utils.clip_grad_norm_(
                root.parameters(), spec.clip_grad_norm.max_norm, norm_type=spec.clip_grad_norm.norm_type
            )
        instruments.record_grad_norm(
            step.index, norm, spec.clip_grad_norm, clip_coef=_ratio(local_grad_peak(root), peak_before)
        )
    if spec.steps_optimizer:
        with instruments.phase("optimizer", step.index):
            optimizer.step()
            if spec.post_optim_event:  # on the current accelerator; a CPU has no events: record() raises
                event = torch.Event()
                event.record()
                root.set_post_optim_event(event)
        instruments.after_optimizer_step(step.index)


def local_grad_peak(root: nn.Module) -> float | None:
    """The largest |element| of this rank's local gradient shards (float64), read with no grad and no
    dispatch mode (the recorders do not see it; no collective: ``to_local()``); None when simulated."""
    peak = 0.0
    try:
        with torch.no_grad(), _disable_current_modes():
            for p in root.parameters():
                g = p.grad
                if g is None:
                    continue
                g = g.to_local() if hasattr(g, "to_local") else g
                if g.numel():
                    peak = max(peak, float(g.detach().abs().max().double()))
    except Exception:  # FakeTensorMode (the fake backend): no value to read
        return None
    return peak


def _ratio(after: float | None, before: float | None) -> float | None:
    """after / before, None where either is unknown or before is 0."""
    return after / before if after is not None and before else None


def _run_microbatch(
    step: PlannedStep,
    mb: PlannedMicrobatch,
    root: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    instruments: Instruments,
) -> StepOutcome:
    """One microbatch of ``step``: gradient sync, manual unshards, its forwards and losses,
    manual reshards, one backward of the mean loss; the last forward's outcome."""
    spec, n_mb = step.step, len(step.microbatches)
    if mb.sync is not None:
        root.set_requires_gradient_sync(mb.sync)
    if mb.all_reduce is not None:
        root.set_requires_all_reduce(mb.all_reduce)
    if spec.unshard:
        with instruments.phase("unshard", step.index, mb.index):
            for unit in spec.unshard:
                with call_span("unshard", unit):  # 'root' names the root, as "" does
                    _module(root, unit).unshard(async_op=spec.unshard_async)  # a handle: the pre-forward waits
    losses = []
    abort = spec.abort_backward_at
    with (
        instruments.phase("forward", step.index, mb.index),
        _abort_backward_at(_module(root, abort), abort) if abort is not None else contextlib.nullcontext(),
    ):
        with torch.no_grad() if spec.no_grad else contextlib.nullcontext():
            for f, fwd in enumerate(mb.forwards):
                target = spec.loss_target()
                capture = StepCapture(target) if target else None
                with (
                    instruments.forward_steps(root),
                    qwen3.observe_steps(root, capture) if capture else contextlib.nullcontext(),
                ):
                    x = forward_inputs(fwd.inputs, loss_fn)
                    output = call_root(
                        root,
                        x,
                        spec.forward_input,
                        instruments.forward_input_recorder(f),
                        method=spec.forward_method,
                        skip_layers=mb.skip_layers,
                    )
                if capture is not None:
                    if capture.tensor is None:
                        raise ValueError(
                            f"step {step.index} microbatch {mb.index}: loss_on {spec.loss_on!r} "
                            f"was not computed (is the layer skipped there?)"
                        )
                    output = capture.tensor
                losses.append(loss_fn(output, x))
                outcome = StepOutcome(output, losses[-1])
        scale = len(losses) * n_mb
        loss = losses[0] if scale == 1 else torch.stack(losses).sum() / scale
        if spec.loss_scale != 1.0:
            loss = loss * spec.loss_scale
    instruments.after_forward(step.index, mb.index)
    if spec.reshard:
        with instruments.phase("reshard", step.index, mb.index):
            for unit in spec.reshard:
                _module(root, unit).reshard()
    aborted = False
    if spec.backward:
        try:
            with instruments.phase("backward", step.index, mb.index):
                loss.backward()
        except BackwardAborted:
            aborted = True
        else:
            instruments.after_backward()
    instruments.end_microbatch()
    return dataclasses.replace(outcome, aborted=aborted) if aborted else outcome
