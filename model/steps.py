"""The walkthrough's steps of one decoder layer (section "Forward 逐算子 Walkthrough", Steps
1-10; Steps 0 and 11 are FSDP's), as the one list of names: specs cite them, the model emits
them (``model.observe``), the calculator derives their shapes.

Shapes are symbolic: B = batch per rank, L = sequence length, d = hidden_size,
h_q = num_attention_heads, h_kv = num_key_value_heads, d_h = head_dim, d_ffn = intermediate_size;
head tensors in the document's layout (B, L, h, d_h).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Step:
    """One observable tensor: ``name`` (``step<N>.<tensor>``), the document's ``step`` (1-10),
    its symbolic ``shape``, and what the document ``says`` of it, ending with the shape it
    prints (tests/unit/model/test_qwen3.py reads that shape)."""

    name: str
    step: int
    shape: tuple[str, ...]
    says: str


STEPS: tuple[Step, ...] = (
    Step("step1.x_norm", 1, ("B", "L", "d"), "input_layernorm keeps the shape, x_norm is [2, 8, 512]"),
    Step("step2.q", 2, ("B", "L", "h_q*d_h"), "x_norm projected by q_proj (h_q × d_h = 512 outputs): [2, 8, 512]"),
    Step(
        "step2.k", 2, ("B", "L", "h_kv*d_h"), "k_proj has h_kv × d_h = 256 outputs, half of q's under GQA: [2, 8, 256]"
    ),
    Step("step2.v", 2, ("B", "L", "h_kv*d_h"), "v_proj, like k: [2, 8, 256]"),
    Step("step2.q_heads", 2, ("B", "L", "h_q", "d_h"), "q split into heads, (B, L, h_q, d_h) = [2, 8, 8, 64]"),
    Step("step2.k_heads", 2, ("B", "L", "h_kv", "d_h"), "k split into heads, (B, L, h_kv, d_h) = [2, 8, 4, 64]"),
    Step("step2.v_heads", 2, ("B", "L", "h_kv", "d_h"), "v split into heads like k: [2, 8, 4, 64]"),
    Step("step3.q_normed", 3, ("B", "L", "h_q", "d_h"), "q_norm, an RMSNorm over d_h, leaves q's shape: [2, 8, 8, 64]"),
    Step("step3.k_normed", 3, ("B", "L", "h_kv", "d_h"), "k_norm likewise for k: [2, 8, 4, 64]"),
    Step("step4.q_rope", 4, ("B", "L", "h_q", "d_h"), "RoPE rotates q along head_dim; same shape, [2, 8, 8, 64]"),
    Step("step4.k_rope", 4, ("B", "L", "h_kv", "d_h"), "RoPE on k; same shape, [2, 8, 4, 64]"),
    Step(
        "step5.k_repeated",
        5,
        ("B", "L", "h_q", "d_h"),
        "GQA repeats each KV head twice (repeat_interleave on dim 2), k [2, 8, 4, 64] → [2, 8, 8, 64]",
    ),
    Step("step5.v_repeated", 5, ("B", "L", "h_q", "d_h"), "the same repeat for v, [2, 8, 4, 64] → [2, 8, 8, 64]"),
    Step("step5.attn_out", 5, ("B", "L", "h_q", "d_h"), "attention output per head, [2, 8, 8, 64]"),
    Step("step5.attn_flat", 5, ("B", "L", "h_q*d_h"), "heads merged back, [2, 8, 8, 64] → [2, 8, 512]"),
    Step("step6.o_proj", 6, ("B", "L", "d"), "o_proj maps the attention output to [2, 8, 512]"),
    Step("step7.residual", 7, ("B", "L", "d"), "the residual plus the attention output, [2, 8, 512]"),
    Step("step8.h_norm", 8, ("B", "L", "d"), "post_attention_layernorm, built like Step 1, keeps [2, 8, 512]"),
    Step("step9.gate", 9, ("B", "L", "d_ffn"), "gate_proj widens h to d_ffn: [2, 8, 1024]"),
    Step("step9.up", 9, ("B", "L", "d_ffn"), "up_proj, also to d_ffn: [2, 8, 1024]"),
    Step("step9.fused", 9, ("B", "L", "d_ffn"), "SiLU(gate) times up, element-wise: [2, 8, 1024]"),
    Step("step9.down", 9, ("B", "L", "d"), "down_proj back to hidden_size: [2, 8, 512]"),
    Step("step10.output", 10, ("B", "L", "d"), "the residual plus the MLP output, the layer's output: [2, 8, 512]"),
)

STEP_NAMES: tuple[str, ...] = tuple(s.name for s in STEPS)
STEPS_BY_NAME: Mapping[str, Step] = {s.name: s for s in STEPS}

# ---- a Qwen3 MoE layer's sparse block (model/qwen3_moe.py) ----------------------------------
# A sparse layer replaces Step 9's dense MLP by a router and E experts; Steps 1-8 and 10 are the
# dense layer's. Extra symbols: E = num_experts, k = num_experts_per_tok, d_moe =
# moe_intermediate_size (model.config.step_symbols of a Qwen3MoeConfig). Tokens are flattened:
# the router sees T = B*L rows. Kept apart from STEPS: a dense layer never emits these.
MOE_STEPS: tuple[Step, ...] = (
    Step("step9.router_logits", 9, ("B*L", "E"), "the router (mlp.gate) scores every token for every expert: [B*L, E]"),
    Step(
        "step9.topk_weights",
        9,
        ("B*L", "k"),
        "softmax in float32, the k largest, renormalised if norm_topk_prob, in the router's dtype: [B*L, k]",
    ),
    Step("step9.topk_indices", 9, ("B*L", "k"), "the experts each token is routed to, by descending weight: [B*L, k]"),
    Step(
        "step9.tokens_per_expert", 9, ("E",), "how many (token, slot) pairs each expert receives, summing to B*L*k: [E]"
    ),
    Step(
        "step9.expert_outputs",
        9,
        ("B*L", "k", "d"),
        "expert topk_indices[t, j]'s SwiGLU output on token t, unweighted: [B*L, k, d]",
    ),
    Step(
        "step9.moe_out",
        9,
        ("B", "L", "d"),
        "the experts' outputs weighted by topk_weights and summed per token: [B, L, d]",
    ),
)
MOE_STEP_NAMES: tuple[str, ...] = tuple(s.name for s in MOE_STEPS)

# What one sparse decoder layer emits, in order: the dense steps with Step 9's MLP tensors
# (step9.gate .. step9.down) replaced by MOE_STEPS. A dense layer of a MoE model (mlp_only_layers,
# decoder_sparse_step) emits STEP_NAMES.
MOE_LAYER_STEP_NAMES: tuple[str, ...] = (
    tuple(n for n in STEP_NAMES if not n.startswith("step9.") and n != "step10.output")
    + MOE_STEP_NAMES
    + ("step10.output",)
)
ALL_STEPS_BY_NAME: Mapping[str, Step] = {**STEPS_BY_NAME, **{s.name: s for s in MOE_STEPS}}


def resolve_shape(step: Step | str, symbols: Mapping[str, int]) -> list[int]:
    """A step's (or step name's) shape as ints, from ``symbols`` (B, L, d, ...; E, k, d_moe too
    for :data:`MOE_STEPS`).

    Raises:
        KeyError: unknown step name or a symbol missing from ``symbols``.
    """

    if isinstance(step, str):
        step = ALL_STEPS_BY_NAME[step]
    dims = []
    for expr in step.shape:
        value = 1
        for factor in expr.split("*"):
            value *= symbols[factor]
        dims.append(value)
    return dims
