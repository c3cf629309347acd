"""Applying FSDP2 to a built model: the mesh, the FSDP units, ``fully_shard``, meta-device init.

:func:`apply_fsdp` is the harness's only ``torch.distributed.fsdp.fully_shard`` call and applies each
unit option (:class:`harness.load.units.UnitOptions`). Source: the walkthrough document, section
"FSDP2 设置" (``fully_shard`` per decoder layer, then the root).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    DataParallelMeshDims,
    FSDPModule,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
    register_fsdp_forward_method,
)
from torch.distributed.tensor import DTensor, Shard

import model as qwen3
from harness.load.setup import RunSetup
from harness.load.units import HOOK_OPTION_KEYS, MixedPrecision, UnitOptions, match_params
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
    "replicate_on_mesh",
    "share_units_comm_ctx",
    "comm_ctx_owners",
    "comm_ctx_ids",
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
    """One ``fully_shard`` call: which modules (``paths``; () means ``(path,)``), as which unit, how.

    ``path`` names the unit (FQN relative to the root, ``""`` the root; several modules' FQNs joined by
    ``", "``); ``role``: "layer", "root" or "module"; None passes nothing to ``fully_shard``;
    ``after``: the unit's other options (:data:`UNIT_SETTERS`, checkpointing, compile)."""

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
        """This unit's ``fully_shard`` keyword arguments besides ``mesh`` and ``shard_placement_fn``."""
        kwargs: dict[str, Any] = {}
        if self.reshard_after_forward is not None:
            kwargs["reshard_after_forward"] = self.reshard_after_forward
        if self.mp_policy is not None:
            kwargs["mp_policy"] = self.mp_policy
        if self.offload_policy is not None:
            kwargs["offload_policy"] = self.offload_policy
        return kwargs


def build_mesh(setup: RunSetup, device_type: str) -> DeviceMesh:
    """The setup's ``init_device_mesh`` (2-D: HSDP); not under ``FakeTensorMode``: it reads ranks as values."""
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
    """The setup's units in ``fully_shard`` order, the root last (``RunSetup.unit_plan``);
    ``harness.load.setup.SetupError`` where a unit names no module of ``root``."""
    num_layers = len(root.get_submodule(setup.layer_prefix))
    units = []
    sparse = tuple(i for i, layer in enumerate(root.get_submodule(setup.layer_prefix)) if hasattr(layer.mlp, "experts"))
    for plan in setup.unit_plan(num_layers, sparse_layers=sparse):  # the loader validated the same plan
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
    """``requires_grad_(requires_grad)`` on the parameters matching ``patterns``; their FQNs, in order.
    ValueError where a pattern matches none (the message starts with ``where``)."""
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
    """A schedule step's ``freeze`` then ``unfreeze`` on ``root``; ValueError if a pattern matches nothing."""
    if step.freeze:
        freeze_params(root, step.freeze, where="setup.schedule.steps[].freeze")
    if step.unfreeze:
        freeze_params(root, step.unfreeze, requires_grad=True, where="setup.schedule.steps[].unfreeze")


