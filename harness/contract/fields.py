"""Every field an observation document holds, declared once: its JSON type, unit, the recorder
that produces it, the worlds that cannot observe it (and why), whether it may vary run to run (and
why). The check kinds name the fields they read (``reads`` in harness/language/kinds/).

The observation schema is generated from these declarations
(``python -m harness.contract.observation_schema``); ``compare``, ``run --repeat``, the judge's
handling of simulated runs, the load-time refusal of timing-dependent fields and the
simulated-vs-real agreement test read them through the API below and keep no list of their own.

A field's path is its keys joined by dots, list positions left out: ``memory.bytes.temp``,
``params.grad_device``, ``state_dict_options.set_model.entries.gathered_dtype``. A rank's parts
(``ranks[i].memory``) are named without ``ranks``; a rank's own environment is
``rank_environment``, the run's is ``environment``. A leaf holding a whole sub-document
(``setup``, ``custom.values``, ``numerics.grads``) answers for every path below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from harness.contract.field_tree import WORLDS, Facts, Keyed, Leaf, Record, Records, walk
from harness.contract.names import (
    COLLECTIVE_OPS,
    MEMORY_CATEGORIES,
    MEMORY_ROOT_STATES,
    PARAM_STATE_POINTS,
    PHASES,
)

__all__ = [
    "WORLDS",
    "ObservedField",
    "RecordCondition",
    "DOCUMENT",
    "DEFS",
    "RECORD_CONDITIONS",
    "fields",
    "lookup",
    "observed_in",
    "unobserved_reason",
    "stable",
    "varies",
    "varying_in",
    "rank_part_path",
]


_RUNNER = "harness/contract/observation.py (build_observation)"
_WALL_TIME = "wall-clock seconds: they differ in every run"
_NO_VALUES_WHY = "holds no values (fake tensors)"
_NO_VALUES = {"fake": _NO_VALUES_WHY}
_ROUTER = {"fake": f"{_NO_VALUES_WHY}: the router's choices are not observed"}
_NO_CHECKPOINT = {"fake": "saves no checkpoint"}
_CATEGORIES = {name: f"bytes of FSDPMemTracker's '{ref}' storages" for ref, name in MEMORY_CATEGORIES.items()}
_TEMP_TIMING = {
    "unobserved": {"fake": "completes each collective at once, where a real rank may still hold its temporary buffer"},
    "varies": (
        "depends on thread timing: gloo copies a reduce-scatter's result out in a callback run by the calling "
        "thread (the tracker counts the copy as temp while it lives) or by gloo's worker (it never sees it), and "
        "the copy is freed whenever the last thread drops the work (one walkthrough run counted 4,720,896 temp "
        "bytes on rank 2 after layer 0's post-backward where others counted 0); total includes it"
    ),
    "varies_in": ("gloo", "nccl"),
}
_TIMING_CATEGORIES = {"temp": _TEMP_TIMING, "total": _TEMP_TIMING}

DEFS: dict[str, Any] = {
    "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
    "dtype": {
        "type": "string",
        "pattern": "^(float16|bfloat16|float32|float64|int64|int32|uint8|int8|bool|float8_e4m3fn|float8_e5m2)$",
    },
    "diff": {
        "type": "object",
        "required": ["max_abs_diff", "max_abs_ref"],
        "properties": {
            "fqn": {"type": "string"},
            "max_abs_diff": {"type": "number", "minimum": 0},
            "max_abs_ref": {"type": "number", "minimum": 0},
            "nonfinite": {
                "type": "integer",
                "minimum": 0,
                "description": ("elements of the sharded side (output, loss, gradient shard) that are NaN or infinite"),
            },
        },
    },
    "step_index": {
        "type": ["integer", "null"],
        "minimum": 0,
        "description": (
            "the schedule's step (0-based, repeats counted); null outside the steps (setup, the whole-run peak)"
        ),
    },
    "microbatch": {
        "type": ["integer", "null"],
        "minimum": 0,
        "description": (
            "the microbatch within the step; null outside one (setup, zero_grad, clip_grad_norm, optimizer)"
        ),
    },
}
"""Small types the declarations refer to (``{"$ref": "#/$defs/dtype"}``), copied into the schema."""

DOC_FORMAT = Leaf({"const": "fsdp2-observation/1"})

DOC_ENVIRONMENT = Record(
    {
        "torch_version": Leaf({"type": "string", "description": "torch.__version__"}),
        "torch_cuda_version": Leaf(
            {
                "type": ["string", "null"],
                "description": "torch.version.cuda of rank 0's torch: null on a CPU-only build",
            },
        ),
        "python_version": Leaf({"type": "string"}),
        "backend": Leaf({"enum": ["gloo", "nccl", "fake"]}),
        "device_type": Leaf({"enum": ["cpu", "cuda"]}),
        "device_name": Leaf({"type": "string", "description": "e.g. torch.cuda.get_device_name(), or 'cpu'"}),
        "world_size": Leaf({"type": "integer", "minimum": 1}, aspect="behaviour"),
        "mesh_shape": Leaf(
            {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1}, aspect="behaviour"
        ),
        "mesh_dim_names": Leaf({"type": "array", "items": {"type": "string"}, "minItems": 1}, aspect="behaviour"),
        "simulated": Leaf(
            {"type": "boolean", "description": "true for the fake backend: no data moved, no numerics"},
        ),
        "launcher": Leaf(
            {
                "enum": ["local", "joined", "simulated"],
                "description": (
                    "local: ranks spawned by the harness; joined: a world set up by torchrun or another launcher; "
                    "simulated: fake process group in one process"
                ),
            },
        ),
        "observed_ranks": Leaf(
            {
                "type": "array",
                "items": {"type": "integer", "minimum": 0},
                "description": "global ranks present in 'ranks' (all ranks when real; the chosen ones when simulated)",
            },
            aspect="behaviour",
        ),
    },
    required=(
        "torch_version",
        "python_version",
        "backend",
        "device_type",
        "world_size",
        "mesh_shape",
        "mesh_dim_names",
        "simulated",
        "observed_ranks",
    ),
    aspect="environment",
    by=_RUNNER,
)

DOC_SETUP = Leaf(
    {"type": "object", "description": "the resolved setup the run used (spec setup with defaults filled in)"},
    by=_RUNNER,
    masked=True,  # setup.hooks.file is an absolute path: another checkout is no other behaviour
)

DOC_FSDP_UNITS = Records(
    Record(
        {
            "name": Leaf({"type": "string", "description": "module FQN of the unit; '' for the root"}),
            "role": Leaf(
                {
                    "enum": ["layer", "root", "module"],
                    "description": (
                        "a decoder layer's unit, the root (the last fully_shard call), or another unit (a module or "
                        "a group of modules, setup.fsdp.units)"
                    ),
                }
            ),
            "layer": Leaf({"type": ["integer", "null"], "description": "decoder layer index for role=layer"}),
            "params": Leaf(
                {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "FQNs of the parameters this unit manages, in registration order",
                }
            ),
            "state": Record(
                {
                    "managed": Leaf({"type": "boolean"}),
                    "modules": Leaf({"type": "integer", "minimum": 1}),
                    "reshard_after_forward": Leaf({"type": ["boolean", "integer"]}),
                    "reshard_after_backward": Leaf({"type": "boolean"}),
                    "gradient_divide_factor": Leaf({"type": ["number", "null"]}),
                    "force_sum_reduction_for_comms": Leaf({"type": "boolean"}),
                    "separate_reduce_scatter_group": Leaf({"type": "boolean"}),
                    "reduce_scatter_max_input_buffers": Leaf({"type": "integer", "minimum": 1}),
                    "offload": Leaf({"type": "boolean"}),
                    "param_dtype": Leaf({"type": ["string", "null"]}),
                    "reduce_dtype": Leaf({"type": ["string", "null"]}),
                    "output_dtype": Leaf({"type": ["string", "null"]}),
                    "comm_ctx_unit": Leaf({"type": ["string", "null"]}),
                    "comm_ctx_unit_at_setup": Leaf({"type": ["string", "null"]}),
                },
                closed=False,
                schema={
                    "description": (
                        "what torch's FSDP state holds for the unit after the step (FSDPParamGroup): "
                        "reshard_after_forward (false, true, or the post-forward group size), "
                        "reshard_after_backward, gradient_divide_factor (null: FSDP's default division), "
                        "force_sum_reduction_for_comms, separate_reduce_scatter_group (the reduce-scatter has a "
                        "process group of its own), reduce_scatter_max_input_buffers, offload (a CPUOffloadPolicy), "
                        "the MixedPrecisionPolicy's "
                        "dtypes (null: keep), modules (how many the unit has); managed false for a unit with no "
                        "parameters; comm_ctx_unit: the unit whose state made the FSDPCommContext (CUDA streams, "
                        "comm state) the unit holds after the step, comm_ctx_unit_at_setup the same right after the "
                        "fully_shard calls and setup.fsdp.share_comm_ctx, before the root's lazy init ('' the root)"
                    )
                },
            ),
        },
        required=("name", "role", "params"),
    ),
    schema={
        "description": (
            "FSDP units in the order fully_shard was applied (layers first, root last, as the document's setup code)."
        )
    },
    by="harness/run/rank/step.py (FSDPParamGroup)",
)


RANK_RANK = Leaf({"type": "integer", "minimum": 0})

RANK_COORDS = Leaf(
    {"type": "array", "items": {"type": "integer"}, "description": "this rank's coordinate on each mesh dim"}
)

RANK_INPUT = Record(
    {
        "name": Leaf({"enum": ["hidden_states", "input_ids"]}),
        "shape": Leaf({"$ref": "#/$defs/shape"}),
        "dtype": Leaf({"$ref": "#/$defs/dtype"}),
        "samples": Leaf(
            {
                "type": "array",
                "items": {"type": "integer"},
                "description": (
                    "indices into the seeded global batch of the rows this rank holds, found by comparing its input "
                    "rows with the global batch's (document: rank r holds samples r*B .. r*B+B-1); simulated runs "
                    "have no values to compare and record the assignment"
                ),
            }
        ),
    },
    required=("name", "shape", "dtype", "samples"),
    by="harness/run/rank/observe.py",
)

RANK_OUTPUT = Record(
    {
        "shape": Leaf({"$ref": "#/$defs/shape"}),
        "dtype": Leaf({"$ref": "#/$defs/dtype"}),
        "loss_dtype": Leaf({"$ref": "#/$defs/dtype"}),
    },
    schema={"description": "the model's output and the loss of the (last) step"},
    by="harness/run/rank/observe.py",
)

RANK_PARAMS = Records(
    Record(
        {
            "fqn": Leaf({"type": "string", "description": "transformers name, e.g. layers.0.self_attn.q_proj.weight"}),
            "unit": Leaf(
                {
                    "type": ["string", "null"],
                    "description": "the FSDP unit that manages it; null: none does (fully_shard's ignored_params)",
                }
            ),
            "full_shape": Leaf({"$ref": "#/$defs/shape"}),
            "local_shape": Leaf({"$ref": "#/$defs/shape"}),
            "numel": Leaf({"type": "integer", "minimum": 0}, unit="elements"),
            "local_numel": Leaf({"type": "integer", "minimum": 0}, unit="elements"),
            "dtype": Leaf({"$ref": "#/$defs/dtype"}),
            "element_size": Leaf({"type": "integer", "minimum": 1, "description": "bytes per element"}, unit="bytes"),
            "is_dtensor": Leaf({"type": "boolean"}),
            "placements": Leaf(
                {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "str() of each placement: 'Shard(dim=0)', 'Replicate()'",
                }
            ),
            "mesh_dim_names": Leaf({"type": "array", "items": {"type": "string"}}),
            "requires_grad": Leaf({"type": "boolean", "description": "false for a frozen parameter (setup.freeze)"}),
            "device": Leaf({"type": "string", "description": "device type of the sharded parameter: cpu, cuda, meta"}),
            "grad_device": Leaf(
                {
                    "type": ["string", "null"],
                    "description": "after the step: device type of its (sharded) gradient; null: none",
                }
            ),
            "optstate_device": Leaf(
                {
                    "type": ["string", "null"],
                    "description": (
                        "after the step: device type of its optimizer state tensors (AdamW's exp_avg, exp_avg_sq); "
                        "null: none"
                    ),
                }
            ),
            "pinned": Leaf(
                {
                    "type": ["boolean", "null"],
                    "description": (
                        "before the first step: the shard's local storage is page-locked host memory "
                        "(Tensor.is_pinned(), what CPUOffloadPolicy(pin_memory=True) asks for); false on a device; "
                        "null on meta or under FakeTensorMode"
                    ),
                },
                unobserved=_NO_VALUES,
            ),
            "grad_pinned": Leaf(
                {
                    "type": ["boolean", "null"],
                    "description": (
                        "after the step: its sharded gradient's local storage is page-locked host memory "
                        "(Tensor.is_pinned()); null: no gradient"
                    ),
                },
                unobserved=_NO_VALUES,
            ),
            "finite": Leaf(
                {
                    "type": ["boolean", "null"],
                    "description": (
                        "before the first step: every element of the shard is finite (no NaN or inf); null on meta "
                        "or under FakeTensorMode"
                    ),
                },
                unobserved=_NO_VALUES,
            ),
        },
        required=(
            "fqn",
            "unit",
            "full_shape",
            "local_shape",
            "numel",
            "local_numel",
            "dtype",
            "element_size",
            "is_dtensor",
            "placements",
            "mesh_dim_names",
        ),
    ),
    schema={"description": "every parameter after fully_shard, before the step (model.named_parameters() order)"},
    by="harness/run/rank/recorders/params.py",
)

RANK_BUFFERS = Records(
    Record(
        {
            "fqn": Leaf({"type": "string"}),
            "shape": Leaf({"$ref": "#/$defs/shape"}),
            "dtype": Leaf({"$ref": "#/$defs/dtype"}),
            "device": Leaf({"type": "string"}),
            "finite": Leaf(
                {
                    "type": ["boolean", "null"],
                    "description": "every element is finite; null on meta or under FakeTensorMode",
                },
                unobserved=_NO_VALUES,
            ),
        },
        required=("fqn", "shape", "dtype", "device", "finite"),
    ),
    schema={"description": "every buffer of the root (named_buffers(): RoPE's inv_freq), before the first step"},
    by="harness/run/rank/recorders/params.py",
)

RANK_PARAM_STATES = Records(
    Record(
        {
            "unit": Leaf({"type": "string"}),
            # after_fully_shard is a fully_shard_calls record, not a param_states one
            "point": Leaf({"enum": [p for p in PARAM_STATE_POINTS if p != "after_fully_shard"]}),
            "bytes": Leaf(
                {
                    "type": "integer",
                    "minimum": 0,
                    "description": (
                        "sum over params of local storage bytes (numel x element_size of what the module holds)"
                    ),
                },
                unit="bytes",
            ),
            "input_dtypes": Leaf(
                {
                    "type": "array",
                    "items": {"$ref": "#/$defs/dtype"},
                    "description": (
                        "pre_forward: dtypes of the module's floating-point tensor inputs after FSDP's pre-forward "
                        "hook (cast_forward_inputs applied)"
                    ),
                }
            ),
            "output_dtypes": Leaf(
                {
                    "type": "array",
                    "items": {"$ref": "#/$defs/dtype"},
                    "description": (
                        "post_forward: dtypes of the module's floating-point tensor outputs after FSDP's "
                        "post-forward hook (output_dtype applied)"
                    ),
                }
            ),
            "params": Records(
                Record(
                    {
                        "fqn": Leaf({"type": "string"}),
                        "is_dtensor": Leaf({"type": "boolean"}),
                        "shape": Leaf(
                            {
                                "$ref": "#/$defs/shape",
                                "description": "local shape for a DTensor, shape for a plain tensor",
                            }
                        ),
                        "dtype": Leaf({"$ref": "#/$defs/dtype"}),
                        "placements": Leaf(
                            {
                                "type": "array",
                                "items": {"type": "string"},
                                "description": "a DTensor's placements (repr), [] for a plain tensor",
                            }
                        ),
                        "device": Leaf({"type": "string", "description": "device type of the (local) tensor"}),
                        "grad": Leaf(
                            {
                                "type": "boolean",
                                "description": (
                                    "a gradient is attached to the tensor the module holds (.grad is not None)"
                                ),
                            }
                        ),
                    },
                    required=("fqn", "is_dtensor", "shape", "dtype"),
                ),
            ),
            "step_index": Leaf({"$ref": "#/$defs/step_index"}),
            "microbatch": Leaf({"$ref": "#/$defs/microbatch"}),
        },
        required=("unit", "point", "params", "bytes"),
    ),
    schema={
        "description": (
            "The parameters of one unit as its module holds them at a point "
            "(harness/run/rank/recorders/param_states.py): 'pre_forward' right after FSDP's pre-forward hook (document "
            "Step 0 done), 'post_forward' right after its post-forward hook (Step 11 done), 'pre_backward' right "
            "after its pre-backward hook, 'post_backward' right after the RegisterPostBackwardFunction node that "
            "runs its post-backward (units whose inputs need a gradient), 'after_backward', 'after_optimizer_step', "
            "'after_zero_grad', 'after_reset_iter_state' (an aborted step's recovery) when the loop's call "
            "returned. Taken with module and autograd hooks registered after fully_shard; forward points not "
            "while backward recomputes."
        )
    },
    by="harness/run/rank/recorders/param_states.py",
)

RANK_FULLY_SHARD_CALLS = Record(
    {
        "before": Records(
            Record(
                {
                    "fqn": Leaf({"type": "string"}),
                    "is_dtensor": Leaf(
                        {
                            "type": "boolean",
                            "description": "the parameter is a DTensor (fully_shard registered its shard)",
                        }
                    ),
                    "shape": Leaf({"$ref": "#/$defs/shape", "description": "a DTensor's local shape, else its shape"}),
                    "full_shape": Leaf({"$ref": "#/$defs/shape"}),
                    "placements": Leaf(
                        {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "a DTensor's placements (repr), [] for a plain tensor",
                        }
                    ),
                    "device": Leaf(
                        {
                            "type": "string",
                            "description": "device type (meta before a meta-built model is materialized)",
                        }
                    ),
                    "dtype": Leaf({"$ref": "#/$defs/dtype"}),
                },
                required=("fqn", "is_dtensor", "shape", "full_shape", "placements", "device", "dtype"),
            ),
        ),
        "calls": Records(
            Record(
                {
                    "unit": Leaf({"type": "string", "description": "the unit the call made ('' for the root)"}),
                    "changed": Records(
                        Record(
                            {
                                "fqn": Leaf({"type": "string"}),
                                "is_dtensor": Leaf(
                                    {
                                        "type": "boolean",
                                        "description": "the parameter is a DTensor (fully_shard registered its shard)",
                                    }
                                ),
                                "shape": Leaf(
                                    {"$ref": "#/$defs/shape", "description": "a DTensor's local shape, else its shape"}
                                ),
                                "full_shape": Leaf({"$ref": "#/$defs/shape"}),
                                "placements": Leaf(
                                    {
                                        "type": "array",
                                        "items": {"type": "string"},
                                        "description": "a DTensor's placements (repr), [] for a plain tensor",
                                    }
                                ),
                                "device": Leaf(
                                    {
                                        "type": "string",
                                        "description": "device type (meta before a meta-built model is materialized)",
                                    }
                                ),
                                "dtype": Leaf({"$ref": "#/$defs/dtype"}),
                            },
                            required=("fqn", "is_dtensor", "shape", "full_shape", "placements", "device", "dtype"),
                        ),
                    ),
                },
                required=("unit", "changed"),
            ),
        ),
    },
    required=("before", "calls"),
    schema={
        "description": (
            "every parameter of the root before the first fully_shard call, then after each call (in the harness's "
            "order, children first, the root last) the parameters whose state that call changed; what a parameter "
            "is after call k is its last state at or before k (harness/run/rank/recorders/param_states.py "
            "FullyShardCalls)"
        )
    },
    by="harness/run/rank/recorders/param_states.py",
)

RANK_STEPS = Records(
    Record(
        {
            "layer": Leaf({"type": "integer", "minimum": 0}),
            "step_index": Leaf({"$ref": "#/$defs/step_index"}),
            "microbatch": Leaf({"$ref": "#/$defs/microbatch"}),
            "name": Leaf({"type": "string"}),
            "shape": Leaf({"$ref": "#/$defs/shape"}),
            "dtype": Leaf({"$ref": "#/$defs/dtype"}),
        },
        required=("layer", "name", "shape", "dtype"),
    ),
    schema={"description": "forward step tensors named by model.steps (document Steps 1-10), in emission order"},
    by="model/steps.py",
)

RANK_FORWARD_INPUTS = Records(
    Record(
        {
            "step_index": Leaf({"$ref": "#/$defs/step_index"}),
            "microbatch": Leaf({"$ref": "#/$defs/microbatch"}),
            "forward": Leaf({"type": "integer", "minimum": 0, "description": "the forward's index in its microbatch"}),
            "argument": Leaf({"enum": ["positional", "keyword"], "description": "how the input tensor was passed"}),
            "container": Leaf(
                {
                    "type": "string",
                    "description": "what held the tensor: Tensor, ForwardBatch (a dataclass), dict, UserDict",
                }
            ),
            "dtype": Leaf({"$ref": "#/$defs/dtype"}),
            "shape": Leaf({"$ref": "#/$defs/shape"}),
        },
        required=("step_index", "microbatch", "forward", "argument", "container", "dtype", "shape"),
    ),
    schema={
        "description": (
            "what the root's forward received per forward, once FSDP's pre-forward hook has run (its "
            "cast_forward_inputs included), as schedule forward_input passed it"
        )
    },
    by="harness/run/rank/forward_input.py",
)


def _tensor_list(what: str) -> Leaf:
    return Leaf({"type": "array", "description": what})


RANK_ALL_GATHER_EXTENSIONS = Records(
    Record(
        {
            "fqn": Leaf({"type": "string", "description": "the parameter's FQN"}),
            "call": Leaf({"enum": ["pre", "post"], "description": "fsdp_pre_all_gather or fsdp_post_all_gather"}),
            "step_index": Leaf({"type": ["integer", "null"], "minimum": 0}),
            "microbatch": Leaf({"type": ["integer", "null"], "minimum": 0}),
            "phase": Leaf({"type": "string", "description": "the harness phase it ran in (forward, backward, ...)"}),
            "received_dtypes": _tensor_list("pre: the local shard's dtype; post: the all-gather outputs' dtypes"),
            "received_shapes": _tensor_list("pre: the local shard's shape; post: the all-gather outputs' shapes"),
            "returned_dtypes": _tensor_list(
                "pre: the all-gather inputs' dtypes; post: the unsharded tensor's ([] when written into out)"
            ),
            "returned_shapes": _tensor_list("pre: the all-gather inputs' shapes; post: the unsharded tensor's"),
            "metadata": Leaf({"type": ["string", "null"], "description": "pre: repr of the metadata returned"}),
            "param_dtype": Leaf(
                {
                    "type": ["string", "null"],
                    "description": "post: the dtype FSDP passed (param_dtype, else the parameter's own)",
                }
            ),
            "into_out": Leaf({"type": ["boolean", "null"], "description": "post: FSDP passed out= (buffer reuse)"}),
        },
        required=("fqn", "call", "step_index", "microbatch", "phase", "received_dtypes", "received_shapes"),
    ),
    schema={
        "description": (
            "each call of a parameter's all-gather extension (its local tensor's fsdp_pre_all_gather / "
            "fsdp_post_all_gather): what it received and returned, dtypes and shapes; absent where no parameter has one"
        )
    },
    by="harness/run/rank/recorders/all_gather_extensions.py",
)

RANK_COLLECTIVES = Records(
    Record(
        {
            "index": Leaf({"type": "integer", "minimum": 0}),
            "op": Leaf({"enum": list(COLLECTIVE_OPS)}),
            "c10d_op": Leaf({"type": "string", "description": "the dispatched op, e.g. c10d._allgather_base_.default"}),
            "dtype": Leaf({"$ref": "#/$defs/dtype"}),
            "element_size": Leaf({"type": "integer", "minimum": 0}, unit="bytes"),
            "numel_in": Leaf(
                {
                    "type": "integer",
                    "minimum": 0,
                    "description": (
                        "elements this rank contributes (all-gather input, reduce-scatter input, all-reduce buffer)"
                    ),
                },
                unit="elements",
            ),
            "numel_out": Leaf(
                {
                    "type": "integer",
                    "minimum": 0,
                    "description": (
                        "elements this rank receives into (all-gather output, reduce-scatter output, all-reduce buffer)"
                    ),
                },
                unit="elements",
            ),
            "buffer_bytes": Leaf(
                {
                    "type": "integer",
                    "minimum": 0,
                    "description": (
                        "S in nccl-tests' terms: the full buffer, all-gather output / reduce-scatter input / "
                        "all-reduce buffer, elements x element_size"
                    ),
                },
                unit="bytes",
            ),
            "group_size": Leaf({"type": "integer", "minimum": 1}, unit="ranks"),
            "mesh_dim": Leaf(
                {
                    "type": ["string", "null"],
                    "description": (
                        "mesh dim name whose group carried it; null if not a mesh group. Where one group serves "
                        "several dims (a [1, 1] mesh), the dim FSDP issues that op on: all-reduce on the replicate "
                        "dim (0), others on the shard dim (last)"
                    ),
                }
            ),
            "reduce_op": Leaf(
                {
                    "type": ["string", "null"],
                    "description": (
                        "the ReduceOp the c10d op was called with: SUM, AVG, PREMUL_SUM, ... (null for ops without "
                        "one); a PREMUL_SUM's factor is not exposed by the dispatched op"
                    ),
                }
            ),
            "phase": Leaf({"enum": [*PHASES, "other"]}),
            "unit": Leaf(
                {
                    "type": ["string", "null"],
                    "description": "FSDP unit named by the innermost FSDP:: profiler label, null if none",
                }
            ),
            "fsdp_label": Leaf(
                {
                    "type": ["string", "null"],
                    "description": (
                        "innermost FSDP:: label without the unit suffix, e.g. 'FSDP::all_gather', "
                        "'FSDP::post_backward_reduce'"
                    ),
                }
            ),
            "fsdp_labels": Leaf(
                {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "all enclosing FSDP:: labels, outermost first, verbatim",
                }
            ),
            "hook": Leaf(
                {
                    "type": ["string", "null"],
                    "description": (
                        "the FSDP hook that issued it: the innermost enclosing FSDP:: label other than "
                        "all_gather/all_gather_copy_out, without 'FSDP::' and the unit: pre_forward, pre_backward, "
                        "backward_prefetch, forward_prefetch, post_backward_reduce, ...; null if none"
                    ),
                }
            ),
            "step_index": Leaf({"$ref": "#/$defs/step_index"}),
            "microbatch": Leaf({"$ref": "#/$defs/microbatch"}),
        },
        required=(
            "index",
            "op",
            "c10d_op",
            "dtype",
            "element_size",
            "numel_in",
            "numel_out",
            "buffer_bytes",
            "group_size",
            "mesh_dim",
            "phase",
            "unit",
            "fsdp_label",
        ),
    ),
    schema={
        "description": (
            "c10d collectives in issue order on this rank, from a TorchDispatchMode over the c10d ops, attributed "
            "with torch.profiler's FSDP:: labels"
        )
    },
    by="harness/run/rank/recorders/collectives.py",
)

RANK_MEMORY = Records(
    Record(
        {
            "module": Leaf({"type": "string", "description": "module FQN ('' for root)"}),
            "state": Leaf(
                {
                    "type": "string",
                    "description": (
                        "FSDPMemTracker state, e.g. 'After Pre-Forward', 'Before Post-Backward', 'Peak Forward'"
                    ),
                }
            ),
            "step_index": Leaf({"$ref": "#/$defs/step_index"}),
            "microbatch": Leaf({"$ref": "#/$defs/microbatch"}),
            "bytes": Keyed(
                _CATEGORIES,
                Leaf({"type": "integer", "minimum": 0}, unit="bytes"),
                by_key=_TIMING_CATEGORIES,
                schema={
                    "description": (
                        "category -> bytes as FSDPMemTracker counts them (on CUDA every storage rounded up to the "
                        "caching allocator's 512-B block); categories: sharded_param, unsharded_param, buffer, "
                        "sharded_grad, unsharded_grad, activation, temp, all_gather, reduce_scatter, optstate, "
                        "inputs, total"
                    )
                },
            ),
            "unrounded_bytes": Keyed(
                _CATEGORIES,
                Leaf({"type": "integer", "minimum": 0}, unit="bytes"),
                by_key=_TIMING_CATEGORIES,
                schema={
                    "description": (
                        "the same categories summed from the tracked storages' real sizes (storage numel x element "
                        "size), without CUDA's 512-B rounding: equal to bytes on the CPU; what the memory check "
                        "reads (harness/run/rank/recorders/memory.py, StorageBytesTracker)"
                    )
                },
            ),
        },
        required=("module", "state", "bytes"),
    ),
    schema={"description": "FSDPMemTracker snapshots per module and state, bytes by category"},
    by="harness/run/rank/recorders/memory.py (FSDPMemTracker)",
)

RANK_NUMERICS = Record(
    {
        "replica_dtype": Leaf({"$ref": "#/$defs/dtype"}),
        "reduce_dtype": Leaf(
            {
                "$ref": "#/$defs/dtype",
                "description": (
                    "with a schedule: the dtype the reference summed gradients over ranks in (the policy's "
                    "reduce_dtype, else the compute dtype)"
                ),
            }
        ),
        "forward_output": Leaf({"$ref": "#/$defs/diff"}),
        "loss": Leaf({"$ref": "#/$defs/diff"}),
        "grads": Leaf(
            {
                "type": "array",
                "description": (
                    "per parameter: this rank's reduce-scattered gradient shard vs the rows of its shard of the "
                    "mean over ranks of the replica's full local gradients"
                ),
                "items": {
                    "allOf": [{"$ref": "#/$defs/diff"}],
                    "required": ["fqn"],
                    "properties": {"fqn": {"type": "string"}},
                },
            }
        ),
    },
    required=("replica_dtype", "forward_output", "grads"),
    nullable=True,
    schema={
        "description": (
            "comparison against a non-sharded replica with the same weights and inputs; null when simulated. With "
            "setup.schedule: against the single-process reference of the same schedule "
            "(harness/run/rank/recorders/updates.py) after the last step"
        )
    },
    by="harness/run/rank/recorders/numerics.py",
    unobserved={"fake": "records no numerics"},
)

RANK_TIMINGS_S = Leaf(
    {
        "type": "object",
        "description": (
            "wall seconds per phase on this rank: setup (model + fully_shard), forward, backward, optimizer, total"
        ),
        "additionalProperties": {"type": "number", "minimum": 0},
    },
    by="harness/run/rank/step.py",
    unit="s",
    aspect="timing",
    varies=_WALL_TIME,
)

RANK_ENVIRONMENT = Record(
    {
        "host": Leaf({"type": "string", "description": "socket.gethostname()"}),
        "node_rank": Leaf(
            {
                "type": "integer",
                "minimum": 0,
                "description": "torchrun's GROUP_RANK (the agent's rank in the rendezvous); 0 for the local launcher",
            }
        ),
        "local_rank": Leaf(
            {"type": "integer", "minimum": 0, "description": "LOCAL_RANK, else the global rank (local launcher)"}
        ),
        "local_world_size": Leaf(
            {"type": "integer", "minimum": 1, "description": "LOCAL_WORLD_SIZE, else the world size (local launcher)"}
        ),
        "pid": Leaf({"type": "integer"}, aspect="diagnostic", varies="a new process each run"),
        "torch_version": Leaf({"type": "string", "description": "torch.__version__"}),
        "python_version": Leaf({"type": "string"}),
        "backend": Leaf({"enum": ["gloo", "nccl"]}),
        "device_type": Leaf({"enum": ["cpu", "cuda"]}),
        "device_index": Leaf(
            {"type": ["integer", "null"], "description": "the CUDA device index the rank used; null on CPU"}
        ),
        "device_name": Leaf(
            {"type": "string", "description": "torch.cuda.get_device_properties(i).name, or the CPU model"}
        ),
        "device_uuid": Leaf(
            {
                "type": ["string", "null"],
                "description": "GPU-<uuid> from torch.cuda.get_device_properties(i).uuid; null on CPU",
            }
        ),
        "device_pci_bus_id": Leaf(
            {
                "type": ["string", "null"],
                "description": (
                    "domain:bus:device.0 from the device properties; null on CPU or where torch does not expose it"
                ),
            }
        ),
        "cuda_version": Leaf({"type": ["string", "null"], "description": "torch.version.cuda"}),
        "nccl_version": Leaf(
            {"type": ["string", "null"], "description": "torch.cuda.nccl.version() as major.minor.patch"}
        ),
        "cuda_visible_devices": Leaf(
            {"type": ["string", "null"], "description": "CUDA_VISIBLE_DEVICES as set for the rank"}
        ),
        "variables": Leaf(
            {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "every NCCL_*, TORCH_NCCL_* and GLOO_* variable set for the rank",
            },
            varies="a launcher's variables may hold its rendezvous port",
        ),
    },
    required=(
        "host",
        "node_rank",
        "local_rank",
        "local_world_size",
        "torch_version",
        "backend",
        "device_type",
        "device_name",
        "variables",
    ),
    schema={"description": "where this rank ran (harness/run/rank/recorders/environment.py); absent in simulated runs"},
    by="harness/run/rank/recorders/environment.py",
    aspect="environment",
    define="rank_environment",
)

RANK_BANDWIDTH = Records(
    Record(
        {
            "name": Leaf(
                {
                    "type": "string",
                    "description": "the size's name in setup.bandwidth.sizes, or 'step' for the step's own collectives",
                }
            ),
            "source": Leaf(
                {
                    "enum": ["sweep", "step"],
                    "description": (
                        "sweep: setup.bandwidth's sizes; step: a collective the FSDP step issued, replayed on its own"
                    ),
                }
            ),
            "op": Leaf(
                {
                    "enum": ["all_gather", "reduce_scatter", "all_reduce"],
                    "description": (
                        "dist.all_gather_into_tensor, dist.reduce_scatter_tensor (sum), dist.all_reduce (sum)"
                    ),
                }
            ),
            "dtype": Leaf({"$ref": "#/$defs/dtype"}),
            "element_size": Leaf({"type": "integer", "minimum": 1}, unit="bytes"),
            "size_bytes": Leaf(
                {
                    "type": "integer",
                    "minimum": 0,
                    "description": (
                        "S as nccl-tests counts it: the all-gather output, the reduce-scatter input, the all-reduce "
                        "buffer (bytes)"
                    ),
                },
                unit="bytes",
            ),
            "count": Leaf(
                {"type": "integer", "minimum": 0, "description": "elements of S (size_bytes / element_size)"},
                unit="elements",
            ),
            "requested_bytes": Leaf(
                {
                    "type": "integer",
                    "minimum": 0,
                    "description": (
                        "S the size asked for; larger than size_bytes when setup.bandwidth.cpu_max_bytes capped it"
                    ),
                },
                unit="bytes",
            ),
            "group_size": Leaf({"type": "integer", "minimum": 1, "description": "n: ranks in the process group"}),
            "mesh_dim": Leaf(
                {"type": ["string", "null"], "description": "the mesh dim whose group ran it; null for the world group"}
            ),
            "occurrences": Leaf(
                {
                    "type": ["integer", "null"],
                    "description": "step rows: how many times the step issued this collective; null for sweep rows",
                }
            ),
            "warmup": Leaf({"type": "integer", "minimum": 0}),
            "iterations": Leaf({"type": "integer", "minimum": 1}),
            "time_s": Leaf(
                {
                    "type": "number",
                    "minimum": 0,
                    "description": "this rank's mean seconds per operation over the timed iterations",
                },
                unit="s",
                aspect="timing",
                varies=_WALL_TIME,
            ),
            "wrong": Leaf(
                {
                    "type": "integer",
                    "minimum": 0,
                    "description": (
                        "elements of this rank's output that differ from the expected gathered or reduced values "
                        "(nccl-tests' #wrong), over every timed iteration's last result"
                    ),
                }
            ),
            "timer": Leaf(
                {
                    "enum": ["cuda_events", "wall_barrier"],
                    "description": (
                        "cuda_events: CUDA events around the timed loop (NCCL); wall_barrier: wall time after a "
                        "barrier, to the last operation's completion (gloo)"
                    ),
                }
            ),
        },
        required=(
            "name",
            "source",
            "op",
            "dtype",
            "element_size",
            "size_bytes",
            "count",
            "requested_bytes",
            "group_size",
            "warmup",
            "iterations",
            "time_s",
            "wrong",
            "timer",
        ),
        schema={"description": "one timed collective on one rank, sized as nccl-tests counts it"},
        define="bandwidth_row",
    ),
    schema={
        "description": (
            "setup.bandwidth's timed collectives on this rank (harness/run/rank/collective_timing.py): the sweep's "
            "sizes, then the step's own collectives replayed; absent without setup.bandwidth"
        )
    },
    by="harness/run/rank/collective_timing.py",
    unobserved={"fake": "a simulated run moves no data: nothing to time"},
)

RANK_STATE_DICT = Record(
    {
        "saved_world_size": Leaf({"type": "integer", "minimum": 1, "description": "ranks that saved the checkpoint"}),
        "world_size": Leaf(
            {"type": "integer", "minimum": 1, "description": "ranks that loaded it (the run's own, or a reload's)"}
        ),
        "entries": Records(
            Record(
                {
                    "fqn": Leaf({"type": "string", "description": "the state-dict key (the parameter's FQN)"}),
                    "full_shape": Leaf({"$ref": "#/$defs/shape"}),
                    "dtype": Leaf({"$ref": "#/$defs/dtype"}),
                    "placements": Leaf(
                        {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": (
                                "repr() of the loaded DTensor's placements, as params[].placements: 'Shard(dim=0)'"
                            ),
                        }
                    ),
                    "local_shape": Leaf(
                        {"$ref": "#/$defs/shape", "description": "this rank's shard after load (to_local())"}
                    ),
                    "global_offset": Leaf(
                        {
                            "type": "array",
                            "items": {"type": "integer", "minimum": 0},
                            "description": (
                                "where the shard starts in the full tensor, per dim "
                                "(compute_local_shape_and_global_offset)"
                            ),
                        }
                    ),
                    "local_length": Leaf(
                        {
                            "type": "integer",
                            "minimum": 0,
                            "description": "the shard's size along the sharded dim (elements)",
                        }
                    ),
                    "local_numel": Leaf({"type": "integer", "minimum": 0}, unit="elements"),
                    "equal_before_load": Leaf(
                        {
                            "type": "boolean",
                            "description": (
                                "the fresh model's shard already held the expected values before load (true for an "
                                "empty shard)"
                            ),
                        }
                    ),
                    "round_trip_equal": Leaf(
                        {
                            "type": "boolean",
                            "description": (
                                "after load, bitwise equal (same dtype, torch.equal) to the saved shard (same "
                                "world) or to the saved full tensor's elements at the global offset (a reload)"
                            ),
                        }
                    ),
                    "max_abs_diff": Leaf(
                        {
                            "type": ["number", "null"],
                            "minimum": 0,
                            "description": (
                                "largest |loaded - expected| (0 for no elements; null if the shapes differ or it is "
                                "not finite)"
                            ),
                        }
                    ),
                    "checkpoint_offsets": Leaf(
                        {
                            "type": "array",
                            "items": {"type": "integer", "minimum": 0},
                            "description": (
                                "the checkpoint metadata's chunks of this entry: offsets along the sharded dim, sorted"
                            ),
                        }
                    ),
                    "checkpoint_lengths": Leaf(
                        {
                            "type": "array",
                            "items": {"type": "integer", "minimum": 0},
                            "description": "the same chunks' sizes along the sharded dim",
                        }
                    ),
                    "optimizer": Records(
                        Record(
                            {
                                "name": Leaf(
                                    {"type": "string", "description": "e.g. exp_avg, exp_avg_sq, step (AdamW)"}
                                ),
                                "equal": Leaf(
                                    {"type": "boolean", "description": "after load, bitwise equal to what was saved"}
                                ),
                                "equal_before_load": Leaf(
                                    {
                                        "type": "boolean",
                                        "description": "the fresh optimizer's value already equalled it before load",
                                    }
                                ),
                                "max_abs_diff": Leaf({"type": ["number", "null"], "minimum": 0}),
                            },
                            required=("name", "equal", "equal_before_load", "max_abs_diff"),
                        ),
                        schema={"description": "the optimizer's state of this parameter, by name"},
                    ),
                },
                required=(
                    "fqn",
                    "full_shape",
                    "dtype",
                    "placements",
                    "local_shape",
                    "global_offset",
                    "local_length",
                    "local_numel",
                    "equal_before_load",
                    "round_trip_equal",
                    "max_abs_diff",
                    "checkpoint_offsets",
                    "checkpoint_lengths",
                    "optimizer",
                ),
            ),
            schema={"description": "one per entry of the model's state dict (get_state_dict), in its order"},
        ),
    },
    required=("saved_world_size", "world_size", "entries"),
    schema={
        "description": (
            "setup.state_dict.round_trip: the sharded model and optimizer saved with torch.distributed.checkpoint "
            "after the step and loaded into a fresh sharded model and optimizer (harness/run/rank/checkpoint.py); what "
            "this rank holds after load"
        )
    },
    by="harness/run/rank/checkpoint.py",
    unobserved=_NO_CHECKPOINT,
    define="state_dict",
)

RANK_STATE_DICT_OPTIONS = Record(
    {
        "get_model": Records(
            Record(
                {
                    "id": Leaf({"type": "string"}),
                    "keys": Leaf(
                        {
                            "type": "integer",
                            "minimum": 0,
                            "description": "keys of the returned state dict on this rank (0: an empty dict)",
                        }
                    ),
                    "entries": Records(
                        Record(
                            {
                                "fqn": Leaf({"type": "string"}),
                                "is_dtensor": Leaf(
                                    {
                                        "type": "boolean",
                                        "description": "the tensor is a DTensor (false: a plain torch.Tensor)",
                                    }
                                ),
                                "device": Leaf(
                                    {
                                        "type": "string",
                                        "description": "the (local) tensor's device type: cpu, cuda, meta",
                                    }
                                ),
                                "local_shape": Leaf({"$ref": "#/$defs/shape"}),
                                "placements": Leaf(
                                    {
                                        "type": "array",
                                        "items": {"type": "string"},
                                        "description": (
                                            "the DTensor's placements, e.g. Shard(dim=0); [] for a plain tensor"
                                        ),
                                    }
                                ),
                                "equal": Leaf(
                                    {
                                        "type": "boolean",
                                        "description": (
                                            "holds the trained model's values bitwise: a full tensor its full "
                                            "tensor, a DTensor's local shard this rank's shard"
                                        ),
                                    }
                                ),
                                "shape": Leaf({"$ref": "#/$defs/shape"}),
                                "dtype": Leaf({"$ref": "#/$defs/dtype"}),
                            },
                            required=(
                                "fqn",
                                "is_dtensor",
                                "device",
                                "local_shape",
                                "placements",
                                "equal",
                                "shape",
                                "dtype",
                            ),
                        ),
                    ),
                },
                required=("id", "keys", "entries"),
            ),
        ),
        "set_model": Records(
            Record(
                {
                    "id": Leaf({"type": "string"}),
                    "given_keys": Leaf(
                        {
                            "type": "integer",
                            "minimum": 0,
                            "description": (
                                "keys of the state dict this rank handed over ({} on ranks other than 0 with "
                                "broadcast_from_rank0)"
                            ),
                        }
                    ),
                    "error": Record(
                        {
                            "type": Leaf({"type": "string"}),
                            "message": Leaf({"type": "string"}),
                        },
                        required=("type", "message"),
                        nullable=True,
                        schema={"description": "what set_model_state_dict raised on this rank (null: it returned)"},
                    ),
                    "missing_keys": Leaf(
                        {
                            "description": "the missing keys it returned, sorted (null when it raised)",
                            "oneOf": [{"type": "null"}, {"type": "array", "items": {"type": "string"}}],
                        }
                    ),
                    "unexpected_keys": Leaf(
                        {
                            "description": "the unexpected keys it returned, sorted (null when it raised)",
                            "oneOf": [{"type": "null"}, {"type": "array", "items": {"type": "string"}}],
                        }
                    ),
                    "meta_params": Leaf(
                        {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "parameters of the fresh model still on the meta device after the call",
                        }
                    ),
                    "meta_buffers": Leaf(
                        {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "buffers of the fresh model still on the meta device after the call",
                        }
                    ),
                    "gathered": Leaf(
                        {
                            "type": "boolean",
                            "description": (
                                "FSDP's all-gather was run on the fresh model after the call (every rank returned "
                                "and no parameter was left on meta)"
                            ),
                        }
                    ),
                    "entries": Records(
                        Record(
                            {
                                "fqn": Leaf({"type": "string"}),
                                "is_dtensor": Leaf(
                                    {
                                        "type": "boolean",
                                        "description": "the tensor is a DTensor (false: a plain torch.Tensor)",
                                    }
                                ),
                                "device": Leaf(
                                    {
                                        "type": "string",
                                        "description": "the (local) tensor's device type: cpu, cuda, meta",
                                    }
                                ),
                                "local_shape": Leaf({"$ref": "#/$defs/shape"}),
                                "placements": Leaf(
                                    {
                                        "type": "array",
                                        "items": {"type": "string"},
                                        "description": (
                                            "the DTensor's placements, e.g. Shard(dim=0); [] for a plain tensor"
                                        ),
                                    }
                                ),
                                "equal": Leaf(
                                    {
                                        "type": "boolean",
                                        "description": (
                                            "holds the trained model's values bitwise: a full tensor its full "
                                            "tensor, a DTensor's local shard this rank's shard"
                                        ),
                                    }
                                ),
                                "equal_before_load": Leaf(
                                    {
                                        "type": "boolean",
                                        "description": (
                                            "the fresh model's shard already held the trained values before the call"
                                        ),
                                    }
                                ),
                                "gathered_equal": Leaf(
                                    {
                                        "description": (
                                            "FSDPModule.unshard() on every unit gathered the trained full parameter "
                                            "bitwise, compared in the dtype the unit gathers in (the trained value "
                                            "cast to its MixedPrecisionPolicy's param_dtype, as the all-gather "
                                            "casts each shard) (null: not gathered)"
                                        ),
                                        "oneOf": [{"type": "null"}, {"type": "boolean"}],
                                    }
                                ),
                                "gathered_dtype": Leaf(
                                    {
                                        "description": (
                                            "dtype of the unsharded parameter FSDP's all-gather gave (e.g. bfloat16 "
                                            "under param_dtype=bfloat16): the dtype gathered_equal compared in "
                                            "(null: not gathered, or not a parameter)"
                                        ),
                                        "oneOf": [{"type": "null"}, {"type": "string"}],
                                    }
                                ),
                            },
                            required=(
                                "fqn",
                                "is_dtensor",
                                "device",
                                "local_shape",
                                "placements",
                                "equal",
                                "equal_before_load",
                                "gathered_equal",
                                "gathered_dtype",
                            ),
                        ),
                    ),
                },
                required=(
                    "id",
                    "given_keys",
                    "error",
                    "missing_keys",
                    "unexpected_keys",
                    "meta_params",
                    "meta_buffers",
                    "gathered",
                    "entries",
                ),
            ),
        ),
    },
    required=("get_model", "set_model"),
    schema={
        "description": (
            "setup.state_dict.get_model / set_model: torch.distributed.checkpoint.state_dict's get_model_state_dict "
            "and set_model_state_dict with StateDictOptions, after the step (harness/run/rank/state_dict_options.py); "
            "what this rank got and what its fresh models hold"
        )
    },
    by="harness/run/rank/state_dict_options.py",
    unobserved={"fake": "makes no state-dict calls"},
    define="state_dict_options",
)

RANK_COMPILE = Record(
    {
        "unique_graphs": Leaf({"type": "integer", "minimum": 0}),
        "graph_breaks": Leaf({"type": "integer", "minimum": 0}),
        "ran_eager": Leaf(
            {
                "type": "boolean",
                "description": (
                    "dynamo captured no graph: the harness's collective recorder (a TorchDispatchMode) is active "
                    "during the step, and dynamo compiles nothing under one, so the compiled units ran eagerly (the "
                    "CLI says so after the run)"
                ),
            }
        ),
    },
    closed=False,
    schema={
        "description": (
            "only when a unit asks for torch.compile: what dynamo captured on this rank (torch._dynamo.utils.counters)"
        )
    },
    by="harness/run/rank/step.py (torch._dynamo counters)",
)

RANK_ERROR = Record(
    {
        "type": Leaf({"type": "string", "description": "the exception's class name, e.g. RuntimeError"}),
        "qualname": Leaf(
            {"type": "string", "description": "module and class, e.g. torch.distributed.DistBackendError"}
        ),
        "message": Leaf(
            {"type": "string", "description": "str() of the exception"},
            masked=True,
            varies=(
                "a bystander rank's message names gloo's ephemeral port; a message that prints a set "
                "(mixed_grad_dtypes_refused) orders it by hashes"
            ),
        ),
        "phase": Leaf(
            {
                "type": "string",
                "description": "the innermost phase it left first: setup, replica, forward, backward, optimizer",
            }
        ),
        "traceback": Leaf(
            {"type": "string", "description": "the last lines of its traceback"},
            aspect="diagnostic",
            masked=True,
            unobserved={"fake": "a fake tensor's meta kernel raises instead of the device kernel"},
            varies="names paths, line numbers and gloo's ephemeral ports",
        ),
        "hook": Leaf(
            {
                "type": ["string", "null"],
                "description": "the spec's hook the exception came from (its point, function and file), whose own "
                "type and message the other fields hold; null: not raised in a hook",
            },
            masked=True,
            varies="names the hooks file's path",
        ),
    },
    required=("type", "qualname", "message", "phase"),
    nullable=True,
    schema={
        "description": (
            "only when the spec has an expect_error entry: what this rank raised (null: nothing); the other fields "
            "then hold what was recorded up to the error"
        )
    },
    by="harness/run/rank/step.py",
)

RANK_EVENTS = Records(
    Record(
        {
            "event": Leaf(
                {
                    "type": "string",
                    "description": (
                        "the FSDP:: label without 'FSDP::' and its unit (pre_forward, all_gather, "
                        "post_backward_reduce, root_post_backward_callback, ...), or reshard / unshard"
                    ),
                }
            ),
            "unit": Leaf(
                {
                    "type": ["string", "null"],
                    "description": "the unit's module FQN ('' for the root); null for labels that name none",
                }
            ),
            "source": Leaf({"enum": ["fsdp", "harness"]}),
            "training_state": Leaf(
                {
                    "type": ["string", "null"],
                    "description": (
                        "the TrainingState torch sets for the unit inside that hook (FORWARD, PRE_BACKWARD, "
                        "POST_BACKWARD; IDLE for a data label outside any hook); null for harness events"
                    ),
                }
            ),
            "phase": Leaf({"type": "string"}),
            "step_index": Leaf({"$ref": "#/$defs/step_index"}),
            "microbatch": Leaf({"$ref": "#/$defs/microbatch"}),
        },
        required=("event", "unit", "source", "training_state", "phase", "step_index", "microbatch"),
    ),
    schema={
        "description": (
            "FSDP's own events in order (harness/run/rank/recorders/events.py): its profiler labels (source fsdp) and "
            "the units' shard-state changes the harness saw (source harness: reshard, unshard)"
        )
    },
    by="harness/run/rank/recorders/events.py",
)

RANK_CUSTOM = Records(
    Record(
        {
            "step_index": Leaf({"type": "integer", "minimum": 0}),
            "values": Leaf({"type": "object", "description": "the hook's mapping of names to JSON values"}),
        },
        required=("step_index", "values"),
    ),
    schema={
        "description": (
            "what the spec's setup.hooks.observe function returned after each step (harness/run/rank/hooks.py); "
            "present only with that hook; checked by check kind custom"
        )
    },
    by="harness/run/rank/hooks.py (the spec's observe hook)",
)

RANK_GRAD_NORMS = Records(
    Record(
        {
            "step_index": Leaf({"type": "integer", "minimum": 0}),
            "max_norm": Leaf({"type": "number"}),
            "norm_type": Leaf({"type": "number"}),
            "value": Leaf(
                {
                    "type": ["number", "null"],
                    "description": (
                        "the returned total norm: the local value, or for a Partial DTensor the ranks' local values "
                        "reduced by its op (harness.contract.partial_values, no collective); null when simulated "
                        "(no data)"
                    ),
                },
                unobserved=_NO_VALUES,
            ),
            "local_value": Leaf(
                {
                    "type": ["number", "null"],
                    "description": (
                        "this rank's local value of the returned norm (DTensor.to_local()); null when simulated"
                    ),
                },
                unobserved=_NO_VALUES,
            ),
            "is_dtensor": Leaf({"type": "boolean"}),
            "placements": Leaf({"type": "array", "items": {"type": "string"}}),
            "dtype": Leaf({"$ref": "#/$defs/dtype"}),
            "reference": Leaf(
                {
                    "type": ["number", "null"],
                    "description": (
                        "the total norm the single-process reference's clip_grad_norm_ returned at the same step; "
                        "null without numerics"
                    ),
                },
                unobserved=_NO_VALUES,
            ),
            "clip_coef": Leaf(
                {
                    "type": ["number", "null"],
                    "description": (
                        "the factor clip_grad_norm_ scaled this rank's gradients by: the largest |element| of its "
                        "local gradient shards after the call over the same before (float64); null when simulated "
                        "or every gradient element is 0"
                    ),
                },
                unobserved=_NO_VALUES,
            ),
            "reference_clip_coef": Leaf(
                {
                    "type": ["number", "null"],
                    "description": (
                        "the same factor for the single-process reference's gradients at the same step; null "
                        "without numerics"
                    ),
                },
                unobserved=_NO_VALUES,
            ),
            "shard_reference": Leaf(
                {
                    "type": ["number", "null"],
                    "description": (
                        "the reference's norm_type-norm of this rank's shard alone (its rows, dim 0, of every "
                        "gradient, before clipping): what a Partial(max) norm's local value holds; null without "
                        "numerics"
                    ),
                },
                unobserved=_NO_VALUES,
            ),
        },
        required=("step_index", "max_norm", "norm_type", "value", "is_dtensor", "placements", "dtype", "reference"),
    ),
    schema={"description": "what clip_grad_norm_ returned, per step that clips"},
    by="harness/run/rank/step.py (clip_grad_norm_)",
)

RANK_GRADS = Records(
    Record(
        {
            "step_index": Leaf({"type": "integer", "minimum": 0}),
            "fqn": Leaf({"type": "string"}),
            "requires_grad": Leaf({"type": "boolean"}),
            "grad_dtype": Leaf({"type": ["string", "null"], "description": "dtype of .grad; null: no gradient"}),
            "grad_local_shape": Leaf(
                {
                    "type": ["array", "null"],
                    "items": {"type": "integer", "minimum": 0},
                    "description": "shape of .grad's local tensor (DTensor.to_local()); null: no gradient",
                }
            ),
            "param_grad_dtype": Leaf(
                {
                    "type": ["string", "null"],
                    "description": (
                        "Parameter.grad_dtype: the dtype autograd accumulates its gradient in (null: this torch has "
                        "none)"
                    ),
                }
            ),
        },
        required=("step_index", "fqn", "requires_grad", "grad_dtype", "grad_local_shape", "param_grad_dtype"),
    ),
    schema={
        "description": (
            "after each step's optimizer step (harness/run/rank/recorders/grads.py): every parameter "
            "(named_parameters(), the sharded DTensor parameters), whether it requires a gradient, its gradient's "
            "dtype and local shape (null: no gradient) and its Parameter.grad_dtype; a step that raised records "
            "none"
        )
    },
    by="harness/run/rank/step.py",
)

RANK_UNIT_DTYPES = Records(
    Record(
        {
            "step_index": Leaf({"type": "integer", "minimum": 0}),
            "microbatch": Leaf({"type": ["integer", "null"], "minimum": 0}),
            "unit": Leaf({"type": "string", "description": "the unit's name ('' for the root)"}),
            "orig_dtype": Leaf(
                {
                    "type": ["string", "null"],
                    "description": "FSDPParamGroup._orig_dtype: what reduced gradients are cast back to",
                }
            ),
            "reduce_dtype": Leaf(
                {
                    "type": ["string", "null"],
                    "description": (
                        "FSDPParamGroup._reduce_dtype: the reduce-scatter's dtype (null: the gradients' own)"
                    ),
                }
            ),
            "trainable": Leaf(
                {"type": "integer", "minimum": 0, "description": "its sharded parameters with requires_grad now"}
            ),
            "params": Leaf({"type": "integer", "minimum": 0}),
        },
        required=("step_index", "microbatch", "unit", "orig_dtype", "reduce_dtype", "trainable", "params"),
    ),
    schema={
        "description": (
            "after each forward phase (harness/run/rank/recorders/grads.py): each unit with parameters, the dtypes its "
            "FSDPParamGroup resolved at lazy init from its trainable parameters (_orig_dtype, _reduce_dtype; null: "
            "none resolved, or no casting), and how many of its parameters are trainable now"
        )
    },
    by="harness/run/rank/step.py",
)

RANK_PARAM_UPDATES = Records(
    Record(
        {
            "step_index": Leaf({"type": "integer", "minimum": 0}),
            "fqn": Leaf({"type": "string"}),
            "rows": Leaf({"type": "integer", "minimum": 0, "description": "rows of this rank's shard"}),
            "rows_changed": Leaf({"type": "integer", "minimum": 0}),
            "unchanged_rows": Leaf(
                {
                    "type": "array",
                    "items": {"type": "integer"},
                    "description": "global indices of the unchanged rows (the first 64)",
                }
            ),
            "max_abs_update": Leaf(
                {"type": "number", "minimum": 0, "description": "largest |after - before| in the shard"}
            ),
            "max_abs_diff": Leaf(
                {"type": "number", "minimum": 0, "description": "largest |shard - reference rows| after the step"}
            ),
            "max_abs_ref": Leaf({"type": "number", "minimum": 0}),
            "ref_rows_changed": Leaf(
                {"type": "integer", "minimum": 0, "description": "rows of the shard the reference's step changed"}
            ),
            "same_rows_as_reference": Leaf(
                {"type": "boolean", "description": "the changed rows are exactly the reference's"}
            ),
        },
        required=("step_index", "fqn", "rows", "rows_changed", "unchanged_rows", "max_abs_update"),
    ),
    schema={
        "description": (
            "with setup.schedule (real runs): per step and parameter, which rows (dim 0) of this rank's shard the "
            "step changed, and the shard against the reference's after the same step"
        )
    },
    by="harness/run/rank/recorders/updates.py",
    unobserved={"fake": f"records no parameter updates: it {_NO_VALUES_WHY}"},
)

RANK_EXPERTS = Record(
    {
        "shards": Records(
            Record(
                {
                    "layer": Leaf({"type": "integer", "minimum": 0}),
                    "param": Leaf({"type": "string"}),
                    "fqn": Leaf({"type": "string"}),
                    "placements": Leaf({"type": "array", "items": {"type": "string"}}),
                    "shard_dim": Leaf(
                        {
                            "type": "integer",
                            "minimum": -1,
                            "description": "the Shard placement's dim; -1 when not a DTensor",
                        }
                    ),
                    "num_experts": Leaf({"type": "integer", "minimum": 1}),
                    "experts": Leaf(
                        {
                            "type": "array",
                            "items": {"type": "integer", "minimum": 0},
                            "description": (
                                "experts whose rows (Shard(0): whole experts; Shard(d>0): a slice of each) the "
                                "local shard holds"
                            ),
                        }
                    ),
                },
                required=("layer", "param", "fqn", "placements", "shard_dim", "num_experts", "experts"),
            ),
            schema={"description": "one row per sparse layer and fused expert parameter"},
        ),
        "tokens": Records(
            Record(
                {
                    "layer": Leaf({"type": "integer", "minimum": 0}),
                    "step_index": Leaf({"type": ["integer", "null"], "minimum": 0}),
                    "microbatch": Leaf({"type": ["integer", "null"], "minimum": 0}),
                    "counts": Leaf(
                        {
                            "type": ["array", "null"],
                            "items": {"type": "integer", "minimum": 0},
                            "description": "E counts summing to B*L*k; null when simulated",
                        },
                        unobserved=_ROUTER,
                    ),
                },
                required=("layer", "step_index", "microbatch", "counts"),
            ),
            schema={"description": "per sparse layer and forward: step9.tokens_per_expert of this rank's tokens"},
        ),
        "zero_grad_rows": Records(
            Record(
                {
                    "layer": Leaf({"type": "integer", "minimum": 0}),
                    "param": Leaf({"type": "string"}),
                    "step_index": Leaf({"type": ["integer", "null"], "minimum": 0}),
                    "microbatch": Leaf({"type": ["integer", "null"], "minimum": 0}),
                    "experts": Leaf(
                        {"type": "array", "items": {"type": "integer", "minimum": 0}, "description": "the experts held"}
                    ),
                    "zero_rows": Leaf(
                        {
                            "type": ["array", "null"],
                            "items": {"type": "integer", "minimum": 0},
                            "description": "null when simulated",
                        },
                        unobserved=_ROUTER,
                    ),
                },
                required=("layer", "param", "step_index", "microbatch", "experts", "zero_rows"),
            ),
            schema={"description": "after each backward: held experts whose sharded gradient rows are all zero"},
        ),
    },
    required=("shards", "tokens", "zero_grad_rows"),
    schema={
        "description": (
            "a MoE model's sparse layers on this rank (harness/run/rank/recorders/experts.py); absent for a dense model"
        )
    },
    by="harness/run/rank/recorders/experts.py",
)

DOC_RELOADS = Records(
    Record(
        {
            "world_size": Leaf({"type": "integer", "minimum": 1}),
            "mesh_shape": Leaf({"type": "array", "items": {"type": "integer", "minimum": 1}}),
            "mesh_dim_names": Leaf({"type": "array", "items": {"type": "string"}}),
            "ranks": Records(
                Record(
                    {
                        "rank": Leaf({"type": "integer", "minimum": 0}),
                        "state_dict": RANK_STATE_DICT,
                        "timings_s": Leaf(
                            {"type": "object", "additionalProperties": {"type": "number", "minimum": 0}},
                            unit="s",
                            aspect="timing",
                            varies=_WALL_TIME,
                        ),
                    },
                    required=("rank", "state_dict"),
                ),
            ),
        },
        required=("world_size", "mesh_shape", "mesh_dim_names", "ranks"),
    ),
    schema={
        "description": (
            "setup.state_dict.reload_world_sizes: the run's checkpoint loaded by a second launch of each of these "
            "world sizes (harness.run.rank.checkpoint.reload_step), ranks in order"
        )
    },
    by="harness/run/rank/checkpoint.py",
    unobserved=_NO_CHECKPOINT,
)

DOC_DEATHS = Records(
    Record(
        {
            "rank": Leaf({"type": "integer", "minimum": 0}),
            "exit_code": Leaf(
                {"type": ["integer", "null"], "description": "the process's exit code; -N: ended by signal N"}
            ),
            "signal": Leaf(
                {"type": ["string", "null"], "description": "the signal's name (SIGSEGV) where one ended it, else null"}
            ),
            "phase": Leaf(
                {
                    "type": "string",
                    "description": "the phase the launcher last saw the rank in (harness.contract.names.RANK_PHASES)",
                }
            ),
        },
        required=("rank", "exit_code", "signal", "phase"),
    ),
    schema={
        "description": (
            "only when the spec has an expect_error entry and a rank died without a result (a signal, "
            "os._exit): what the launcher saw of it; the rank is not in 'ranks'"
        )
    },
    by="harness/run/launch/local.py",
    unobserved={"fake": "simulates every rank in one process: a rank that dies ends the run"},
)

RANK_PARTS: dict[str, Any] = {
    "rank": RANK_RANK,
    "coords": RANK_COORDS,
    "input": RANK_INPUT,
    "output": RANK_OUTPUT,
    "params": RANK_PARAMS,
    "buffers": RANK_BUFFERS,
    "param_states": RANK_PARAM_STATES,
    "fully_shard_calls": RANK_FULLY_SHARD_CALLS,
    "steps": RANK_STEPS,
    "forward_inputs": RANK_FORWARD_INPUTS,
    "collectives": RANK_COLLECTIVES,
    "all_gather_extensions": RANK_ALL_GATHER_EXTENSIONS,
    "memory": RANK_MEMORY,
    "numerics": RANK_NUMERICS,
    "timings_s": RANK_TIMINGS_S,
    "environment": RANK_ENVIRONMENT,
    "bandwidth": RANK_BANDWIDTH,
    "state_dict": RANK_STATE_DICT,
    "state_dict_options": RANK_STATE_DICT_OPTIONS,
    "compile": RANK_COMPILE,
    "error": RANK_ERROR,
    "events": RANK_EVENTS,
    "custom": RANK_CUSTOM,
    "grad_norms": RANK_GRAD_NORMS,
    "grads": RANK_GRADS,
    "unit_dtypes": RANK_UNIT_DTYPES,
    "param_updates": RANK_PARAM_UPDATES,
    "experts": RANK_EXPERTS,
}
"""A rank entry's parts (``ranks[i]``) by key."""
_RANK_PATHS = {"environment": "rank_environment"}  # a rank part whose path differs from its key

