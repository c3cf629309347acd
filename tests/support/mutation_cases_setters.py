"""Mutation cases of the FSDPModule setter specs (issue 40), in tests/integration/test_mutations.py's
formats: SETTER_CASES as its CASES (spec, text, replacement, failing entry id, text the failure
must show), SETTER_SETUP_CASES as its SETUP_CASES (spec, text, replacement, failing entry ids).

A setup case flips the setter's key, so the spec's run changes and exactly the entries that pin
the setter's effect fail: that shows the key reaches torch."""

SETTER_CASES = [
    (
        "expert_parallel",
        "total_buffer_bytes: 35840}",
        "total_buffer_bytes: 32768}",
        "rank1_tokens_bytes",
        "35,840",
    ),
    (
        "share_comm_ctx",
        "{id: layer0_holds_layer1s, unit: layers.0, comm_contexts_at_setup: [layers.1]}",
        "{id: layer0_holds_layer1s, unit: layers.0, comm_contexts_at_setup: [layers.0]}",
        "layer0_holds_layer1s",
        "[layers.1]",
    ),
    (
        "fsdp_tp_sequence_parallel",
        "count: 4, group_size: 2,\n         numel_in: 512, numel_out: 1024, buffer_bytes: 4096}",
        "count: 4, group_size: 2,\n         numel_in: 1024, numel_out: 1024, buffer_bytes: 4096}",
        "forward_gathers",
        "expected 1,024",
    ),
    (
        "post_optim_event_on_gloo",
        "raised: true, type: RuntimeError, phase: optimizer,",
        "raised: true, type: RuntimeError, phase: forward,",
        "no_cpu_events",
        "optimizer",
    ),
    (
        "dp_mesh_dims_flash_attention",
        "raised: true, type: NotImplementedError, phase: forward,",
        "raised: true, type: NotImplementedError, phase: backward,",
        "no_strategy_for_cpu_flash_attention",
        "backward",
    ),
    (
        "expert_parallel_divide_factor",
        'param: mlp.experts.gate_up_proj, grads_rel_diff: "<= 1.001"}',
        'param: mlp.experts.gate_up_proj, grads_rel_diff: "<= 0.5"}',
        "gate_up_not_more",
        "<= 0.5",
    ),
    (
        "expert_parallel_unrouted",
        "{id: one_pair_per_rank, layer: 0, tokens_total: 1}",
        "{id: one_pair_per_rank, layer: 0, tokens_total: 2}",
        "one_pair_per_rank",
        "expected 2",
    ),
    (
        "dp_mesh_dims_hsdp",
        "select: {op: all_reduce}, count: 2, mesh_dim: dp_replicate, numel_in: 18512}",
        "select: {op: all_reduce}, count: 2, mesh_dim: dp_shard, numel_in: 18512}",
        "all_reduces_over_dp_replicate",
        "dp_replicate",
    ),
    (
        "dp_mesh_dims",
        '[q_proj_sharded_on_dp, self_attn.q_proj.weight, [32, 64], ["Shard(dim=0)"], [dp]]',
        '[q_proj_sharded_on_dp, self_attn.q_proj.weight, [32, 64], ["Replicate()"], [dp]]',
        "q_proj_sharded_on_dp",
        "Replicate()",
    ),
    (
        "expert_parallel",
        '[rank2_experts_2_3, [2], [2, 3], ["_StridedShard(dim=0, sf=2)", "Shard(dim=0)"]]',
        '[rank2_experts_2_3, [2], [4, 5], ["_StridedShard(dim=0, sf=2)", "Shard(dim=0)"]]',
        "rank2_experts_2_3",
        "[2, 3]",
    ),
    (
        "expert_parallel",
        "select: {phase: forward, op: all_to_all, dtype: int64}, count: 2, group_size: 2,\n         numel_in: 8,",
        "select: {phase: forward, op: all_to_all, dtype: int64}, count: 2, group_size: 2,\n         numel_in: 16,",
        "counts_per_layer",
        "expected 16",
    ),
    (
        "fsdp_tp_2d",
        '[q_proj_colwise, self_attn.q_proj.weight, [64, 64], [16, 64], ["_StridedShard(dim=0, sf=2)", "Shard(dim=0)"]]',
        '[q_proj_colwise, self_attn.q_proj.weight, [64, 64], [32, 64], ["_StridedShard(dim=0, sf=2)", "Shard(dim=0)"]]',
        "q_proj_colwise",
        "[16, 64]",
    ),
    (
        "fsdp_tp_2d",
        "select: {phase: forward, op: all_reduce, mesh_dim: tp}, count: 4,",
        "select: {phase: forward, op: all_reduce, mesh_dim: tp}, count: 2,",
        "rowwise_outputs_in_forward",
        "expected 2",
    ),
    (
        "fsdp_tp_plain_plan_qk_norm",
        'layer: 0, param: self_attn.q_norm.weight, grads_rel_diff: ">= 0.1"}',
        'layer: 0, param: self_attn.q_norm.weight, grads_rel_diff: "<= 1e-5"}',
        "q_norm_gradient_wrong",
        "0.632819",
    ),
    (
        "forward_input_structure",
        "argument: positional, container: dict, dtype: bfloat16}",
        "argument: positional, container: UserDict, dtype: bfloat16}",
        "dict_cast",
        "UserDict",
    ),
    (
        "forward_input_structure",
        "container: Tensor, dtype: bfloat16, shape: [2, 8, 64]}",
        "container: Tensor, dtype: bfloat16, shape: [2, 64, 8]}",
        "positional_cast",
        "[2, 8, 64]",
    ),
    (
        "all_gather_extension",
        "received_shapes: [[32, 64]],",
        "received_shapes: [[64, 32]],",
        "q_proj_shard_cast_to_bf16",
        "[[32, 64]]",
    ),
    (
        "all_gather_extension",
        "into_out: true, param_dtype: float32}",
        "into_out: true, param_dtype: bfloat16}",
        "later_gathers_refill_out",
        "float32",
    ),
    (
        "all_gather_extension",
        "returned_dtypes: [bfloat16], returned_shapes: [[32, 64]]}",
        "returned_dtypes: [float32], returned_shapes: [[32, 64]]}",
        "q_proj_shard_cast_to_bf16",
        "bfloat16",
    ),
    (
        "all_gather_extension",
        "dtype: uint8,\n         numel_in: 37184, numel_out: 74368}",
        "dtype: uint8,\n         numel_in: 74048, numel_out: 74368}",
        "mixed_dtypes_gathered_as_bytes",
        "37,184",
    ),
    (
        "forward_method_registered",
        "select: {phase: forward, op: all_gather, unit: root}, numel_in: 4128, numel_out: 8256}",
        "select: {phase: forward, op: all_gather, unit: root}, numel_in: 4128, numel_out: 16512}",
        "root_gather_size",
        "16,512",
    ),
    (
        "forward_method_unregistered",
        "select: {phase: forward}, count: 0}",
        "select: {phase: forward}, count: 3}",
        "no_all_gather",
        "expected 3",
    ),
    (
        "forward_input_structure",
        "argument: positional, container: UserDict, dtype: float32,",
        "argument: positional, container: UserDict, dtype: bfloat16,",
        "user_dict_passed_as_given",
        "float32",
    ),
    (
        "forward_input_user_dict",
        'message: {matches: "expected m1 and m2 to have the same dtype"}',
        'message: {matches: "expected m1 and m2 to have the same shape"}',
        "mixed_dtype_matmul",
        "same dtype",
    ),
    (
        "double_backward_segfault",
        "died: true, signal: SIGSEGV, exit_code: -11, phase: backward",
        "died: true, signal: SIGBUS, exit_code: -11, phase: backward",
        "every_rank_dies_by_sigsegv",
        "SIGBUS",
    ),
    (
        "rank_killed_by_signal",
        "died: true, signal: SIGSEGV, exit_code: -11,",
        "died: true, signal: SIGABRT, exit_code: -11,",
        "rank1_killed_by_sigsegv",
        "SIGABRT",
    ),
    (
        "reset_iter_state",
        "[layer0_resharded_by_reset, layers.0, after_reset_iter_state, 11, 0, 11, 74048]",
        "[layer0_resharded_by_reset, layers.0, after_reset_iter_state, 11, 0, 11, 148096]",
        "layer0_resharded_by_reset",
        "148,096",
    ),
    (
        "unshard_async",
        'phase: unshard, source: fsdp,\n         sequence: ["all_gather layers.0"]}',
        'phase: unshard, source: fsdp,\n         sequence: ["all_gather layers.0", "all_gather_copy_out layers.0"]}',
        "async_leaves_the_copy_out",
        "all_gather_copy_out layers.0",
    ),
    (
        "custom_comms",
        "reduce_scatters: [[37024, 18512]]}",
        "reduce_scatters: [[37024, 18512], [37024, 18512]]}",
        "gathered_twice_reduced_once",
        "[37024, 18512], [37024, 18512]",
    ),
    (
        "all_reduce_hook",
        "step_index: 0, hook_calls: 1, numels: [18512]",
        "step_index: 0, hook_calls: 1, numels: [37024]",
        "called_once_with_the_flat_shard",
        "37024",
    ),
    (
        "reduce_scatter_group_and_buffers",
        "[layer1_own_group_two_buffers, 1, true, 2]",
        "[layer1_own_group_two_buffers, 1, true, 3]",
        "layer1_own_group_two_buffers",
        "expected 3",
    ),
    (
        "ignored_params",
        "[ignored_plain_and_whole, self_attn.q_proj.weight, null, false,",
        "[ignored_plain_and_whole, self_attn.q_proj.weight, layers.0, false,",
        "ignored_plain_and_whole",
        "expected layers.0",
    ),
    (
        "unshard_in_backward_false",
        "select: {phase: backward, op: all_gather, unit: model.embed_tokens}, count: 0}",
        "select: {phase: backward, op: all_gather, unit: model.embed_tokens}, count: 1}",
        "embedding_not_gathered_in_backward",
        "expected 1",
    ),
    (
        "reduce_scatter_unused_params",
        "layer: 1}, count: 1, numel_in: 37024, numel_out: 18512}",
        "layer: 1}, count: 1, numel_in: 20640, numel_out: 18512}",
        "layer1_reduces_the_whole_layer",
        "20,640",
    ),
    (
        "reduce_scatter_divide_factor_alias",
        '[factor_4, "f = 4 through the alias: SUM, then / 4", 1, 1, SUM, 4, true]',
        '[factor_4, "f = 4 through the alias: SUM, then / 4", 1, 1, SUM, 2, true]',
        "factor_4",
        "expected 2",
    ),
    (
        "symm_mem_for_comm_on_gloo",
        "raised: true, type: RuntimeError,",
        "raised: true, type: ValueError,",
        "refused_on_cpu",
        "ValueError",
    ),
    (
        "process_group_allocation_on_gloo",
        "DefaultAllGather, DefaultReduceScatter, ProcessGroupAllocAllGather, ProcessGroupAllocReduceScatter, false]",
        "DefaultAllGather, DefaultReduceScatter, DefaultAllGather, ProcessGroupAllocReduceScatter, false]",
        "helpers",
        "DefaultAllGather",
    ),
    (
        "is_last_backward_false",
        '"reduce_scatter layers.1", "all_gather layers.1",\n',
        '"reduce_scatter layers.1",\n',
        "step1_gathers_layer1_again",
        "reduce_scatter layers.0",
    ),
]

