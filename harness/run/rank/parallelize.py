"""Applying FSDP2 to a built model: the mesh, the FSDP units, ``fully_shard``, meta-device init.

Each unit option (:class:`harness.load.units.UnitOptions`, declared once there) is applied here in
one place: a ``fully_shard`` argument in :meth:`ShardUnit.options`, an ``FSDPModule`` setter in
:data:`UNIT_SETTERS`, activation checkpointing before the call and ``module.compile()`` after.
:func:`apply_fsdp` is the only place in the harness that calls
``torch.distributed.fsdp.fully_shard``. :func:`units_from_setup` derives the units from a
:class:`~harness.load.setup.RunSetup` (``setup.fsdp.units``, :mod:`harness.load.units`).

Source: the walkthrough document ("FSDP2 Qwen3 Decoder Layer Walkthrough", section "FSDP2
设置"): over a 1-D ``dp`` mesh of 4 ranks, every decoder layer becomes its own FSDP unit
(``fully_shard`` per layer), and then the whole model is wrapped as the root unit; each
parameter turns into a ``DTensor`` split evenly along dim 0 (``Shard(0)``) across the 4 ranks,
and FSDP's pre-/post-forward hooks sit on every unit. API: ``fully_shard(module, *, mesh,
reshard_after_forward, mp_policy, ...)`` (torch 2.13).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor, Shard

import model as qwen3
from harness.load.setup import RunSetup
from harness.load.units import MixedPrecision, UnitOptions, match_params
from harness.run.rank.build import torch_dtype
from harness.run.rank.recorders.params import Unit

__all__ = [
    "ShardUnit",
    "build_mesh",
    "units_from_setup",
    "mixed_precision_policy",
    "apply_fsdp",
    "apply_checkpoint",
    "freeze_params",
    "set_grad_dtypes",
    "step_requires_grad",
    "init_local_shards",
    "init_shards_like_full",
    "uninitialized_memory_as_nan",
    "materialization_devices",
    "materialize_empty",
    "offloaded_params",
]


COMPILE_ON_CPU = (
    "setup.fsdp.units[].compile: torch.compile per unit runs only on CUDA ranks. Measured on this project's "
    "2-core CPU machine (benchmarks/bench_compile.py): the first step of 2 tiny compiled layers under FSDP2 took "
    "about 320 s on 2 gloo ranks (eager: 0.1 s). Note also that dynamo compiles nothing while a TorchDispatchMode is "
    "active, as the harness's collective recorder is: compiled units then run eagerly (the observation's "
    "'compile' counts the graphs dynamo captured)."
)


@dataclass(frozen=True)
class ShardUnit:
    """One ``fully_shard`` call: which modules, as which unit, with which options.

    Attributes:
        path: the unit's name: its module's FQN relative to the root (``"layers.0"``,
            ``"model.layers.3"``; ``""`` is the root), or for a unit of several modules torch's
            name for it, their FQNs joined by ``", "``.
        role: "layer", "root" or "module" (the observation's ``fsdp_units[].role``).
        layer: the decoder layer index of a layer unit, else None.
        reshard_after_forward: True, False or an int (reshard to groups of that size after
            forward); None passes nothing, so torch's default applies (for the root: not
            resharded after forward).
        mp_policy: the unit's ``MixedPrecisionPolicy``; None passes nothing (torch's default,
            no casting).
        paths: the module FQNs of the call (a list call when more than one); () means ``(path,)``.
        offload_policy: ``CPUOffloadPolicy`` or None (nothing passed).
        shard_placement: ((parameter FQN pattern, dim), ...) for ``shard_placement_fn``.
        after: every option of the unit (the setters of :data:`UNIT_SETTERS`, checkpointing,
            compile); None: none.
    """

    path: str
    role: str
    layer: int | None = None
    reshard_after_forward: bool | int | None = None
    mp_policy: MixedPrecisionPolicy | None = None
    paths: tuple[str, ...] = ()
    offload_policy: OffloadPolicy | None = None
    shard_placement: tuple[tuple[str, int], ...] = ()
    after: UnitOptions | None = None

    @property
    def module_paths(self) -> tuple[str, ...]:
        return self.paths or (self.path,)

    def options(self) -> dict[str, Any]:
        """The keyword arguments of this unit's ``fully_shard`` call, besides ``mesh`` and
        ``shard_placement_fn`` (which needs the model's parameter names: see :func:`apply_fsdp`)."""
        kwargs: dict[str, Any] = {}
        if self.reshard_after_forward is not None:
            kwargs["reshard_after_forward"] = self.reshard_after_forward
        if self.mp_policy is not None:
            kwargs["mp_policy"] = self.mp_policy
        if self.offload_policy is not None:
            kwargs["offload_policy"] = self.offload_policy
        return kwargs


def build_mesh(setup: RunSetup, device_type: str) -> DeviceMesh:
    """``init_device_mesh(device_type, setup.mesh_shape, mesh_dim_names=setup.mesh_dim_names)``.

    A 2-D mesh is HSDP to ``fully_shard``: dim 0 replicates, dim 1 shards. Build it outside
    ``FakeTensorMode`` (the mesh reads its rank map as real values).
    """
    return init_device_mesh(device_type, tuple(setup.mesh_shape), mesh_dim_names=tuple(setup.mesh_dim_names))


def _policy(mp: MixedPrecision | None) -> MixedPrecisionPolicy | None:
    if mp is None:
        return None
    return MixedPrecisionPolicy(
        param_dtype=torch_dtype(mp.param_dtype),
        reduce_dtype=torch_dtype(mp.reduce_dtype),
        output_dtype=torch_dtype(mp.output_dtype),
        cast_forward_inputs=mp.cast_forward_inputs,
    )


def mixed_precision_policy(setup: RunSetup) -> MixedPrecisionPolicy:
    """``setup.fsdp.mixed_precision`` as a ``MixedPrecisionPolicy`` (torch's default if None)."""
    return _policy(setup.fsdp.mixed_precision) or MixedPrecisionPolicy()


def units_from_setup(setup: RunSetup, root: nn.Module) -> list[ShardUnit]:
    """The setup's units in ``fully_shard`` order, the root last (``RunSetup.unit_plan``).

    By default each decoder layer of ``root`` in order, then the root (as the document): layers
    take ``setup.fsdp.reshard_after_forward``; the root takes
    ``setup.fsdp.root_reshard_after_forward`` (None: nothing passed, as the document's
    ``fully_shard(model, mesh=mesh)``, so torch does not reshard the root after forward).
    Every unit takes the setup's mixed-precision policy unless it sets its own ``mp_policy``.

    Raises:
        harness.load.setup.SetupError: a unit names no module of ``root`` (the loader reports
            the same at load time).
    """
    num_layers = len(root.get_submodule(setup.layer_prefix))
    units = []
    for plan in setup.unit_plan(num_layers):  # the loader validated selectors against the same plan
        o = plan.options
        units.append(
            ShardUnit(
                plan.name,
                plan.role,
                plan.layer,
                o.reshard_after_forward,
                _policy(o.mp_policy),
                plan.paths,
                CPUOffloadPolicy(pin_memory=o.offload_policy.pin_memory) if o.offload_policy is not None else None,
                o.shard_placement,
                o,
            )
        )
    return units


def freeze_params(
    root: nn.Module, patterns: Sequence[str], *, requires_grad: bool = False, where: str = "setup.freeze.params"
) -> list[str]:
    """``requires_grad_(requires_grad)`` on every parameter whose FQN matches one of ``patterns``
    (``requires_grad=True``: a schedule step's ``unfreeze``).

    Returns the FQNs changed (``named_parameters()`` order).

    Raises:
        ValueError: a pattern matches no parameter (the message starts with ``where``).
    """
    named = dict(root.named_parameters())
    frozen: list[str] = []
    for pattern in patterns:
        hits = match_params(pattern, list(named))
        if not hits:
            raise ValueError(f"{where}: {pattern!r} matches no parameter")
        frozen += [h for h in hits if h not in frozen]
    for fqn in frozen:
        named[fqn].requires_grad_(requires_grad)
    return [f for f in named if f in frozen]


def step_requires_grad(root: nn.Module, step: Any) -> None:
    """A schedule step's ``freeze`` then ``unfreeze`` patterns (``harness.load.schedule.ScheduleStep``)
    applied to ``root``'s parameters, at the start of the step.

    Raises:
        ValueError: a pattern matches no parameter (the loader refuses such a spec first).
    """
    if step.freeze:
        freeze_params(root, step.freeze, where="setup.schedule.steps[].freeze")
    if step.unfreeze:
        freeze_params(root, step.unfreeze, requires_grad=True, where="setup.schedule.steps[].unfreeze")


def set_grad_dtypes(root: nn.Module, rules: Sequence[tuple[str, str]]) -> dict[str, str]:
    """``Parameter.grad_dtype = dtype`` for each parameter matching a rule (``setup.grad_dtype``;
    the first matching pattern wins), on the built model before ``fully_shard``.

    Returns FQN -> the dtype name set. ``grad_dtype`` (torch >= 2.9) asks autograd to accumulate a
    leaf's gradient in that dtype whatever the dtype of the parameter.

    Raises:
        ValueError: a pattern matches no parameter; or this torch has no ``Parameter.grad_dtype``.
    """
    named = dict(root.named_parameters())
    chosen: dict[str, str] = {}
    for pattern, dtype in rules:
        hits = match_params(pattern, list(named))
        if not hits:
            raise ValueError(f"setup.grad_dtype: {pattern!r} matches no parameter")
        for fqn in hits:
            chosen.setdefault(fqn, dtype)
    for fqn, dtype in chosen.items():
        if not hasattr(named[fqn], "grad_dtype"):
            raise ValueError(f"setup.grad_dtype: torch {torch.__version__} has no Parameter.grad_dtype (torch >= 2.9)")
        named[fqn].grad_dtype = torch_dtype(dtype)
    return chosen


def _placement_fn(rules: Sequence[tuple[str, int]], names: Mapping[int, str]) -> Callable[[nn.Parameter], Shard | None]:
    """``shard_placement_fn``: ``Shard(dim)`` for a parameter matching a rule, else None (Shard(0))."""

    def placement(param: nn.Parameter) -> Shard | None:
        fqn = names.get(id(param), "")
        for pattern, dim in rules:
            if match_params(pattern, [fqn]):
                return Shard(dim)
        return None

    return placement


def _fsdp_params(module: nn.Module) -> list[nn.Parameter]:
    """The parameters FSDP manages for the unit whose first module is ``module`` (its state)."""
    state = fully_shard.state(module)
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is None:  # torch before per-mesh parameter groups
        groups = [state._fsdp_param_group] if state._fsdp_param_group is not None else []
    return [fp.sharded_param for g in groups for fp in g.fsdp_params]


def apply_fsdp(
    root: nn.Module,
    mesh: DeviceMesh,
    units: Sequence[ShardUnit],
    *,
    materialize: Callable[[nn.Module], None] | None = None,
    forward_prefetch: Sequence[tuple[str, Sequence[str]]] = (),
    backward_prefetch: Sequence[tuple[str, Sequence[str]]] = (),
    freeze: Sequence[str] = (),
    freeze_after: bool = False,
    grad_dtypes: Sequence[tuple[str, str]] = (),
    after_each: Callable[[ShardUnit, nn.Module], None] | None = None,
) -> list[Unit]:
    """Call ``fully_shard(modules, mesh=mesh, **unit.options())`` for each unit, in order.

    Order matters: a module sharded earlier keeps its parameters, and a later unit that
    contains it (its parent, the root last) manages only the parameters no earlier unit took.
    Per unit, before its call: activation checkpointing of its modules (``checkpoint``);
    after every call: ``materialize``, then each unit's :data:`UNIT_SETTERS`, the prefetch
    lists, freezing (``freeze_after``) and ``module.compile()``.

    Args:
        root: the built model (on its device, or on ``meta`` for meta-device init).
        mesh: 1-D (FSDP, ``Shard(0)`` on it) or 2-D (HSDP: replicate on dim 0, shard on dim 1).
        units: the units, children before their parents.
        materialize: for a model built on ``meta``: called with ``root`` after every
            ``fully_shard``, to allocate and fill only this rank's shards.
        forward_prefetch, backward_prefetch: (unit name, unit names) pairs ("" is the root).
        freeze: parameter FQN patterns to make ``requires_grad=False``.
        freeze_after: freeze after every ``fully_shard`` (the DTensor parameters) instead of before.
        grad_dtypes: (FQN pattern, dtype name) pairs: ``Parameter.grad_dtype`` set before the first
            ``fully_shard`` (:func:`set_grad_dtypes`).
        after_each: called with (the unit, its first module) right after each ``fully_shard`` call
            (the spec's ``setup.hooks.after_fully_shard``); a meta-built model is not yet materialized.

    Returns:
        The recorders' :class:`~harness.run.rank.recorders.params.Unit` per unit, same order: its
        modules and the FQNs (relative to the root, ``named_parameters()`` order) of the
        parameters torch's FSDP state for it manages.

    Raises:
        AttributeError: a unit's path names no submodule of ``root``.
        ValueError: a freeze pattern matches no parameter.
        Whatever torch raises for a unit it refuses (a module already managed, a bad placement).
    """
    if freeze and not freeze_after:
        freeze_params(root, freeze)
    if grad_dtypes:
        set_grad_dtypes(root, grad_dtypes)
    groups = [[root.get_submodule(p) for p in u.module_paths] for u in units]
    _fully_shard_units(root, mesh, units, groups, after_each)
    if materialize is not None:
        materialize(root)
    _set_unit_options(units, groups)
    by_name = {u.path: modules[0] for u, modules in zip(units, groups)}
    for unit, targets in forward_prefetch:
        by_name[unit].set_modules_to_forward_prefetch([by_name[t] for t in targets])
    for unit, targets in backward_prefetch:
        by_name[unit].set_modules_to_backward_prefetch([by_name[t] for t in targets])
    if freeze and freeze_after:
        freeze_params(root, freeze)
    for unit, modules in zip(units, groups):
        if unit.after is not None and unit.after.compile:
            if mesh.device_type == "cpu":
                raise RuntimeError(COMPILE_ON_CPU)
            for m in modules:
                m.compile()
    return _managed(root, units, groups)


def _fully_shard_units(
    root: nn.Module,
    mesh: DeviceMesh,
    units: Sequence[ShardUnit],
    groups: list[list[nn.Module]],
    after_each: Callable[[ShardUnit, nn.Module], None] | None = None,
) -> None:
    """Activation checkpointing (where asked), then ``fully_shard`` of each unit's modules, in order
    (``after_each`` after each call)."""
    names = {id(p): fqn for fqn, p in root.named_parameters()}
    for unit, modules in zip(units, groups):
        if unit.after is not None and unit.after.checkpoint:
            for m in modules:
                apply_checkpoint(m, unit.after.checkpoint_style, unit.after.checkpoint_use_reentrant)
        kwargs = unit.options()
        if unit.shard_placement:
            kwargs["shard_placement_fn"] = _placement_fn(unit.shard_placement, names)
        if unit.after is not None and unit.after.ignored_params:
            current = dict(root.named_parameters())  # an earlier unit replaced its own with DTensors
            kwargs["ignored_params"] = {
                current[fqn] for pat in unit.after.ignored_params for fqn in match_params(pat, list(current))
            }
        fully_shard(modules if len(modules) > 1 else modules[0], mesh=mesh, **kwargs)
        if after_each is not None:
            after_each(unit, modules[0])


def apply_checkpoint(module: nn.Module, style: str, use_reentrant: bool) -> None:
    """Activation checkpointing of ``module``, before its ``fully_shard`` (``setup.fsdp.units[].checkpoint``).

    ``style``: "composable" applies ``torch.distributed._composable.checkpoint(module)`` (its
    hooks register before FSDP's); "call" makes ``module(...)`` run as
    ``torch.utils.checkpoint.checkpoint(nn.Module.__call__, ...)``, FSDP's hooks inside the
    checkpoint, as transformers 4's ``GradientCheckpointingLayer.__call__``; "forward" wraps
    ``module.forward`` alone, inside FSDP's hooks, as transformers 5's. The functional forms
    checkpoint only in training with grad enabled (transformers' condition) and pass keyword
    arguments bound (``use_reentrant=True`` takes positional tensors only).

    Raises:
        ValueError: an unknown style.
    """
    if style == "composable":
        from torch.distributed._composable import checkpoint

        checkpoint(module)
        return
    from torch.utils.checkpoint import checkpoint

    def checkpointed(call: Callable[..., Any], owner: nn.Module, *args: Any, **kwargs: Any) -> Any:
        if owner.training and torch.is_grad_enabled():
            return checkpoint(functools.partial(call, **kwargs), *args, use_reentrant=use_reentrant)
        return call(*args, **kwargs)

    if style == "forward":
        forward = module.forward  # bound: an instance attribute, so nn.Module's call (and FSDP's hooks) wraps it
        module.forward = functools.partial(checkpointed, forward, module)
    elif style == "call":
        # __call__ is looked up on the type: a subclass of the module's class (fully_shard then
        # subclasses this one in turn, FSDP<name>, and keeps the override)
        base = type(module)

        def __call__(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
            return checkpointed(functools.partial(nn.Module.__call__, self), self, *args, **kwargs)

        module.__class__ = type(f"Checkpointed{base.__name__}", (base,), {"__call__": __call__})
    else:
        raise ValueError(f"checkpoint_style {style!r}: expected composable, call or forward")


UNIT_SETTERS: dict[str, Callable[[FSDPModule, Any], None]] = {
    "gradient_divide_factor": lambda unit, f: unit.set_gradient_divide_factor(f),
    "reduce_scatter_divide_factor": lambda unit, f: unit.set_reduce_scatter_divide_factor(f),
    "force_sum_reduction_for_comms": lambda unit, on: unit.set_force_sum_reduction_for_comms(on),
    "reshard_after_backward": lambda unit, on: unit.set_reshard_after_backward(on, recurse=False),
    "set_reshard_after_forward": lambda unit, on: unit.set_reshard_after_forward(on, recurse=False),
    "unshard_in_backward": lambda unit, on: unit.set_unshard_in_backward(on),
    "is_last_backward": lambda unit, on: unit.set_is_last_backward(on),
    "reduce_scatter_unused_params": lambda unit, on: unit.set_reduce_scatter_unused_params(on, recurse=False),
    "allocate_memory_from_process_group_for_comm": lambda unit, on: (
        unit.set_allocate_memory_from_process_group_for_comm(on)
    ),
    "symm_mem_for_comm": lambda unit, backend: unit.set_symm_mem_for_comm(backend),
}
"""The ``FSDPModule`` setter each unit option (:class:`~harness.load.units.UnitOptions` field of
the same name) calls on the unit's first module after every ``fully_shard``, in this order;
``recurse=False`` where torch has it, so a parent's call leaves its children's settings. A
setter runs only when the unit's value differs from the option's declared default (the default
means "not called")."""


def _set_unit_options(units: Sequence[ShardUnit], groups: list[list[nn.Module]]) -> None:
    """Each unit's :data:`UNIT_SETTERS` whose option it sets, on its first module."""
    defaults = UnitOptions()
    for unit, modules in zip(units, groups):
        if unit.after is None:
            continue
        for name, setter in UNIT_SETTERS.items():
            value = getattr(unit.after, name)
            if value != getattr(defaults, name):
                setter(modules[0], value)


def _managed(root: nn.Module, units: Sequence[ShardUnit], groups: list[list[nn.Module]]) -> list[Unit]:
    """What each unit manages, as torch's FSDP state says (a tied weight is managed once)."""
    names = {id(p): fqn for fqn, p in root.named_parameters()}
    order = {fqn: i for i, fqn in enumerate(names.values())}
    out = []
    for u, modules in zip(units, groups):
        managed = sorted((names[id(p)] for p in _fsdp_params(modules[0]) if id(p) in names), key=order.__getitem__)
        out.append(Unit(u.path, u.role, u.layer, modules[0], tuple(managed), tuple(modules), tuple(u.module_paths)))
    return out


def offloaded_params(root: nn.Module) -> set[int]:
    """``id`` of every parameter an FSDP unit of ``root`` manages under a ``CPUOffloadPolicy``
    (the unit's ``FSDPParamGroup``, as :func:`unit_state` reads it)."""
    ids: set[int] = set()
    for module in root.modules():
        if not isinstance(module, FSDPModule):
            continue
        group = getattr(fully_shard.state(module), "_fsdp_param_group", None)
        if group is not None and isinstance(group.offload_policy, CPUOffloadPolicy):
            ids.update(id(fsdp_param.sharded_param) for fsdp_param in group.fsdp_params)
    return ids


def materialization_devices(root: nn.Module, device: torch.device) -> dict[str, torch.device]:
    """Module FQN (``""``: the root) -> the device :func:`materialize_empty` allocates that
    module's own parameters on: the CPU for a module whose parameters a unit offloads
    (FSDP2 refuses, at its lazy init, offloaded parameters materialized anywhere else), else
    ``device``. Buffers are not FSDP's to offload: they always go to ``device``, where the
    forward runs (torchtitan materializes offloaded models the same way)."""
    offloaded = offloaded_params(root)
    cpu = torch.device("cpu")
    return {
        fqn: cpu if any(id(p) in offloaded for p in module.parameters(recurse=False)) else device
        for fqn, module in root.named_modules()
    }


def materialize_empty(root: nn.Module, device: torch.device) -> None:
    """``root.to_empty(device=device)`` for a model sharded on ``meta``, except that the
    parameters of offloaded units are allocated on the CPU (:func:`materialization_devices`).
    Module by module (``to_empty(recurse=False)``: the same per-module ``_apply`` a recursive
    call makes, so tied parameters stay tied), children before their parent as in a recursive
    call: an FSDP module's ``_apply`` re-pads its shards (``FSDPParam.reset_sharded_param``) only
    when they are no longer on ``meta``. Parent first, the re-padding of an uneven shard waited
    for the lazy init of the first forward, under the memory tracker, which then counted the
    padded shards of the last rank as activations and no sharded parameter at all."""
    devices = materialization_devices(root, device)
    for fqn, module in reversed(list(root.named_modules())):
        module.to_empty(device=devices[fqn], recurse=False)
        if devices[fqn] != device:  # its buffers, allocated with its parameters, go where compute runs
            for name, buffer in module.named_buffers(recurse=False):
                setattr(module, name, torch.empty_like(buffer, device=device))


def init_local_shards(root: nn.Module, device: torch.device, *, std: float, seed: int, rank: int) -> None:
    """Materialize a model sharded on ``meta``: allocate on ``device``, fill this rank's shards.

    ``root.to_empty(device)`` keeps FSDP's ``DTensor`` parameters (and tied weights). Matrices
    (embedding, projections, lm_head) ~ N(0, std^2), vectors (RMSNorm weights) = 1, as
    ``model.init_weights``; but each rank draws its own shard from its own generator
    (``seed``, ``rank``), so the full weights are not those of ``init_weights``: used only
    when numerics are off and ``setup.init`` is not set, where no value is observed. RoPE's
    ``inv_freq`` buffer (not sharded) is recomputed. See :func:`init_shards_like_full` for
    values identical to a full init. Offloaded units' parameters on the CPU
    (:func:`materialize_empty`).
    """
    materialize_empty(root, device)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    with torch.no_grad():
        for p in root.parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            if p.dim() >= 2:
                sample = torch.empty(local.shape, dtype=torch.float32).normal_(0.0, std, generator=generator)
                local.copy_(sample)
            else:
                local.fill_(1.0)
        for m in root.modules():
            if isinstance(m, qwen3.Qwen3RotaryEmbedding):
                m.reset_parameters()


def _local_slices(p: torch.Tensor) -> tuple[slice, ...] | None:
    """This rank's slice of each dim of ``p``'s full tensor (None: ``p`` is not a DTensor)."""
    if not isinstance(p, DTensor):
        return None
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
    return tuple(slice(o, o + n) for o, n in zip(offset, shape))


@contextlib.contextmanager
def uninitialized_memory_as_nan() -> Iterator[None]:
    """Inside the block, memory torch allocates without initializing (``torch.empty``,
    ``empty_like``: what ``to_empty()`` uses) is filled with NaN (integers: their maximum), so a
    value read before anything wrote it shows as NaN instead of whatever the allocator left.

    torch's own switch for it: ``torch.utils.deterministic.fill_uninitialized_memory`` under
    ``torch.use_deterministic_algorithms(True)`` (torch docs, "torch.utils.deterministic"); both
    are restored on exit.
    """
    import torch.utils.deterministic as deterministic

    enabled, warn_only = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    fill = deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        deterministic.fill_uninitialized_memory = fill
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


@torch.no_grad()
def init_shards_like_full(root: nn.Module, device: torch.device, *, seed: int, repair: bool = True) -> None:
    """Materialize a model sharded on ``meta`` with the values a full init gives (``setup.init: meta``).

    ``root.to_empty(device)`` allocates every (local) tensor; then ``model.init_weights`` runs
    with ``torch.Generator().manual_seed(seed)`` exactly as :func:`harness.run.rank.build.build_model`
    does for a full model, except that each weight is drawn whole (float32, one weight at a
    time) and only this rank's slice (DTensor local shape and global offset: ``Shard(0)``,
    ``Shard(1)``, padding, HSDP) is kept. Same draws in the same order: the same numbers as a
    full init. RMSNorm weights are filled with 1 and RoPE's ``inv_freq`` recomputed (a buffer
    ``to_empty`` leaves uninitialized). Offloaded units' parameters on the CPU
    (:func:`materialize_empty`).

    ``repair`` False (``setup.init: {device: meta, repair: false}``): only the Linear and
    Embedding weights are filled, as an init that forgets the rest; the RMSNorm weights and
    ``inv_freq`` keep what ``to_empty`` left, which :func:`uninitialized_memory_as_nan` makes NaN.
    """
    if repair:
        materialize_empty(root, device)
    else:
        with uninitialized_memory_as_nan():
            materialize_empty(root, device)

    def fill(weight: torch.Tensor, sample: torch.Tensor) -> None:
        slices = _local_slices(weight)
        target = weight.to_local() if slices is not None else weight
        target.copy_(sample[slices] if slices is not None else sample)

    qwen3.init_weights(root, generator=torch.Generator().manual_seed(seed), fill=fill, reset_norms_and_rope=repair)


def unit_state(unit: Unit) -> dict[str, Any]:
    """What torch's FSDP state holds for a unit (read after the step, when the root's lazy init
    has settled its defaults): the observation's ``fsdp_units[].state``.

    ``reshard_after_forward``: False when no post-forward mesh, True when it is the shard
    mesh, else the size of the post-forward shard group; the others as ``FSDPParamGroup`` holds
    them (``gradient_divide_factor`` None: FSDP's default division; ``offload``: a
    ``CPUOffloadPolicy``; ``param_dtype``/``reduce_dtype``/``output_dtype``: the
    ``MixedPrecisionPolicy``'s, None to keep).
    """
    from harness.run.rank.recorders.collectives import dtype_name

    state = fully_shard.state(unit.module)
    group = getattr(state, "_fsdp_param_group", None)
    if group is None:
        return {"managed": False}
    post = group.post_forward_mesh_info
    if post is None:
        raf: bool | int = False
    elif post.shard_mesh_size == group.mesh_info.shard_mesh_size:
        raf = True
    else:
        raf = int(post.shard_mesh_size)
    mp = group.mp_policy

    def name(d: torch.dtype | None) -> str | None:
        return dtype_name(d) if d is not None else None

    return {
        "managed": True,
        "modules": len(group.modules),
        "reshard_after_forward": raf,
        "reshard_after_backward": bool(group.reshard_after_backward),
        "gradient_divide_factor": group.gradient_divide_factor,
        "force_sum_reduction_for_comms": bool(group.force_sum_reduction_for_comms),
        "offload": isinstance(group.offload_policy, CPUOffloadPolicy),
        "param_dtype": name(mp.param_dtype),
        "reduce_dtype": name(mp.reduce_dtype),
        "output_dtype": name(mp.output_dtype),
    }
