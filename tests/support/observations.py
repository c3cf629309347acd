"""Synthetic observation documents for unit tests of the checks (no ranks launched).

:func:`walkthrough_observation` is what a real FSDP2 step of "FSDP2 Qwen3 Decoder Layer
Walkthrough" should record: 2 decoder layers ("layers.0", "layers.1") plus a root unit with
no parameters of its own, 4 ranks on a 1-D mesh "dp", fp16, B=2, L=8. Every figure is derived
from the document's configuration table (``DIMS``) and its rules (Shard(0) splits dim 0 in N; rank r holds
samples r*B .. r*B+B-1; one all-gather per unit
in forward and in backward, one reduce-scatter per unit in backward), never typed in as JSON.
The document's printed figures (``DOC_*``) are kept alongside so tests can hold the derived
numbers against them.

The document validates against harness/contract/observation.schema.json
(tests/unit/language/kinds/test_walkthrough_kinds.py).
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable, Iterable

from harness.contract import fields
from harness.load.setup import ModelSetup, RunSetup
from model.config import KNOWN_CONFIGS
from model.steps import STEPS, resolve_shape

# --- the document's setup ------------------------------------------------------------------

#: The walkthrough's config, defined once in model/config.py (N_L = 2, so that "between
#: layers" and prefetch show).
CONFIG = KNOWN_CONFIGS["walkthrough"]
#: The harness's default setup is the document's: N=4 ranks on one mesh dim, B=2, L=8.
_DEFAULT = RunSetup()
#: The document's config table (section "配置（精简版，便于数值追踪）"): the symbols of
#: model/steps.py, from their one definition.
DIMS = CONFIG.step_symbols(_DEFAULT.batch_per_rank, _DEFAULT.seq_len)
WORLD_SIZE = _DEFAULT.world_size  # DP world size (N)
NUM_LAYERS = CONFIG.num_hidden_layers
DTYPE, ELEMENT_SIZE = "float16", 2  # the document counts fp16: 4.72 MB per layer
MESH_DIM = "dp"
TORCH_VERSION = "2.13.0+cpu"

#: "参数列表（单层）" / "每个 rank 上的参数分片": element counts as the document prints them.
DOC_LAYER_NUMEL = 2_360_448  # the layer total, ≈ 2.36M (the rows' sum)
DOC_LOCAL_NUMEL = 590_112  # the per-GPU total, ≈ 590K (the rows' sum)
DOC_PARAM_ROWS = {  # name: (full shape, numel, shard shape, shard numel)
    "input_layernorm.weight": ([512], 512, [128], 128),
    "self_attn.q_proj.weight": ([512, 512], 262_144, [128, 512], 65_536),
    "self_attn.k_proj.weight": ([256, 512], 131_072, [64, 512], 32_768),
    "self_attn.v_proj.weight": ([256, 512], 131_072, [64, 512], 32_768),
    "self_attn.q_norm.weight": ([64], 64, [16], 16),
    "self_attn.k_norm.weight": ([64], 64, [16], 16),
    "self_attn.o_proj.weight": ([512, 512], 262_144, [128, 512], 65_536),
    "post_attention_layernorm.weight": ([512], 512, [128], 128),
    "mlp.gate_proj.weight": ([1024, 512], 524_288, [256, 512], 131_072),
    "mlp.up_proj.weight": ([1024, 512], 524_288, [256, 512], 131_072),
    "mlp.down_proj.weight": ([512, 1024], 524_288, [128, 1024], 131_072),
}

LAYER_UNITS = tuple(f"layers.{i}" for i in range(NUM_LAYERS))
ROOT_UNIT = ""


def layer_param_shapes(dims: dict[str, int] = DIMS) -> list[tuple[str, list[int]]]:
    """One decoder layer's parameters (relative names, document order) and full shapes."""
    d, h_q, h_kv, d_h, d_ffn = dims["d"], dims["h_q"], dims["h_kv"], dims["d_h"], dims["d_ffn"]
    return [
        ("input_layernorm.weight", [d]),
        ("self_attn.q_proj.weight", [h_q * d_h, d]),
        ("self_attn.k_proj.weight", [h_kv * d_h, d]),
        ("self_attn.v_proj.weight", [h_kv * d_h, d]),
        ("self_attn.q_norm.weight", [d_h]),
        ("self_attn.k_norm.weight", [d_h]),
        ("self_attn.o_proj.weight", [d, h_q * d_h]),
        ("post_attention_layernorm.weight", [d]),
        ("mlp.gate_proj.weight", [d_ffn, d]),
        ("mlp.up_proj.weight", [d_ffn, d]),
        ("mlp.down_proj.weight", [d, d_ffn]),
    ]


