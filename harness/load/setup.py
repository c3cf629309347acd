"""The run setup: everything the harness needs to reproduce one FSDP2 training step.

A spec's ``setup:`` mapping (already validated by ``harness/schemas/spec.schema.json``)
becomes a :class:`RunSetup`. Defaults follow the walkthrough document's setup code
(section "FSDP2 设置"): ``fully_shard`` on every decoder layer, then on the root, over a
1-D mesh named ``dp``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from harness.contract.names import BANDWIDTH_OPS  # noqa: F401 (the sweep's ops, re-exported)
from harness.load.units import (UNIT_OPTION_KEYS, MixedPrecision, OffloadSetup, UnitPlan, UnitSpec, freeze,
                                resolve_units, unit_spec_from_yaml)
from model.names import module_paths
from harness.load.schedule import Schedule

DTYPES = ("float16", "bfloat16", "float32")


class SetupError(ValueError):
    """A ``setup:`` mapping the schema accepts but the harness cannot run.

    Attributes:
        key_path: where, as a spec key path (``setup.mesh.dim_names``).
        message: what was expected (without the key path).
        errors: every problem found, as (key_path, message) pairs; the first is the one above.
    """

    def __init__(self, key_path: str, message: str, errors: list[tuple[str, str]] | None = None):
        self.key_path, self.message = key_path, message
        self.errors = list(errors) if errors else [(key_path, message)]
        super().__init__("\n".join(f"{k}: {m}" for k, m in self.errors))


@dataclass(frozen=True)
class ModelSetup:
    """Which model to build.

    Attributes:
        config: a name in ``model.KNOWN_CONFIGS`` ("walkthrough", "Qwen3-8B", ...) or an
            inline mapping of ``Qwen3Config`` fields.
        overrides: ``Qwen3Config`` fields replacing the named config's (e.g. num_hidden_layers).
        body: "decoder_layers" (the document's focus: N_L decoder layers, input is
            hidden_states [B, L, d]) or "causal_lm" (embed_tokens, layers, norm, lm_head;
            input is token ids [B, L]).
        dtype: dtype the parameters are built in, before ``fully_shard`` (the document: float16);
            not ``MixedPrecisionPolicy.param_dtype``, which is what the all-gather casts to.
    """

    config: str | Mapping[str, Any] = "walkthrough"
    overrides: Mapping[str, Any] = field(default_factory=dict)
    body: str = "decoder_layers"
    dtype: str = "float16"


@dataclass(frozen=True)
class FSDPSetup:
    """How ``fully_shard`` is applied.

    Attributes:
        reshard_after_forward: for every unit but the root (unless a unit sets its own):
            True, False, an int (reshard to a group of that size after forward) or None (torch's
            default).
        root_reshard_after_forward: for the root unit; None passes nothing, so torch's own
            default for the root applies, as in the document's ``fully_shard(model, mesh=mesh)``.
        mixed_precision: every unit's ``MixedPrecisionPolicy`` unless a unit sets ``mp_policy``;
            None for no policy.
        offload_policy: every unit's ``CPUOffloadPolicy`` unless a unit sets one; None: none.
        units: the ``fully_shard`` calls in order (:mod:`harness.load.units`); None: one unit per
            decoder layer, then the root (the document's setup code).
        forward_prefetch: ((unit, (units...)), ...): ``unit.set_modules_to_forward_prefetch``.
        backward_prefetch: the same for ``set_modules_to_backward_prefetch``.
        defaults: the other unit options (``gradient_divide_factor``,
            ``force_sum_reduction_for_comms``, ``reshard_after_backward``,
            ``set_reshard_after_forward``, ``shard_placement``, ``checkpoint``, ``compile``)
            as written at ``fsdp`` level, defaults of every unit.
    """

    reshard_after_forward: bool | int | None = True
    root_reshard_after_forward: bool | int | None = None
    mixed_precision: MixedPrecision | None = None
    offload_policy: OffloadSetup | None = None
    units: tuple[UnitSpec, ...] | None = None
    forward_prefetch: tuple[tuple[str, tuple[str, ...]], ...] = ()
    backward_prefetch: tuple[tuple[str, tuple[str, ...]], ...] = ()
    defaults: tuple[tuple[str, Any], ...] = ()

    def unit_defaults(self) -> dict[str, Any]:
        """Every unit option's value at ``fsdp`` level (:data:`harness.load.units.UNIT_OPTION_KEYS`)."""
        out: dict[str, Any] = {"reshard_after_forward": self.reshard_after_forward,
                               "mp_policy": self.mixed_precision, "offload_policy": self.offload_policy}
        out.update(dict(self.defaults))
        return out


@dataclass(frozen=True)
class FreezeSetup:
    """Parameters made ``requires_grad=False`` by pattern (:func:`harness.load.units.match_params`).

    Attributes:
        params: FQN patterns (relative to the root; ``*`` one component, ``**`` several).
        after_fully_shard: False: frozen on the built model, before ``fully_shard`` (FSDP then
            sees frozen parameters at init); True: frozen on the sharded ``DTensor`` parameters,
            after every ``fully_shard``.
    """

    params: tuple[str, ...] = ()
    after_fully_shard: bool = False


@dataclass(frozen=True)
class OptimizerSetup:
    """The optimizer stepped after backward: "sgd" or "adamw", with its learning rate."""

    name: str = "sgd"
    lr: float = 1e-2


@dataclass(frozen=True)
class BandwidthSize:
    """One size of a bandwidth sweep: S, the full buffer as nccl-tests counts it.

    Attributes:
        name: the size's name in reports and in ``bandwidth`` entries (``size:``).
        layer_of: a known config name (``Qwen3-8B``): S is one of its decoder layers, the FSDP
            unit FSDP2 all-gathers, padded as FSDP2 pads it for the group size.
        numel: or S as an element count.
    """

    name: str
    layer_of: str | None = None
    numel: int | None = None


@dataclass(frozen=True)
class BandwidthSetup:
    """Collectives timed after the step, in nccl-tests' terms (``harness/run/bandwidth.py``).

    Attributes:
        ops: which collectives to sweep (:data:`BANDWIDTH_OPS`).
        sizes: the sweep's sizes, in order.
        dtype: the sweep's dtype; None: the step's all-gather dtype (the mixed-precision
            param_dtype, else ``model.dtype``).
        warmup: untimed operations before the timed ones, per row.
        iterations: timed operations per row; a row's time is their mean.
        cpu_max_bytes: on CPU ranks (gloo), a size whose S is larger runs at this many bytes
            instead (rounded down to whole elements per rank), and reports both; None: no cap.
            GPUs ignore it.
        step: also time each distinct collective the step issued (same op, dtype, elements
            and group), replayed on its own after the step.
    """

    ops: tuple[str, ...] = ("all_gather", "reduce_scatter")
    sizes: tuple[BandwidthSize, ...] = ()
    dtype: str | None = None
    warmup: int = 2
    iterations: int = 5
    cpu_max_bytes: int | None = None
    step: bool = True

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "BandwidthSetup":
        """Build from ``setup.bandwidth`` (schema-validated).

        Raises:
            SetupError: a size name used twice or named ``step``, a ``layer_of`` that is not a
                known config.
        """
        from model.config import known_config_name

        data = dict(data)
        sizes = []
        problems: list[tuple[str, str]] = []
        seen: dict[str, int] = {}
        for i, raw in enumerate(data.pop("sizes", ())):
            size = BandwidthSize(**raw)
            where = f"setup.bandwidth.sizes[{i}]"
            if size.name == "step" or size.name in seen:
                problems.append((f"{where}.name", f"size name {size.name!r} "
                                 + ("is reserved for the step's own collectives" if size.name == "step"
                                    else f"is used by sizes[{seen[size.name]}]; each name once")))
            seen.setdefault(size.name, i)
            if size.layer_of is not None and known_config_name(size.layer_of) is None:
                from model.config import KNOWN_CONFIGS

                problems.append((f"{where}.layer_of", f"expected a known config, one of {list(KNOWN_CONFIGS)}, "
                                 f"got {size.layer_of!r}"))
            sizes.append(size)
        if problems:
            raise SetupError(*problems[0], errors=problems)
        return cls(ops=tuple(data.pop("ops", cls.ops)), sizes=tuple(sizes), **data)


@dataclass(frozen=True)
class StateDictSetup:
    """The ``torch.distributed.checkpoint`` round trip after the step (``setup.state_dict``).

    Attributes:
        round_trip: after the optimizer step, save the sharded model and optimizer state
            (``get_state_dict`` + ``dcp.save``) into a temporary folder, load it into a freshly
            built and sharded model and optimizer of the same world (``dcp.load`` +
            ``set_state_dict``) and record, per state-dict entry and rank, equality after load
            and the shard's global offset and length (``harness.run.checkpoint``).
        reload_world_sizes: also load the same checkpoint in a second launch of this many
            ranks each (a 1-D mesh named as the run's shard dim), e.g. ``(2,)``; needs
            ``round_trip`` and a local launch.
    """

    round_trip: bool = False
    reload_world_sizes: tuple[int, ...] = ()


@dataclass(frozen=True)
class RunSetup:
    """One FSDP2 training step, fully specified.

    Attributes:
        model: see :class:`ModelSetup`.
        mesh_shape: DeviceMesh shape; (4,) for the document, (2, 2) for HSDP.
        mesh_dim_names: one name per mesh dim; ("dp",) for the document,
            ("dp_replicate", "dp_shard") for HSDP.
        batch_per_rank: B, samples per data-parallel rank (document: 2).
        seq_len: L, tokens per sample (document: 8).
        fsdp: see :class:`FSDPSetup`.
        optimizer: see :class:`OptimizerSetup`.
        seed: seeds weights and the global batch.
        observe_ranks: simulated runs only: which global ranks to record (None: every rank up
            to 8 ranks, else rank 0).
        numerics: compare with a non-sharded replica (real runs; every rank then holds the
            full model, its full gradients and runs one more forward and backward). Off: the
            model is built on the meta device and each rank materializes only its shards
            after fully_shard (values then differ from init_weights'), for models too big to
            hold unsharded on every rank at once. The observation is otherwise the same.
        numerics_reference: where the replica runs: "each_rank" (default: every rank builds the
            full model and runs its own inputs; gradients summed with an all-reduce) or "rank_0"
            (rank 0 alone builds it, runs every rank's inputs in turn, sums the gradients in
            float32 and hands each rank its rows through files in a shared folder: one full
            model in memory instead of one per rank; the default step only, not a schedule).
        bandwidth: collectives timed after the step (:class:`BandwidthSetup`); None: none.
        state_dict: see :class:`StateDictSetup` (default: no checkpoint round trip).
        init: how the weights come to be: "full" (built on the device, ``init_weights``, then
            ``fully_shard``), "meta" (built on ``meta``, ``fully_shard``, ``to_empty``, then each
            rank fills its shards with exactly the values "full" gives: same seed, same numbers;
            RoPE's ``inv_freq`` recomputed), or None: "full" with numerics on, else each rank
            draws its own shards (fast, values unlike "full"'s).
        track_memory: run ``FSDPMemTracker`` over the step (the ``memory`` observation).
        freeze: see :class:`FreezeSetup`.
        record_errors: set by the loader when a spec has an ``expect_error`` entry: an error
            raised by a rank is recorded in its observation (type, message, phase) instead of
            failing the run.
        schedule: the steps to run (``harness.load.schedule``); None: the walkthrough's one
            step (one forward, the body's loss, backward, optimizer step).
    """

    model: ModelSetup = field(default_factory=ModelSetup)
    mesh_shape: tuple[int, ...] = (4,)
    mesh_dim_names: tuple[str, ...] = ("dp",)
    batch_per_rank: int = 2
    seq_len: int = 8
    fsdp: FSDPSetup = field(default_factory=FSDPSetup)
    optimizer: OptimizerSetup = field(default_factory=OptimizerSetup)
    seed: int = 0
    observe_ranks: tuple[int, ...] | None = None
    numerics: bool = True
    numerics_reference: str = "each_rank"
    bandwidth: BandwidthSetup | None = None
    state_dict: StateDictSetup = field(default_factory=StateDictSetup)
    init: str | None = None
    track_memory: bool = True
    freeze: FreezeSetup = field(default_factory=FreezeSetup)
    record_errors: bool = False
    schedule: Schedule | None = None

    @property
    def world_size(self) -> int:
        size = 1
        for n in self.mesh_shape:
            size *= n
        return size

    @property
    def layer_prefix(self) -> str:
        """Where the decoder layers live: ``layers`` (decoder_layers) or ``model.layers``."""
        return "layers" if self.model.body == "decoder_layers" else "model.layers"

    def unit_plan(self, num_layers: int, param_fqns: tuple[str, ...] | None = None) -> list[UnitPlan]:
        """The FSDP units in ``fully_shard`` order, the root last (:mod:`harness.load.units`).

        ``param_fqns``: the model's parameter FQNs, to check that every ``shard_placement`` and
        ``freeze`` pattern names a parameter (skipped when None).

        Raises:
            SetupError: a unit pattern matches no module, a module is in two units, a prefetch
                names no unit, or a parameter pattern matches no parameter.
        """
        plans, problems = resolve_units(self.fsdp.units, self.fsdp.unit_defaults(),
                                        self.fsdp.root_reshard_after_forward,
                                        module_paths(self.model.body, num_layers), self.layer_prefix)
        if param_fqns is not None:
            problems += _param_pattern_problems(self, plans, param_fqns)
        names = [p.name for p in plans]
        for key, pairs in (("forward_prefetch", self.fsdp.forward_prefetch),
                           ("backward_prefetch", self.fsdp.backward_prefetch)):
            for unit, targets in pairs:
                for name in (unit, *targets):
                    if _unit_key(name) not in names:
                        problems.append((f"setup.fsdp.{key}", f"no FSDP unit named {name!r}; units: "
                                                              f"{['root' if n == '' else n for n in names]}"))
        if problems:
            raise SetupError(*problems[0], errors=problems)
        return plans

    def unit_names(self, num_layers: int) -> tuple[str, ...]:
        """FQNs of the FSDP units this setup creates, in ``fully_shard`` order ("" is the root):
        by default one per decoder layer, then the root (the document's section "FSDP2 设置")."""
        return tuple(p.name for p in self.unit_plan(num_layers))

    @property
    def data_parallel_size(self) -> int:
        """Ranks that each hold distinct samples: every rank of the mesh (FSDP and HSDP)."""
        return self.world_size

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        return json.loads(json.dumps(asdict(self)))

    def cache_key(self) -> str:
        """A stable hash of the setup; callers add torch version and backend."""
        import hashlib  # only runs need the key, not loading

        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "RunSetup":
        """Build from a spec's ``setup:`` mapping (schema-validated; unknown keys rejected).

        Keys: model {config, overrides, body, dtype}, mesh {shape, dim_names},
        batch_per_rank, seq_len, fsdp {reshard_after_forward, root_reshard_after_forward,
        mixed_precision {param_dtype, reduce_dtype, output_dtype, cast_forward_inputs},
        offload_policy {pin_memory}, units [...], forward_prefetch, backward_prefetch, and the
        unit options as every unit's defaults (harness.load.units.UNIT_OPTION_KEYS)},
        optimizer {name, lr}, seed, observe_ranks, numerics, numerics_reference, init, track_memory,
        freeze {params, after_fully_shard}, bandwidth {ops, sizes, dtype, warmup, iterations,
        cpu_max_bytes, step}, state_dict {round_trip, reload_world_sizes},
        schedule (harness.load.schedule).

        Raises:
            SetupError: naming the key path, for values the schema cannot catch (a mesh whose
                dim names do not match its shape, an observed rank outside the world).
        """
        data = dict(data)
        model = ModelSetup(**data.pop("model", {}))
        mesh = data.pop("mesh", {})
        shape = tuple(mesh.get("shape", (4,)))
        names = tuple(mesh.get("dim_names", ("dp",) if len(shape) == 1 else ()))
        problems: list[tuple[str, str]] = []
        if len(names) != len(shape):
            problems.append(("setup.mesh.dim_names",
                             f"expected {len(shape)} name{'s' if len(shape) != 1 else ''} for shape {list(shape)}, "
                             f"got {list(names)}"))
        fsdp_setup = _fsdp_from_mapping(dict(data.pop("fsdp", {})))
        frozen = data.pop("freeze", None)
        freeze_setup = FreezeSetup(tuple(frozen.get("params", ())), bool(frozen.get("after_fully_shard", False))) \
            if frozen else FreezeSetup()
        optimizer = OptimizerSetup(**data.pop("optimizer", {}))
        bandwidth = data.pop("bandwidth", None)
        if bandwidth is not None:
            try:
                bandwidth = BandwidthSetup.from_mapping(bandwidth)
            except SetupError as exc:
                problems.extend(exc.errors)
        observe = data.pop("observe_ranks", None)
        world = 1
        for n in shape:
            world *= n
        outside = [r for r in (observe or ()) if not 0 <= r < world]
        if outside:
            problems.append(("setup.observe_ranks",
                             f"rank(s) {outside} outside the world: world size {world} (mesh shape {list(shape)}), "
                             f"ranks 0-{world - 1}"))
        state_dict, sd_problems = _state_dict_setup(data.pop("state_dict", {}), world)
        problems += sd_problems
        if data.get("numerics_reference", "each_rank") != "each_rank" and data.get("schedule"):
            problems.append(("setup.numerics_reference",
                             "rank_0 computes the reference of the default step only; with setup.schedule "
                             "expected each_rank (or leave it out)"))
        schedule = None
        if "schedule" in data:
            schedule, schedule_problems = Schedule.from_mapping(data.pop("schedule") or {})
            problems += schedule_problems
        if problems:
            raise SetupError(*problems[0], errors=problems)
        return cls(
            model=model,
            mesh_shape=shape,
            mesh_dim_names=names,
            fsdp=fsdp_setup,
            freeze=freeze_setup,
            optimizer=optimizer,
            observe_ranks=tuple(observe) if observe is not None else None,
            bandwidth=bandwidth,
            state_dict=state_dict,
            schedule=schedule,
            **data,
        )


def _state_dict_setup(data: Mapping[str, Any], world: int) -> tuple[StateDictSetup, list[tuple[str, str]]]:
    """``setup.state_dict`` as a :class:`StateDictSetup`, and what the schema cannot catch."""
    sizes = tuple(data.get("reload_world_sizes", ()))
    problems = []
    if sizes and not data.get("round_trip", False):
        problems.append(("setup.state_dict.reload_world_sizes",
                         f"reloading on world sizes {list(sizes)} needs the round trip: add round_trip: true"))
    if world in sizes:
        problems.append(("setup.state_dict.reload_world_sizes",
                         f"world size {world} is the run's own (the round trip loads there already); "
                         f"expected other world sizes, got {list(sizes)}"))
    if len(set(sizes)) != len(sizes):
        problems.append(("setup.state_dict.reload_world_sizes", f"expected distinct world sizes, got {list(sizes)}"))
    return StateDictSetup(round_trip=bool(data.get("round_trip", False)), reload_world_sizes=sizes), problems


def _unit_key(name: str) -> str:
    """A unit as a spec names it ('root' is the root, "")."""
    return "" if name == "root" else name


def _fsdp_from_mapping(fsdp: dict[str, Any]) -> FSDPSetup:
    """``setup.fsdp`` (schema-validated) -> :class:`FSDPSetup`."""
    mp = fsdp.pop("mixed_precision", None)
    offload = fsdp.pop("offload_policy", None)
    units = fsdp.pop("units", None)
    prefetch = {k: tuple((_unit_key(u), tuple(_unit_key(t) for t in ts)) for u, ts in fsdp.pop(k, {}).items())
                for k in ("forward_prefetch", "backward_prefetch")}
    known = {"reshard_after_forward", "root_reshard_after_forward"}
    defaults = tuple((k, freeze(fsdp.pop(k))) for k in list(fsdp) if k in UNIT_OPTION_KEYS and k not in known)
    return FSDPSetup(**fsdp, mixed_precision=MixedPrecision(**mp) if mp else None,
                     offload_policy=OffloadSetup(**offload) if offload is not None else None,
                     units=tuple(unit_spec_from_yaml(u) for u in units) if units is not None else None,
                     defaults=defaults, **prefetch)


def _param_pattern_problems(setup: RunSetup, plans: list[UnitPlan], fqns: tuple[str, ...]) -> list[tuple[str, str]]:
    """``shard_placement`` and ``freeze`` patterns that name no parameter of the model."""
    from harness.load.units import match_params

    def hint(pattern: str) -> str:
        return (f"{pattern!r} matches no parameter; parameters look like {list(fqns[:3])} "
                "('*' is one component, '**' several)")

    out = []
    seen = set()
    for plan in plans:
        for pattern, _ in plan.options.shard_placement:
            where = (f"setup.fsdp.units[{plan.entry}].shard_placement"
                     if plan.entry is not None and "shard_placement" in dict(setup.fsdp.units[plan.entry].given)
                     else "setup.fsdp.shard_placement")
            if (where, pattern) not in seen and not match_params(pattern, fqns):
                seen.add((where, pattern))
                out.append((where, hint(pattern)))
    for j, pattern in enumerate(setup.freeze.params):
        if not match_params(pattern, fqns):
            out.append((f"setup.freeze.params[{j}]", hint(pattern)))
    return out