def set_grad_dtypes(root: nn.Module, rules: Sequence[tuple[str, str]]) -> dict[str, str]:
    """``Parameter.grad_dtype`` (torch >= 2.9: the dtype autograd accumulates a gradient in) per
    ``setup.grad_dtype`` rule, the first match winning; FQN -> dtype name. ValueError where a pattern
    matches no parameter or this torch has no ``Parameter.grad_dtype``."""
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
    call_hook: Callable[..., Any] | None = None,
    unit_mesh: Callable[[ShardUnit], DeviceMesh] | None = None,
    dp_mesh_dims: Any = None,
) -> list[Unit]:
    """``fully_shard(modules, mesh=mesh, **unit.options())`` per unit, in order, children first (a later
    unit containing an earlier one manages only the parameters left); per unit, a
    :class:`~harness.run.rank.recorders.params.Unit` (its modules, the FQNs FSDP's state manages).

    Activation checkpointing before each call; after all of them ``materialize`` (a ``meta``-built
    ``root``: allocate and fill this rank's shards), :data:`UNIT_SETTERS`, the prefetch lists ((unit
    name, unit names), "" the root), ``freeze`` (before instead, unless ``freeze_after``) and
    ``compile()``. ``grad_dtypes`` are set first; ``after_each(unit, first module)`` runs after each
    call; ``call_hook(name, **kwargs)`` calls the hooks-file function a unit option names;
    ``unit_mesh(unit)``: a unit's own mesh where not ``mesh`` (expert parallelism); ``dp_mesh_dims``:
    ``setup.fsdp.dp_mesh_dims`` (every unit gets its ``DataParallelMeshDims``). Raises AttributeError
    (a path names no submodule), ValueError (a freeze pattern matches nothing) and whatever torch raises
    for a unit."""
    if freeze and not freeze_after:
        freeze_params(root, freeze)
    if grad_dtypes:
        set_grad_dtypes(root, grad_dtypes)
    groups = [[root.get_submodule(p) for p in u.module_paths] for u in units]
    extra = (
        {}
        if dp_mesh_dims is None
        else {"dp_mesh_dims": DataParallelMeshDims(dp_mesh_dims.shard, dp_mesh_dims.replicate)}
    )
    _fully_shard_units(root, unit_mesh or (lambda unit: mesh), units, groups, after_each, extra)
    if materialize is not None:
        materialize(root)
    _set_unit_options(units, groups)
    _set_hook_options(units, groups, call_hook)
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
    mesh_of: Callable[[ShardUnit], DeviceMesh],
    units: Sequence[ShardUnit],
    groups: list[list[nn.Module]],
    after_each: Callable[[ShardUnit, nn.Module], None] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Checkpointing where asked, then ``fully_shard`` of each unit's modules (``after_each`` after
    each; ``extra``: keyword arguments every call gets)."""
    names = {id(p): fqn for fqn, p in root.named_parameters()}
    for unit, modules in zip(units, groups):
        if unit.after is not None and unit.after.checkpoint:
            for m in modules:
                apply_checkpoint(m, unit.after.checkpoint_style, unit.after.checkpoint_use_reentrant)
        kwargs = {**unit.options(), **(extra or {})}
        if unit.shard_placement:
            kwargs["shard_placement_fn"] = _placement_fn(unit.shard_placement, names)
        if unit.after is not None and unit.after.ignored_params:
            current = dict(root.named_parameters())  # an earlier unit replaced its own with DTensors
            kwargs["ignored_params"] = {
                current[fqn] for pat in unit.after.ignored_params for fqn in match_params(pat, list(current))
            }
        fully_shard(modules if len(modules) > 1 else modules[0], mesh=mesh_of(unit), **kwargs)
        if after_each is not None:
            after_each(unit, modules[0])


def apply_checkpoint(module: nn.Module, style: str, use_reentrant: bool) -> None:
    """Activation checkpointing of ``module`` before its ``fully_shard`` (``setup.fsdp.units[].checkpoint``).

    ``style`` "composable": ``torch.distributed._composable.checkpoint`` (hooks before FSDP's); "call":
    ``module(...)`` checkpointed, FSDP's hooks inside (transformers 4's ``GradientCheckpointingLayer``);
    "forward": ``module.forward`` alone (transformers 5's); these two only in training with grad, keyword
    arguments bound (``use_reentrant=True`` takes positional tensors only). Else ValueError."""
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
    "separate_reduce_scatter_group": lambda unit, on: unit.set_separate_reduce_scatter_group(on, recurse=False),
    "reduce_scatter_max_input_buffers": lambda unit, k: unit.set_reduce_scatter_max_input_buffers(k, recurse=False),
    "allocate_memory_from_process_group_for_comm": lambda unit, on: (
        unit.set_allocate_memory_from_process_group_for_comm(on)
    ),
    "symm_mem_for_comm": lambda unit, backend: unit.set_symm_mem_for_comm(backend),
    # a module function, not a setter: FSDP's forward hooks around each named method
    "forward_methods": lambda unit, names: [register_fsdp_forward_method(unit, name) for name in names],
}
"""The ``FSDPModule`` setter each unit option (:class:`~harness.load.units.UnitOptions` field of
the same name) calls on the unit's first module after every ``fully_shard``, in this order;
``recurse=False`` where torch has it, so a parent's call leaves its children's settings. A
setter runs only when the unit's value differs from the option's declared default (the default
means "not called")."""


def _set_unit_options(units: Sequence[ShardUnit], groups: list[list[nn.Module]]) -> None:
    defaults = UnitOptions()
    for unit, modules in zip(units, groups):
        if unit.after is None:
            continue
        for name, setter in UNIT_SETTERS.items():
            value = getattr(unit.after, name)
            if value != getattr(defaults, name):
                setter(modules[0], value)


def _set_hook_options(units: Sequence[ShardUnit], groups: list[list[nn.Module]], call_hook: Any) -> None:
    """The unit options that name a function of the spec's hooks file (:data:`HOOK_OPTION_KEYS`)."""
    for unit, modules in zip(units, groups):
        o, module = unit.after, modules[0]
        named = {k: getattr(o, k) for k in HOOK_OPTION_KEYS if o is not None and getattr(o, k) is not None}
        if named and call_hook is None:
            raise ValueError(f"unit {unit.path!r}: {named} without the spec's hooks")
        if "all_reduce_hook" in named:
            name = named["all_reduce_hook"]
            module.set_all_reduce_hook(lambda reduce_output, name=name: call_hook(name, reduce_output=reduce_output))
        if "custom_all_gather" in named:
            module.set_custom_all_gather(call_hook(named["custom_all_gather"], unit=unit.path or "root"))
        if "custom_reduce_scatter" in named:
            module.set_custom_reduce_scatter(call_hook(named["custom_reduce_scatter"], unit=unit.path or "root"))


def _managed(root: nn.Module, units: Sequence[ShardUnit], groups: list[list[nn.Module]]) -> list[Unit]:
    """What each unit manages, as torch's FSDP state says (a tied weight is managed once)."""
    names = {id(p): fqn for fqn, p in root.named_parameters()}
    order = {fqn: i for i, fqn in enumerate(names.values())}
    out = []
    for u, modules in zip(units, groups):
        managed = sorted((names[id(p)] for p in _fsdp_params(modules[0]) if id(p) in names), key=order.__getitem__)
        out.append(Unit(u.path, u.role, u.layer, modules[0], tuple(managed), tuple(modules), tuple(u.module_paths)))
    return out


def replicate_on_mesh(root: nn.Module, mesh: DeviceMesh) -> None:
    """Every parameter of ``root`` as a ``Replicate()`` DTensor on every dim of ``mesh``, in place
    (``setup.fsdp.dp_mesh_dims``: the full SPMD style ``fully_shard(dp_mesh_dims=)`` requires);
    ``src_data_rank=None``: each rank keeps the weights it built, the same on every rank."""
    from torch.distributed.tensor import Replicate, distribute_tensor

    placements = [Replicate()] * mesh.ndim
    for module in root.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            replicated = distribute_tensor(p.data, mesh, placements, src_data_rank=None)
            module.register_parameter(name, nn.Parameter(replicated, requires_grad=p.requires_grad))


def share_units_comm_ctx(units: Sequence[Unit], names: Sequence[str]) -> None:
    """``torch.distributed.fsdp.share_comm_ctx`` over the units named (``root`` or "" the root), in
    the order named: the later take the first's ``FSDPCommContext``."""
    from torch.distributed.fsdp import share_comm_ctx

    by_name = {u.name: u.module for u in units}
    share_comm_ctx([by_name["" if n == "root" else n] for n in names])


def comm_ctx_ids(units: Sequence[Unit]) -> dict[int, str]:
    """``id`` of each unit's own ``FSDPCommContext`` -> its name (right after ``fully_shard``)."""
    # FSDPState._comm_ctx has no public getter; only the ids are kept, no reference
    return {id(fully_shard.state(u.module)._comm_ctx): u.name for u in units}


def comm_ctx_owners(units: Sequence[Unit], made_by: Mapping[int, str]) -> dict[str, str | None]:
    """Unit name -> the unit that made the ``FSDPCommContext`` it holds now (:func:`comm_ctx_ids`)."""
    return {u.name: made_by.get(id(fully_shard.state(u.module)._comm_ctx)) for u in units}


def offloaded_params(root: nn.Module) -> set[int]:
    """``id`` of every parameter a unit of ``root`` manages under a ``CPUOffloadPolicy``."""
    ids: set[int] = set()
    for module in root.modules():
        if not isinstance(module, FSDPModule):
            continue
        group = getattr(fully_shard.state(module), "_fsdp_param_group", None)
        if group is not None and isinstance(group.offload_policy, CPUOffloadPolicy):
            ids.update(id(fsdp_param.sharded_param) for fsdp_param in group.fsdp_params)
    return ids


def materialization_devices(root: nn.Module, device: torch.device) -> dict[str, torch.device]:
    """Module FQN -> where :func:`materialize_empty` puts its own parameters: the CPU where a unit
    offloads them (FSDP2's lazy init refuses them elsewhere), else ``device``; buffers: ``device``."""
    offloaded = offloaded_params(root)
    cpu = torch.device("cpu")
    return {
        fqn: cpu if any(id(p) in offloaded for p in module.parameters(recurse=False)) else device
        for fqn, module in root.named_modules()
    }


def materialize_empty(root: nn.Module, device: torch.device) -> None:
    """``root.to_empty(device=device)``, offloaded units' parameters on the CPU; module by module,
    children first (tied parameters stay tied): FSDP's ``_apply`` re-pads a shard only once it is off
    ``meta``, and parent first left an uneven shard's re-padding to the first forward, where the memory
    tracker counted it as activations."""
    devices = materialization_devices(root, device)
    for fqn, module in reversed(list(root.named_modules())):
        module.to_empty(device=devices[fqn], recurse=False)
        if devices[fqn] != device:  # its buffers, allocated with its parameters, go where compute runs
            for name, buffer in module.named_buffers(recurse=False):
                setattr(module, name, torch.empty_like(buffer, device=device))


def init_local_shards(root: nn.Module, device: torch.device, *, std: float, seed: int, rank: int) -> None:
    """Materialize a ``meta``-sharded model on ``device``, each rank drawing its own shards: matrices ~
    N(0, std^2), vectors 1, RoPE's ``inv_freq`` recomputed. Drawn per (``seed``, ``rank``), not a full
    init's values (:func:`init_shards_like_full`): for runs that observe no value."""
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
    """This rank's slice of each dim of ``p``'s full tensor (None: not a DTensor)."""
    if not isinstance(p, DTensor):
        return None
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
    return tuple(slice(o, o + n) for o, n in zip(offset, shape))


@contextlib.contextmanager
def uninitialized_memory_as_nan() -> Iterator[None]:
    """Inside the block, memory torch allocates uninitialized (``torch.empty``, ``to_empty()``) is NaN
    (integers: their maximum), so a read before any write shows: torch's
    ``torch.utils.deterministic.fill_uninitialized_memory``, both switches restored on exit."""
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
    """Materialize a ``meta``-sharded model with a full init's values (``setup.init: meta``).

    ``model.init_weights`` with ``manual_seed(seed)``, as :func:`harness.run.rank.build.build_model`, each
    weight drawn whole (float32) and only this rank's slice kept: the same numbers. RMSNorm weights are
    set to 1 and RoPE's ``inv_freq`` recomputed, unless ``repair`` is False: they then keep what
    ``to_empty`` left, NaN (:func:`uninitialized_memory_as_nan`)."""
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
    """What torch's FSDP state holds for a unit after the step (``fsdp_units[].state``):
    ``reshard_after_forward`` False (no post-forward mesh), True (the shard mesh) or the post-forward
    group size; ``gradient_divide_factor`` None: FSDP's default; dtypes None: kept."""
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
        "separate_reduce_scatter_group": getattr(group.mesh_info, "reduce_scatter_process_group", None) is not None,
        "reduce_scatter_max_input_buffers": int(getattr(group, "reduce_scatter_max_input_buffers", 1)),
        "offload": isinstance(group.offload_policy, CPUOffloadPolicy),
        "param_dtype": name(mp.param_dtype),
        "reduce_dtype": name(mp.reduce_dtype),
        "output_dtype": name(mp.output_dtype),
    }
