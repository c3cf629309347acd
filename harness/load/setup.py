"""The run setup: everything the harness needs to reproduce one FSDP2 training step.

Each ``setup:`` key is declared once, on a field below (:func:`harness.load.declare.key`); the schema's
setup definitions and docs/setup-keys.md are generated from them (``python -m harness.load.docs``).
Defaults follow the walkthrough document's section "FSDP2 设置": ``fully_shard`` on every decoder
layer, then on the root, over a 1-D mesh named ``dp``.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping, Sequence

from harness.calculator import QWEN3_TP_PLAN, TP_STYLES, layer_params, tp_divisibility_problem
from harness.contract.names import BANDWIDTH_OPS
from harness.load.declare import Problems, build, key
from harness.load.hooks import HooksSetup
from harness.load.schedule import Schedule, aborted_step_problems
from harness.load.units import (
    DTYPES,
    MixedPrecision,
    OffloadSetup,
    UnitOptions,
    UnitPlan,
    UnitSpec,
    freeze,
    resolve_units,
    unit_entry_schema,
    unit_spec_from_yaml,
)
from model.names import EXPERTS_MODULE, module_paths

OPTIMIZERS: tuple[str, ...] = ("sgd", "adamw")
"""Optimizers a setup names: ``torch.optim.SGD`` and ``torch.optim.AdamW``."""

BODIES: tuple[str, ...] = ("decoder_layers", "causal_lm")
"""What the model is: the document's N_L decoder layers on hidden states, or ``Qwen3ForCausalLM``."""


class SetupError(ValueError):
    """A ``setup:`` mapping the schema accepts but the harness cannot run.

    ``key_path`` (``setup.mesh.dim_names``) and ``message`` (what was expected) are the first
    problem's; ``errors`` holds every (key_path, message) pair.
    """

    def __init__(self, key_path: str, message: str, errors: list[tuple[str, str]] | None = None):
        self.key_path, self.message = key_path, message
        self.errors = list(errors) if errors else [(key_path, message)]
        super().__init__("\n".join(f"{k}: {m}" for k, m in self.errors))


