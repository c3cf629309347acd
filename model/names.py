"""Parameter names of one Qwen3 decoder layer, as transformers names them (no torch import).

Two orders of the same 11 names: the order the modules register them (what FSDP2 packs into a
unit's all-gather buffer) and the order the walkthrough's parameter table lists them
("FSDP2 Qwen3 Decoder Layer Walkthrough", section "参数列表（单层）").
"""

from __future__ import annotations

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


def param_fqns(body: str, num_layers: int, *, tie_word_embeddings: bool = True) -> tuple[str, ...]:
    """Every parameter FQN of a model in ``named_parameters()`` order (a tied weight once).

    ``body`` "decoder_layers" (model.qwen3.Qwen3DecoderStack): ``layers.{i}.<name>``;
    "causal_lm" (Qwen3ForCausalLM): ``model.embed_tokens.weight``, ``model.layers.{i}.<name>``,
    ``model.norm.weight``, and ``lm_head.weight`` unless tied to the embedding.
    """
    prefix = "layers" if body == "decoder_layers" else "model.layers"
    layers = tuple(f"{prefix}.{i}.{name}" for i in range(num_layers) for name in LAYER_PARAM_NAMES_REGISTRATION)
    if body == "decoder_layers":
        return layers
    head = () if tie_word_embeddings else ("lm_head.weight",)
    return ("model.embed_tokens.weight",) + layers + ("model.norm.weight",) + head
