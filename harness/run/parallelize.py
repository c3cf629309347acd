"""Applying FSDP2 to a built model: the mesh, the FSDP units, ``fully_shard``, meta-device init.

:func:`apply_fsdp` is the only place in the harness that calls
``torch.distributed.fsdp.fully_shard``. It takes the units as data (:class:`ShardUnit`: a
module path and that unit's own ``fully_shard`` options), so richer setups (several modules
per unit, per-unit offload policies, ``shard_placement_fn``, frozen parameters, activation
checkpointing) extend the unit description and this one function, not the rank step.
:func:`units_from_setup` derives today's units from a :class:`~harness.load.setup.RunSetup`.

Source: the walkthrough document ("FSDP2 Qwen3 Decoder Layer Walkthrough", section "FSDP2
设置"): over a 1-D ``dp`` mesh of 4 ranks, every decoder layer becomes its own FSDP unit
(``fully_shard`` per layer), and then the whole model is wrapped as the root unit; each
parameter turns into a ``DTensor`` split evenly along dim 0 (``Shard(0)``) across the 4 ranks,
and FSDP's pre-/post-forward hooks sit on every unit. API: ``fully_shard(module, *, mesh,
reshard_after_forward, mp_policy, ...)`` (torch 2.13).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import model as qwen3
from harness.load.setup import RunSetup
from harness.run.build import torch_dtype
from harness.run.recorders.params import Unit, param_owner

__all__ = ["ShardUnit", "build_mesh", "units_from_setup", "mixed_precision_policy", "apply_fsdp", "init_local_shards"]


@dataclass(frozen=True)
class ShardUnit:
    """One ``fully_shard`` call: which module, as which unit, with which options.

    Attributes:
        path: module FQN relative to the root (``"layers.0"``, ``"model.layers.3"``); ``""``
            is the root itself.
        role: "layer" or "root" (the observation's ``fsdp_units[].role``).
        layer: the decoder layer index of a layer unit, else None.
        reshard_after_forward: True, False or an int (reshard to groups of that size after
            forward); None passes nothing, so torch's default applies (for the root: not
            resharded after forward).
        mp_policy: the unit's ``MixedPrecisionPolicy``; None passes nothing (torch's default,
            no casting).
    """

    path: str
    role: str
    layer: int | None = None
    reshard_after_forward: bool | int | None = None
    mp_policy: MixedPrecisionPolicy | None = None

    def options(self) -> dict[str, Any]:
        """The keyword arguments of this unit's ``fully_shard`` call, besides ``mesh``."""
        kwargs: dict[str, Any] = {}
        if self.reshard_after_forward is not None:
            kwargs["reshard_after_forward"] = self.reshard_after_forward
        if self.mp_policy is not None:
            kwargs["mp_policy"] = self.mp_policy
        return kwargs


def build_mesh(setup: RunSetup, device_type: str) -> DeviceMesh:
    """``init_device_mesh(device_type, setup.mesh_shape, mesh_dim_names=setup.mesh_dim_names)``.

    A 2-D mesh is HSDP to ``fully_shard``: dim 0 replicates, dim 1 shards. Build it outside
    ``FakeTensorMode`` (the mesh reads its rank map as real values).
    """
    return init_device_mesh(device_type, tuple(setup.mesh_shape), mesh_dim_names=tuple(setup.mesh_dim_names))


def mixed_precision_policy(setup: RunSetup) -> MixedPrecisionPolicy:
    """``setup.fsdp.mixed_precision`` as a ``MixedPrecisionPolicy`` (torch's default if None)."""
    mp = setup.fsdp.mixed_precision
    if mp is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(
        param_dtype=torch_dtype(mp.param_dtype),
        reduce_dtype=torch_dtype(mp.reduce_dtype),
        output_dtype=torch_dtype(mp.output_dtype),
        cast_forward_inputs=mp.cast_forward_inputs,
    )


def units_from_setup(setup: RunSetup, root: nn.Module) -> list[ShardUnit]:
    """Today's units: each decoder layer of ``root`` in order, then the root (as the document).

    Layers take ``setup.fsdp.reshard_after_forward``; the root takes
    ``setup.fsdp.root_reshard_after_forward`` (None: nothing passed, as the document's
    ``fully_shard(model, mesh=mesh)``, so torch does not reshard the root after forward).
    Every unit takes the setup's mixed-precision policy.
    """
    policy = mixed_precision_policy(setup)
    num_layers = len(root.get_submodule("layers" if setup.model.body == "decoder_layers" else "model.layers"))
    *layers, _root = setup.unit_names(num_layers)  # the loader validates selectors against the same names
    units = [ShardUnit(path, "layer", i, setup.fsdp.reshard_after_forward, policy) for i, path in enumerate(layers)]
    units.append(ShardUnit("", "root", None, setup.fsdp.root_reshard_after_forward, policy))
    return units


def apply_fsdp(
    root: nn.Module,
    mesh: DeviceMesh,
    units: Sequence[ShardUnit],
    *,
    materialize: Callable[[nn.Module], None] | None = None,
) -> list[Unit]:
    """Call ``fully_shard(module, mesh=mesh, **unit.options())`` for each unit, in order.

    Order matters: a module sharded earlier keeps its parameters, and a later unit that
    contains it (its parent, the root last) manages only the parameters no earlier unit took.

    Args:
        root: the built model (on its device, or on ``meta`` for meta-device init).
        mesh: 1-D (FSDP, ``Shard(0)`` on it) or 2-D (HSDP: replicate on dim 0, shard on dim 1).
        units: the units, children before their parents.
        materialize: for a model built on ``meta``: called with ``root`` after every
            ``fully_shard``, to allocate and fill only this rank's shards (see
            :func:`init_local_shards`).

    Returns:
        The recorders' :class:`~harness.run.recorders.params.Unit` per unit, same order: its
        module and the FQNs (relative to the root, ``named_parameters()`` order) of the
        parameters it manages.

    Raises:
        AttributeError: a unit's path names no submodule of ``root``.
    """
    all_params = [fqn for fqn, _ in root.named_parameters()]
    names = [u.path for u in units]
    modules = [root.get_submodule(u.path) for u in units]
    for unit, module in zip(units, modules):
        fully_shard(module, mesh=mesh, **unit.options())
    if materialize is not None:
        materialize(root)
    return [
        Unit(u.path, u.role, u.layer, module, tuple(f for f in all_params if param_owner(f, names) == u.path))
        for u, module in zip(units, modules)
    ]


def init_local_shards(root: nn.Module, device: torch.device, *, std: float, seed: int, rank: int) -> None:
    """Materialize a model sharded on ``meta``: allocate on ``device``, fill this rank's shards.

    ``root.to_empty(device)`` keeps FSDP's ``DTensor`` parameters (and tied weights). Matrices
    (embedding, projections, lm_head) ~ N(0, std^2), vectors (RMSNorm weights) = 1, as
    ``model.init_weights``; but each rank draws its own shard from its own generator
    (``seed``, ``rank``), so the full weights are not those of ``init_weights``: used only
    when numerics are off, where no value is observed. RoPE's ``inv_freq`` buffer (not
    sharded) is recomputed.
    """
    root.to_empty(device=device)
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
