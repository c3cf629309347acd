"""Closed-form calculator of the walkthrough's tables: what FSDP2 does to a unit's parameters
on a world size or an HSDP mesh. Pure integer arithmetic, no torch: cheap for property tests
and ``harness draft``. Sources, cited on each formula: the walkthrough document, torch 2.13
``torch/distributed/fsdp/_fully_shard/``, nccl-tests ``doc/PERFORMANCE.md``. Units: elements
(``*_numel``), bytes (``*_bytes``; the document's MB is 10**6 bytes); per-rank tables are
indexed by shard rank; field names are the spec's. More: docs/simulated-backend.md.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from model.config import KNOWN_CONFIGS  # torch-free, as model.names
from model.config import step_symbols as _step_symbols
from model.names import (
    LAYER_PARAM_NAMES_DOCUMENT,
    LAYER_PARAM_NAMES_REGISTRATION,
    MOE_LAYER_PARAM_NAMES_DOCUMENT,
    MOE_LAYER_PARAM_NAMES_REGISTRATION,
)

MB = 10**6
"""The document's megabyte: 10**6 bytes."""

DTYPE_BYTES: Mapping[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4}
"""Element size in bytes of each dtype the harness supports (``harness.load.setup.DTYPES``)."""

_DTYPE_ALIASES = {
    "half": "float16",
    "fp16": "float16",
    "bf16": "bfloat16",
    "float": "float32",
    "fp32": "float32",
}

_ORDERS = {"registration": LAYER_PARAM_NAMES_REGISTRATION, "document": LAYER_PARAM_NAMES_DOCUMENT}
_MOE_ORDERS = {"registration": MOE_LAYER_PARAM_NAMES_REGISTRATION, "document": MOE_LAYER_PARAM_NAMES_DOCUMENT}

EXPERT_PARAMS: tuple[str, ...] = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")
"""A sparse layer's fused expert parameters (transformers 5 ``Qwen3MoeExperts``): dim 0 is the expert."""


# ---------------------------------------------------------------------------------------------
# Inputs


def dtype_name(dtype: Any) -> str:
    """A :data:`DTYPE_BYTES` name from a name, an alias ("fp16", "bf16", "half", "float",
    "fp32") or a ``torch.dtype``; ValueError for an unsupported dtype."""
    name = str(dtype)
    if name.startswith("torch."):
        name = name[len("torch.") :]
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPE_BYTES:
        raise ValueError(f"unsupported dtype {dtype!r}: expected one of {sorted(DTYPE_BYTES)}")
    return name


def dtype_bytes(dtype: Any) -> int:
    """Element size in bytes: float16/bfloat16 2, float32 4."""
    return DTYPE_BYTES[dtype_name(dtype)]


@dataclass(frozen=True)
class Dims:
    """Model dimensions with ``Qwen3Config``'s and ``Qwen3MoeConfig``'s field names (symbols as
    in ``model/config.py``); ``vocab_size`` is needed only for the root's parameters,
    ``num_experts`` is None for a dense model."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    num_hidden_layers: int = 1
    vocab_size: int | None = None
    tie_word_embeddings: bool = False
    num_experts: int | None = None
    num_experts_per_tok: int | None = None
    moe_intermediate_size: int | None = None
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()

    def is_moe_layer(self, layer_idx: int) -> bool:
        """Whether decoder layer ``layer_idx`` is sparse, as ``Qwen3MoeConfig.is_moe_layer``."""
        return (
            bool(self.num_experts)
            and layer_idx not in self.mlp_only_layers
            and ((layer_idx + 1) % self.decoder_sparse_step == 0)
        )


def to_dims(dims: Any) -> Dims:
    """:class:`Dims` from a ``Dims``, a mapping or a config (transformers' or ours; not
    ``num_local_experts``); a missing ``head_dim`` is ``hidden_size // num_attention_heads``.
    KeyError for a missing required field, ValueError for a dimension not a positive int."""

    if isinstance(dims, Dims):
        return dims

    def get(name: str, default: Any = KeyError) -> Any:
        if isinstance(dims, Mapping):
            value = dims.get(name, None)
        else:
            value = getattr(dims, name, None)
        if value is None:
            if default is KeyError:
                raise KeyError(f"model dimensions lack {name!r}")
            return default
        return value

    hidden = get("hidden_size")
    heads = get("num_attention_heads")
    out = Dims(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=get("num_key_value_heads"),
        head_dim=get("head_dim", None) or hidden // heads,
        intermediate_size=get("intermediate_size"),
        num_hidden_layers=get("num_hidden_layers", 1),
        vocab_size=get("vocab_size", None),
        tie_word_embeddings=bool(get("tie_word_embeddings", False)),
        num_experts=get("num_experts", None),
        num_experts_per_tok=get("num_experts_per_tok", None),
        moe_intermediate_size=get("moe_intermediate_size", None),
        decoder_sparse_step=get("decoder_sparse_step", 1),
        mlp_only_layers=tuple(get("mlp_only_layers", ())),
    )
    fields = [
        "hidden_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "intermediate_size",
        "num_hidden_layers",
    ]
    if out.num_experts is not None:  # a MoE model: its own dims are needed too
        fields += ["num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step"]
    for field in fields:
        value = getattr(out, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{field} must be a positive int, got {value!r}")
    return out


# ---------------------------------------------------------------------------------------------
# Parameters


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: its name relative to its FSDP unit, full shape and element count."""

    name: str
    shape: tuple[int, ...]
    numel: int


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _spec(name: str, shape: Sequence[int]) -> ParamSpec:
    shape = tuple(int(s) for s in shape)
    return ParamSpec(name, shape, _numel(shape))


