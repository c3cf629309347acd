"""Mutation cases of the MoE specs (issue 24), in tests/test_mutations.py's CASES format:
(spec, text in the spec, replacement, failing entry id, text the failure must show).

Kept in a module of their own so that the MoE specs' cases do not interleave with the others'."""

MOE_CASES = [
    # whole experts per rank: the fused experts' local shape, a byte figure, a step's shape, numerics
    ("moe_tiny_4_ranks", "[mlp.experts.gate_up_proj, [\"Shard(dim=0)\"], [2, 64, 64], 8192]",
     "[mlp.experts.gate_up_proj, [\"Shard(dim=0)\"], [1, 64, 64], 8192]", "mlp.experts.gate_up_proj", "[1, 64, 64]"),
    ("moe_tiny_4_ranks", "numel_out: 62112, buffer_bytes: 248448", "numel_out: 62112, buffer_bytes: 248446",
     "forward_all_gather", "248,446"),
    ("moe_tiny_4_ranks", "step: step9.router_logits, shape: [16, 8]", "step: step9.router_logits, shape: [16, 4]",
     "router_logits", "[16, 4]"),
    ("moe_tiny_4_ranks", "grads_count: 22}", "grads_count: 20}", "same_step_as_a_replica", "expected 20"),
]
