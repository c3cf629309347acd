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
    # parameter states at every point of two steps: a step's zero_grad, a backward hook's bytes
    (
        "param_states_through_a_step",
        "point: after_zero_grad, step_index: 1, dtensors: 11, with_grad: 0,",
        "point: after_zero_grad, step_index: 1, dtensors: 11, with_grad: 11,",
        "zero_grad_sets_none",
        "expected 11",
    ),
    (
        "param_states_through_a_step",
        "plain_tensors: 11, bytes: 148096, with_grad: 0}",
        "plain_tensors: 11, bytes: 74048, with_grad: 0}",
        "gathered_again_before_backward",
        "74,048",
    ),
    # between fully_shard calls: the root's parameters before its own call
    (
        "between_fully_shard_calls",
        "plain_tensors: 2, bytes: 33024}",
        "plain_tensors: 2, bytes: 16512}",
        "root_still_plain",
        "16,512",
    ),
    (
        "between_fully_shard_calls",
        "call: model.layers.1, dtensors: 11,",
        "call: model.layers.0, dtensors: 11,",
        "both_layers_sharded",
        "[11, 0]",
    ),
    # meta init without repairs: which tensors are garbage, how much of the step is NaN
    (
        "meta_init_without_repair",
        "      - [self_attn.q_norm.weight, false]",
        "      - [self_attn.q_norm.weight, true]",
        "self_attn.q_norm.weight",
        "expected true",
    ),
    (
        "meta_init_without_repair",
        "forward_nonfinite: 1600",
        "forward_nonfinite: 1599",
        "every_logit_nan",
        "1,599",
    ),
    (
        "meta_init",
        "fqn: model.rotary_emb.inv_freq, shape: [8], finite: true}",
        "fqn: model.rotary_emb.inv_freq, shape: [8], finite: false}",
        "inv_freq_finite",
        "expected false",
    ),
]

# (spec, text in the spec, replacement, the failing entry ids in file order): SETUP_CASES' format
OBSERVABILITY_SETUP_CASES = [
    (
        "meta_init_without_repair",
        "init: {device: meta, repair: false}",
        "init: {device: meta, repair: true}",  # the repairs made: nothing is NaN
        [
            "inv_freq_is_nan",
            "self_attn.q_norm.weight",
            "self_attn.k_norm.weight",
            "input_layernorm.weight",
            "post_attention_layernorm.weight",
            "model.norm.weight",
            "every_logit_nan",
            "every_gradient_nan",
        ],
    ),
    (
        "cpu_offload_pinned_refused",
        "offload_policy: {pin_memory: true}",
        "offload_policy: {pin_memory: false}",  # nothing to pin: no error
        ["pinning_needs_an_accelerator"],
    ),
]
