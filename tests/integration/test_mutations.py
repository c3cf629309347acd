"""Every spec can fail: change one figure or selector in a copy and exactly that entry fails.

Each case copies a spec, changes one value in its text, loads the copy and evaluates it
against the real observation of that spec's setup (the same per-session run the spec items
use, see tests/conftest.py ``spec_observation``). Exactly the one mutated entry must fail, and its
report must show the new expectation, the observed value and the document section.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.judge.evaluate import FAILING, evaluate_spec
from harness.load.spec import load_spec
from tests.support import REPO, SPECS
from tests.support.mutation_cases_moe import MOE_CASES
from tests.support.mutation_cases_observability import OBSERVABILITY_CASES, OBSERVABILITY_SETUP_CASES
from tests.support.mutation_cases_setters import SETTER_CASES, SETTER_SETUP_CASES

# (spec, text in the spec, replacement, failing entry id, text the failure must show)
CASES = [
    # the walkthrough: a shard shape, a byte figure, a step's shape, an invariant
    (
        "qwen3_walkthrough",
        "[self_attn.q_proj.weight, [512, 512], [128, 512], 65536]",
        "[self_attn.q_proj.weight, [512, 512], [128, 256], 65536]",
        "self_attn.q_proj.weight",
        "[128, 256]",
    ),
    ("qwen3_walkthrough", 'buffer_bytes: "4.72 MB"', 'buffer_bytes: "4.73 MB"', "gathers_the_whole_layer", "4.73 MB"),
    (
        "qwen3_walkthrough",
        "param_counts: [11, 11, 0]",
        "param_counts: [11, 11, 1]",
        "the_layers_hold_every_parameter",
        "[11, 11, 1]",
    ),
    (
        "qwen3_walkthrough",
        "[step2.k_heads, [2, 8, 4, 64]",
        "[step2.k_heads, [2, 8, 8, 64]",
        "step2.k_heads",
        "[2, 8, 8, 64]",
    ),
    (
        "qwen3_walkthrough",
        "        select: {phase: optimizer}\n        count: 0",
        "        select: {phase: optimizer}\n        count: 1",
        "optimizer_needs_no_communication",
        "expected 1",
    ),
    (
        "qwen3_walkthrough",
        'total_ring_bytes]\n    rows:\n      - [forward_all_gather, "forward all-gather of the layer: '
        '3/4 × 4.72 ≈ 3.54 MB per rank", {phase: forward, layer: 0}, 1, "≈3.54 MB"]',
        'total_ring_bytes]\n    rows:\n      - [forward_all_gather, "forward all-gather of the layer: '
        '3/4 × 4.72 ≈ 3.54 MB per rank", {phase: forward, layer: 0}, 1, "≈3.56 MB"]',
        "forward_all_gather",
        "3.56 MB",
    ),
    # the other specs: one figure each
    (
        "qwen3_walkthrough_as_written",
        'buffer_bytes: "9.44 MB"',
        'buffer_bytes: "9.45 MB"',
        "gathers_9_44_mb",
        "9.45 MB",
    ),
    (
        "uneven_3_ranks",
        "[q_proj.rank2, self_attn.q_proj.weight, [2], [170, 512], 87040]",
        "[q_proj.rank2, self_attn.q_proj.weight, [2], [171, 512], 87040]",
        "q_proj.rank2",
        "[171, 512]",
    ),
    ("uneven_3_ranks", "numel_out: 2366598", "numel_out: 2360448", "padded_buffer", "2,360,448"),
    (
        "mixed_precision",
        "        dtype: float32\n        numel_in: 2360448",
        "        dtype: bfloat16\n        numel_in: 2360448",
        "reduce_scatter_fp32",
        "bfloat16",
    ),
    (
        "reshard_after_forward_false",
        "{id: no_backward_all_gather, select: {phase: backward, op: all_gather}, count: 0}",
        "{id: no_backward_all_gather, select: {phase: backward, op: all_gather}, count: 2}",
        "no_backward_all_gather",
        "expected 2",
    ),
    (
        "reshard_after_forward_int",
        "        group_size: 2\n",
        "        group_size: 4\n",
        "backward_all_gather_on_2",
        "expected 4",
    ),
    (
        "hsdp_2x2",
        "        mesh_dim: dp_replicate\n",
        "        mesh_dim: dp_shard\n",
        "all_reduce_across_replicas",
        "dp_shard",
    ),
    (
        "hsdp_all_reduce_last",
        "step_index: 0, microbatch: 0, sharded_grad: 0}",
        "step_index: 0, microbatch: 0, sharded_grad: 74048}",
        "mb0_held_back",
        "74,048",
    ),
    (
        "whole_model",
        "        numel_out: 524800\n",
        "        numel_out: 524288\n",
        "root_gathers_embedding_and_norm",
        "524,288",
    ),
    (
        "backward_prefetch",
        '"reduce_scatter layers.2", "all_gather layers.0"',
        '"all_gather layers.0", "reduce_scatter layers.2"',
        "backward_sequence",
        "all_gather layers.0",
    ),
    ("qwen3_8b_64_ranks", "local_numel: 3014788", "local_numel: 3014789", "per_rank", "3,014,789"),
    (
        "qwen3_32b_1024_ranks",
        "[q_norm.ranks128-1023, self_attn.q_norm.weight, [128, 1023], [0], 0]",
        "[q_norm.ranks128-1023, self_attn.q_norm.weight, [128, 1023], [1], 0]",
        "q_norm.ranks128-1023",
        "[1]",
    ),
    ("qwen3_0_6b_8_ranks", "ring_bytes: 272271104", "ring_bytes: 311166976", "root_all_gather", "311,166,976"),
    (
        "cluster_bandwidth",
        "[ag_qwen3_8b, all_gather, qwen3_8b_layer, 385892864, 0,",
        "[ag_qwen3_8b, all_gather, qwen3_8b_layer, 385892866, 0,",
        "ag_qwen3_8b",
        "385,892,866",
    ),
    (
        "cluster_bandwidth",
        "step_reduce_scatter, \"the step's reduce-scatter of one layer's gradients, 4.72 MB\", "
        'reduce_scatter, 4720896, 0, "> 0"]',
        "step_reduce_scatter, \"the step's reduce-scatter of one layer's gradients, 4.72 MB\", "
        'reduce_scatter, 4720896, 1, "> 0"]',
        "step_reduce_scatter",
        "expected 1",
    ),
    (
        "cluster_bandwidth",
        "        distinct_devices: true\n",
        "        distinct_devices: true\n        hosts: 2\n",
        "one_gpu_per_rank",
        "expected 2",
    ),
    (
        "state_dict_3_ranks",
        "[q_norm.rank2, self_attn.q_norm.weight, [2], [4], [12], 4]",
        "[q_norm.rank2, self_attn.q_norm.weight, [2], [4], [13], 4]",
        "q_norm.rank2",
        "[13]",
    ),
    (
        "state_dict_3_ranks",
        "local_shape: [8], global_offset: [8],",
        "local_shape: [8], global_offset: [6],",
        "q_norm.rank1",
        "[6]",
    ),  # the reload on 2 ranks
    (
        "state_dict_3_ranks",
        "optimizer_equal_before_load: [step]}",
        "optimizer_equal_before_load: []}",
        "adamw_states",
        "[step]",
    ),
    (
        "state_dict_empty_shards",
        "[q_norm.rank3, self_attn.q_norm.weight, [3], [0], [2], 0]",
        "[q_norm.rank3, self_attn.q_norm.weight, [3], [0], [3], 0]",
        "q_norm.rank3",
        "[3]",
    ),
    ("state_dict_empty_shards", "checkpoint_chunks: 3,", "checkpoint_chunks: 4,", "q_norm_chunks", "expected 4"),
    (
        "state_dict_options",
        "keys: 0, devices: []}",
        "keys: 11, devices: []}",
        "full_on_cpu_others_empty",
        "expected 11",
    ),
    (
        "state_dict_options",
        "set: broadcast_lenient, error: null, missing_keys: [],",
        "set: broadcast_lenient, error: null, missing_keys: [layers.0.mlp.up_proj.weight],",
        "broadcast_lenient_reports_no_missing_key",
        "layers.0.mlp.up_proj.weight",
    ),
    # gathered_equal compares in the dtype the unit gathers in (issue 44): a wrong count, dtype or value fails
    (
        "state_dict_mixed_precision",
        "gathered_equal_entries: 22, gathered_dtypes: [bfloat16]}",
        "gathered_equal_entries: 21, gathered_dtypes: [bfloat16]}",
        "gathers_all_22_in_bf16",
        "expected 21",
    ),
    (
        "state_dict_mixed_precision",
        "gathered_equal: true, gathered_dtype: bfloat16}\n      - {id: q_norm_layer1",
        "gathered_equal: true, gathered_dtype: float32}\n      - {id: q_norm_layer1",
        "q_proj_rank1",
        "float32",
    ),
    (
        "state_dict_mixed_precision",
        "equal: true, gathered_equal: true, gathered_dtype: bfloat16}\n",
        "equal: true, gathered_equal: false, gathered_dtype: bfloat16}\n",
        "q_norm_layer1",
        "expected false",
    ),
    (
        "state_dict_mixed_precision",
        "get: full, layer: 0, param: self_attn.q_proj.weight, shape: [64, 64], dtype: float32,",
        "get: full, layer: 0, param: self_attn.q_proj.weight, shape: [64, 64], dtype: bfloat16,",
        "full_q_proj_fp32",
        "bfloat16",
    ),  # the full state dict is in the stored dtype, not param_dtype
    # a selector changed to another that the setup does produce: the entry then measures something else
    (
        "qwen3_0_6b_8_ranks",
        "select: {phase: forward, op: all_gather, unit: root}",
        "select: {phase: forward, op: all_gather, unit: model.layers.1}",
        "root_all_gather",
        "15,730,944",
    ),  # unit
    (
        "hsdp_2x2",
        "select: {phase: backward, op: all_reduce, layer: 0}",
        "select: {phase: backward, op: reduce_scatter, layer: 0}",
        "all_reduce_across_replicas",
        "dp_shard",
    ),  # op
    (
        "qwen3_walkthrough",
        'state: "After Post-Forward", unsharded_param: 0}',
        'state: "After Pre-Forward", unsharded_param: 0}',
        "unsharded_freed_after_step11",
        "4,720,896",
    ),  # memory state
    (
        "whole_model",
        "select: {role: layer}, count: 6",
        "select: {role: root}, count: 6",
        "layers_move_n_l_times_10_6_mb",
        "expected 6",
    ),  # unit role
    (
        "qwen3_walkthrough",
        "select: {phase: optimizer}",
        "select: {phase: backward}",
        "optimizer_needs_no_communication",
        "expected 0",
    ),  # phase
    (
        "state_dict_empty_shards",
        "{id: rank2_elements, ranks: [2], local_numel: 8264}",
        "{id: rank2_elements, ranks: [1], local_numel: 8264}",
        "rank2_elements",
        "8,990",
    ),  # ranks of a reload
    # issue 10, units: a grouped unit, the tracker's perturbation, memory after fully_shard
    (
        "tail_unit",
        "        count: 1\n        numel_in: 4128",
        "        count: 2\n        numel_in: 4128",
        "tail_unit_gathers_once",
        "expected 2",
    ),
    (
        "tail_unit",
        "{id: layer_units, role: layer, count: 22",
        "{id: layer_units, role: module, count: 22",
        "layer_units",
        "expected 22",
    ),  # role module
    ("tail_unit_memory_tracked", "sharded_param: 180992", "sharded_param: 180993", "sharded_parameters", "180,993"),
    # divide factors, the PREMUL_SUM refusal (expect_error, reduce_op)
    (
        "mixed_grad_dtypes_refused",
        "type: AssertionError",
        "type: RuntimeError",
        "uniform_dtype_refused",
        "expected RuntimeError",
    ),
    (
        "premul_sum_refused_on_gloo",
        "        phase: backward\n",
        "        phase: forward\n",
        "premul_sum_refused",
        "expected forward",
    ),
    (
        "premul_sum_refused_hsdp",
        'message: {matches: "PREMUL_SUM with Gloo"}',
        'message: {matches: "PREMUL_SUM with NCCL"}',
        "premul_sum_refused",
        "a string matching /PREMUL_SUM with NCCL/",
    ),
    (
        "divide_factors_4",
        '[factor_8, "f = 8: SUM, then / 8", 2, 1, SUM, 8, true]',
        '[factor_8, "f = 8: SUM, then / 8", 2, 1, SUM, 7, true]',
        "factor_8",
        "expected 7",
    ),
    (
        "divide_factors_2x2",
        '[factor_1_all_reduce, "f = 1: SUM across replicas", 0, all_reduce, 1, SUM, 1]',
        '[factor_1_all_reduce, "f = 1: SUM across replicas", 0, all_reduce, 1, AVG, 1]',
        "factor_1_all_reduce",
        "expected AVG",
    ),
    # HSDP meshes with a dim of size 1 (the [1, 1] attribution)
    (
        "hsdp_1x1",
        "count: 2, mesh_dim: dp_replicate, group_size: 1",
        "count: 2, mesh_dim: dp_shard, group_size: 1",
        "all_reduce_per_unit",
        "expected dp_shard",
    ),
    ("hsdp_1x4", "group_size: 1, numel_in: 9256", "group_size: 4, numel_in: 9256", "all_reduce_per_unit", "expected 4"),
    (
        "hsdp_4x1",
        "numel: 37024, local_numel: 37024}",
        "numel: 37024, local_numel: 9256}",
        "whole_layer_per_rank",
        "9,256",
    ),
    # explicit prefetch, reshard_after_backward
    (
        "explicit_prefetch",
        "count: 2, hook: forward_prefetch",
        "count: 2, hook: pre_forward",
        "layers_1_2_prefetched",
        "expected pre_forward",
    ),
    (
        "explicit_prefetch",
        "select: {phase: backward, op: all_gather, layer: [0, 1]}, count: 2",
        "select: {phase: backward, op: all_gather, layer: [0, 2]}, count: 2",
        "layers_1_0_prefetched",
        "backward_prefetch",
    ),  # layer selector: layer 2 is gathered by its own pre_backward hook
    (
        "reshard_after_backward_false",
        "unsharded_param: 296192",
        "unsharded_param: 0",
        "unsharded_after_the_step",
        "296,192",
    ),
    # frozen parameters, before and after fully_shard
    (
        "frozen_params",
        "count: 1, numel_in: 24704, numel_out: 12352}",
        "count: 1, numel_in: 37024, numel_out: 12352}",
        "only_trainable_reduced",
        "37,024",
    ),
    (
        "frozen_params",
        "[self_attn.q_proj.weight, false, true, [32, 64]]",
        "[self_attn.q_proj.weight, true, true, [32, 64]]",
        "self_attn.q_proj.weight",
        "expected true",
    ),
    (
        "frozen_params_after_fully_shard",
        "fqn: layers.0.self_attn.o_proj.weight, requires_grad: false",
        "fqn: layers.0.self_attn.o_proj.weight, requires_grad: true",
        "frozen_shard",
        "expected true",
    ),
    # activation checkpointing, CPU offload
    ("activation_checkpointing", "activation: 9280}", "activation: 9216}", "only_checkpoint_inputs_saved", "9,216"),
    (
        "activation_checkpointing",
        "layer: 1}, count: 1, hook: pre_backward}",
        "layer: 1}, count: 1, hook: backward_prefetch}",
        "layer1_by_its_pre_backward",
        "expected backward_prefetch",
    ),
    (
        "cpu_offload",
        "[mlp.up_proj.weight, cpu, cpu, cpu, [64, 64], false, false]",
        "[mlp.up_proj.weight, cpu, cuda, cpu, [64, 64], false, false]",
        "mlp.up_proj.weight",
        "expected cuda",
    ),
    # meta-device init
    (
        "meta_init",
        "[embed.rank2, model.embed_tokens.weight, [2], [32, 64]]",
        "[embed.rank2, model.embed_tokens.weight, [2], [33, 64]]",
        "embed.rank2",
        "[33, 64]",
    ),
    ("meta_init", "loss_max_abs_diff: 0}", 'loss_max_abs_diff: "> 0"}', "forward_identical", "> 0"),
    # model options: tied embeddings split or grouped, empty shards
    (
        "tied_embeddings_split_units",
        "raised: true, type: ValueError, phase: forward",
        "raised: true, type: RuntimeError, phase: forward",
        "shared_parameter_refused",
        "expected RuntimeError",
    ),
    (
        "tied_embeddings_one_unit",
        "count: 1,\n         numel_in: 8192, numel_out: 4096",
        "count: 2,\n         numel_in: 8192, numel_out: 4096",
        "tied_unit_reduced_once",
        "expected 2",
    ),
    (
        "empty_shards",
        "[q_norm.ranks2-3, self_attn.q_norm.weight, [2, 3], [0]]",
        "[q_norm.ranks2-3, self_attn.q_norm.weight, [2, 3], [1]]",
        "q_norm.ranks2-3",
        "[1]",
    ),
    (
        "empty_shards",
        "ranks: [2, 3], local_numel: 92}",
        "ranks: [2, 3], local_numel: 110}",
        "emptier_ranks",
        "expected 110",
    ),
    # shard_placement_fn, set_reshard_after_forward after init
    (
        "shard_placement",
        '[mlp.gate_proj.weight, ["Shard(dim=1)"], [128, 32]]',
        '[mlp.gate_proj.weight, ["Shard(dim=0)"], [128, 32]]',
        "mlp.gate_proj.weight",
        "Shard(dim=0)",
    ),
    (
        "set_reshard_after_forward",
        "select: {op: all_gather, unit: root}, count: 2",
        "select: {op: all_gather, unit: root}, count: 1",
        "root_gathered_in_both_passes",
        "expected 1",
    ),
    # per-unit mixed precision: unit input/output dtypes, loss dtype
    (
        "per_unit_mixed_precision",
        "{id: lm_head_input_cast_to_fp32, unit: lm_head, point: pre_forward, input_dtypes: [float32]}",
        "{id: lm_head_input_cast_to_fp32, unit: lm_head, point: pre_forward, input_dtypes: [bfloat16]}",
        "lm_head_input_cast_to_fp32",
        "[bfloat16]",
    ),
    (
        "per_unit_mixed_precision",
        "output_dtype: float32, loss_dtype: float32}",
        "output_dtype: float32, loss_dtype: bfloat16}",
        "fp32_logits_and_loss",
        "expected bfloat16",
    ),
    # torch.compile gated to CUDA runs
    (
        "compile_gated_on_cpu",
        "type: RuntimeError, phase: setup",
        "type: RuntimeError, phase: forward",
        "refused_on_cpu",
        "expected forward",
    ),
    # nested units, a child after its parent
    (
        "nested_units",
        "count: 6, numel: 12320, local_numel: 6160}",
        "count: 6, numel: 12320, local_numel: 12320}",
        "attention_unit",
        "12,320",
    ),
    (
        "parent_before_child",
        'message: {matches: "Cannot concatenate overlapping meshes"}',
        'message: {matches: "already sharded"}',
        "refused_in_setup",
        "a string matching /already sharded/",
    ),
    # schedules: one figure per spec, and each new selector changed to another the setup produces
    (
        "grad_accumulation",
        "        select: {step_index: 0, microbatch: 0, op: reduce_scatter}\n        count: 0",
        "        select: {step_index: 0, microbatch: 0, op: reduce_scatter}\n        count: 2",
        "mb0_no_reduce_scatter",
        "expected 2",
    ),
    (
        "grad_accumulation",
        "select: {step_index: 0, microbatch: 1, op: reduce_scatter}",
        "select: {step_index: 0, microbatch: 0, op: reduce_scatter}",
        "mb1_reduce_scatters_each_layer",
        "expected 2",
    ),  # microbatch
    (
        "event_order",
        'order: ["reshard layers.0", "all_gather layers.1"]',
        'order: ["all_gather layers.1", "reshard layers.0"]',
        "reshard_before_next_gather",
        "all_gather layers.1",
    ),
    (
        "event_order",
        'events: ["reshard layers.0", "all_gather layers.1"]',
        'events: ["reshard layers.1", "all_gather layers.1"]',
        "reshard_before_next_gather",
        "reshard layers.1",
    ),  # events
    (
        "forward_no_grad",
        'sequence: ["all_gather model.layers.0", "all_gather model.layers.1"]',
        'sequence: ["all_gather root", "all_gather model.layers.0", "all_gather model.layers.1"]',
        "step1_root_still_unsharded",
        "all_gather root",
    ),
    ("clip_grad_norm", "numel_in: 22", "numel_in: 11", "one_all_reduce_of_22_norms", "expected 11"),
    (
        "clip_grad_norm_eps",
        'clip_coef: "≈0.1000000", reference_clip_coef: "≈0.1000000"}',
        'clip_coef: "≈0.1000001", reference_clip_coef: "≈0.1000000"}',
        "l2_scaled_by_max_norm_over_eps",
        "0.1000001",
    ),
    (
        "clip_grad_norm_local_value",
        'placements: ["Replicate()"], local_equals_value: true,',
        'placements: ["Replicate()"], local_equals_value: false,',
        "l2_every_rank_holds_the_full_norm",
        "expected false",
    ),
    (
        "clip_grad_norm_local_value",
        'step_index: 0, placements: ["Partial(max)"], rel_diff',
        'step_index: 0, placements: ["Replicate()"], rel_diff',
        "inf_partial_max",
        "Replicate()",
    ),
    (
        "clip_grad_norm_inf_empty_shard",
        "ranks: [2, 3], raised: true, type: RuntimeError,",
        "ranks: [2, 3], raised: true, type: ValueError,",
        "empty_shards_refused",
        "ValueError",
    ),
    (
        "activation_checkpointing_reentrant",
        "count: 5, numel_out: 37024}",
        "count: 3, numel_out: 37024}",
        "five_backward_all_gathers",
        "expected 3",
    ),
    (
        "activation_checkpointing_forward",
        "count: 3, numel_out: 37024,",
        "count: 5, numel_out: 37024,",
        "three_backward_all_gathers",
        "expected 5",
    ),
    ("clip_grad_norm_inf", "reduce_op: MAX", "reduce_op: SUM", "one_max_all_reduce_of_the_norm", "SUM"),
    (
        "clip_grad_norm",
        'placements: ["Replicate()"]',
        'placements: ["Shard(dim=0)"]',
        "replicated_dtensor",
        "Shard(dim=0)",
    ),
    (
        "adamw_three_steps",
        "        step_index: 0\n        optstate: 148184",
        "        step_index: 0\n        optstate: 148096",
        "optimizer_state",
        "148,096",
    ),
    (
        "adamw_three_steps",
        "        step_index: 2\n        sharded_grad: 74048",
        "        step_index: 1\n        sharded_grad: 74048",
        "zeros_keeps_the_gradients",
        "74,048",
    ),  # step_index
    ("loss_on_intermediate", "numel_in: 20640", "numel_in: 37024", "layer1_reduces_20640", "37,024"),
    (
        "loss_on_intermediate",
        "        param: mlp.up_proj.weight\n        rows_changed: 0",
        "        param: mlp.gate_proj.weight\n        rows_changed: 0",
        "up_proj_unchanged",
        "expected 0",
    ),  # param_update's param
    (
        "mixed_precision_accumulation",
        "        dtype: float32\n        numel_in: 37024",
        "        dtype: bfloat16\n        numel_in: 37024",
        "mb1_reduce_scatters_fp32",
        "bfloat16",
    ),
    (
        "mixed_precision_accumulation",
        "        microbatch: 0\n        layers: 1",
        "        microbatch: 1\n        layers: 1",
        "layer1_absent_in_mb0",
        "expected 1",
    ),  # step's microbatch
    # custom: a value the spec's own observe hook returned
    (
        "hooks_unfreeze_layer0",
        "[step1_layer0_trains, 1, 11, 11, 11, float32, [32, 64]]",
        "[step1_layer0_trains, 1, 11, 11, 11, float32, [64, 64]]",
        "step1_layer0_trains",
        "[64, 64]",
    ),
    (
        "hooks_freeze_between_microbatches",
        "[frozen_layer0_keeps_a_gradient, 0, 0, 11, float32]",
        "[frozen_layer0_keeps_a_gradient, 0, 0, 0, float32]",
        "frozen_layer0_keeps_a_gradient",
        "expected 0",
    ),
    # collectives: a unit of fp32 shards all-gathers in param_dtype (bf16): 128 bytes, not 256
    (
        "mixed_param_dtypes",
        "numel_out: 64, numel_in: 32, buffer_bytes: 128}",
        "numel_out: 64, numel_in: 32, buffer_bytes: 256}",
        "norm_gathered_bf16",
        "256",
    ),
    (
        "mixed_param_dtypes_refused",
        "        phase: forward\n",
        "        phase: backward\n",
        "uniform_dtype_expected",
        "backward",
    ),
    # expect_error: a hook's error keeps torch's type; the wrapper's would fail exactly that entry
    (
        "hook_error_type",
        "        type: ValueError\n",
        "        type: HookError\n",
        "torchs_value_error",
        "ValueError",
    ),
    # grads: a count and a gradient shard after a schedule step's unfreeze
    (
        "unfreeze_between_steps",
        "[step1_layer0_trains, 1, 0, 11, 11, float32]",
        "[step1_layer0_trains, 1, 0, 11, 10, float32]",
        "step1_layer0_trains",
        "expected 10",
    ),
    (
        "unfreeze_between_steps",
        "[q_proj_shard_step1, 1, [32, 64]]",
        "[q_proj_shard_step1, 1, [64, 64]]",
        "q_proj_shard_step1",
        "[64, 64]",
    ),
    # unit_dtypes: a unit frozen at its first forward resolved nothing
    (
        "unfreeze_after_frozen_first_forward",
        '[layer0_unfrozen_still_unresolved, 1, 0, 11, null, null, "<2.14"]',
        '[layer0_unfrozen_still_unresolved, 1, 0, 11, float32, null, "<2.14"]',
        "layer0_unfrozen_still_unresolved",
        "float32",
    ),
    (
        "unfreeze_after_frozen_first_forward_bf16",
        '[layer1_resolved, 0, 1, 11, bfloat16, float32, ""]',
        '[layer1_resolved, 0, 1, 11, float32, float32, ""]',
        "layer1_resolved",
        "float32",
    ),
    # a torch ">=2.14" gate dropped: 2.13 (pytorch#187376 not in it) fails the fixed behaviour's entry
    (
        "unfreeze_after_frozen_first_forward",
        '[layer0_frozen_resolved, 0, 0, 0, float32, float32, ">=2.14"]',
        '[layer0_frozen_resolved, 0, 0, 0, float32, float32, ""]',
        "layer0_frozen_resolved",
        "observed null",
    ),
    (
        "unfreeze_after_frozen_first_forward_bf16",
        'dtype: float32, buffer_bytes: 148096,\n         torch: ">=2.14"}',
        "dtype: float32, buffer_bytes: 148096}",
        "layer0_reduces_fp32",
        "74,048",
    ),
    # grads: Parameter.grad_dtype as fully_shard left it
    (
        "grad_dtype_dropped",
        "params: 22, param_grad_dtype: bfloat16}",
        "params: 22, param_grad_dtype: float32}",
        "grad_dtype_reset_to_bf16",
        "float32",
    ),
]


CASES += MOE_CASES  # tests/support/mutation_cases_moe.py
CASES += OBSERVABILITY_CASES  # tests/support/mutation_cases_observability.py
CASES += SETTER_CASES  # tests/support/mutation_cases_setters.py


def _copy_hooks_file(spec: Path, folder: Path) -> None:
    """A spec's hooks file (``setup.hooks.file``, beside it) goes with its mutated copy."""
    hooks = spec.with_suffix(".py")
    if hooks.exists():
        shutil.copy(hooks, folder / hooks.name)


