"""The training schedule a spec asks for: steps, microbatches, forwards, runtime calls, the loss.

``setup.schedule`` (optional; its keys are declared below, :mod:`harness.load.declare`) becomes a
:class:`Schedule`; without it the harness runs the walkthrough's one step: one forward on the
rank's inputs, the body's loss, ``loss.backward()``, ``optimizer.step()``. Each step of
``schedule.steps`` is, in order (docs/schedules.md):

0. ``freeze`` then ``unfreeze``, before ``setup.hooks.before_step`` and the step's ``call``;
1. ``zero_grad`` (not before the plan's first step);
2. for each of ``microbatches``, with gradient sync and HSDP's all-reduce off on all but the last
   as ``gradient_sync`` / ``all_reduce`` say: ``unshard``, the ``forwards``, ``reshard``, then,
   unless ``forward_only``, one backward of the mean of its losses divided by ``microbatches``
   (the accumulated gradient is the mean over the step's samples), times ``loss_scale``;
   With ``abort_backward_at`` the backward raises at that unit and the loop calls the root's
   ``reset_iter_state()``; the step ends there;
3. ``clip_grad_norm`` over the model's parameters (the returned total norm is observed);
4. ``optimizer.step()`` unless ``optimizer_step: false`` or ``forward_only``.

``repeat: K`` writes the step K times; ``step_index`` counts the repeated steps from 0, microbatch
indices count within a step.

Source: torch 2.13 ``FSDPModule.set_requires_gradient_sync``, ``set_requires_all_reduce``,
``unshard`` (``async_op``), ``reshard``, ``reset_iter_state``; ``torch.nn.utils.clip_grad_norm_``;
``torch.optim.Optimizer.zero_grad``.
Imports nothing heavy (no torch): loading a spec stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from harness.load.declare import Problems, build, key
from harness.load.hooks import FUNCTION_NAME
from model.steps import STEP_NAMES

__all__ = [
    "LOSSES",
    "GRADIENT_SYNC",
    "ALL_REDUCE",
    "ZERO_GRAD",
    "FORWARD_INPUTS",
    "FORWARD_METHODS",
    "ClipGradNorm",
    "ScheduleStep",
    "Schedule",
    "schedule_problems",
    "aborted_step_problems",
]

LOSSES: tuple[str, ...] = ("mean_square", "sum", "input_grad_penalty", "cross_entropy")
"""Loss functions: ``out.float().pow(2).mean()``, ``out.float().sum()``, that mean of squares plus the
squared norm of its gradient with respect to the inputs (``torch.autograd.grad`` with
``create_graph=True``: the backward differentiates the forward twice; ``decoder_layers`` only), and
cross-entropy of the causal LM's logits at positions 0..L-2 against the tokens at 1..L-1
(``causal_lm`` only)."""

GRADIENT_SYNC: tuple[str, ...] = ("last", "every")
ALL_REDUCE: tuple[str, ...] = ("every", "last")
"""``all_reduce``: HSDP's all-reduce across replicas after every microbatch (FSDP2's default) or
after the last only (``set_requires_all_reduce(False)`` before the others)."""
ZERO_GRAD: tuple[Any, ...] = (True, False, "zeros")
FORWARD_INPUTS: tuple[str, ...] = ("positional", "keyword", "dataclass", "dict", "user_dict")
"""How the root's forward gets the rank's input tensor ``x``: ``root(x)``, ``root(inputs=x)``, a
dataclass with the field ``inputs``, ``{"inputs": x}``, ``collections.UserDict({"inputs": x})``
(``harness/run/rank/forward_input.py``)."""
FORWARD_METHODS: tuple[str, ...] = ("forward", "last_hidden_state")
"""The root's method each forward calls: ``forward`` (through ``root(x)``), or the causal LM's
``last_hidden_state`` (``model/qwen3.py``: the final norm's output, no ``lm_head``), called as
``root.last_hidden_state(x)``, which runs FSDP's forward hooks only where a unit's
``forward_methods`` registered it (``register_fsdp_forward_method``)."""


@dataclass(frozen=True)
class ClipGradNorm:
    """``torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type)``'s arguments."""

    max_norm: float = key(doc="the largest total norm kept; larger gradients are scaled down to it", exclusiveMinimum=0)
    norm_type: float = key(2.0, doc="the p of the p-norm", exclusiveMinimum=0)