def _pattern_dtypes(value: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """``{pattern: dtype}`` -> ((pattern, dtype), ...), in the order written."""
    return tuple((str(k), str(v)) for k, v in dict(value).items())


ATTENTION_KERNELS: tuple[str, ...] = ("math", "flash_attention", "efficient_attention", "cudnn_attention")
"""``torch.nn.attention.SDPBackend`` members by their lower-case name (``SDPBackend.MATH``: math)."""


@dataclass(frozen=True)
class ModelSetup:
    """Which model to build."""

    config: str | Mapping[str, Any] = key(
        "walkthrough",
        doc="a name in model.KNOWN_CONFIGS (walkthrough, Qwen3-0.6B, Qwen3-1.7B, Qwen3-4B, Qwen3-8B, "
        "Qwen3-14B, Qwen3-32B; MoE: moe-tiny, Qwen3-30B-A3B, Qwen3-235B-A22B) or its hub id (Qwen/Qwen3-8B), "
        "a mapping of Qwen3Config fields, or the path of a "
        "transformers config.json relative to the spec file (its dtype, or torch_dtype, is the default model.dtype)",
    )
    overrides: Mapping[str, Any] = key(
        default_factory=dict, doc="Qwen3Config fields replacing the named config's, e.g. num_hidden_layers"
    )
    body: str = key(
        "decoder_layers",
        enum=list(BODIES),
        doc="decoder_layers: N_L decoder layers, input hidden_states [B, L, d] (the document's focus); "
        "causal_lm: embed_tokens + layers + norm + lm_head, input token ids [B, L]",
    )
    dtype: str = key(
        "float16",
        enum=list(DTYPES),
        doc="dtype the model's parameters are built in, before fully_shard (the document: float16); "
        "not MixedPrecisionPolicy's param_dtype",
    )
    param_dtypes: tuple[tuple[str, str], ...] = key(
        (),
        parse=_pattern_dtypes,
        whole=lambda: {"type": "object", "minProperties": 1, "additionalProperties": {"enum": list(DTYPES)}},
        doc="parameters built in another dtype than model.dtype (the FSDP step and its replica alike): parameter "
        "FQN pattern (relative to the root; * one component, ** several) -> dtype; the first matching pattern wins",
    )
    attention_kernel: str | None = key(
        None,
        enum=[None, *ATTENTION_KERNELS],
        doc="the scaled_dot_product_attention backend the forwards and backwards run under "
        "(torch.nn.attention.sdpa_kernel with that SDPBackend: math, flash_attention, efficient_attention, "
        "cudnn_attention); null: torch's choice. The reference runs under it too",
    )


def _prefetch(value: Mapping[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``{unit: [units...]}`` -> ((unit, (units...)), ...), 'root' as ""."""
    return tuple((_unit_key(u), tuple(_unit_key(t) for t in ts)) for u, ts in value.items())


def _prefetch_schema() -> dict[str, Any]:
    return {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}}


def _tp_plan(value: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """``{module: style}`` -> ((module, style), ...), in the order written."""
    return tuple((str(k), str(v)) for k, v in dict(value).items())


@dataclass(frozen=True)
class TensorParallelSetup:
    """Tensor parallelism inside each decoder layer, on the mesh dim ``mesh_dim``; FSDP then shards
    over the other dim (``parallelize_module`` before ``fully_shard``, as torchtitan composes them)."""

    mesh_dim: str = key("tp", doc="the mesh dim TP runs on: the last of a 2-D mesh ([dp, tp])")
    plan: tuple[tuple[str, str], ...] = key(
        QWEN3_TP_PLAN,
        parse=_tp_plan,
        whole=lambda: {"type": "object", "minProperties": 1, "additionalProperties": {"enum": list(TP_STYLES)}},
        doc="module path within a decoder layer -> colwise, rowwise (ColwiseParallel / RowwiseParallel) or "
        "head_norm (SequenceParallel(sequence_dim=2): a norm over the TP-local heads). Default torchtitan's Qwen3 "
        "plan: colwise q_proj, k_proj, v_proj, gate_proj, up_proj; head_norm q_norm, k_norm; rowwise o_proj, "
        "down_proj. A plan written here replaces the default whole",
    )
    sequence_parallel: bool = key(
        False,
        doc="sequence parallelism between the projections, as torchtitan: each layer's input, residual stream and "
        "output are the rank's 1/tp of the sequence (layer 0 cuts the replicated input), the norms run on it "
        "(SequenceParallel), self_attn and mlp all-gather it (PrepareModuleInput) and the rowwise projections "
        "reduce-scatter to it; the rank's loss is its share, the local loss over tp. decoder_layers only",
    )


@dataclass(frozen=True)
class ExpertParallelSetup:
    """Each sparse layer's experts sharded over the mesh dim ``mesh_dim``, tokens routed to them by
    all-to-all; their own FSDP unit shards over the other dim, every other unit over the world."""

    mesh_dim: str = key("ep", doc="the mesh dim the experts are spread over: the last of a 2-D mesh ([efsdp, ep])")


@dataclass(frozen=True)
class DpMeshDims:
    """``fully_shard(dp_mesh_dims=DataParallelMeshDims(shard, replicate))``: the data-parallel dims of
    a full SPMD mesh whose parameters are already DTensors on it."""

    shard: str | None = key(None, doc="the mesh dim FSDP shards over (required; on an HSDP mesh its last dim)")
    replicate: str | None = key(None, doc="the mesh dim HSDP replicates over (an HSDP mesh's first dim); null: none")


@dataclass(frozen=True)
class FSDPSetup:
    """How ``fully_shard`` is applied.

    The prefetch fields hold ((unit, (units...)), ...); ``defaults`` the other
    :class:`~harness.load.units.UnitOptions` keys written at ``fsdp`` level (every unit's default).
    """

    reshard_after_forward: bool | int | None = key(
        True, null=True, doc="for every unit but the root, unless the unit sets its own; null: torch's default"
    )
    root_reshard_after_forward: bool | int | None = key(
        None,
        null=True,
        doc="for the root unit; null: the argument is not passed, so torch's own default for the "
        "root applies (the root is not resharded after forward), as in the document's fully_shard(model, mesh=mesh)",
    )
    mixed_precision: MixedPrecision | None = key(
        None, null=True, doc="every unit's MixedPrecisionPolicy unless the unit sets mp_policy; null: none"
    )
    offload_policy: OffloadSetup | None = key(
        None,
        null=True,
        doc="every unit's CPUOffloadPolicy unless the unit sets one: sharded parameters, gradients "
        "and optimizer states on the CPU; null: no offload",
    )
    defaults: tuple[tuple[str, Any], ...] = key(
        (),
        parse=freeze,
        spread=(UnitOptions, ("reshard_after_forward", "mp_policy", "offload_policy")),
        doc="the other unit options, written at fsdp level: every unit's defaults",
    )
    units: tuple[UnitSpec, ...] | None = key(
        None,
        parse=lambda units: tuple(unit_spec_from_yaml(u) for u in units),
        whole=lambda: {"type": "array", "items": unit_entry_schema(), "minItems": 1},
        doc="the fully_shard calls in order, children before parents; the root is always the last call (default: one "
        "unit per decoder layer, then the root). A unit's name is torch's: its module's FQN, or its modules' FQNs "
        "joined by ', '",
    )
    share_comm_ctx: tuple[str, ...] = key(
        (),
        minItems=2,
        doc="torch.distributed.fsdp.share_comm_ctx over these units ('root' for the root) right after the "
        "fully_shard calls: the later units take the first's FSDPCommContext (its CUDA streams). fsdp_units "
        "records which units share one at setup and after the step, where the root's lazy init has handed its "
        "own to every unit (it shares streams across separate roots: pipeline stages)",
    )
    dp_mesh_dims: DpMeshDims | None = key(
        None,
        null=True,
        doc="run the model as full SPMD DTensor code: every parameter a Replicate() DTensor on the whole mesh "
        "before fully_shard, which gets dp_mesh_dims naming the data-parallel dims (every mesh dim, once), and the "
        "steps under DTensor's implicit_replication (plain inputs and buffers taken as replicated); null: plain "
        "parameters. On CPU set model.attention_kernel: math (DTensor has no strategy for the CPU flash kernel)",
    )
    forward_prefetch: tuple[tuple[str, tuple[str, ...]], ...] = key(
        (),
        parse=_prefetch,
        whole=_prefetch_schema,
        doc="set_modules_to_forward_prefetch: unit -> units it prefetches in forward",
    )
    backward_prefetch: tuple[tuple[str, tuple[str, ...]], ...] = key(
        (),
        parse=_prefetch,
        whole=_prefetch_schema,
        doc="set_modules_to_backward_prefetch: unit -> units it prefetches in backward",
    )

    def unit_defaults(self) -> dict[str, Any]:
        """Every unit option's value at ``fsdp`` level (:data:`harness.load.units.UNIT_OPTION_KEYS`)."""
        out: dict[str, Any] = {
            "reshard_after_forward": self.reshard_after_forward,
            "mp_policy": self.mixed_precision,
            "offload_policy": self.offload_policy,
        }
        out.update(dict(self.defaults))
        return out

    @property
    def offloads(self) -> bool:
        """Whether a unit may take a ``CPUOffloadPolicy``: the ``fsdp``-level policy or a unit's own."""
        return self.offload_policy is not None or any(
            dict(u.given).get("offload_policy") is not None for u in self.units or ()
        )


@dataclass(frozen=True)
class FreezeSetup:
    """Parameters made ``requires_grad=False`` by pattern (:func:`harness.load.units.match_params`)."""

    params: tuple[str, ...] = key(
        (), required=True, minItems=1, doc="FQN patterns (relative to the root; * one component, ** several)"
    )
    after_fully_shard: bool = key(
        False,
        doc="false: freeze the built model before fully_shard; true: freeze the sharded DTensor parameters after it",
    )


@dataclass(frozen=True)
class OptimizerSetup:
    """The optimizer stepped after backward: "sgd" or "adamw", with its learning rate."""

    name: str = key("sgd", enum=list(OPTIMIZERS), doc="torch.optim.SGD or torch.optim.AdamW")
    lr: float = key(1e-2, exclusiveMinimum=0, doc="the learning rate")


@dataclass(frozen=True)
class BandwidthSize:
    """One size of a bandwidth sweep: S, the full buffer as nccl-tests counts it."""

    name: str = key(
        pattern=r"^[A-Za-z0-9_.\-]+$",
        doc="the size's name in reports and in bandwidth entries (size:); 'step' is reserved",
    )
    layer_of: str | None = key(
        None,
        doc="a known config (walkthrough, Qwen3-8B, Qwen3-32B, ...): S is one of its "
        "decoder layers, the FSDP unit, padded as FSDP2 pads it for the group size",
    )
    numel: int | None = key(None, minimum=1, doc="S as an element count")

    _SCHEMA_EXTRA = {"oneOf": [{"required": ["layer_of"]}, {"required": ["numel"]}]}


@dataclass(frozen=True)
class BandwidthSetup:
    """Collectives timed after the step, in nccl-tests' terms (algbw, busbw, #wrong); the
    bandwidth check kind reads them (``harness/run/rank/collective_timing.py``).

    ``cpu_max_bytes`` is rounded down to whole elements per rank; ``step`` replays each distinct
    collective (same op, dtype, elements and group).
    """

    ops: tuple[str, ...] = key(
        ("all_gather", "reduce_scatter"),
        minItems=1,
        uniqueItems=True,
        items={"enum": list(BANDWIDTH_OPS)},
        doc="collectives to sweep: all_gather (dist.all_gather_into_tensor), reduce_scatter "
        "(dist.reduce_scatter_tensor, sum), all_reduce (dist.all_reduce, sum)",
    )
    sizes: tuple[BandwidthSize, ...] = key(
        (), doc="the sweep's sizes S (nccl-tests' size: the all-gather output, the reduce-scatter input), in order"
    )
    dtype: str | None = key(
        None,
        enum=list(DTYPES),
        doc="the sweep's dtype; default: the step's all-gather dtype (mixed_precision.param_dtype, else model.dtype)",
    )
    warmup: int = key(2, minimum=0, doc="untimed operations per row before the timed ones")
    iterations: int = key(5, minimum=1, doc="timed operations per row; the row's time is their mean")
    cpu_max_bytes: int | None = key(
        None,
        null=True,
        minimum=1,
        doc="on CPU ranks (gloo): a larger S runs at this many bytes instead, and the "
        "report says so; GPUs ignore it (null: no cap)",
    )
    step: bool = key(True, doc="also time each distinct collective the step issued, replayed on its own after the step")

    def _rules(self, given: Mapping[str, Any], where: str) -> Problems:
        """A size name used twice or named ``step``, a ``layer_of`` that is not a known config."""
        from model.config import KNOWN_CONFIGS, known_config_name

        problems: Problems = []
        seen: dict[str, int] = {}
        for i, size in enumerate(self.sizes):
            at = f"{where}.sizes[{i}]"
            if size.name == "step" or size.name in seen:
                problems.append(
                    (
                        f"{at}.name",
                        f"size name {size.name!r} "
                        + (
                            "is reserved for the step's own collectives"
                            if size.name == "step"
                            else f"is used by sizes[{seen[size.name]}]; each name once"
                        ),
                    )
                )
            seen.setdefault(size.name, i)
            if size.layer_of is not None and known_config_name(size.layer_of) is None:
                problems.append(
                    (f"{at}.layer_of", f"expected a known config, one of {list(KNOWN_CONFIGS)}, got {size.layer_of!r}")
                )
        return problems

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "BandwidthSetup":
        """Build from ``setup.bandwidth`` (schema-validated); SetupError for a size name used twice
        or named ``step``, or an unknown ``layer_of``."""
        made, problems = build(cls, data, "setup.bandwidth")
        if problems:
            raise SetupError(*problems[0], errors=problems)
        return made


STATE_DICT_INTO: tuple[str, ...] = ("sharded", "meta")
"""``set_model[].into``: a model sharded and filled from another seed, or one left on the meta device."""


@dataclass(frozen=True)
class GetModelStateDict:
    """One ``torch.distributed.checkpoint.state_dict.get_model_state_dict(model,
    options=StateDictOptions(...))`` call on the trained model after the step
    (``harness/run/rank/state_dict_options.py``); checked with check kind state_dict_get.
    """

    id: str = key(doc="the name state_dict_get entries select this call by", pattern=r"^[A-Za-z0-9_.-]+$")
    full_state_dict: bool = key(False, doc="StateDictOptions.full_state_dict: gather plain full tensors")
    cpu_offload: bool = key(
        False, doc="StateDictOptions.cpu_offload: tensors on the CPU; with full_state_dict on rank 0 only"
    )


@dataclass(frozen=True)
class SetModelStateDict:
    """One ``set_model_state_dict(fresh model, state dict, options=StateDictOptions(...))`` call
    after the step (``harness/run/rank/state_dict_options.py``); checked with check kind state_dict_set.

    The state dict handed over is the trained model's: full (``get_model_state_dict(full_state_dict=True)``)
    with ``full_state_dict``, on rank 0 alone with ``broadcast_from_rank0`` (the others pass ``{}``:
    torch's documented recipe), else sharded (DTensors); less ``drop``, plus ``add``.
    """

    id: str = key(doc="the name state_dict_set entries select this call by", pattern=r"^[A-Za-z0-9_.-]+$")
    into: str = key(
        "sharded",
        enum=list(STATE_DICT_INTO),
        doc="sharded: a fresh model sharded like the run's, filled from another seed; meta: the same left on the "
        "meta device (fully_shard on meta, no to_empty), the documented recipe for broadcast_from_rank0",
    )
    full_state_dict: bool = key(
        False, doc="StateDictOptions.full_state_dict: hand over the trained model's full state dict (plain tensors)"
    )
    broadcast_from_rank0: bool = key(
        False,
        doc="StateDictOptions.broadcast_from_rank0: only rank 0 hands over the full state dict, the others {}; "
        "needs full_state_dict",
    )
    cpu_offload: bool = key(False, doc="StateDictOptions.cpu_offload")
    strict: bool = key(True, doc="StateDictOptions.strict: load_state_dict's strict (missing/unexpected keys raise)")
    drop: tuple[str, ...] = key((), doc="parameter FQNs left out of the handed-over state dict (missing keys)")
    add: tuple[str, ...] = key(
        (), doc="extra keys added to the handed-over state dict, one-element float32 zeros (unexpected keys)"
    )

    def _rules(self, given: Mapping[str, Any], where: str) -> Problems:
        problems: Problems = []
        if self.broadcast_from_rank0 and not self.full_state_dict:
            problems.append(
                (
                    f"{where}.broadcast_from_rank0",
                    "torch broadcasts a full state dict from rank 0: expected full_state_dict: true with it",
                )
            )
        return problems


@dataclass(frozen=True)
class StateDictSetup:
    """torch.distributed.checkpoint round trip after the optimizer step (harness/run/rank/checkpoint.py):
    get_state_dict + dcp.save of the sharded model and optimizer into a temporary folder (always
    removed), dcp.load + set_state_dict into a freshly built and sharded model and optimizer;
    checked with check kind state_dict.

    The round trip records, per state-dict entry and rank, equality after load and the shard's
    global offset and length.
    """

    round_trip: bool = key(False, doc="save and load on the run's own world (false: no checkpoint)")
    reload_world_sizes: tuple[int, ...] = key(
        (),
        items={"minimum": 1},
        doc="also load the checkpoint in a second launch of each of these world sizes (1-D mesh named as the run's "
        "shard dim); needs round_trip: true, sizes other than the run's; local launches only (not under "
        "torchrun)",
    )
    get_model: tuple[GetModelStateDict, ...] = key(
        (),
        doc="get_model_state_dict(model, options=StateDictOptions(...)) on the trained model after the step, one "
        "call per item; checked with check kind state_dict_get (harness/run/rank/state_dict_options.py)",
    )
    set_model: tuple[SetModelStateDict, ...] = key(
        (),
        doc="set_model_state_dict(fresh model, the trained model's state dict, options=StateDictOptions(...)) after "
        "the step, one call per item; checked with check kind state_dict_set",
    )

    @property
    def calls(self) -> bool:
        """Whether the setup asks for any state-dict work after the step."""
        return self.round_trip or bool(self.get_model) or bool(self.set_model)

    def _rules(self, given: Mapping[str, Any], where: str) -> Problems:
        sizes = list(self.reload_world_sizes)
        problems: Problems = []
        for name, calls in (("get_model", self.get_model), ("set_model", self.set_model)):
            seen: set[str] = set()
            for i, call in enumerate(calls):
                if call.id in seen:
                    problems.append((f"{where}.{name}[{i}].id", f"id {call.id!r} used twice; expected distinct ids"))
                seen.add(call.id)
        if sizes and not self.round_trip:
            problems.append(
                (
                    f"{where}.reload_world_sizes",
                    f"reloading on world sizes {sizes} needs the round trip: add round_trip: true",
                )
            )
        if len(set(sizes)) != len(sizes):
            problems.append((f"{where}.reload_world_sizes", f"expected distinct world sizes, got {sizes}"))
        return problems


INIT_DEVICES = ("full", "meta")
"""``setup.init``'s values, or its ``device`` key's."""


def _init_schema() -> dict[str, Any]:
    """``setup.init``: one of :data:`INIT_DEVICES`, or ``{device, repair}``."""
    return {
        "if": {"type": "object"},
        "then": {
            "type": "object",
            "additionalProperties": False,
            "required": ["device"],
            "properties": {
                "device": {"enum": list(INIT_DEVICES), "description": "full or meta, as setup.init's value"},
                "repair": {
                    "type": "boolean",
                    "default": True,
                    "description": "meta only: after to_empty, fill RMSNorm weights with 1 and recompute RoPE's "
                    "inv_freq (false: leave them as to_empty leaves them, with that memory filled with NaN by "
                    "torch.utils.deterministic.fill_uninitialized_memory so that a read of it shows)",
                },
            },
        },
        "else": {"enum": list(INIT_DEVICES)},
    }


def _init_device(value: Any) -> str | None:
    """``setup.init`` as written -> the device it names ("full", "meta") or None."""
    return value.get("device") if isinstance(value, Mapping) else value


MESH_RULE_KEYS = re.compile(
    r"setup\.(mesh\.dim_names|observe_ranks|state_dict\.reload_world_sizes|schedule\.steps\[\d+\]\.all_reduce)$"
)
"""Key paths of the setup rules that read the mesh (``RunSetup._rules``)."""


def reads_the_mesh(key_path: str) -> bool:
    """Whether the rule at ``key_path`` reads the mesh (where the default stood in for a refused one)."""
    return MESH_RULE_KEYS.match(key_path) is not None


@dataclass(frozen=True)
class RunSetup:
    """How the harness runs the step: one FSDP2 training step, fully specified.

    Not spec keys: ``init_repair`` (``setup.init.repair``, default true); ``record_errors``, set by
    the loader for an ``expect_error`` entry (a rank's error is recorded in its observation, type,
    message and phase, instead of failing the run); ``instruments``, set by the caller: the names
    in ``harness.contract.instrument_names.INSTRUMENTS`` to run (None: every one; an instrument left
    off records its fields empty). ``grad_dtype`` holds ((parameter pattern, dtype name), ...).
    With ``numerics_reference: rank_0`` rank 0 sums the replica's gradients in float32.
    """

    model: ModelSetup = key(default_factory=ModelSetup, doc="which model to build")
    mesh_shape: tuple[int, ...] = key(
        (4,),
        at="mesh.shape",
        items={"minimum": 1},
        minItems=1,
        maxItems=2,
        doc="the DeviceMesh's shape: [4] for the document, [2, 2] for HSDP (replicate, shard)",
    )
    mesh_dim_names: tuple[str, ...] = key(
        ("dp",),
        at="mesh.dim_names",
        minItems=1,
        maxItems=2,
        doc="one name per mesh dim ([dp_replicate, dp_shard] for HSDP); the default is for a 1-D mesh",
    )
    batch_per_rank: int = key(2, minimum=1, doc="B, samples per data-parallel rank")
    seq_len: int = key(8, minimum=1, doc="L, tokens per sample")
    fsdp: FSDPSetup = key(default_factory=FSDPSetup, doc="how fully_shard is applied")
    optimizer: OptimizerSetup = key(default_factory=OptimizerSetup, doc="the optimizer stepped after backward")
    seed: int = key(0, minimum=0, maximum=2**32 - 1, doc="seeds the weights and the global batch (0 to 2^32 - 1)")
    observe_ranks: tuple[int, ...] | None = key(
        None,
        items={"minimum": 0},
        doc="simulated runs: which global ranks to record (default: every rank up to 8 ranks, else [0])",
    )
    numerics: bool = key(
        True, doc="compare with a non-sharded replica (off for models too big to hold unsharded on every rank)"
    )
    numerics_reference: str = key(
        "each_rank",
        enum=["each_rank", "rank_0"],
        doc="where the numerics replica runs: each_rank (every rank holds the full model) or rank_0 (rank 0 alone "
        "runs every rank's inputs and hands each rank its gradient rows through a shared folder: one full model "
        "in memory; the default step only)",
    )
    bandwidth: BandwidthSetup | None = key(
        None,
        doc="collectives timed after the step, in nccl-tests' terms (algbw, "
        "busbw, #wrong); the bandwidth check kind reads them "
        "(harness/run/rank/collective_timing.py)",
    )
    state_dict: StateDictSetup = key(
        default_factory=StateDictSetup, doc=" ".join(StateDictSetup.__doc__.split("\n\n")[0].split())
    )
    init: str | None = key(
        None,
        whole=lambda: _init_schema(),
        parse=lambda value: _init_device(value),
        doc="full: build on the device, init, then fully_shard; meta: build on meta, fully_shard, to_empty, then each "
        "rank fills its shards with exactly the full init's values (same seed) and recomputes RoPE's inv_freq. "
        "{device: meta, repair: false}: the same without the repairs a meta-built model needs (RMSNorm weights "
        "and RoPE's inv_freq left as to_empty leaves them, NaN). Default: full with numerics on, else each rank "
        "draws its own shards",
    )
    init_repair: bool = True
    track_memory: bool = key(
        True,
        doc="run FSDPMemTracker over the step. It re-registers FSDP's forward hooks per module, which changes "
        "what a unit of several modules does (torch 2.13): turn it off to observe such a unit as torch runs it",
    )
    freeze: FreezeSetup = key(default_factory=FreezeSetup, doc="parameters made requires_grad=False")
    grad_dtype: tuple[tuple[str, str], ...] = key(
        (),
        parse=_pattern_dtypes,
        whole=lambda: {"type": "object", "minProperties": 1, "additionalProperties": {"enum": list(DTYPES)}},
        doc="Parameter.grad_dtype set on the built model before fully_shard (and on the numerics replica): "
        "parameter FQN pattern (relative to the root; * one component, ** several) -> the dtype autograd is asked "
        "to give its gradient in; the first matching pattern wins",
    )
    record_errors: bool = False
    instruments: tuple[str, ...] | None = None
    schedule: Schedule | None = key(
        None,
        doc="the training schedule (harness/load/schedule.py): steps of "
        "microbatches of forwards, runtime calls, the loss; default: one step, "
        "one forward, backward, optimizer step",
    )
    tensor_parallel: TensorParallelSetup | None = key(
        None,
        doc="tensor parallelism inside each decoder layer on a 2-D [dp, tp] mesh, FSDP over dp "
        "(harness/run/rank/tensor_parallel.py)",
    )
    expert_parallel: ExpertParallelSetup | None = key(
        None,
        doc="expert parallelism: each sparse layer's experts Shard(0) over the mesh's last dim, tokens sent to "
        "their owners by all-to-all; each layer's mlp.experts must be an FSDP unit of its own, which shards over "
        "the first dim, the other units over the whole world (a 1-D mesh 'dp'). Give the experts' units "
        "gradient_divide_factor: <world size> (with force_sum_reduction_for_comms on gloo), as torchtitan does: "
        "at FSDP's default their gradients are the mean times the EP size (specs/expert_parallel_divide_factor.yaml) "
        "(harness/run/rank/expert_parallel.py)",
    )
    hooks: HooksSetup | None = key(
        None,
        doc="extension points: functions of a Python file beside the spec called at "
        "model build, after each fully_shard, around each step and microbatch, "
        "as the loss and as a custom observation (harness/load/hooks.py)",
    )

    _KEY_GROUPS = {"mesh": "the DeviceMesh the units shard over (init_device_mesh)"}

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

    def unit_plan(
        self, num_layers: int, param_fqns: tuple[str, ...] | None = None, sparse_layers: tuple[int, ...] = ()
    ) -> list[UnitPlan]:
        """The FSDP units in ``fully_shard`` order, the root last (:mod:`harness.load.units`).

        ``param_fqns``: the model's parameter FQNs, to check that every ``shard_placement`` and
        ``freeze`` pattern names a parameter (skipped when None); ``sparse_layers``: the MoE
        layers, whose ``mlp.experts`` and ``mlp.gate`` a unit may name.

        Raises:
            SetupError: a unit pattern matches no module, a module is in two units, a prefetch
                names no unit, or a parameter pattern matches no parameter.
        """
        plans, problems = resolve_units(
            self.fsdp.units,
            self.fsdp.unit_defaults(),
            self.fsdp.root_reshard_after_forward,
            module_paths(self.model.body, num_layers, sparse_layers),
            self.layer_prefix,
        )
        problems += _root_unit_problems(self, plans[-1])  # resolve_units puts the root last
        if param_fqns is not None:
            problems += _param_pattern_problems(self, plans, param_fqns)
        names = [p.name for p in plans]
        for j, unit in enumerate(self.fsdp.share_comm_ctx):
            if _unit_key(unit) not in names:
                problems.append(
                    (
                        f"setup.fsdp.share_comm_ctx[{j}]",
                        f"no FSDP unit named {unit!r}; units: {['root' if n == '' else n for n in names]}",
                    )
                )
        for prefetch, pairs in (
            ("forward_prefetch", self.fsdp.forward_prefetch),
            ("backward_prefetch", self.fsdp.backward_prefetch),
        ):
            for unit, targets in pairs:
                for name in (unit, *targets):
                    if _unit_key(name) not in names:
                        problems.append(
                            (
                                f"setup.fsdp.{prefetch}",
                                f"no FSDP unit named {name!r}; units: {['root' if n == '' else n for n in names]}",
                            )
                        )
        if problems:
            raise SetupError(*problems[0], errors=problems)
        return plans

    def unit_names(self, num_layers: int) -> tuple[str, ...]:
        """FQNs of the FSDP units this setup creates, in ``fully_shard`` order ("" is the root):
        by default one per decoder layer, then the root (the document's section "FSDP2 设置")."""
        return tuple(p.name for p in self.unit_plan(num_layers))

    @property
    def tp_size(self) -> int:
        """Ranks of one tensor-parallel group (1 without ``tensor_parallel``): the mesh's last dim."""
        return self.mesh_shape[-1] if self.tensor_parallel is not None else 1

    @property
    def shard_mesh_dim(self) -> int:
        """Index of the mesh dim FSDP shards over: the last, or the one before TP's."""
        return -2 if self.tensor_parallel is not None else -1

    @property
    def shard_count(self) -> int:
        """Ranks a non-expert parameter is sharded over (EP: the world)."""
        return self.world_size if self.expert_parallel is not None else self.mesh_shape[self.shard_mesh_dim]

    def shard_index(self, coords: Sequence[int]) -> int:
        """A rank's index in its (non-expert) FSDP shard group, from its mesh ``coords``."""
        if self.expert_parallel is not None:  # the world's 1-D mesh: the global (row-major) rank
            return coords[0] * self.mesh_shape[1] + coords[1]
        return coords[self.shard_mesh_dim]

    @property
    def data_parallel_size(self) -> int:
        """Ranks that each hold distinct samples (a TP group shares its samples)."""
        return self.world_size // self.tp_size

    def data_rank(self, rank: int) -> int:
        """Which data-parallel rank global rank ``rank`` is (row-major mesh: TP's ranks adjacent)."""
        return rank // self.tp_size

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists); ``instruments`` only where a subset is chosen, so
        the document of a run with every instrument is what it was before the switch existed."""
        data = json.loads(json.dumps(asdict(self)))
        if data["instruments"] is None:
            del data["instruments"]
        return data

    def cache_key(self) -> str:
        """A stable hash of the setup; callers add torch version and backend."""
        import hashlib  # only runs need the key, not loading

        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "RunSetup":
        """Build from a spec's ``setup:`` mapping (schema-validated; keys: docs/setup-keys.md).

        Raises:
            SetupError: every value the schema cannot catch (a mesh whose dim names do not match
                its shape, an observed rank outside the world, ...), naming its key path.
        """
        setup, problems = build(cls, data)
        if problems:
            raise SetupError(*problems[0], errors=problems)
        init = data.get("init")
        if isinstance(init, Mapping) and init.get("repair") is False:  # not a key of its own: part of init's
            setup = replace(setup, init_repair=False)
        return setup

    def _rules(self, given: Mapping[str, Any], where: str) -> Problems:
        """What the schema cannot see across keys, as (key path, expected) pairs. The rules that
        read the mesh write only to :data:`MESH_RULE_KEYS`."""
        problems: Problems = []
        shape, names = list(self.mesh_shape), list(self.mesh_dim_names)
        if len(names) != len(shape):
            written = "dim_names" in given.get("mesh", {})
            problems.append(
                (
                    f"{where}.mesh.dim_names",
                    f"expected {len(shape)} name{'s' if len(shape) != 1 else ''} for shape {shape}, "
                    + (f"got {names}" if written else f"got none (the default {names} is for a 1-D mesh)"),
                )
            )
        world = self.world_size
        outside = [r for r in (self.observe_ranks or ()) if not 0 <= r < world]
        if outside:
            problems.append(
                (
                    f"{where}.observe_ranks",
                    f"rank(s) {outside} outside the world: world size {world} (mesh shape {shape}), "
                    f"ranks 0-{world - 1}",
                )
            )
        if world in self.state_dict.reload_world_sizes:
            problems.append(
                (
                    f"{where}.state_dict.reload_world_sizes",
                    f"world size {world} is the run's own (the round trip loads there already); "
                    f"expected other world sizes, got {list(self.state_dict.reload_world_sizes)}",
                )
            )
        if len(shape) != 2 and self.schedule is not None:
            for i, step in enumerate(self.schedule.steps):
                if step.all_reduce == "last":
                    problems.append(
                        (
                            f"{where}.schedule.steps[{i}].all_reduce",
                            f"all_reduce: last defers HSDP's all-reduce across replicas; mesh shape {shape} has no "
                            "replicate dim: expected a 2-D mesh (dp_replicate, dp_shard)",
                        )
                    )
        init = given.get("init")
        if isinstance(init, Mapping) and init.get("repair") is False and init.get("device") != "meta":
            problems.append(
                (
                    f"{where}.init.repair",
                    f"device {init.get('device')!r} builds the model with its values: nothing to repair; "
                    "repair: false goes with device: meta",
                )
            )
        if self.numerics and self.schedule is not None:
            problems += [
                (f"{where}{path[len('setup') :]}", message) for path, message in aborted_step_problems(self.schedule)
            ]
        problems += self._tensor_parallel_rules(given, where)
        problems += self._expert_parallel_rules(given, where)
        problems += self._dp_mesh_dims_rules(given, where)
        if self.numerics_reference != "each_rank" and given.get("schedule"):
            problems.append(
                (
                    f"{where}.numerics_reference",
                    "rank_0 computes the reference of the default step only; with setup.schedule "
                    "expected each_rank (or leave it out)",
                )
            )
        return problems

    def _tensor_parallel_rules(self, given: Mapping[str, Any], where: str) -> Problems:
        """``tensor_parallel`` on a mesh that has its dim last, and only with what slices a TP shard."""
        tp = self.tensor_parallel
        if tp is None:
            return []
        at = f"{where}.tensor_parallel"
        shape, names = list(self.mesh_shape), list(self.mesh_dim_names)
        if len(shape) != 2 or names[-1:] != [tp.mesh_dim]:
            return [
                (
                    f"{at}.mesh_dim",
                    f"TP runs on the last dim of a 2-D mesh, named as tensor_parallel.mesh_dim ({tp.mesh_dim!r}); got "
                    f"mesh shape {shape}, dim names {names}: expected e.g. mesh: {{shape: [2, 2], dim_names: "
                    f"[dp, {tp.mesh_dim}]}}",
                )
            ]
        if tp.sequence_parallel:
            if self.model.body != "decoder_layers":
                return [(f"{at}.sequence_parallel", "cuts the decoder layers' sequence: body decoder_layers only")]
            if self.seq_len % shape[-1]:
                return [
                    (
                        f"{at}.sequence_parallel",
                        f"TP size {shape[-1]} does not divide seq_len {self.seq_len}: each rank holds 1/tp of it",
                    )
                ]
        refused = {
            "schedule": "the schedule's reference and update rows slice one Shard(0) per rank",
            "numerics_reference": "rank_0 hands each rank FSDP rows, not a TP shard's",
            "state_dict": "the state-dict round trip reloads onto a 1-D mesh",
            "bandwidth": "the bandwidth sweep times the whole world's group, not dp's or tp's",
        }
        return _not_with(given, at, "tensor_parallel", refused)

    def _dp_mesh_dims_rules(self, given: Mapping[str, Any], where: str) -> Problems:
        """``fsdp.dp_mesh_dims`` names every mesh dim once, shard or replicate, and stands alone."""
        dims = self.fsdp.dp_mesh_dims
        if dims is None:
            return []
        at = f"{where}.fsdp.dp_mesh_dims"
        refused = _not_with(given, at, "dp_mesh_dims", ("tensor_parallel", "expert_parallel", "schedule", "state_dict"))
        if refused:
            return refused
        named = [d for d in (dims.replicate, dims.shard) if d is not None]
        if dims.shard is None:
            return [(f"{at}.shard", f"expected the mesh dim FSDP shards over, one of {list(self.mesh_dim_names)}")]
        if sorted(named) != sorted(self.mesh_dim_names):
            return [
                (
                    at,
                    f"expected every mesh dim named once, as shard or replicate (the mesh's dims: "
                    f"{list(self.mesh_dim_names)}), got shard {dims.shard!r}, replicate {dims.replicate!r}",
                )
            ]
        if len(self.mesh_dim_names) == 2 and dims.shard != self.mesh_dim_names[-1]:
            return [(f"{at}.shard", f"HSDP shards over the mesh's last dim {self.mesh_dim_names[-1]!r}")]
        return []

    def _expert_parallel_rules(self, given: Mapping[str, Any], where: str) -> Problems:
        """``expert_parallel`` on a mesh that has its dim last, alone, and only with the default step."""
        ep = self.expert_parallel
        if ep is None:
            return []
        at = f"{where}.expert_parallel"
        shape, names = list(self.mesh_shape), list(self.mesh_dim_names)
        if len(shape) != 2 or names[-1:] != [ep.mesh_dim] or "dp" in names:
            return [
                (
                    f"{at}.mesh_dim",
                    f"EP runs on the last dim of a 2-D mesh named [efsdp, {ep.mesh_dim}] ('dp' names the whole "
                    f"world's mesh); got mesh shape {shape}, dim names {names}: expected e.g. "
                    f"mesh: {{shape: [2, 2], dim_names: [efsdp, {ep.mesh_dim}]}}",
                )
            ]
        return _not_with(
            given,
            at,
            "expert_parallel",
            ("schedule", "state_dict", "bandwidth", "tensor_parallel", "numerics_reference"),
        )

    @property
    def observed_mesh_dims(self) -> tuple[str, ...]:
        """The mesh dims a collective can run on: the mesh's (and EP's world ``dp``)."""
        return (*self.mesh_dim_names, *(("dp",) if self.expert_parallel is not None else ()))


def _not_with(given: Mapping[str, Any], at: str, key: str, others: Mapping[str, str] | tuple[str, ...]) -> Problems:
    """``key`` refused beside each of the setup keys ``others`` written in ``given`` (a mapping gives
    each one's reason); ``numerics_reference`` counts only when not its default, each_rank."""
    why = {name: f" ({reason})" for name, reason in others.items()} if isinstance(others, Mapping) else {}
    return [
        (at, f"{key} does not go with setup.{name} here{why.get(name, '')}: leave setup.{name} out")
        for name in others
        if given.get(name) not in (None, "each_rank")
    ]


def expert_config_problem(setup: RunSetup, config: Any) -> str | None:
    """Why ``expert_parallel`` cannot run on ``config`` at all (a dense config), or None."""
    if setup.expert_parallel is not None and getattr(config, "num_experts", None) is None:
        return "expert parallelism needs a MoE config (num_experts); this one is dense"
    return None


def expert_parallel_problems(setup: RunSetup, config: Any, plans: list[UnitPlan]) -> Problems:
    """EP against the model: a MoE config whose expert count the EP size divides, and every sparse
    layer's ``mlp.experts`` in an FSDP unit of its own (it shards over another mesh than the layer)."""
    ep = setup.expert_parallel
    if ep is None:
        return []
    at = "setup.expert_parallel.mesh_dim"
    problem = expert_config_problem(setup, config)
    if problem:
        return [(at, problem)]
    experts = config.num_experts
    size = setup.mesh_shape[-1]
    if experts % size:
        return [(at, f"EP size {size} does not divide the config's num_experts {experts}")]
    own = {path for plan in plans if all(p.endswith(f".{EXPERTS_MODULE}") for p in plan.paths) for path in plan.paths}
    missing = [
        f"{setup.layer_prefix}.{i}.{EXPERTS_MODULE}"
        for i in getattr(config, "moe_layers", ())
        if f"{setup.layer_prefix}.{i}.{EXPERTS_MODULE}" not in own
    ]
    if missing:
        return [
            (
                "setup.fsdp.units",
                f"under expert_parallel each sparse layer's experts are a unit of their own (they shard over "
                f"efsdp, the rest over the world); {missing[:3]} {'are' if len(missing) > 1 else 'is'} not: expected "
                f"e.g. units: [{{modules: '{setup.layer_prefix}.*.{EXPERTS_MODULE}', gradient_divide_factor: "
                f"{setup.world_size}, force_sum_reduction_for_comms: true}}, '{setup.layer_prefix}.*'] (the "
                "world size as the experts' divide factor, as torchtitan; summed on gloo, which has no PREMUL_SUM)",
            )
        ]
    return []


def tensor_parallel_problems(setup: RunSetup, config: Any, fqns: tuple[str, ...]) -> Problems:
    """A TP plan against the model: each module path must name a ``Linear`` of decoder layer 0
    (a ``weight`` of 2 dims is all the loader sees: ``fqns``), and the TP size must divide the
    dims it splits (attention heads, KV heads, ``intermediate_size``). ``config``: a Qwen3Config."""
    tp = setup.tensor_parallel
    if tp is None:
        return []
    at = "setup.tensor_parallel"
    problems: Problems = []
    layer = f"{setup.layer_prefix}.0."
    in_layer = sorted({f[len(layer) : -len(".weight")] for f in fqns if f.startswith(layer) and f.endswith(".weight")})
    for path, _ in tp.plan:
        if path not in in_layer:
            problems.append(
                (f"{at}.plan", f"{path!r} names no module with a weight in {layer[:-1]}; modules: {in_layer}")
            )
    shapes = {p.name: p.shape for p in layer_params(config)}
    for path, style in tp.plan:
        shape = shapes.get(f"{path}.weight")
        want = 1 if style == "head_norm" else 2
        if shape is not None and len(shape) != want:
            kind = "a norm's weight (1 dim)" if want == 1 else "a Linear's weight (2 dims)"
            problems.append((f"{at}.plan", f"{path!r}: {style} needs {kind}; its weight is {list(shape)}"))
    problem = tp_divisibility_problem(config, setup.tp_size)
    if problem:
        problems.append(
            (f"{at}.mesh_dim", f"{problem} (mesh dim {tp.mesh_dim!r}): colwise projections split it evenly")
        )
    return problems


def _unit_key(name: str) -> str:
    """A unit as a spec names it ('root' is the root, "")."""
    return "" if name == "root" else name


def _written_at(setup: RunSetup, plan: UnitPlan, option: str) -> str:
    """The key path of a unit's option: its own entry's, or the fsdp default it took."""
    if plan.entry is not None and option in dict(setup.fsdp.units[plan.entry].given):
        return f"setup.fsdp.units[{plan.entry}].{option}"
    return f"setup.fsdp.{option}"


def _root_unit_problems(setup: RunSetup, root: UnitPlan) -> list[tuple[str, str]]:
    """What the root unit's options rule out: a container input into a checkpointed root (its
    recomputation calls it without the unpacking), a forward method the body's root lacks."""
    out = []
    steps = setup.schedule.steps if setup.schedule is not None else ()
    packed = [i for i, step in enumerate(steps) if step.forward_input != "positional"]
    if root.options.checkpoint and packed:
        out.append(
            (
                f"setup.schedule.steps[{packed[0]}].forward_input",
                "the root is checkpointed: its recomputation in the backward calls it again without the "
                "unpacking of a container; expected positional",
            )
        )
    if root.options.forward_methods and setup.model.body != "causal_lm":
        out.append(
            (
                _written_at(setup, root, "forward_methods"),
                f"model.body {setup.model.body}'s root has no last_hidden_state; expected model.body causal_lm",
            )
        )
    return out


def _param_pattern_problems(setup: RunSetup, plans: list[UnitPlan], fqns: tuple[str, ...]) -> list[tuple[str, str]]:
    """Parameter patterns (``shard_placement``, ``ignored_params``, ``freeze``, ``grad_dtype``, ``param_dtypes``,
    schedule ``freeze``/``unfreeze``) that name no parameter; state-dict keys to drop that are not parameters,
    keys to add that are; ``ignored_params`` or ``param_dtypes`` with the numerics replica on."""
    from harness.load.units import match_params

    def hint(pattern: str) -> str:
        return (
            f"{pattern!r} matches no parameter; parameters look like {list(fqns[:3])} "
            "('*' is one component, '**' several)"
        )

    out = []
    seen = set()
    for plan in plans:
        patterns = {
            "shard_placement": [pattern for pattern, _ in plan.options.shard_placement],
            "ignored_params": list(plan.options.ignored_params),
        }
        for option, written in patterns.items():
            where = _written_at(setup, plan, option)
            for pattern in written:
                if (where, pattern) not in seen and not match_params(pattern, fqns):
                    seen.add((where, pattern))
                    out.append((where, hint(pattern)))
        where = _written_at(setup, plan, "ignored_params")
        if plan.options.ignored_params and setup.numerics and (where, "numerics") not in seen:
            seen.add((where, "numerics"))
            out.append(
                (
                    where,
                    "an ignored parameter's gradient is each rank's own (never reduced), not the replica's "
                    "global-batch mean: set setup.numerics: false",
                )
            )
    for j, pattern in enumerate(setup.freeze.params):
        if not match_params(pattern, fqns):
            out.append((f"setup.freeze.params[{j}]", hint(pattern)))
    for i, call in enumerate(setup.state_dict.set_model):
        where = f"setup.state_dict.set_model[{i}]"
        for j, name in enumerate(call.drop):
            if name not in fqns:
                out.append(
                    (f"{where}.drop[{j}]", f"no parameter {name!r} to leave out; parameters: {list(fqns[:3])}...")
                )
        for j, name in enumerate(call.add):
            if name in fqns:
                out.append(
                    (f"{where}.add[{j}]", f"{name!r} is a parameter of the model; expected a key it does not have")
                )
    for pattern, _ in setup.grad_dtype:
        if not match_params(pattern, fqns):
            out.append((f"setup.grad_dtype.{pattern}", hint(pattern)))
    for pattern, _ in setup.model.param_dtypes:
        if not match_params(pattern, fqns):
            out.append((f"setup.model.param_dtypes.{pattern}", hint(pattern)))
    if setup.model.param_dtypes and setup.numerics:
        out.append(
            (
                "setup.model.param_dtypes",
                "the numerics replica computes and reduces in one dtype, not per parameter: set setup.numerics: false",
            )
        )
    for i, step in enumerate(setup.schedule.steps if setup.schedule is not None else ()):
        for change in ("freeze", "unfreeze"):
            for j, pattern in enumerate(getattr(step, change)):
                if not match_params(pattern, fqns):
                    out.append((f"setup.schedule.steps[{i}].{change}[{j}]", hint(pattern)))
    return out