DOCUMENT = Record(
    {
        "format": DOC_FORMAT,
        "environment": DOC_ENVIRONMENT,
        "setup": DOC_SETUP,
        "fsdp_units": DOC_FSDP_UNITS,
        "ranks": Records(
            Record(
                RANK_PARTS,
                define="rank",
                required=(
                    "rank",
                    "input",
                    "params",
                    "param_states",
                    "steps",
                    "collectives",
                    "memory",
                    "numerics",
                    "timings_s",
                ),
            )
        ),
        "reloads": DOC_RELOADS,
        "deaths": DOC_DEATHS,
    },
    required=("format", "environment", "setup", "fsdp_units", "ranks"),
    schema={
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://fsdp2-conformance/observation.schema.json",
        "title": "FSDP2 observation document",
        "description": (
            "What one FSDP2 training step really did, as recorded by the harness. Written by harness.run.runner, "
            "read by harness.judge.checks. Bytes are bytes; element counts are elements; shapes are lists of ints; "
            "dtypes are torch dtype names without the 'torch.' prefix (float16, bfloat16, float32)."
        ),
    },
)
"""The observation document (``fsdp2-observation/1``)."""


@dataclass(frozen=True)
class RecordCondition:
    """Records of a part whose every field a world cannot observe, or that vary, by a selecting key's value."""

    part: str
    key: str
    values: frozenset[str]
    unobserved: Mapping[str, str]
    varies: str
    varies_in: tuple[str, ...]

    def holds(self, path: str, record: Mapping[str, Any] | None) -> bool:
        return record is not None and path.split(".", 1)[0] == self.part and record.get(self.key) in self.values


