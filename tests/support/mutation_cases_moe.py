"""Mutation cases of the MoE specs (issue 24), in tests/integration/test_mutations.py's CASES format:
(spec, text in the spec, replacement, failing entry id, text the failure must show).

Kept in a module of their own so that the MoE specs' cases do not interleave with the others'."""

MOE_CASES = [
    # whole experts per rank: the fused experts' local shape, a byte figure, a step's shape, numerics
    (
        "moe_tiny_4_ranks",
        '[mlp.experts.gate_up_proj, ["Shard(dim=0)"], [2, 64, 64], 8192]',
        '[mlp.experts.gate_up_proj, ["Shard(dim=0)"], [1, 64, 64], 8192]',
        "mlp.experts.gate_up_proj",
        "[1, 64, 64]",
    ),
    (
        "moe_tiny_4_ranks",
        "numel_out: 62112, buffer_bytes: 248448",
        "numel_out: 62112, buffer_bytes: 248446",
        "forward_all_gather",
        "248,446",
    ),
    (
        "moe_tiny_4_ranks",
        "step: step9.router_logits, shape: [16, 8]",
        "step: step9.router_logits, shape: [16, 4]",
        "router_logits",
        "[16, 4]",
    ),
    ("moe_tiny_4_ranks", "grads_count: 22}", "grads_count: 20}", "same_step_as_a_replica", "expected 20"),
    # released MoE layers on 1,024 simulated ranks: an empty expert shard, the padded all-gather, memory
    (
        "qwen3_30b_a3b_1024_ranks",
        "[128, 511, 512, 1023], [0, 1536, 2048], 0]",
        "[128, 511, 512, 1023], [1, 1536, 2048], 0]",
        "gate_up_proj.ranks128-1023",
        "[1, 1536, 2048]",
    ),
    (
        "qwen3_30b_a3b_1024_ranks",
        "ring_bytes: 9700343796",
        "ring_bytes: 1245024240",
        "padded_all_gather",
        "1,245,024,240",
    ),
    (
        "qwen3_30b_a3b_1024_ranks",
        "local_numel: 16388, local_bytes: 32776}",
        "local_numel: 20484, local_bytes: 32776}",
        "ranks512-1023",
        "20,484",
    ),
    (
        "qwen3_235b_a22b_1024_ranks",
        "numel_out: 19407054848\n        buffer_bytes",
        "numel_out: 2487755008\n        buffer_bytes",
        "padded_all_gather",
        "2,487,755,008",
    ),
    (
        "qwen3_235b_a22b_1024_ranks",
        "full_shapes: true, bytes: 4975510016}",
        "full_shapes: true, bytes: 4975510018}",
        "full_layer",
        "4,975,510,018",
    ),
    # the experts kind: the experts a shard holds, tokens per rank, zero gradient rows of unrouted experts
    (
        "moe_tiny_4_ranks",
        "[rank2_gate_up, [2], mlp.experts.gate_up_proj, [4, 5], 2]",
        "[rank2_gate_up, [2], mlp.experts.gate_up_proj, [4, 6], 2]",
        "rank2_gate_up",
        "[4, 6]",
    ),
    ("moe_tiny_4_ranks", "layer: 1, tokens_total: 32}", "layer: 1, tokens_total: 16}", "layer1_tokens", "expected 16"),
    (
        "moe_tiny_4_ranks",
        'exactly when no rank routed a token to it", zero_grad_rows_are_unrouted: true}',
        'exactly when no rank routed a token to it", zero_grad_rows_are_unrouted: false}',
        "zero_rows_are_the_unrouted",
        "false",
    ),
    (
        "moe_unrouted_experts",
        'leave at least 4 unrouted", unrouted_anywhere: ">= 4"}',
        'leave at least 4 unrouted", unrouted_anywhere: ">= 5"}',
        "at_least_four_unrouted",
        ">= 5",
    ),
    (
        "moe_unrouted_experts",
        "param: mlp.experts.down_proj, zero_grad_rows_are_unrouted: true}",
        "param: mlp.experts.down_proj, zero_grad_rows_are_unrouted: false}",
        "down_zero_rows",
        "false",
    ),
    (
        "moe_unrouted_experts",
        "count: 1, numel_in: 62112, numel_out: 15528}",
        "count: 1, numel_in: 15528, numel_out: 15528}",
        "whole_layer_reduce_scattered",
        "15,528",
    ),
    (
        "moe_tiny_shard1",
        '[mlp.experts.down_proj, ["Shard(dim=1)"], [8, 16, 32], 4096]',
        '[mlp.experts.down_proj, ["Shard(dim=0)"], [8, 16, 32], 4096]',
        "mlp.experts.down_proj",
        "Shard(dim=0)",
    ),
    (
        "moe_tiny_shard1",
        "param: mlp.experts.down_proj, held_count: 8}",
        "param: mlp.experts.down_proj, held_count: 2}",
        "all_experts_down",
        "expected 2",
    ),
    ("moe_tiny_16_ranks", "[empty_rank15, [15], [], 0]", "[empty_rank15, [15], [7], 0]", "empty_rank15", "[7]"),
    (
        "moe_tiny_16_ranks",
        "numel_out: 111776, buffer_bytes: 447104",
        "numel_out: 62112, buffer_bytes: 447104",
        "padded_all_gather",
        "62,112",
    ),
    (
        "moe_tiny_16_ranks",
        "local_numel: 778, local_bytes: 3112}",
        "local_numel: 6986, local_bytes: 3112}",
        "ranks8-15",
        "6,986",
    ),
    (
        "moe_aux_loss",
        '"2 layers x 3 collectives", select: {}, count: 6}',
        '"2 layers x 3 collectives", select: {}, count: 7}',
        "three_per_layer",
        "expected 7",
    ),
    (
        "moe_aux_loss",
        'grads_rel_diff: "<= 1e-5", grads_count: 22}',
        'grads_rel_diff: "<= 1e-12", grads_count: 22}',
        "same_step_as_a_replica",
        "1.000e-12",
    ),
]