def layer_params(dims: Any, order: str = "registration", layer_idx: int = 0) -> list[ParamSpec]:
    """The parameters of decoder layer ``layer_idx`` (document, "参数列表（单层）"), in
    ``order`` "registration" (FSDP2's all-gather order) or "document" (``model.names``).

    Dense total = 2*d*h_q*d_h + 2*d*h_kv*d_h + 3*d*d_ffn + 2*d_h + 2*d (walkthrough: 2,360,448);
    a sparse layer's fused experts and router replace the MLP's 3*d*d_ffn by 3*E*d_moe*d + E*d
    (Qwen3-30B-A3B: 623,120,640).
    """
    d = to_dims(dims)
    q_out = d.num_attention_heads * d.head_dim
    kv_out = d.num_key_value_heads * d.head_dim
    shapes = {
        "self_attn.q_proj.weight": (q_out, d.hidden_size),
        "self_attn.k_proj.weight": (kv_out, d.hidden_size),
        "self_attn.v_proj.weight": (kv_out, d.hidden_size),
        "self_attn.o_proj.weight": (d.hidden_size, q_out),
        "self_attn.q_norm.weight": (d.head_dim,),
        "self_attn.k_norm.weight": (d.head_dim,),
        "mlp.gate_proj.weight": (d.intermediate_size, d.hidden_size),
        "mlp.up_proj.weight": (d.intermediate_size, d.hidden_size),
        "mlp.down_proj.weight": (d.hidden_size, d.intermediate_size),
        "input_layernorm.weight": (d.hidden_size,),
        "post_attention_layernorm.weight": (d.hidden_size,),
    }
    if order not in _ORDERS:
        raise ValueError(f"order must be one of {sorted(_ORDERS)}, got {order!r}")
    if not d.is_moe_layer(layer_idx):
        return [_spec(name, shapes[name]) for name in _ORDERS[order]]
    E, d_moe = d.num_experts, d.moe_intermediate_size
    shapes.update(
        {
            "mlp.experts.gate_up_proj": (E, 2 * d_moe, d.hidden_size),
            "mlp.experts.down_proj": (E, d.hidden_size, d_moe),
            "mlp.gate.weight": (E, d.hidden_size),
        }
    )
    return [_spec(name, shapes[name]) for name in _MOE_ORDERS[order]]


def root_params(dims: Any) -> list[ParamSpec]:
    """A causal LM root unit's own parameters: ``model.embed_tokens.weight`` [V, d],
    ``model.norm.weight`` [d], ``lm_head.weight`` [V, d] unless tied; needs ``vocab_size``."""
    d = to_dims(dims)
    if d.vocab_size is None:
        raise ValueError("root_params needs vocab_size")
    params = [
        _spec("model.embed_tokens.weight", (d.vocab_size, d.hidden_size)),
        _spec("model.norm.weight", (d.hidden_size,)),
    ]
    if not d.tie_word_embeddings:
        params.append(_spec("lm_head.weight", (d.vocab_size, d.hidden_size)))
    return params


# ---------------------------------------------------------------------------------------------
# Shard(0) with torch.chunk semantics