PEAKS = RecordCondition(
    "memory",
    "state",
    frozenset(s for s in MEMORY_ROOT_STATES if s.startswith("Peak")),
    {"fake": "completes each collective at once: its peaks are not a real rank's (buffers coexist differently)"},
    "FSDPMemTracker's peaks: a real collective completes asynchronously, so which buffers coexist at a peak "
    "varies run to run",
    ("gloo", "nccl"),
)
ROUTED = RecordCondition(
    "collectives",
    "op",
    frozenset({"all_to_all"}),
    {
        "fake": f"{_NO_VALUES_WHY}: expert parallelism's all-to-alls carry what the router chose, which a simulated "
        "rank does not know (it splits its token slots evenly instead)"
    },
    "",
    (),
)
RECORD_CONDITIONS: tuple[RecordCondition, ...] = (PEAKS, ROUTED)
"""Conditions on whole records (the fields' own declarations hold for the other records)."""


@dataclass(frozen=True)
class ObservedField:
    """One declared field: ``path``, its JSON ``schema`` and the :class:`~harness.contract.field_tree.Facts`
    that hold for it (unit, by, unobserved, varies, varies_in, aspect, masked)."""

    path: str
    schema: Mapping[str, Any]
    facts: Facts

    def __getattr__(self, name: str) -> Any:  # the facts read as attributes: field.unit, field.varies
        return getattr(self.__dict__["facts"], name)