@dataclass(frozen=True)
class ScheduleStep:
    """One optimizer step: zero_grad, microbatches (each: unshard, forwards, reshard, backward),
    clip_grad_norm, optimizer step (see the module docstring for the order of calls)."""

    microbatches: int = key(1, doc="backward passes accumulated into the step's gradient", minimum=1)
    gradient_sync: str = key(
        "last",
        enum=list(GRADIENT_SYNC),
        doc="last: set_requires_gradient_sync(False) on all microbatches but the last; every: "
        "reduce-scatter after every microbatch",
    )
    all_reduce: str = key(
        "every",
        enum=list(ALL_REDUCE),
        doc="HSDP only, with gradient_sync: every. every: all-reduce across replicas after every microbatch; "
        "last: set_requires_all_reduce(False) on all microbatches but the last (each still reduce-scatters; "
        "the all-reduce runs once, after the last backward)",
    )
    forwards: int = key(
        1, minimum=1, doc="forwards per microbatch, each on its own inputs, before one backward of their mean loss"
    )
    forward_only: bool = key(False, doc="no backward and no optimizer step")
    no_grad: bool = key(False, doc="forwards under torch.no_grad(); implies forward_only")
    loss_on: str | None = key(
        None,
        doc="take the loss on a named step tensor instead of the output: '<decoder layer "
        "path>:<step name of model/steps.py>', e.g. 'layers.1:step9.gate'",
    )
    used_only_in: Mapping[str, tuple[int, ...]] = key(
        default_factory=dict,
        additionalProperties={"items": {"minimum": 0}},
        doc="decoder layer path (layers.1) or one of its blocks (layers.1.mlp: post_attention_layernorm + MLP; "
        "layers.1.self_attn: input_layernorm + attention) -> the microbatches it runs in; in the others it is "
        "skipped (its input passes on unchanged)",
    )
    loss_scale: float = key(
        1.0,
        exclusiveMinimum=0,
        doc="each microbatch's loss is multiplied by this before its backward (the reference's too), so the "
        "gradients are scaled by it: 1e-30 reaches clip_grad_norm_'s eps regime (its 1e-6 dominates the norm)",
    )
    clip_grad_norm: ClipGradNorm | None = key(
        None, doc="torch.nn.utils.clip_grad_norm_ over the model's parameters before the optimizer step"
    )
    optimizer_step: bool = key(True, doc="call optimizer.step()")
    post_optim_event: bool = key(
        False,
        doc="after the optimizer step record a torch.Event on the rank's device and hand it to the root's "
        "FSDPModule.set_post_optim_event: the next root pre-forward waits its all-gather streams on that event "
        "instead of the current stream. CUDA streams only: a CPU device has no events (torch raises; "
        "specs/post_optim_event_on_gloo.yaml), scripts/gpu_check runs it on NCCL",
    )
    zero_grad: bool | str = key(
        True,
        enum=list(ZERO_GRAD),
        doc="before this step (not the first): true optimizer.zero_grad(set_to_none=True), "
        "zeros (set_to_none=False), false (gradients accumulate across steps)",
    )
    unshard: tuple[str, ...] = key(
        (), doc="units to FSDPModule.unshard() before each microbatch's forwards ('root' for the root)"
    )
    reshard: tuple[str, ...] = key(
        (), doc="units to FSDPModule.reshard() after each microbatch's forwards ('root' for the root)"
    )
    unshard_async: bool = key(
        False,
        doc="unshard with FSDPModule.unshard(async_op=True): the all-gather is issued at once and its "
        "UnshardHandle is left to the unit's pre-forward hook, which waits on it",
    )
    abort_backward_at: str | None = key(
        None,
        doc="FSDP unit ('root' for the root) at whose backward the step's backward raises, once FSDP's "
        "pre-backward hook has unsharded it; the loop catches the error and calls reset_iter_state() on "
        "the root (FSDPModule.reset_iter_state); the step then ends: no clip_grad_norm, optimizer step "
        "or after_microbatch hook, and the reference skips it",
    )
    forward_input: str = key(
        "positional",
        enum=list(FORWARD_INPUTS),
        doc="how each forward passes the input tensor to the root: positional root(x), keyword root(inputs=x), "
        "dataclass (a field inputs), dict {'inputs': x}, user_dict collections.UserDict({'inputs': x}); FSDP's "
        "cast_forward_inputs reaches a tensor in each but a UserDict",
    )
    forward_method: str = key(
        "forward",
        enum=list(FORWARD_METHODS),
        doc="the root's method each forward calls: forward (root(x)), or last_hidden_state (model.body causal_lm: "
        "the final norm's output, no lm_head), which FSDP's hooks wrap only where setup.fsdp.units' "
        "forward_methods registers it (register_fsdp_forward_method)",
    )
    repeat: int = key(1, minimum=1, doc="run this step K times; step_index counts the repeats")
    call: str | None = key(
        None,
        pattern=FUNCTION_NAME,
        doc="a function of setup.hooks.file called as f(model, step_index, rank, world_size) at "
        "the start of the step, after setup.hooks.before_step (the reference makes the same "
        "call)",
    )

    freeze: tuple[str, ...] = key(
        (),
        doc="parameter FQN patterns (relative to the root; * one component, ** several) made requires_grad=False "
        "at the start of the step, before setup.hooks.before_step and call (the single-process reference too)",
    )
    unfreeze: tuple[str, ...] = key(
        (),
        doc="parameter FQN patterns made requires_grad=True at the start of the step, after freeze (the "
        "single-process reference too)",
    )

    @property
    def backward(self) -> bool:
        """Whether the step runs backward (not forward-only, not under no_grad)."""
        return not (self.forward_only or self.no_grad)

    @property
    def steps_optimizer(self) -> bool:
        return self.backward and self.optimizer_step

    def loss_target(self) -> tuple[str, str] | None:
        """``loss_on`` split into (layer path, step name), None for the model output."""
        if self.loss_on is None:
            return None
        path, _, name = self.loss_on.rpartition(":")
        return path, name

    def _rules(self, given: Mapping[str, Any], where: str) -> Problems:
        """What the schema cannot see in one step, as (key path, expected) pairs."""
        problems: Problems = []
        if self.forward_method != "forward" and self.forward_input != "positional":
            problems.append(
                (
                    f"{where}.forward_input",
                    f"forward_method {self.forward_method} takes the tensor positionally (a method call runs no "
                    "forward pre-hook to unpack a container); expected positional or left out",
                )
            )
        if self.no_grad and "forward_only" in given and not self.forward_only:
            problems.append(
                (f"{where}.forward_only", "no_grad: true runs no backward; expected forward_only true or left out")
            )
        if not self.backward and "loss_scale" in given:
            problems.append(
                (f"{where}.loss_scale", "a forward-only step runs no backward to scale; expected no loss_scale")
            )
        if not self.backward and self.clip_grad_norm is not None:
            problems.append(
                (f"{where}.clip_grad_norm", "a forward-only step has no gradients to clip; expected no clip_grad_norm")
            )
        if self.all_reduce == "last":
            if self.gradient_sync != "every":
                problems.append(
                    (
                        f"{where}.all_reduce",
                        "all_reduce: last defers only HSDP's all-reduce and needs gradient_sync: every "
                        "(gradient_sync: last already turns off the reduce-scatter and the all-reduce "
                        "on all microbatches but the last)",
                    )
                )
            if self.microbatches < 2:
                problems.append(
                    (
                        f"{where}.all_reduce",
                        f"all_reduce: last defers the all-reduce to the last microbatch; expected microbatches "
                        f">= 2, got {self.microbatches}",
                    )
                )
            if not self.backward:
                problems.append((f"{where}.all_reduce", "a forward-only step reduces nothing; expected no all_reduce"))
        if self.post_optim_event and not self.steps_optimizer:
            problems.append((f"{where}.post_optim_event", "follows the optimizer step; this step takes none"))
        if self.unshard_async and not self.unshard:
            problems.append((f"{where}.unshard_async", "names no unit to unshard; expected unshard: [<unit>, ...]"))
        if self.abort_backward_at is not None:
            if not self.backward:
                problems.append((f"{where}.abort_backward_at", "a forward-only step runs no backward to abort"))
            if self.microbatches != 1:
                problems.append(
                    (f"{where}.abort_backward_at", f"expected a step of 1 microbatch, got {self.microbatches}")
                )
            if self.clip_grad_norm is not None:
                problems.append(
                    (f"{where}.clip_grad_norm", "an aborted step clips nothing; expected no clip_grad_norm")
                )
        both = [p for p in self.freeze if p in self.unfreeze]
        if both:
            problems.append(
                (
                    f"{where}.unfreeze",
                    f"pattern(s) {both} are in freeze too; expected each pattern in freeze or in unfreeze",
                )
            )
        for path, mbs in self.used_only_in.items():
            outside = [m for m in mbs if not 0 <= m < self.microbatches]
            if outside:
                problems.append(
                    (
                        f"{where}.used_only_in.{path}",
                        f"microbatch(es) {outside} do not exist: the step has {self.microbatches} "
                        f"microbatch{'es' if self.microbatches != 1 else ''} "
                        f"(0-{self.microbatches - 1})",
                    )
                )
        if self.loss_on is not None:
            _, name = self.loss_target()
            if ":" not in self.loss_on or name not in STEP_NAMES:
                problems.append(
                    (
                        f"{where}.loss_on",
                        f"expected '<decoder layer path>:<step name>' like "
                        f"'layers.1:step9.gate', steps: {list(STEP_NAMES)}; "
                        f"got {self.loss_on!r}",
                    )
                )
        return problems


