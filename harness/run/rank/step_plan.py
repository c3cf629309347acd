"""The step plan: a setup's schedule as concrete steps, microbatches and forwards with their inputs.

Forward k takes global batch k of one generator seeded ``setup.seed + 1``, rank r its rows
``r*B .. r*B+B-1`` (the document's section "每个 rank 上的激活值（输入）").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from harness.load.schedule import Schedule, ScheduleStep
from harness.load.setup import RunSetup

__all__ = [
    "StepCapture",
    "call_model",
    "PlannedForward",
    "PlannedMicrobatch",
    "PlannedStep",
    "LossFn",
    "loss_function",
    "global_batches",
    "forward_count",
    "step_plan",
]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def loss_function(name: str) -> LossFn:
    """``loss(tensor, inputs)`` -> float32 scalar for a :data:`harness.load.schedule.LOSSES` name:
    mean_square, sum, or cross_entropy (logits [B, L, V] at 0..L-2 against token ids at 1..L-1).
    ValueError for another name."""
    if name == "mean_square":
        return lambda t, inputs: t.float().pow(2).mean()
    if name == "sum":
        return lambda t, inputs: t.float().sum()
    if name == "input_grad_penalty":
        return input_grad_penalty
    if name == "cross_entropy":

        def cross_entropy(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
            vocab = logits.shape[-1]
            return F.cross_entropy(logits[:, :-1].float().reshape(-1, vocab), input_ids[:, 1:].reshape(-1))

        return cross_entropy
    raise ValueError(f"schedule.loss {name!r}: expected one of mean_square, sum, input_grad_penalty, cross_entropy")


def input_grad_penalty(t: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """mean(t^2) + sum(g^2), g = d mean(t^2) / d inputs by ``torch.autograd.grad(create_graph=True)``: its
    backward differentiates the forward twice (a gradient penalty). ``inputs`` must require grad."""
    value = t.float().pow(2).mean()
    (grad,) = torch.autograd.grad(value, inputs, create_graph=True)
    return value + grad.float().pow(2).sum()


input_grad_penalty.needs_input_grad = True  # the loop and the reference feed it inputs that require grad


def forward_inputs(inputs: torch.Tensor, loss_fn: LossFn) -> torch.Tensor:
    """``inputs`` as the forward takes them: a leaf that requires grad where ``loss_fn`` differentiates them."""
    return inputs.detach().requires_grad_() if getattr(loss_fn, "needs_input_grad", False) else inputs


def call_model(model: nn.Module, x: torch.Tensor, method: str = "forward", skip_layers: tuple = ()) -> torch.Tensor:
    """``model(x)``, or its method ``method`` (schedule ``forward_method``) called on ``x`` directly, with
    ``skip_layers`` where there are any; the sharded run and the reference both call it."""
    call = model if method == "forward" else getattr(model, method)
    return call(x, skip_layers=skip_layers) if skip_layers else call(x)


class StepCapture:
    """A ``model.observe_steps`` callback keeping the first emission of ``loss_on``'s tensor by its layer
    (activation checkpointing's recomputation emits it again)."""

    def __init__(self, loss_on: tuple[str, str]) -> None:
        path, self.name = loss_on
        self.layer = int(path.rsplit(".", 1)[1])
        self.tensor: torch.Tensor | None = None

    def __call__(self, layer: int, name: str, t: torch.Tensor) -> None:
        if self.tensor is None and layer == self.layer and name == self.name:
            self.tensor = t


@dataclass(frozen=True)
class PlannedForward:
    """One forward: ``index`` k in the plan and this rank's inputs (the k-th global batch's rows)."""

    index: int
    inputs: torch.Tensor


@dataclass(frozen=True)
class PlannedMicrobatch:
    """One backward's worth of ``forwards``; ``skip_layers``: layers (index, or (index, "mlp" |
    "self_attn")) not run in it; ``sync``, ``all_reduce``: the values for ``set_requires_gradient_sync``
    / ``set_requires_all_reduce`` before it (None: not called)."""

    index: int
    forwards: tuple[PlannedForward, ...]
    skip_layers: tuple[int | tuple[int, str], ...] = ()
    sync: bool | None = None
    all_reduce: bool | None = None


@dataclass(frozen=True)
class PlannedStep:
    """One optimizer step: ``index`` (0-based over the repeated steps), the first forward's ``inputs``."""

    index: int
    inputs: torch.Tensor
    microbatches: tuple[PlannedMicrobatch, ...] = ()
    step: ScheduleStep = ScheduleStep()

    def __post_init__(self) -> None:
        if not self.microbatches:  # a bare step: one microbatch, one forward on ``inputs``
            object.__setattr__(self, "microbatches", (PlannedMicrobatch(0, (PlannedForward(0, self.inputs),)),))


def _skipped(path: str, prefix_parts: int) -> int | tuple[int, str]:
    """``layers.1`` -> 1; ``layers.1.mlp`` -> (1, "mlp") (``prefix_parts``: dots before the index)."""
    parts = path.split(".")
    index = int(parts[prefix_parts])
    return (index, parts[prefix_parts + 1]) if len(parts) > prefix_parts + 1 else index


def forward_count(schedule: Schedule | None) -> int:
    """Forwards the plan runs, hence global batches it draws."""
    if schedule is None:
        return 1
    return sum(s.microbatches * s.forwards for s in schedule.expanded())


def global_batches(
    setup: RunSetup, config: Any, dtype: torch.dtype, count: int, *, rows: int | None = None
) -> list[torch.Tensor]:
    """``count`` global batches of ``world_size * B`` (or ``rows``) samples from a generator seeded
    ``setup.seed + 1``: hidden states [W*B, L, d] (float32 cast to ``dtype``) or token ids (int64)."""
    n = setup.world_size * setup.batch_per_rank if rows is None else rows
    generator = torch.Generator().manual_seed(setup.seed + 1)
    out = []
    for _ in range(count):
        if setup.model.body == "decoder_layers":
            out.append(torch.randn(n, setup.seq_len, config.hidden_size, generator=generator).to(dtype))
        else:
            out.append(torch.randint(0, config.vocab_size, (n, setup.seq_len), generator=generator))
    return out


def step_plan(
    setup: RunSetup, inputs: torch.Tensor, more_inputs: Callable[[int], list[torch.Tensor]] | None = None
) -> list[PlannedStep]:
    """The steps ``setup`` asks for, with this rank's inputs: ``inputs`` for forward 0,
    ``more_inputs(count)`` for forwards 0..count-1 (only if more than one). No schedule: one forward."""
    schedule = setup.schedule
    if schedule is None:
        return [PlannedStep(0, inputs)]
    count = forward_count(schedule)
    rank_inputs = [inputs] if count == 1 else more_inputs(count)
    plan, k = [], 0
    for index, step in enumerate(schedule.expanded()):
        microbatches = []
        for m in range(step.microbatches):
            forwards = tuple(PlannedForward(k + f, rank_inputs[k + f]) for f in range(step.forwards))
            k += step.forwards
            depth = 1 if setup.model.body == "decoder_layers" else 2  # layers.1 / model.layers.1
            skip = tuple(_skipped(path, depth) for path, used in sorted(step.used_only_in.items()) if m not in used)
            sync = None
            if step.microbatches > 1 and step.gradient_sync == "last" and step.backward:
                sync = m == step.microbatches - 1
            all_reduce = None
            if step.microbatches > 1 and step.all_reduce == "last" and step.backward:
                all_reduce = m == step.microbatches - 1
            microbatches.append(PlannedMicrobatch(m, forwards, skip, sync, all_reduce))
        plan.append(PlannedStep(index, microbatches[0].forwards[0].inputs, tuple(microbatches), step))
    return plan