def rank_part_path(part: str) -> str:
    """The path of a rank entry's part ``part`` (``environment`` -> ``rank_environment``)."""
    return _RANK_PATHS.get(part, part)


@lru_cache(maxsize=1)
def _declared() -> dict[str, ObservedField]:
    out: dict[str, ObservedField] = {}
    roots = [(name, node) for name, node in DOCUMENT.children.items() if name != "ranks"]
    roots += [(rank_part_path(name), node) for name, node in RANK_PARTS.items()]
    for name, node in roots:
        for path, leaf, facts in walk(node, name):
            if path in out:
                raise ValueError(f"field {path!r} declared twice")
            out[path] = ObservedField(path, leaf.schema, facts)
    return out


def fields() -> tuple[ObservedField, ...]:
    """Every declared field, in document order."""
    return tuple(_declared().values())


@lru_cache(maxsize=None)
def lookup(path: str) -> ObservedField:
    """The declaration of ``path``: its own, that of the leaf holding the sub-document it is in, or
    for a whole record or list (a null or empty one) that of its first field.

    Raises:
        KeyError: nothing declares ``path`` (the message names it).
    """
    declared = _declared()
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        found = declared.get(".".join(parts[:end]))
        if found is not None:
            return found
    below = next((f for name, f in declared.items() if name.startswith(path + ".")), None)
    if below is not None:  # a record or list as a whole (null, empty): its first field's facts
        return below
    raise KeyError(f"observed field {path!r} is not declared in harness/contract/fields.py")


