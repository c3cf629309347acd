"""Parameter and module names of Qwen3 decoder layers, as transformers names them (no torch).

Each layer's names in two orders: registration (what FSDP2 packs into a unit's all-gather
buffer) and the walkthrough's table (section "参数列表（单层）").
"""

from __future__ import annotations

from typing import Collection

# transformers 5.x Qwen3DecoderLayer.named_parameters() order (checked with transformers
# 5.24.0): __init__ assigns self_attn, mlp, input_layernorm, post_attention_layernorm, and
# Qwen3Attention assigns q/k/v/o_proj before q_norm/k_norm. FSDP2 packs a unit's
# all-gather input in its parameters' order, so this order fixes the per-param offsets.
LAYER_PARAM_NAMES_REGISTRATION: tuple[str, ...] = (
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
)

# The document's table order (section "参数列表（单层）"): forward order of use, with q_norm and
# k_norm before o_proj.
LAYER_PARAM_NAMES_DOCUMENT: tuple[str, ...] = (
    "input_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "self_attn.o_proj.weight",
    "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)


def param_fqns(
    body: str, num_layers: int, *, tie_word_embeddings: bool = True, sparse_layers: Collection[int] = ()
) -> tuple[str, ...]:
    """Every parameter FQN in ``named_parameters()`` order (a tied weight once) of ``body``
    "decoder_layers" (``layers.{i}.…``) or "causal_lm" (``model.…``, ``lm_head.weight`` unless
    tied); ``sparse_layers`` (``Qwen3MoeConfig.moe_layers``) get the MoE layer's names."""
    prefix = "layers" if body == "decoder_layers" else "model.layers"
    sparse = frozenset(sparse_layers)
    layers = tuple(
        f"{prefix}.{i}.{name}"
        for i in range(num_layers)
        for name in (MOE_LAYER_PARAM_NAMES_REGISTRATION if i in sparse else LAYER_PARAM_NAMES_REGISTRATION)
    )
    if body == "decoder_layers":
        return layers
    head = () if tie_word_embeddings else ("lm_head.weight",)
    return ("model.embed_tokens.weight",) + layers + ("model.norm.weight",) + head


# Qwen3DecoderLayer.named_modules() below the layer (relative paths), registration order.
LAYER_MODULE_NAMES: tuple[str, ...] = (
    "self_attn",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "self_attn.q_norm",
    "self_attn.k_norm",
    "mlp",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    "mlp.act_fn",
    "input_layernorm",
    "post_attention_layernorm",
)


def module_paths(body: str, num_layers: int, sparse_layers: Collection[int] = ()) -> tuple[str, ...]:
    """Every module FQN in ``named_modules()`` order, the root (``""``) first, as
    :func:`param_fqns`; ``lm_head`` is a module of its own even when its weight is tied."""

    prefix = "layers" if body == "decoder_layers" else "model.layers"
    sparse = frozenset(sparse_layers)
    layers = [prefix]
    for i in range(num_layers):
        layers.append(f"{prefix}.{i}")
        names = MOE_LAYER_MODULE_NAMES if i in sparse else LAYER_MODULE_NAMES
        layers.extend(f"{prefix}.{i}.{name}" for name in names)
    if body == "decoder_layers":
        return ("", *layers, "rotary_emb")
    return ("", "model", "model.embed_tokens", *layers, "model.norm", "model.rotary_emb", "lm_head")


# transformers 5.x Qwen3MoeDecoderLayer.named_parameters() of a sparse layer (checked with
# transformers 5.24.0 in tests/unit/model/test_model_moe.py): Qwen3MoeSparseMoeBlock registers ``experts``
# (two fused 3-D parameters, gate_up_proj [E, 2 d_moe, d] then down_proj [E, d, d_moe]) BEFORE
# ``gate`` (the router, weight [E, d]). A dense layer of a MoE model has the dense names.
MOE_LAYER_PARAM_NAMES_REGISTRATION: tuple[str, ...] = (
    *LAYER_PARAM_NAMES_REGISTRATION[:6],
    "mlp.experts.gate_up_proj",
    "mlp.experts.down_proj",
    "mlp.gate.weight",
    *LAYER_PARAM_NAMES_REGISTRATION[9:],
)

EXPERTS_MODULE = "mlp.experts"
"""A sparse layer's experts module (``Qwen3MoeExperts``), below the layer."""

# Module paths below a sparse layer, registration order (the dense layer's with its MLP's replaced).
MOE_LAYER_MODULE_NAMES: tuple[str, ...] = (
    *LAYER_MODULE_NAMES[:7],
    "mlp",
    EXPERTS_MODULE,
    "mlp.experts.act_fn",
    "mlp.gate",
    *LAYER_MODULE_NAMES[12:],
)

# The document's order (forward order of use) for a sparse layer: the router scores the tokens
# before the experts run.
MOE_LAYER_PARAM_NAMES_DOCUMENT: tuple[str, ...] = (
    *LAYER_PARAM_NAMES_DOCUMENT[:8],
    "mlp.gate.weight",
    "mlp.experts.gate_up_proj",
    "mlp.experts.down_proj",
)