def chunk_size(rows: int, world_size: int) -> int:
    """Rows of each full chunk: ``ceil(rows / world_size)`` (``torch.chunk``'s split size)."""
    _check_world(world_size)
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    return -(-rows // world_size)


def chunk_rows(rows: int, world_size: int) -> list[int]:
    """Rows each rank holds under Shard(0) (FSDP2's ``_chunk_with_empty``): W entries summing
    to ``rows``, 0 past the last chunk (``rows=6, W=4``: 2, 2, 2, 0)."""
    c = chunk_size(rows, world_size)
    return [max(0, min(c, rows - r * c)) for r in range(world_size)]


def row_range(rows: int, world_size: int, rank: int) -> tuple[int, int]:
    """``[start, stop)`` rows of the full parameter that shard rank ``rank`` holds."""
    c = chunk_size(rows, world_size)
    _check_rank(rank, world_size)
    start = min(rank * c, rows)
    return start, min(start + c, rows)


def local_shape(shape: Sequence[int], world_size: int, rank: int) -> tuple[int, ...]:
    """A Shard(0) DTensor's local shape on shard rank ``rank``: the other dims are kept, also
    on an empty shard (``_get_dim_chunked_size``)."""
    if len(shape) == 0:
        raise ValueError("a 0-dim parameter cannot be sharded on dim 0")
    _check_rank(rank, world_size)
    return (chunk_rows(shape[0], world_size)[rank], *tuple(shape[1:]))


def padded_shard_shape(shape: Sequence[int], world_size: int) -> tuple[int, ...]:
    """The padded shard every rank stores and all-gathers: ``[ceil(rows/W), *rest]`` (torch
    ``FSDPParam._init_sharded_param``: ``padded_sharded_param_size = chunks[0].size()``)."""
    if len(shape) == 0:
        raise ValueError("a 0-dim parameter cannot be sharded on dim 0")
    return (chunk_size(shape[0], world_size), *tuple(shape[1:]))


def _check_world(world_size: int) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world size must be a positive int, got {world_size!r}")


def _check_rank(rank: int, world_size: int) -> None:
    _check_world(world_size)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside [0, {world_size})")


# ---------------------------------------------------------------------------------------------
# Collectives and bandwidth


BUSBW_FACTOR_NUMERATOR = {"all_gather": 1, "reduce_scatter": 1, "all_reduce": 2}


def busbw_factor(op: str, group_size: int) -> float:
    """nccl-tests' ``busbw / algbw``: (n-1)/n, all-reduce 2(n-1)/n (doc/PERFORMANCE.md)."""
    _check_world(group_size)
    return BUSBW_FACTOR_NUMERATOR[op] * (group_size - 1) / group_size


def ring_bytes(op: str, buffer_bytes: int, group_size: int) -> int | float:
    """Bytes each rank sends in a ring collective of nccl-tests size ``S = buffer_bytes``:
    ``S * (n-1)/n``, all-reduce twice that; an int when exact, else a float."""

    _check_world(group_size)
    num = BUSBW_FACTOR_NUMERATOR[op] * buffer_bytes * (group_size - 1)
    return num // group_size if num % group_size == 0 else num / group_size


def algbw(buffer_bytes: int, seconds: float) -> float:
    """nccl-tests algorithm bandwidth in bytes/s: ``S / t``."""
    return buffer_bytes / seconds


def busbw(op: str, buffer_bytes: int, group_size: int, seconds: float) -> float:
    """nccl-tests bus bandwidth in bytes/s: ``algbw * busbw_factor(op, n)``."""
    return algbw(buffer_bytes, seconds) * busbw_factor(op, group_size)


@dataclass(frozen=True)
class Collective:
    """One collective per training step, seen from one rank, in the spec's field names:
    ``buffer_bytes`` is nccl-tests' ``S`` (all-gather output, reduce-scatter input);
    ``mesh_dim`` is None for a ``reshard_after_forward=<int>`` group, no dim of the mesh."""

    op: str
    phase: str
    mesh_dim: str | None
    group_size: int
    dtype: str
    numel_in: int
    numel_out: int
    buffer_bytes: int
    ring_bytes: int | float
    busbw_factor: float

    def fields(self) -> dict[str, Any]:
        """This collective as a spec's ``collectives`` fields (mesh_dim only when set)."""
        out = {
            "op": self.op,
            "dtype": self.dtype,
            "numel_in": self.numel_in,
            "numel_out": self.numel_out,
            "buffer_bytes": self.buffer_bytes,
            "ring_bytes": _whole(self.ring_bytes),
            "group_size": self.group_size,
        }
        if self.mesh_dim is not None:
            out["mesh_dim"] = self.mesh_dim
        return out

    def algbw(self, seconds: float) -> float:
        """``S / t`` in bytes/s."""
        return algbw(self.buffer_bytes, seconds)

    def busbw(self, seconds: float) -> float:
        """``algbw * busbw_factor`` in bytes/s."""
        return self.algbw(seconds) * self.busbw_factor


def _collective(
    op: str, phase: str, mesh_dim: str | None, n: int, dtype: str, numel_in: int, numel_out: int
) -> Collective:
    size_numel = {"all_gather": numel_out, "reduce_scatter": numel_in, "all_reduce": numel_in}[op]
    size = size_numel * DTYPE_BYTES[dtype]
    return Collective(
        op, phase, mesh_dim, n, dtype, numel_in, numel_out, size, ring_bytes(op, size, n), busbw_factor(op, n)
    )


def _whole(value: int | float) -> int | float:
    return int(value) if float(value).is_integer() else value


# ---------------------------------------------------------------------------------------------
# Tables


@dataclass(frozen=True)
class ParamShard:
    """One parameter sharded over the shard group (document: "每个 rank 上的参数分片"), cut
    along ``shard_dim`` (``Shard(dim)``, 0 by default): per shard rank its local shape, numel
    and row range; the padded shard every rank stores; ``padding_numel`` zeros it adds to the
    all-gather output; ``input_offset``, in elements, inside a rank's all-gather input."""

    name: str
    full_shape: tuple[int, ...]
    numel: int
    chunk_rows: int
    padded_shard_shape: tuple[int, ...]
    padded_shard_numel: int
    local_shapes: tuple[tuple[int, ...], ...]
    local_numels: tuple[int, ...]
    row_ranges: tuple[tuple[int, int], ...]
    padding_numel: int
    input_offset: int
    shard_dim: int = 0

    @property
    def placement(self) -> str:
        """The DTensor placement as the observation writes it: ``"Shard(dim=0)"``."""
        return f"Shard(dim={self.shard_dim})"

    def experts_held(self, rank: int) -> tuple[int, int]:
        """``[start, stop)`` of the experts a fused expert parameter's shard holds rows of."""
        if self.shard_dim == 0:
            return self.row_ranges[rank]
        return (0, self.full_shape[0]) if self.local_numels[rank] else (0, 0)

    def row(self, rank: int | None = None) -> dict[str, Any]:
        """This parameter as a spec's ``param`` row, with the local fields on a shard rank."""
        out: dict[str, Any] = {"param": self.name, "full_shape": list(self.full_shape), "numel": self.numel}
        if rank is not None:
            out["local_shape"] = list(self.local_shapes[rank])
            out["local_numel"] = self.local_numels[rank]
        return out


@dataclass(frozen=True)
class UnitTables:
    """One FSDP unit (a decoder layer, or the root) under one mesh, dtypes and options.

    Sizes (torch ``_fsdp_collectives.py``; S = shard group size, P_i = padded shard numel of
    parameter i): all-gather input per rank = sum_i P_i = ``padded_shard_numel``, output =
    reduce-scatter input = S * sum_i P_i = ``padded_numel``; HSDP all-reduces the shard-sized
    reduce-scatter output over the replicate group. Bytes: ``local_bytes`` and
    ``padded_sharded_bytes`` in the storage dtype, ``unsharded_bytes`` in the gather dtype
    (``MixedPrecisionPolicy.param_dtype``). ``collectives`` in issue order: forward all-gather,
    backward all-gather (unless ``reshard_after_forward`` is False), reduce-scatter, all-reduce.
    """

    world_size: int
    mesh_shape: tuple[int, ...]
    shard_size: int
    replicate_size: int
    storage_dtype: str
    gather_dtype: str
    reduce_dtype: str
    reshard_after_forward: bool | int
    params: tuple[ParamShard, ...]
    numel: int
    padded_numel: int
    padding_numel: int
    padded_shard_numel: int
    local_numels: tuple[int, ...]
    local_bytes: tuple[int, ...]
    padded_sharded_bytes: int
    unsharded_bytes: int
    full_storage_bytes: int
    collectives: tuple[Collective, ...]
    total_ring_bytes: int | float
    mesh_dim_names: tuple[str, ...] = ("dp",)

    def param(self, name: str) -> ParamShard:
        """The row of ``params`` with this name."""
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def collective(self, op: str, phase: str | None = None) -> Collective:
        """The only collective with this op (and phase, if given)."""
        found = [c for c in self.collectives if c.op == op and (phase is None or c.phase == phase)]
        if len(found) != 1:
            raise KeyError(f"{len(found)} collectives with op={op!r} phase={phase!r}")
        return found[0]

    def params_total(self, rank: int | None = None) -> dict[str, int]:
        """The unit as a spec's ``params_total`` fields, the local ones on a shard rank."""
        if rank is None:
            return {"count": len(self.params), "numel": self.numel, "bytes": self.full_storage_bytes}
        return {"local_numel": self.local_numels[rank], "local_bytes": self.local_bytes[rank]}

    def param_state(self, point: str, rank: int) -> dict[str, Any]:
        """The unit's parameters at ``point`` "pre_forward" (full tensors) or "post_forward"
        (shards again if ``reshard_after_forward``; ValueError for an int) as ``param_state`` fields."""
        n = len(self.params)
        full = {"plain_tensors": n, "full_shapes": True, "bytes": self.unsharded_bytes}
        if point == "pre_forward":
            return full
        if point != "post_forward":
            raise ValueError(f"point must be 'pre_forward' or 'post_forward', got {point!r}")
        if not isinstance(self.reshard_after_forward, bool):
            raise ValueError("param_state after forward is tabulated for reshard_after_forward True or False only")
        if not self.reshard_after_forward:
            return full
        return {"dtensors": n, "local_shapes": True, "bytes": self.local_bytes[rank]}

    def step_total(self) -> dict[str, Any]:
        """The unit's per-step ``collectives`` fields: count and total_ring_bytes."""
        return {"count": len(self.collectives), "total_ring_bytes": _whole(self.total_ring_bytes)}

    def to_dict(self) -> dict[str, Any]:
        """A JSON/YAML-ready dict (tuples become lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))


def mesh_coords(global_rank: int, mesh_shape: Sequence[int]) -> tuple[int, int]:
    """``(g // S, g % S)``: DeviceMesh lays a ``(R, S)`` mesh out row-major."""
    replicate, shard = _mesh(mesh_shape)
    _check_rank(global_rank, replicate * shard)
    return global_rank // shard, global_rank % shard


def _mesh(mesh_shape: Sequence[int]) -> tuple[int, int]:
    shape = tuple(mesh_shape)
    if len(shape) == 1:
        replicate, shard = 1, shape[0]
    elif len(shape) == 2:
        replicate, shard = shape
    else:
        raise ValueError(f"mesh_shape must be (W,) or (replicate, shard), got {list(shape)}")
    _check_world(replicate)
    _check_world(shard)
    return replicate, shard


def _post_forward_size(reshard_after_forward: bool | int, shard: int) -> int | None:
    """Backward all-gather group size, None for none (torch ``_get_post_forward_mesh_info``:
    True is S, False or 1 none, an int k must divide S)."""
    if isinstance(reshard_after_forward, bool):
        return shard if reshard_after_forward else None
    k = reshard_after_forward
    if not isinstance(k, int) or k < 1 or k > shard or shard % k != 0:
        raise ValueError(f"reshard_after_forward as an int must divide the shard size {shard}, got {k!r}")
    if k == 1:
        return None
    return k


def unit_tables(
    params: Iterable[ParamSpec],
    world_size: int | None = None,
    *,
    mesh_shape: Sequence[int] | None = None,
    storage_dtype: Any = "float16",
    gather_dtype: Any = None,
    reduce_dtype: Any = None,
    reshard_after_forward: bool | int = True,
    mesh_dim_names: Sequence[str] | None = None,
    shard_dims: Mapping[str, int] | None = None,
) -> UnitTables:
    """Tables of one FSDP unit holding ``params`` in FSDP2's order (see :class:`UnitTables`).

    ``world_size`` may be None given ``mesh_shape`` (``(W,)`` or ``(R, S)``; ``mesh_dim_names``
    default ("dp",) or ("dp_replicate", "dp_shard")). ``gather_dtype`` and ``reduce_dtype`` are
    ``MixedPrecisionPolicy``'s, None following the storage and gather dtype (torch
    ``foreach_reduce``). ``reshard_after_forward``: bool, or an int k dividing S for a backward
    all-gather over k ranks. ``shard_dims``: parameter name -> ``Shard(dim)``, cut as Shard(0)
    is along that dim (``_chunk_with_empty(param, S, dim=shard_dim)``); the others Shard(0).
    ValueError for inconsistent arguments, and as torch for a dim > 0 that S does not divide.
    """

    if mesh_shape is None:
        if world_size is None:
            raise ValueError("give world_size or mesh_shape")
        mesh_shape = (world_size,)
    replicate, shard = _mesh(mesh_shape)
    mesh_shape = tuple(mesh_shape)
    if world_size is None:
        world_size = replicate * shard
    if world_size != replicate * shard:
        raise ValueError(f"world_size {world_size} != product of mesh_shape {list(mesh_shape)}")
    if mesh_dim_names is None:
        mesh_dim_names = ("dp",) if len(mesh_shape) == 1 else ("dp_replicate", "dp_shard")
    mesh_dim_names = tuple(mesh_dim_names)
    if len(mesh_dim_names) != len(mesh_shape):
        raise ValueError(f"mesh_dim_names {list(mesh_dim_names)} do not name the dims of mesh_shape {list(mesh_shape)}")
    shard_dim, replicate_dim = mesh_dim_names[-1], (mesh_dim_names[0] if len(mesh_dim_names) == 2 else None)
    storage = dtype_name(storage_dtype)
    gather = dtype_name(gather_dtype) if gather_dtype is not None else storage
    reduce = dtype_name(reduce_dtype) if reduce_dtype is not None else gather
    post_forward = _post_forward_size(reshard_after_forward, shard)

    params = list(params)
    dims_of = dict(shard_dims or {})
    unknown = sorted(set(dims_of) - {p.name for p in params})
    if unknown:
        raise ValueError(f"shard_dims names no parameter of the unit: {unknown}")
    rows_out: list[ParamShard] = []
    offset = 0
    for p in params:
        dim = dims_of.get(p.name, 0)
        if len(p.shape) == 0:
            raise ValueError(f"{p.name}: a 0-dim parameter cannot be sharded on dim 0")
        if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim < len(p.shape):
            raise ValueError(f"{p.name}: Shard dim {dim!r} is invalid for {len(p.shape)}D tensor: {list(p.shape)}")
        rows = p.shape[dim]
        if dim > 0 and rows % shard != 0:  # torch FSDPParam._init_sharded_param refuses it
            raise ValueError(
                f"{p.name}: FSDP does not support uneven sharding on dim {dim}: {list(p.shape)} (world size: {shard})"
            )
        rest = _numel(p.shape[:dim]) * _numel(p.shape[dim + 1 :])
        c = chunk_size(rows, shard)
        per_rank = chunk_rows(rows, shard)
        padded = c * rest

        def cut(n: int, shape: tuple[int, ...] = tuple(p.shape), dim: int = dim) -> tuple[int, ...]:
            return (*shape[:dim], n, *shape[dim + 1 :])

        rows_out.append(
            ParamShard(
                name=p.name,
                full_shape=tuple(p.shape),
                numel=p.numel,
                chunk_rows=c,
                padded_shard_shape=cut(c),
                padded_shard_numel=padded,
                local_shapes=tuple(cut(n) for n in per_rank),
                local_numels=tuple(n * rest for n in per_rank),
                row_ranges=tuple(row_range(rows, shard, r) for r in range(shard)),
                padding_numel=shard * padded - p.numel,
                input_offset=offset,
                shard_dim=dim,
            )
        )
        offset += padded

    numel = sum(p.numel for p in rows_out)
    padded_shard_numel = offset
    padded_numel = shard * padded_shard_numel
    local_numels = tuple(sum(p.local_numels[r] for p in rows_out) for r in range(shard))

    collectives: list[Collective] = []
    # A shard group of one rank issues no all-gather and no reduce-scatter: torch
    # FSDPParamGroup.unshard returns early "if world_size == 1" and copies the shard in place.
    if rows_out and shard > 1:
        collectives.append(
            _collective("all_gather", "forward", shard_dim, shard, gather, padded_shard_numel, padded_numel)
        )
        if post_forward is not None:
            # reshard_after_forward=<int>: a new group of k ranks, no dim of the mesh
            dim = shard_dim if post_forward == shard else None
            collectives.append(
                _collective(
                    "all_gather", "backward", dim, post_forward, gather, padded_numel // post_forward, padded_numel
                )
            )
        collectives.append(
            _collective("reduce_scatter", "backward", shard_dim, shard, reduce, padded_numel, padded_shard_numel)
        )
    if rows_out and replicate > 1:  # HSDP: the shard-sized gradient, across replicas
        collectives.append(
            _collective(
                "all_reduce", "backward", replicate_dim, replicate, reduce, padded_shard_numel, padded_shard_numel
            )
        )
    step = sum(c.ring_bytes for c in collectives)
    if isinstance(step, float) and step.is_integer():
        step = int(step)

    return UnitTables(
        world_size=world_size,
        mesh_shape=mesh_shape,
        shard_size=shard,
        replicate_size=replicate,
        storage_dtype=storage,
        gather_dtype=gather,
        reduce_dtype=reduce,
        reshard_after_forward=reshard_after_forward,
        params=tuple(rows_out),
        numel=numel,
        padded_numel=padded_numel,
        padding_numel=padded_numel - numel,
        padded_shard_numel=padded_shard_numel,
        local_numels=local_numels,
        local_bytes=tuple(n * DTYPE_BYTES[storage] for n in local_numels),
        padded_sharded_bytes=padded_shard_numel * DTYPE_BYTES[storage],
        unsharded_bytes=numel * DTYPE_BYTES[gather],
        full_storage_bytes=numel * DTYPE_BYTES[storage],
        collectives=tuple(collectives),
        total_ring_bytes=step,
        mesh_dim_names=mesh_dim_names,
    )


def layer_tables(
    dims: Any,
    world_size: int | None = None,
    *,
    mesh_shape: Sequence[int] | None = None,
    storage_dtype: Any = "float16",
    gather_dtype: Any = None,
    reduce_dtype: Any = None,
    reshard_after_forward: bool | int = True,
    order: str = "registration",
    mesh_dim_names: Sequence[str] | None = None,
    layer_idx: int = 0,
    shard_dims: Mapping[str, int] | None = None,
) -> UnitTables:
    """The document's tables for decoder layer ``layer_idx`` as one FSDP unit; arguments as
    :func:`unit_tables` and :func:`layer_params` (``layer_tables(WALKTHROUGH, 4)``: numel
    2,360,448, total_ring_bytes 10,622,016)."""
    return unit_tables(
        layer_params(dims, order, layer_idx),
        world_size,
        mesh_shape=mesh_shape,
        storage_dtype=storage_dtype,
        gather_dtype=gather_dtype,
        reduce_dtype=reduce_dtype,
        reshard_after_forward=reshard_after_forward,
        mesh_dim_names=mesh_dim_names,
        shard_dims=shard_dims,
    )


def root_tables(
    dims: Any,
    world_size: int | None = None,
    *,
    mesh_shape: Sequence[int] | None = None,
    storage_dtype: Any = "float16",
    gather_dtype: Any = None,
    reduce_dtype: Any = None,
    reshard_after_forward: bool | int = False,
    mesh_dim_names: Sequence[str] | None = None,
) -> UnitTables:
    """The root unit of a causal LM (:func:`root_params`); ``reshard_after_forward`` False is
    torch's default for the root (``FSDPState._lazy_init``)."""
    return unit_tables(
        root_params(dims),
        world_size,
        mesh_shape=mesh_shape,
        storage_dtype=storage_dtype,
        gather_dtype=gather_dtype,
        reduce_dtype=reduce_dtype,
        reshard_after_forward=reshard_after_forward,
        mesh_dim_names=mesh_dim_names,
    )


@dataclass(frozen=True)
class ModelTables:
    """Per-step totals of a model: ``layer`` (layer 0's tables), ``root`` (None for the
    "decoder_layers" body), every unit's ``total_ring_bytes`` (document, "单层单步通信量汇总")
    and ``local_bytes`` per shard rank."""

    num_layers: int
    layer: UnitTables
    root: UnitTables | None
    total_ring_bytes: int | float
    local_bytes: tuple[int, ...]

    def step_total(self) -> dict[str, Any]:
        """Every unit's per-step ``collectives`` field total_ring_bytes."""
        return {"total_ring_bytes": _whole(self.total_ring_bytes)}

    def to_dict(self) -> dict[str, Any]:
        """A JSON/YAML-ready dict (tuples become lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))


def model_tables(
    dims: Any,
    world_size: int | None = None,
    *,
    body: str = "decoder_layers",
    mesh_shape: Sequence[int] | None = None,
    storage_dtype: Any = "float16",
    gather_dtype: Any = None,
    reduce_dtype: Any = None,
    reshard_after_forward: bool | int = True,
    root_reshard_after_forward: bool | int = False,
    order: str = "registration",
    mesh_dim_names: Sequence[str] | None = None,
    shard_dims: Mapping[str, int] | None = None,
) -> ModelTables:
    """Every unit of a model for one training step: ``body`` "decoder_layers" (a root without
    parameters) or "causal_lm" (:func:`root_tables`); other arguments as :func:`layer_tables`,
    for every layer. Layers of two kinds (MoE) sum each layer's own tables."""
    d = to_dims(dims)
    common = dict(
        mesh_shape=mesh_shape,
        storage_dtype=storage_dtype,
        gather_dtype=gather_dtype,
        reduce_dtype=reduce_dtype,
        mesh_dim_names=mesh_dim_names,
    )
    layer = layer_tables(
        d, world_size, reshard_after_forward=reshard_after_forward, order=order, shard_dims=shard_dims, **common
    )
    kinds = {d.is_moe_layer(i) for i in range(d.num_hidden_layers)}
    layers = [layer] * d.num_hidden_layers
    if len(kinds) > 1:
        dense_dims = {k: v for k, v in (shard_dims or {}).items() if not k.startswith(("mlp.experts.", "mlp.gate."))}
        layers = [
            layer_tables(
                d,
                world_size,
                reshard_after_forward=reshard_after_forward,
                order=order,
                layer_idx=i,
                shard_dims=shard_dims if d.is_moe_layer(i) else dense_dims,
                **common,
            )
            for i in range(d.num_hidden_layers)
        ]
    if body == "decoder_layers":
        root = None
    elif body == "causal_lm":
        root = root_tables(d, world_size, reshard_after_forward=root_reshard_after_forward, **common)
    else:
        raise ValueError(f"body must be 'decoder_layers' or 'causal_lm', got {body!r}")
    step = sum(t.total_ring_bytes for t in layers) + (root.total_ring_bytes if root else 0)
    if isinstance(step, float) and step.is_integer():
        step = int(step)
    sharded = tuple(
        sum(t.local_bytes[r] for t in layers) + (root.local_bytes[r] if root else 0) for r in range(layer.shard_size)
    )
    return ModelTables(d.num_hidden_layers, layer, root, step, sharded)


# ---------------------------------------------------------------------------------------------
# FSDP over tensor parallelism on a 2-D (dp, tp) mesh

TP_STYLES: tuple[str, ...] = ("colwise", "rowwise", "head_norm")
"""Tensor-parallel styles of a decoder layer's modules: ``ColwiseParallel`` (a Linear's output
features, ``Shard(0)`` of its weight), ``RowwiseParallel`` (its input features, ``Shard(1)``) and,
for a norm over ``head_dim`` applied to the TP-local heads (Qwen3's ``q_norm``, ``k_norm``),
``SequenceParallel(sequence_dim=2)``: its weight ``Replicate()`` on tp, its gradient summed over tp."""

TP_STYLE_DIM: dict[str, int] = {"colwise": 0, "rowwise": 1}
"""The weight dim each splitting style cuts (a ``head_norm`` weight stays whole)."""

QWEN3_TP_PLAN: tuple[tuple[str, str], ...] = (
    ("self_attn.q_proj", "colwise"),
    ("self_attn.k_proj", "colwise"),
    ("self_attn.v_proj", "colwise"),
    ("self_attn.q_norm", "head_norm"),
    ("self_attn.k_norm", "head_norm"),
    ("self_attn.o_proj", "rowwise"),
    ("mlp.gate_proj", "colwise"),
    ("mlp.up_proj", "colwise"),
    ("mlp.down_proj", "rowwise"),
)
"""torchtitan's tensor-parallel plan of a Qwen3 decoder layer (``torchtitan/models/qwen3/infra/
parallelize.py``, ``apply_non_moe_tp``): module path within the layer -> style."""


SEQUENCE_PARALLEL_NORMS: tuple[str, ...] = ("input_layernorm", "post_attention_layernorm")
"""The layer norms sequence parallelism runs on the rank's 1/tp of the sequence (``SequenceParallel``)."""

SEQUENCE_GATHERED: tuple[str, ...] = ("self_attn", "mlp")
"""The blocks whose input sequence parallelism all-gathers (torchtitan's ``PrepareModuleInput``)."""


@dataclass(frozen=True)
class TPLayerTables:
    """One decoder layer under TP on mesh dim ``tp``, then FSDP over ``dp``.

    ``fsdp``: :func:`unit_tables` of the TP-local parameters over the dp group (torch shards the
    TP-local tensor: local shapes, all-gather and reduce-scatter sizes per dp rank, even TP cuts
    assumed); ``placements`` and ``mesh_dims``: each parameter's as torch writes them (a colwise
    weight ``_StridedShard(dim=0, sf=T)`` on dp over ``Shard(0)`` on tp); ``tp_collectives``: TP's
    all-reduces per step, in [B, L] activations: each rowwise module's output in forward, each
    colwise module's input gradient and each head norm's weight gradient in backward."""

    tp_size: int
    fsdp: UnitTables
    placements: dict[str, tuple[str, ...]]
    mesh_dims: dict[str, tuple[str, ...]]
    tp_collectives: tuple[Collective, ...]


def tp_divisibility_problem(dims: Any, tp: int) -> str | None:
    """Why TP size ``tp`` cannot split a Qwen3 layer of ``dims`` evenly (the colwise projections
    split attention heads, KV heads and ``intermediate_size``), or None."""
    for name in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        value = getattr(dims, name, None)
        if isinstance(value, int) and value % tp:
            return f"TP size {tp} does not divide the config's {name} {value}"
    return None


def tp_layer_tables(
    dims: Any,
    mesh_shape: Sequence[int],
    *,
    batch_per_rank: int,
    seq_len: int,
    plan: Sequence[tuple[str, str]] = QWEN3_TP_PLAN,
    mesh_dim_names: Sequence[str] = ("dp", "tp"),
    storage_dtype: Any = "float16",
    gather_dtype: Any = None,
    reduce_dtype: Any = None,
    reshard_after_forward: bool | int = True,
    layer_idx: int = 0,
    sequence_parallel: bool = False,
) -> TPLayerTables:
    """:class:`TPLayerTables` of decoder layer ``layer_idx`` on a ``(dp, tp)`` mesh (``specs/
    fsdp_tp_2d.yaml``: tiny layer, [2, 2]: 9,296 elements per all-gather input, 4 forward and
    10 + 4 backward TP all-reduces over 2 layers). ``sequence_parallel`` (``fsdp_tp_sequence_parallel.
    yaml``): the layer norms' weights ``Replicate()`` on tp, and per step an all-gather of the
    sequence into self_attn and mlp and a reduce-scatter out of each rowwise module, reversed in
    backward, with the 4 norms' weight gradients all-reduced. ValueError where the TP size does
    not divide a dim a style cuts (or ``seq_len`` under sequence parallelism), or the plan names no
    module with a weight in the layer."""
    if len(tuple(mesh_shape)) != 2:
        raise ValueError(f"mesh_shape must be (dp, tp), got {list(mesh_shape)}")
    dp, tp = (int(n) for n in mesh_shape)
    _check_world(dp)
    _check_world(tp)
    dp_name, tp_name = mesh_dim_names
    params = layer_params(dims, layer_idx=layer_idx)
    shapes = {p.name: p.shape for p in params}
    styles = {f"{path}.weight": style for path, style in plan}
    unknown = sorted(w for w in styles if w not in shapes)
    if unknown:
        raise ValueError(f"the plan names no module with a weight in the layer: {unknown}")
    local: list[ParamSpec] = []
    for p in params:
        dim = TP_STYLE_DIM.get(styles.get(p.name, ""))
        if dim is None:
            local.append(p)
            continue
        if p.shape[dim] % tp:
            raise ValueError(f"{p.name}: TP size {tp} does not divide dim {dim} of {list(p.shape)}")
        local.append(_spec(p.name, (*p.shape[:dim], p.shape[dim] // tp, *p.shape[dim + 1 :])))
    fsdp = unit_tables(
        local,
        mesh_shape=(dp,),
        mesh_dim_names=(dp_name,),
        storage_dtype=storage_dtype,
        gather_dtype=gather_dtype,
        reduce_dtype=reduce_dtype,
        reshard_after_forward=reshard_after_forward,
    )
    if sequence_parallel:
        if seq_len % tp:
            raise ValueError(f"TP size {tp} does not divide seq_len {seq_len}")
        for norm in SEQUENCE_PARALLEL_NORMS:
            styles.setdefault(f"{norm}.weight", "sequence_norm")
    placements, mesh_dims = {}, {}
    for p in params:
        style = styles.get(p.name)
        if style is None:
            placements[p.name], mesh_dims[p.name] = ("Shard(dim=0)",), (dp_name,)
            continue
        on_dp = f"_StridedShard(dim=0, sf={tp})" if TP_STYLE_DIM.get(style) == 0 else "Shard(dim=0)"
        on_tp = f"Shard(dim={TP_STYLE_DIM[style]})" if style in TP_STYLE_DIM else "Replicate()"
        placements[p.name], mesh_dims[p.name] = (on_dp, on_tp), (dp_name, tp_name)
    compute = fsdp.gather_dtype
    tokens = batch_per_rank * seq_len

    def all_reduce(phase: str, numel: int) -> Collective:
        return _collective("all_reduce", phase, tp_name, tp, compute, numel, numel)

    # a norm's Partial weight gradient, made Replicate in the compute dtype by FSDP's post-backward
    # reshard (FSDPParam's gradient redistribute), before foreach_reduce casts to the reduce dtype
    norms = [all_reduce("backward", shapes[w][0]) for w, s in styles.items() if s in ("head_norm", "sequence_norm")]
    if not sequence_parallel:  # rowwise outputs and colwise input gradients all-reduced
        forward = [all_reduce("forward", tokens * shapes[w][0]) for w, s in styles.items() if s == "rowwise"]
        backward = [all_reduce("backward", tokens * shapes[w][1]) for w, s in styles.items() if s == "colwise"]
        return TPLayerTables(tp, fsdp, placements, mesh_dims, tuple(forward + backward + norms))
    d = shapes["input_layernorm.weight"][0]

    def gather(phase: str, numel: int) -> Collective:  # the sequence's 1/tp -> all of it
        return _collective("all_gather", phase, tp_name, tp, compute, numel // tp, numel)

    def scatter(phase: str, numel: int) -> Collective:  # all of it, summed -> the sequence's 1/tp
        return _collective("reduce_scatter", phase, tp_name, tp, compute, numel, numel // tp)

    rowwise = [tokens * shapes[w][0] for w, s in styles.items() if s == "rowwise"]
    forward = [gather("forward", tokens * d) for _ in SEQUENCE_GATHERED] + [scatter("forward", n) for n in rowwise]
    backward = [gather("backward", n) for n in rowwise] + [scatter("backward", tokens * d) for _ in SEQUENCE_GATHERED]
    return TPLayerTables(tp, fsdp, placements, mesh_dims, tuple(forward + backward + norms))
    return TPLayerTables(tp, fsdp, placements, mesh_dims, tuple(forward + backward))


# ---------------------------------------------------------------------------------------------
# Step shapes


def step_symbols(dims: Any, batch_per_rank: int, seq_len: int) -> dict[str, int]:
    """``model.config.step_symbols`` of :func:`to_dims` of ``dims``."""

    return _step_symbols(to_dims(dims), batch_per_rank, seq_len)


WALKTHROUGH = to_dims(KNOWN_CONFIGS["walkthrough"])
"""The document's config table (section "配置（精简版，便于数值追踪）": d=512, h_q=8, h_kv=4, d_h=64,
d_ffn=1024) as :class:`Dims`: ``model.config.KNOWN_CONFIGS["walkthrough"]``, the one definition
(N_L=2, V=1024, tied: the values that config chooses where the document is silent)."""
