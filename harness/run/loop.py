"""The training loop: forward, loss, backward, optimizer step, each a marked phase.

The loop runs over a step plan (:func:`step_plan`). Today a setup plans one step on the
rank's inputs; schedules (several steps, microbatches) extend the plan and this loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import nn

from harness.load.setup import RunSetup
from harness.run.instruments import Instruments
from harness.run.recorders.phases import Phases

__all__ = ["PlannedStep", "StepOutcome", "step_plan", "run_steps"]


@dataclass(frozen=True)
class PlannedStep:
    """One optimizer step.

    Attributes:
        index: 0-based position in the plan.
        inputs: the rank's inputs for this step (hidden states [B, L, d] or token ids [B, L]).
    """

    index: int
    inputs: torch.Tensor


@dataclass(frozen=True)
class StepOutcome:
    """What the last step computed: the model's output and the float32 scalar loss."""

    output: torch.Tensor
    loss: torch.Tensor


def step_plan(setup: RunSetup, inputs: torch.Tensor) -> list[PlannedStep]:
    """The steps ``setup`` asks for: today one step on ``inputs``."""
    return [PlannedStep(0, inputs)]


def run_steps(
    plan: Sequence[PlannedStep],
    root: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    phases: Phases,
    instruments: Instruments,
) -> StepOutcome:
    """Run every planned step inside ``instruments.observing(...)``; the last step's outcome.

    Phases: ``forward`` (the model and the loss), ``backward`` (``loss.backward()``, FSDP's
    reduce-scatter), ``optimizer`` (``optimizer.step()`` on the sharded parameters).

    Raises:
        ValueError: an empty plan.
    """
    if not plan:
        raise ValueError("step plan is empty: expected at least one step")
    for step in plan:
        with phases.phase("forward"):
            with instruments.forward_steps(root):
                output = root(step.inputs)
            loss = loss_fn(output, step.inputs)
        with phases.phase("backward"):
            loss.backward()
        with phases.phase("optimizer"):
            optimizer.step()
        instruments.after_optimizer_step()
    return StepOutcome(output, loss)