SETTER_SETUP_CASES = [
    (
        "share_comm_ctx",
        "  fsdp:\n    share_comm_ctx: [layers.1, layers.0]\n",
        "",  # no sharing: each unit holds its own until the root's lazy init
        ["shared_at_setup", "layer0_holds_layer1s"],
    ),
    (
        "fsdp_tp_sequence_parallel",
        "  tensor_parallel: {sequence_parallel: true}\n",
        "  tensor_parallel: {}\n",  # plain TP: all-reduces, the norms on dp alone
        [
            "input_layernorm_replicated_on_tp",
            "forward_gathers",
            "forward_reduce_scatters",
            "no_forward_all_reduce",
            "backward_gathers_and_scatters",
            "norm_weight_grads_summed",
        ],
    ),
    (
        "post_optim_event_on_gloo",
        "      - {post_optim_event: true}\n",
        "      - {}\n",  # no event: both steps run
        ["no_cpu_events", "no_step1"],
    ),
    (
        "dp_mesh_dims_flash_attention",
        "    dtype: float32\n  mesh:",
        "    dtype: float32\n    attention_kernel: math\n  mesh:",  # the kernel DTensor knows: the step runs
        ["no_strategy_for_cpu_flash_attention", "layer0_gathered", "nothing_reduced"],
    ),
    (
        "expert_parallel",
        '      - {modules: "layers.*.mlp.experts", gradient_divide_factor: 4, force_sum_reduction_for_comms: true}\n',
        '      - "layers.*.mlp.experts"\n',
        # FSDP's default divide factor for the experts: averaged over efsdp, twice the mean
        ["experts_reduce_scatter_summed", "gradients_equal_the_replica", "experts_equal_the_replica"],
    ),
    (
        "expert_parallel_divide_factor",
        '    units: ["layers.*.mlp.experts", "layers.*"]\n',
        '    units: [{modules: "layers.*.mlp.experts", gradient_divide_factor: 4, force_sum_reduction_for_comms: true},'
        ' "layers.*"]\n',
        ["gate_up_twice_the_mean", "down_twice_the_mean", "experts_average_over_efsdp"],
    ),
    (
        "expert_parallel_unrouted",
        "  batch_per_rank: 1\n  seq_len: 1\n",
        "  batch_per_rank: 4\n  seq_len: 8\n",  # 128 pairs over 8 experts: every expert routed
        ["one_pair_per_rank", "at_least_four_unrouted"],
    ),
    (
        "fsdp_tp_2d",
        "  tensor_parallel: {}\n",
        "  tensor_parallel: {plan: {mlp.gate_proj: colwise, mlp.up_proj: colwise, mlp.down_proj: rowwise}}\n",
        # TP on the MLP only: attention is FSDP's alone, so its shards, the gathers and TP's
        # attention all-reduces change; the MLP's shards, the numerics and the mesh dims do not
        [
            "q_proj_colwise",
            "k_proj_colwise",
            "o_proj_rowwise",
            "q_norm_replicated_on_tp",
            "tp_weights_on_both_dims",
            "one_gather_per_layer_and_pass",
            "one_reduce_scatter_per_layer",
            "rowwise_outputs_in_forward",
            "colwise_input_grads_in_backward",
            "head_norm_weight_grads_in_backward",
        ],
    ),
    (
        "fsdp_tp_plain_plan_qk_norm",
        "      self_attn.v_proj: colwise\n",
        "      self_attn.v_proj: colwise\n      self_attn.q_norm: head_norm\n      self_attn.k_norm: head_norm\n",
        ["q_norm_plain_on_tp", "no_head_norm_sum", "q_norm_gradient_wrong", "k_norm_gradient_wrong"],
    ),
    (
        "all_gather_extension",
        "    after_build: wrap_projections\n",
        "",  # plain float32 parameters: no extension, a float32 all-gather, the replica's gradients
        [
            "q_proj_shard_cast_to_bf16",
            "every_projection_each_gather",
            "first_gather_builds_the_weight",
            "later_gathers_refill_out",
            "mixed_dtypes_gathered_as_bytes",
        ],
    ),
    (
        "forward_method_registered",
        "- {forward_method: last_hidden_state}",
        "- {}",  # root(x): forward, logits [2, 8, 128], the same all-gathers
        ["hidden_states_not_logits"],
    ),
    (
        "forward_method_unregistered",
        "    units: [model.layers.*]\n",
        "    units: [model.layers.*, {modules: root, forward_methods: [last_hidden_state]}]\n",
        ["sharded_embedding_meets_the_input", "no_all_gather"],
    ),
    (
        "forward_input_structure",
        "- {forward_input: user_dict}",
        "- {forward_input: dict}",  # a dict is walked: the root receives bf16 in a dict
        ["user_dict_passed_as_given"],
    ),
    (
        "forward_input_structure",
        "- {forward_input: keyword}",
        "- {forward_input: positional}",
        ["keyword_cast"],
    ),
    (
        "forward_input_user_dict",
        "- {forward_input: user_dict}",
        "- {forward_input: dict}",  # the root's cast reaches it: the step runs
        ["mixed_dtype_matmul"],
    ),
    (
        "double_backward_segfault",
        "loss: input_grad_penalty",
        "loss: mean_square",  # a single backward: the step finishes on every rank
        ["every_rank_dies_by_sigsegv"],
    ),
    (
        "rank_killed_by_signal",
        "- {call: crash_rank_1_after_layer_1}",
        "- {}",  # nobody dies: rank 1 is observed, rank 0 raises nothing and reduce-scatters
        ["rank1_killed_by_sigsegv", "rank0_sees_the_closed_connection", "rank0_nothing_reduced"],
    ),
    (
        "reset_iter_state",
        "- {abort_backward_at: layers.0}",
        "- {}",  # no abort: nothing to recover, layers.0 reduced in step 0
        ["layer0_resharded_by_reset", "layer1_sharded_after_reset", "layer0_never_reduced", "layer0_has_none"],
    ),
    (
        "unshard_async",
        "{unshard: [layers.0], unshard_async: true}",
        "{unshard: [layers.0]}",  # waited in the call: its copy-out runs there
        ["async_leaves_the_copy_out", "pre_forward_waits_on_the_handle"],
    ),
    (
        "custom_comms",
        "{modules: layers.1, custom_all_gather: all_gather, custom_reduce_scatter: reduce_scatter}",
        "{modules: layers.1, custom_reduce_scatter: reduce_scatter}",  # torch's own all-gather: none recorded
        ["gathered_twice_reduced_once"],
    ),
    (
        "all_reduce_hook",
        "{modules: layers.1, all_reduce_hook: record_reduce_output}",
        "{modules: layers.1}",  # no hook: nothing recorded
        ["called_once_with_the_flat_shard"],
    ),
    (
        "reduce_scatter_group_and_buffers",
        "{modules: layers.1, separate_reduce_scatter_group: true, reduce_scatter_max_input_buffers: 2}",
        "{modules: layers.1}",
        ["layer1_own_group_two_buffers", "layer1_reduced_off_the_mesh"],
    ),
    (
        "ignored_params",
        'fsdp: {ignored_params: ["layers.0.self_attn.q_proj.weight"]}',
        "fsdp: {ignored_params: []}",
        ["ignored_plain_and_whole", "ignored_not_gathered", "ignored_not_reduced", "ignored_gradient_whole"],
    ),
    (
        "unshard_in_backward_false",
        "{modules: model.embed_tokens, unshard_in_backward: false}",
        "{modules: model.embed_tokens, unshard_in_backward: true}",
        ["embedding_not_gathered_in_backward", "backward_gathers_only_the_layers"],
    ),
    (
        "reduce_scatter_unused_params",
        "{modules: layers.1, reduce_scatter_unused_params: true}",
        "{modules: layers.1, reduce_scatter_unused_params: false}",
        ["layer1_reduces_the_whole_layer", "grads_equal_reference"],
    ),
    (
        "reduce_scatter_divide_factor_alias",
        "{modules: layers.1, reduce_scatter_divide_factor: 4}",
        "{modules: layers.1, reduce_scatter_divide_factor: 8}",
        ["factor_4"],
    ),
    (
        "symm_mem_for_comm_on_gloo",
        "{modules: layers.*, symm_mem_for_comm: NCCL}",
        "{modules: layers.*, symm_mem_for_comm: null}",
        ["refused_on_cpu", "nothing_gathered"],
    ),
    (
        "process_group_allocation_on_gloo",
        "{modules: layers.1, allocate_memory_from_process_group_for_comm: true}",
        "{modules: layers.1, allocate_memory_from_process_group_for_comm: null}",
        ["helpers"],
    ),
    (
        "is_last_backward_false",
        "units: [layers.*, {modules: root, is_last_backward: false}]",
        "units: [{modules: layers.*, is_last_backward: false}]",  # replaced by the root's at lazy init
        ["step1_gathers_layer1_again", "stale_gather_size"],
    ),
]