def _world(world: str) -> str:
    if world not in WORLDS:
        raise ValueError(f"world {world!r} is not one of {list(WORLDS)}")
    return world


def unobserved_reason(path: str, world: str, record: Mapping[str, Any] | None = None) -> str | None:
    """Why a run in ``world`` cannot observe ``path`` as a real rank would (in ``record``, the
    record holding it, when given), or None when it can."""
    _world(world)
    for condition in RECORD_CONDITIONS:
        if condition.holds(path, record) and world in condition.unobserved:
            return condition.unobserved[world]
    return lookup(path).unobserved.get(world)


def observed_in(path: str, world: str, record: Mapping[str, Any] | None = None) -> bool:
    """Whether a run in ``world`` observes ``path`` as a real rank would."""
    return unobserved_reason(path, world, record) is None


def varies(path: str, world: str | None = None, record: Mapping[str, Any] | None = None) -> str | None:
    """Why ``path`` may differ between two runs in ``world`` (None: any world), or None when stable."""
    for condition in RECORD_CONDITIONS:
        if condition.holds(path, record) and (world is None or world in condition.varies_in):
            return condition.varies
    declared = lookup(path)
    if declared.varies and (world is None or world in declared.varies_in):
        return declared.varies
    return None


def stable(path: str, world: str | None = None, record: Mapping[str, Any] | None = None) -> bool:
    """Whether ``path`` is the same in every run of a spec on one torch in ``world`` (None: in every world)."""
    return varies(path, world if world is None else _world(world), record) is None


def varying_in(world: str) -> tuple[ObservedField, ...]:
    """The fields declared to vary run to run in ``world`` (record conditions aside)."""
    _world(world)
    return tuple(f for f in fields() if f.varies and world in f.varies_in)