@dataclass(frozen=True)
class Schedule:
    """The training schedule (harness/load/schedule.py): steps of microbatches of forwards, runtime
    calls, the loss; default: one step, one forward, backward, optimizer step."""

    steps: tuple[ScheduleStep, ...] = key(
        (ScheduleStep(),),
        minItems=1,
        doc="the optimizer steps in order (default: one step with every key at its default)",
    )
    loss: str | None = key(
        None,
        enum=list(LOSSES),
        doc="the loss of each forward: mean of squares, sum (of the output or the loss_on tensor, "
        "in float32), input_grad_penalty (mean of squares plus the squared norm of its gradient with respect to "
        "the inputs, by torch.autograd.grad(create_graph=True): a double backward; decoder_layers), or "
        "cross-entropy of next-token logits (causal_lm); default: mean_square for decoder_layers, "
        "cross_entropy for causal_lm",
    )

    def expanded(self) -> list[ScheduleStep]:
        """The steps as run: each written step ``repeat`` times; position = ``step_index``."""
        return [s for s in self.steps for _ in range(s.repeat)]

    def microbatches(self) -> tuple[int, ...]:
        """Microbatches of each run step, by ``step_index``."""
        return tuple(s.microbatches for s in self.expanded())

    def loss_for(self, body: str) -> str:
        return self.loss or ("cross_entropy" if body == "causal_lm" else "mean_square")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> tuple["Schedule", Problems]:
        """Build from ``setup.schedule`` (schema-validated): the schedule, and the problems the schema cannot see."""
        return build(cls, data, "setup.schedule")


