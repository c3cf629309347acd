"""Mutation cases of the observability vocabulary of issue 23 (parameter states at every hook,
between fully_shard calls, FSDP label chains, meta init without repairs, pinned memory), in
tests/integration/test_mutations.py's CASES format: (spec, text in the spec, replacement,
failing entry id, text the failure must show).

Kept in a module of their own so that these cases do not interleave with the others'."""

OBSERVABILITY_CASES = [
    # FSDP label chains: one label of one chain, and one chain of a phase's list
    (
        "fsdp_label_chains",
        '"FSDP::pre_backward (layers.1)", "FSDP::backward_prefetch for layers.0",',
        '"FSDP::pre_backward (layers.0)", "FSDP::backward_prefetch for layers.0",',
        "prefetch_inside_pre_backward",
        "FSDP::pre_backward (layers.0)",
    ),
    (
        "fsdp_label_chains",
        '          - "FSDP::post_backward_reduce (layers.1)"',
        '          - "FSDP::post_backward_reshard (layers.1)"',
        "backward_chains",
        "FSDP::post_backward_reshard (layers.1)",
    ),
    # pinned memory under CPU offload, and its refusal without an accelerator
    (
        "cpu_offload",
        "[self_attn.q_norm.weight, cpu, cpu, cpu, [8], false, false]",
        "[self_attn.q_norm.weight, cpu, cpu, cpu, [8], false, true]",
        "self_attn.q_norm.weight",
        "expected true",
    ),
    (
        "cpu_offload_pinned_refused",
        "        phase: setup",
        "        phase: forward",
        "pinning_needs_an_accelerator",
        "forward",
    ),
]