def shard_shape(full: list[int], n: int = WORLD_SIZE) -> list[int]:
    """Shard(0) over n ranks; the document's shapes divide evenly."""
    assert full[0] % n == 0, f"{full} does not split evenly over {n} ranks"
    return [full[0] // n, *full[1:]]


def layer_numel(dims: dict[str, int] = DIMS) -> int:
    return sum(math.prod(shape) for _, shape in layer_param_shapes(dims))


def layer_local_numel(dims: dict[str, int] = DIMS, n: int = WORLD_SIZE) -> int:
    return sum(math.prod(shard_shape(shape, n)) for _, shape in layer_param_shapes(dims))


LAYER_NUMEL = layer_numel()  # 2,360,448
LAYER_LOCAL_NUMEL = layer_local_numel()  # 590,112
LAYER_BYTES = LAYER_NUMEL * ELEMENT_SIZE  # 4,720,896: "4.72 MB"
LAYER_LOCAL_BYTES = LAYER_LOCAL_NUMEL * ELEMENT_SIZE  # 1,180,224: "1.18 MB"


# --- parts of one rank's document ----------------------------------------------------------


def fsdp_units() -> list[dict[str, Any]]:
    """Layers first, root last (the order of fully_shard in the document's setup code)."""
    units = [
        {"name": unit, "role": "layer", "layer": i, "params": [f"{unit}.{name}" for name, _ in layer_param_shapes()]}
        for i, unit in enumerate(LAYER_UNITS)
    ]
    units.append({"name": ROOT_UNIT, "role": "root", "layer": None, "params": []})
    return units


def param_records() -> list[dict[str, Any]]:
    """Every parameter after fully_shard: a DTensor sharded on dim 0 over 'dp'."""
    out = []
    for unit in LAYER_UNITS:
        for name, full in layer_param_shapes():
            local = shard_shape(full)
            out.append(
                {
                    "fqn": f"{unit}.{name}",
                    "unit": unit,
                    "full_shape": full,
                    "local_shape": local,
                    "numel": math.prod(full),
                    "local_numel": math.prod(local),
                    "dtype": DTYPE,
                    "element_size": ELEMENT_SIZE,
                    "is_dtensor": True,
                    "placements": ["Shard(dim=0)"],
                    "mesh_dim_names": [MESH_DIM],
                }
            )
    return out


def input_record(rank: int) -> dict[str, Any]:
    """Rank r holds samples r*B .. r*B+B-1 of the global batch, as hidden states [B, L, d]."""
    b = DIMS["B"]
    return {
        "name": "hidden_states",
        "shape": [b, DIMS["L"], DIMS["d"]],
        "dtype": DTYPE,
        "samples": list(range(rank * b, rank * b + b)),
    }


def step_records() -> list[dict[str, Any]]:
    """Steps 1-10 of every layer, in emission order, shapes from model.steps."""
    return [
        {"layer": layer, "name": step.name, "shape": resolve_shape(step, DIMS), "dtype": DTYPE}
        for layer in range(NUM_LAYERS)
        for step in STEPS
    ]


def param_state_records() -> list[dict[str, Any]]:
    """After Step 0: plain full tensors (4.72 MB); after Step 11: DTensor shards (1.18 MB)."""
    out = []
    for unit in LAYER_UNITS:
        for point, is_dtensor in (("pre_forward", False), ("post_forward", True)):
            params = [
                {
                    "fqn": f"{unit}.{name}",
                    "is_dtensor": is_dtensor,
                    "shape": shard_shape(full) if is_dtensor else full,
                    "dtype": DTYPE,
                }
                for name, full in layer_param_shapes()
            ]
            out.append(
                {
                    "unit": unit,
                    "point": point,
                    "params": params,
                    "bytes": sum(math.prod(p["shape"]) for p in params) * ELEMENT_SIZE,
                }
            )
    return out


_C10D = {"all_gather": "c10d._allgather_base_.default", "reduce_scatter": "c10d._reduce_scatter_base_.default"}
_LABEL = {"all_gather": "FSDP::all_gather", "reduce_scatter": "FSDP::post_backward_reduce"}
_OUTER = {
    ("forward", "all_gather"): "FSDP::pre_forward",
    ("backward", "all_gather"): "FSDP::pre_backward",
    ("backward", "reduce_scatter"): "FSDP::post_backward",
}


def collective(op: str, unit: str, phase: str, index: int) -> dict[str, Any]:
    """One FSDP collective of a whole layer unit: S = the layer's bytes, the shard is S/N."""
    full, shard = LAYER_NUMEL, LAYER_LOCAL_NUMEL
    numel_in, numel_out = (shard, full) if op == "all_gather" else (full, shard)
    return {
        "index": index,
        "op": op,
        "c10d_op": _C10D[op],
        "dtype": DTYPE,
        "element_size": ELEMENT_SIZE,
        "numel_in": numel_in,
        "numel_out": numel_out,
        "buffer_bytes": full * ELEMENT_SIZE,
        "group_size": WORLD_SIZE,
        "mesh_dim": MESH_DIM,
        "phase": phase,
        "unit": unit,
        "fsdp_label": _LABEL[op],
        "fsdp_labels": [f"{_OUTER[(phase, op)]} ({unit})", f"{_LABEL[op]} ({unit})"],
    }


def collective_plan() -> list[tuple[str, str, str]]:
    """(op, unit, phase) in issue order: forward gathers in layer order; backward gathers in
    reverse order (the next one prefetched before the first reduce-scatter), then reduce-scatters."""
    forward = [("all_gather", unit, "forward") for unit in LAYER_UNITS]
    backward = [("all_gather", unit, "backward") for unit in reversed(LAYER_UNITS)]
    backward += [("reduce_scatter", unit, "backward") for unit in reversed(LAYER_UNITS)]
    return forward + backward


def collective_records() -> list[dict[str, Any]]:
    return [collective(op, unit, phase, i) for i, (op, unit, phase) in enumerate(collective_plan())]


def memory_records() -> list[dict[str, Any]]:
    """FSDPMemTracker snapshots around each layer unit. A snapshot counts the whole rank at that
    moment (as the real tracker does): every layer's shards, the one unsharded layer, and by the
    end of backward every layer's gradient shards."""
    all_shards = len(LAYER_UNITS) * LAYER_LOCAL_BYTES
    out = []
    for unit in LAYER_UNITS:
        out += [
            {
                "module": unit,
                "state": "After Pre-Forward",
                "bytes": {"sharded_param": all_shards, "unsharded_param": LAYER_BYTES, "sharded_grad": 0},
            },
            {
                "module": unit,
                "state": "After Post-Forward",
                "bytes": {"sharded_param": all_shards, "unsharded_param": 0, "sharded_grad": 0},
            },
            {
                "module": unit,
                "state": "After Post-Backward",
                "bytes": {"sharded_param": all_shards, "unsharded_param": 0, "sharded_grad": all_shards},
            },
        ]
    # the root ('') after AdamW's step: exp_avg and exp_avg_sq shaped like every shard, plus a
    # 4-byte step counter per parameter (22)
    out.append(
        {
            "module": "",
            "state": "After Optimizer Step",
            "bytes": {
                "sharded_param": all_shards,
                "unsharded_param": 0,
                "sharded_grad": all_shards,
                "optstate": 2 * all_shards + 4 * 22,
            },
        }
    )
    return out


def numerics_record(rank: int) -> dict[str, Any]:
    """Small fp16-sized differences against the replica: one entry per parameter (22)."""
    grads = [
        {"fqn": p["fqn"], "max_abs_diff": 1e-5 * (1 + i % 3), "max_abs_ref": 1e-2 + 1e-3 * rank}
        for i, p in enumerate(param_records())
    ]
    return {
        "replica_dtype": DTYPE,
        "forward_output": {"max_abs_diff": 2e-3, "max_abs_ref": 4.0},
        "loss": {"max_abs_diff": 1e-4, "max_abs_ref": 1.0},
        "grads": grads,
    }


def rank_record(rank: int) -> dict[str, Any]:
    return {
        "rank": rank,
        "coords": [rank],
        "input": input_record(rank),
        "params": param_records(),
        "param_states": param_state_records(),
        "steps": step_records(),
        "collectives": collective_records(),
        "memory": memory_records(),
        "numerics": numerics_record(rank),
        "timings_s": {"setup": 0.5, "forward": 0.01, "backward": 0.02, "optimizer": 0.001, "total": 0.6},
    }


def run_setup() -> RunSetup:
    """The spec's setup (specs/qwen3_walkthrough.yaml)."""
    return RunSetup(
        model=ModelSetup("walkthrough", {"num_hidden_layers": NUM_LAYERS}, "decoder_layers", DTYPE),
        mesh_shape=(WORLD_SIZE,),
        mesh_dim_names=(MESH_DIM,),
        batch_per_rank=DIMS["B"],
        seq_len=DIMS["L"],
    )


def walkthrough_observation(*, torch_version: str = TORCH_VERSION) -> dict[str, Any]:
    """A fresh observation document of the walkthrough's step on 4 real (gloo) ranks."""
    return {
        "format": "fsdp2-observation/1",
        "environment": {
            "torch_version": torch_version,
            "python_version": "3.11.0",
            "backend": "gloo",
            "device_type": "cpu",
            "device_name": "cpu",
            "world_size": WORLD_SIZE,
            "mesh_shape": [WORLD_SIZE],
            "mesh_dim_names": [MESH_DIM],
            "simulated": False,
            "launcher": "local",
            "observed_ranks": list(range(WORLD_SIZE)),
        },
        "setup": run_setup().to_dict(),
        "fsdp_units": fsdp_units(),
        "ranks": [rank_record(r) for r in range(WORLD_SIZE)],
    }


# --- editing a copy -----------------------------------------------------------------------


def rank_doc(observation: dict[str, Any], rank: int) -> dict[str, Any]:
    return next(d for d in observation["ranks"] if d["rank"] == rank)


def find(records: Iterable[dict[str, Any]], **match: Any) -> dict[str, Any]:
    """The one record whose fields equal ``match`` (e.g. ``fqn=...`` in a rank's params)."""
    found = [r for r in records if all(r.get(k) == v for k, v in match.items())]
    assert len(found) == 1, f"{len(found)} records match {match}"
    return found[0]


def with_rank(observation: dict[str, Any], rank: int, edit: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """A deep copy of ``observation`` where ``edit`` changed rank ``rank``'s document."""
    obs = copy.deepcopy(observation)
    edit(rank_doc(obs, rank))
    return obs


# --- bandwidth timings (the bandwidth kind, the cluster report) ----------------------------


def timed(name, op, numel, time_s, *, n=4, element_size=2, wrong=0, source="sweep", requested=None):
    return {
        "name": name,
        "source": source,
        "op": op,
        "dtype": "bfloat16",
        "element_size": element_size,
        "size_bytes": numel * element_size,
        "count": numel,
        "requested_bytes": (requested or numel) * element_size,
        "group_size": n,
        "mesh_dim": None,
        "occurrences": None,
        "warmup": 1,
        "iterations": 3,
        "time_s": time_s,
        "wrong": wrong,
        "timer": "wall_barrier",
    }


def timed_observation(times=(0.010, 0.012, 0.011, 0.013), wrong_rank=None) -> dict:
    """4 ranks, hosts node-a (0, 1) and node-b (2, 3), each timing an all-gather and a reduce-scatter
    of 2,360,448 bf16 elements (4,720,896 B) and an all-reduce of 1,000,000."""
    obs = walkthrough_observation()
    for r in obs["ranks"]:
        rank = r["rank"]
        r["environment"] = {
            "host": "node-a" if rank < 2 else "node-b",
            "node_rank": rank // 2,
            "local_rank": rank % 2,
            "local_world_size": 2,
            "torch_version": "2.13.0",
            "backend": "gloo",
            "device_type": "cpu",
            "device_name": "cpu",
            "variables": {},
        }
        r["bandwidth"] = [
            timed("layer", "all_gather", 2_360_448, times[rank], wrong=5 if rank == wrong_rank else 0),
            timed("layer", "reduce_scatter", 2_360_448, 2 * times[rank]),
            timed("small", "all_reduce", 1_000_000, 0.001),
        ]
    return obs


VALUE_FIELDS = frozenset(
    f.path.rsplit(".", 1)[-1]
    for f in fields.fields()
    if f.path.split(".", 1)[0] in ("params", "buffers") and f.unobserved.get("fake")
)
"""``params``/``buffers`` fields a simulation (fake backend) cannot observe (declared in
harness/contract/fields.py: read from a tensor's values or storage), left out of a
real-vs-simulated comparison."""


def without_value_fields(rows: list) -> list:
    """``params`` or ``buffers`` rows less :data:`VALUE_FIELDS`."""
    return [{k: v for k, v in row.items() if k not in VALUE_FIELDS} for row in rows]