def schedule_problems(
    schedule: Schedule, *, body: str, num_layers: int, unit_names: Sequence[str]
) -> list[tuple[str, str]]:
    """What a schedule names that the model of the setup does not have, as (key path, expected).

    ``unit_names``: the setup's FSDP unit FQNs ("" for the root, written 'root' in specs).
    """
    prefix = "layers" if body == "decoder_layers" else "model.layers"
    layers = [f"{prefix}.{i}" for i in range(num_layers)]
    shown_units = ["root" if u == "" else u for u in unit_names]
    out: list[tuple[str, str]] = []
    loss = schedule.loss_for(body)
    if loss == "cross_entropy" and body != "causal_lm":
        out.append(
            (
                "setup.schedule.loss",
                "cross_entropy needs the causal LM's logits (model.body: causal_lm); expected mean_square or sum",
            )
        )
    if loss == "input_grad_penalty" and body != "decoder_layers":
        out.append(
            (
                "setup.schedule.loss",
                "input_grad_penalty differentiates the hidden states the layers take (model.body: decoder_layers); "
                "a causal LM takes token ids",
            )
        )
    for i, step in enumerate(schedule.steps):
        where = f"setup.schedule.steps[{i}]"
        if loss == "input_grad_penalty" and not step.backward:
            out.append(
                (
                    f"{where}.forward_only" if step.forward_only else f"{where}.no_grad",
                    "input_grad_penalty takes a gradient in the forward's loss: expected a step with a backward",
                )
            )
        if step.forward_method == "last_hidden_state":
            if body != "causal_lm":
                out.append(
                    (
                        f"{where}.forward_method",
                        "last_hidden_state is the causal LM's method (model.body: causal_lm); expected forward",
                    )
                )
            elif loss == "cross_entropy":
                out.append(
                    (
                        "setup.schedule.loss",
                        f"steps[{i}] takes last_hidden_state, hidden states (B, L, d), not logits: expected "
                        "mean_square or sum",
                    )
                )
        target = step.loss_target()
        if target is not None and ":" in (step.loss_on or ""):
            if target[0] not in layers:
                out.append((f"{where}.loss_on", f"no decoder layer {target[0]!r}; layers: {layers}"))
            if loss == "cross_entropy":
                out.append(
                    (
                        f"{where}.loss_on",
                        "cross_entropy is taken on logits; a step tensor takes schedule.loss mean_square or sum",
                    )
                )
        blocks = [f"{layer}.{block}" for layer in layers for block in ("self_attn", "mlp")]
        for path in step.used_only_in:
            if path not in layers and path not in blocks:
                out.append(
                    (
                        f"{where}.used_only_in.{path}",
                        f"no decoder layer or block {path!r}; a layer ({layers}) "
                        f"or its self_attn / mlp block, e.g. {blocks[-1]!r}",
                    )
                )
        for call in ("unshard", "reshard"):
            for j, name in enumerate(getattr(step, call)):
                if name not in shown_units:
                    out.append((f"{where}.{call}[{j}]", f"no FSDP unit {name!r}; units: {shown_units}"))
        if step.abort_backward_at is not None and step.abort_backward_at not in shown_units:
            out.append((f"{where}.abort_backward_at", f"no FSDP unit {step.abort_backward_at!r}; units: {shown_units}"))
    return out


def aborted_step_problems(schedule: Schedule) -> list[tuple[str, str]]:
    """With numerics on: an aborted step's gradients that did reach the shards are not the reference's,
    so the next step must clear them (zero_grad not false) and an aborted step cannot be the last."""
    out: list[tuple[str, str]] = []
    run = [(i, s) for i, s in enumerate(schedule.steps) for _ in range(s.repeat)]  # (written index, step)
    for n, (i, step) in enumerate(run):
        if step.abort_backward_at is None:
            continue
        where = f"setup.schedule.steps[{i}].abort_backward_at"
        if n + 1 == len(run):
            out.append(
                (
                    where,
                    "with numerics on, an aborted step cannot be the last: expected a step after it that clears "
                    "the gradients it left (numerics: false to end on it)",
                )
            )
        elif run[n + 1][1].zero_grad is False:
            out.append(
                (
                    f"setup.schedule.steps[{run[n + 1][0]}].zero_grad",
                    "the step after an aborted one keeps its partly reduced gradients; with numerics on, expected "
                    "zero_grad true or zeros",
                )
            )
    return out