# Specs no CPU machine can observe: their entries are judged against hand-written observations
# (a wrong figure failing exactly its entry) in the test named here.
JUDGED_BY_HAND = {
    "premul_sum_reduce_scatter_one_rank": "tests/unit/judge/test_premul_sum_pin.py",
}


def test_every_spec_has_a_mutation_case():
    assert {p.stem for p in SPECS.glob("*.yaml")} <= {c[0] for c in CASES} | set(JUDGED_BY_HAND)
    assert all((REPO / path).is_file() for path in JUDGED_BY_HAND.values())


@pytest.mark.slow
@pytest.mark.parametrize("spec_name, old, new, failing_id, shown", CASES, ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_one_changed_figure_fails_exactly_that_entry(
    spec_name, old, new, failing_id, shown, tmp_path, spec_observation
):
    original = SPECS / f"{spec_name}.yaml"
    text = original.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"the text to change must occur once in {original.name}"
    mutated = tmp_path / original.name
    mutated.write_text(text.replace(old, new), encoding="utf-8")
    _copy_hooks_file(original, tmp_path)

    spec = load_spec(original)
    observation = spec_observation(spec)
    assert not [r.entry.id for r in evaluate_spec(spec, observation) if r.status in FAILING]

    results = evaluate_spec(load_spec(mutated), observation)
    failing = [r for r in results if r.status in FAILING]
    assert [r.entry.id for r in failing] == [failing_id]
    message = failing[0].explain()
    assert shown in message and "observed" in message
    assert failing[0].entry.section in message


# A changed setup key changes the run itself: the mutated spec runs (its own observation, cached
# per setup like every spec's) and exactly the entries that pin that key's effect fail.
# (spec, text in the spec, replacement, the failing entry ids in file order)
SETUP_CASES = [
    (
        "grad_accumulation",
        "- {microbatches: 2, gradient_sync: every, optimizer_step: false}",
        "- {microbatches: 3, gradient_sync: every, optimizer_step: false}",
        ["every_step_reduce_scatters"],
    ),  # microbatches
    (
        "grad_accumulation",
        "- {microbatches: 2, gradient_sync: last}",
        "- {microbatches: 2, gradient_sync: every}",
        ["mb0_no_reduce_scatter"],
    ),  # gradient_sync
    (
        "grad_accumulation",
        "- {forwards: 2}",
        "- {forwards: 3}",
        ["forward_gathers", "layer1_gathered_twice_in_backward", "layer1_post_backward_per_forward"],
    ),  # forwards
    (
        "grad_accumulation",
        "gradient_sync: every, optimizer_step: false}",
        "gradient_sync: every, optimizer_step: true}",
        ["step1_moves_nothing"],
    ),  # optimizer_step
    (
        "forward_no_grad",
        "- {unshard: [model.layers.0]}",
        "- {unshard: [model.layers.0], forward_only: true}",
        ["equals_reference"],
    ),  # forward_only
    (
        "forward_no_grad",
        "- {no_grad: true}\n",
        "- {no_grad: false}\n",  # no_grad: step 0 trains, so backward
        [
            "layers_reshard_root_does_not",
            "step0_gathers_three_units",
            "step0_nothing_else",  # gathers, reduces and
            "step1_root_still_unsharded",
        ],
    ),  # reshards the root, which step 1 then gathers again
    (
        "forward_no_grad",
        "- {unshard: [model.layers.0]}",
        "- {unshard: [model.layers.1]}",
        ["manual_unshard_gathers_layer0", "step2_forward_gathers"],
    ),  # unshard
    (
        "forward_no_grad",
        "- {no_grad: true, reshard: [root]}",
        "- {no_grad: true, reshard: [model.layers.0]}",
        ["manual_reshard_of_the_root", "step2_forward_gathers"],
    ),  # reshard
    (
        "loss_on_intermediate",
        '- {loss_on: "layers.1:step9.gate"}',
        '- {loss_on: "layers.1:step9.up"}',
        ["up_proj_unchanged", "gate_proj_moves"],
    ),  # loss_on
    (
        "mixed_precision_accumulation",
        "used_only_in: {layers.1: [1]}",
        "used_only_in: {layers.0: [1]}",
        ["mb0_gathers_layer0_only"],
    ),  # used_only_in
    (
        "hsdp_all_reduce_last",
        "- {microbatches: 2, gradient_sync: every, all_reduce: last}",
        "- {microbatches: 2, gradient_sync: every, all_reduce: every}",
        ["mb0_no_all_reduce", "step0_all_reduce_bytes", "mb0_held_back"],
    ),  # all_reduce
    (
        "state_dict_options",
        "- {id: full_on_cpu, full_state_dict: true, cpu_offload: true}",
        "- {id: full_on_cpu, full_state_dict: true}",
        ["full_on_cpu_others_empty", "full_on_cpu_q_norm_absent"],
    ),  # get_model[].cpu_offload: without it every rank gets the full state dict
    (
        "state_dict_options",
        "- {id: strict_missing, drop: [layers.0.mlp.up_proj.weight]}",
        "- {id: strict_missing, strict: false, drop: [layers.0.mlp.up_proj.weight]}",
        ["strict_raises"],
    ),  # set_model[].strict
    (
        "state_dict_options",
        "- {id: broadcast_into_meta, into: meta, full_state_dict: true, broadcast_from_rank0: true}",
        "- {id: broadcast_into_meta, into: meta, full_state_dict: true}",
        ["recipe_others_hand_over_nothing"],
    ),  # set_model[].broadcast_from_rank0: every rank hands over the full state dict
    (
        "state_dict_mixed_precision",
        "mixed_precision: {param_dtype: bfloat16, reduce_dtype: float32}",
        "mixed_precision: {param_dtype: float16, reduce_dtype: float32}",
        ["gathers_all_22_in_bf16", "q_proj_rank1", "q_norm_layer1"],
    ),  # fsdp.mixed_precision.param_dtype: the units gather in fp16, still equal to the trained values in fp16
    (
        "clip_grad_norm",
        "{max_norm: 1.0, norm_type: 1.0}",
        "{max_norm: 1.0e+9, norm_type: 1.0}",
        ["l1_equals_reference"],
    ),  # clip_grad_norm
    (
        "clip_grad_norm",
        "    loss: sum",
        "    loss: mean_square",
        ["l2_equals_reference"],
    ),  # loss: the L1 norm still exceeds 1
    ("adamw_three_steps", "- {zero_grad: zeros}", "- {zero_grad: true}", ["zeros_keeps_the_gradients"]),  # zero_grad
    (
        "adamw_three_steps",
        "- {repeat: 2}",
        "- {repeat: 3}",
        ["every_row_every_step", "zeros_keeps_the_gradients"],
    ),  # repeat
    (
        "hooks_unfreeze_layer0",
        "- {call: unfreeze_layer0}",
        "- {}",  # a schedule step's call: layers.0 stays frozen
        ["step1_layer0_trains", "unfrozen_step_reduces_all", "all_gradients_right"],
    ),
    (
        "mixed_param_dtypes_refused",
        '    param_dtypes: {"layers.*.input_layernorm.weight": float32}\n',
        "",  # every parameter bf16: nothing refused
        ["uniform_dtype_expected"],
    ),
    (
        "mixed_param_dtypes",
        '    param_dtypes: {"layers.*.input_layernorm.weight": float32}\n',
        "",  # the norms built bf16 too
        ["input_layernorm.weight", "norm_gradient_fp32"],
    ),
    (
        "hook_error_type",
        "    after_fully_shard: prefetch_a_plain_module\n",
        "",  # no hook: nothing raises
        ["torchs_value_error"],
    ),
    (
        "hooks_freeze_between_microbatches",
        "    after_microbatch: freeze_layer0_after_first_microbatch\n",
        "",  # no hook: layers.0 trains in both microbatches
        ["frozen_layer0_keeps_a_gradient"],
    ),
    (
        "hooks_freeze_between_microbatches",
        "- {microbatches: 2}",
        "- {microbatches: 2, gradient_sync: every}",  # microbatch 0 reduces layers.0; microbatch 1 has nothing of it
        ["mb0_reduces_nothing", "mb1_reduces_frozen_layer0"],
    ),
    (
        "activation_checkpointing_reentrant",
        "checkpoint_style: call, checkpoint_use_reentrant: true}",
        "checkpoint_style: call, checkpoint_use_reentrant: false}",  # non-reentrant: no duplicate
        [
            "five_backward_all_gathers",
            "duplicates_by_forward_prefetch",
            "backward_order",
            "recompute_prefetches",
            "no_copy_out_after",
        ],
    ),  # checkpoint_use_reentrant
    (
        "activation_checkpointing_forward",
        "checkpoint: true, checkpoint_style: forward}",
        "checkpoint: true, checkpoint_style: call}",  # FSDP's hooks inside the checkpoint: the duplicates
        [
            "three_backward_all_gathers",
            "no_forward_prefetch_in_backward",
            "backward_order",
            "no_pre_forward_in_backward",
        ],
    ),  # checkpoint_style
    (
        "clip_grad_norm_eps",
        "- {loss_scale: 1.0e-30, clip_grad_norm: {max_norm: 1.0e-7, norm_type: .inf}}",
        "- {clip_grad_norm: {max_norm: 1.0e-7, norm_type: .inf}}",  # unscaled: a norm of ~4e-3, no eps regime
        ["inf_norm_tiny", "inf_scaled_by_max_norm_over_eps"],
    ),  # loss_scale
    (
        "unfreeze_between_steps",
        '- {unfreeze: ["layers.0.**"]}',
        "- {}",  # a schedule step's unfreeze: layers.0 stays frozen
        ["step1_layer0_trains", "q_proj_shard_step1", "unfrozen_step_reduces_all", "all_gradients_right"],
    ),
    (
        "unfreeze_after_frozen_first_forward",
        '- {freeze: ["layers.0.**"]}',
        "- {}",  # a schedule step's freeze: layers.0 trainable at its first forward resolves float32
        [
            "layer0_frozen_unresolved",
            "layer0_unfrozen_still_unresolved",
            "step0_layer0_none",
            "layer0_reduces_bf16_after_unfreeze",
            "bf16_gradient_refused",
        ],
    ),
    (
        "unfreeze_after_frozen_first_forward_bf16",
        '- {unfreeze: ["layers.0.**"]}',
        "- {}",  # layers.0 stays frozen: no bf16 reduce-scatter, 11 gradients only
        ["layer0_unfrozen_still_unresolved", "layer0_reduces_bf16", "every_gradient_bf16"],
    ),
]
SETUP_CASES += OBSERVABILITY_SETUP_CASES  # tests/support/mutation_cases_observability.py
SETUP_CASES += SETTER_SETUP_CASES  # tests/support/mutation_cases_setters.py


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec_name, old, new, failing_ids", SETUP_CASES, ids=[f"{c[0]}-{c[2].strip('- {}')[:30]}" for c in SETUP_CASES]
)
def test_one_changed_setup_key_fails_exactly_its_entries(spec_name, old, new, failing_ids, tmp_path, spec_observation):
    original = SPECS / f"{spec_name}.yaml"
    text = original.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"the text to change must occur once in {original.name}"
    mutated = tmp_path / original.name
    mutated.write_text(text.replace(old, new), encoding="utf-8")
    _copy_hooks_file(original, tmp_path)
    spec = load_spec(mutated)
    failing = [r for r in evaluate_spec(spec, spec_observation(spec)) if r.status in FAILING]
    assert [r.entry.id for r in failing] == failing_ids, "\n".join(r.explain() for r in failing)


@pytest.mark.slow
def test_cli_exits_nonzero_and_names_the_entry(tmp_path):
    text = (SPECS / "qwen3_walkthrough.yaml").read_text(encoding="utf-8")
    mutated = tmp_path / "walkthrough_mutated.yaml"
    old = 'memory_falls_back, says: "parameter memory drops from 4.72 MB back to 1.18 MB", bytes: "1.18 MB"}'
    assert text.count(old) == 1
    mutated.write_text(text.replace(old, old.replace('bytes: "1.18 MB"', 'bytes: "1.28 MB"')), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(mutated), "--failures-only"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=SPECS.parent,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "memory_falls_back" in proc.stdout and "1.28 MB" in proc.stdout and "1.18 MB" in proc.stdout
    assert "1 failed" in proc.stdout.splitlines()[-1]
    assert "Traceback" not in proc.stdout + proc.stderr
