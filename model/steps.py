"""The walkthrough's steps of one decoder layer, as observable names.

Source: the walkthrough document ("FSDP2 Qwen3 Decoder Layer Walkthrough"), section
"Forward 逐算子 Walkthrough", Steps 1-10. Steps 0 (all-gather) and 11 (reshard) belong to
FSDP, not to the model: the harness observes them through FSDP's hooks.

This module is the one place where step names live. Specs refer to them
(``step: step2.q_heads``), the model emits them, the calculator derives their shapes.

Shapes are symbolic, in the document's symbols:
  B = batch per rank, L = sequence length, d = hidden_size, h_q = num_attention_heads,
  h_kv = num_key_value_heads, d_h = head_dim, d_ffn = intermediate_size.
Head tensors are reported in the document's layout (B, L, h, d_h), whatever layout the
kernel uses internally.

How they are emitted: ``model.observe.observe_steps(module, callback)`` makes every decoder
layer in ``module`` call ``callback(layer_idx, name, tensor)`` once per name, in the order of
:data:`STEPS`, each forward (``model/qwen3.py`` holds the emitting lines; a test checks that
they are exactly these names).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Step:
    """One observable tensor of a decoder layer's forward.

    Attributes:
        name: stable observable name, ``step<N>.<tensor>``.
        step: the document's step number (1-10).
        shape: symbolic shape, a tuple of symbols from the module docstring.
        says: the document's own line for this tensor.
    """

    name: str
    step: int
    shape: tuple[str, ...]
    says: str


STEPS: tuple[Step, ...] = (
    Step("step1.x_norm", 1, ("B", "L", "d"), "输出：x_norm: [2, 8, 512]"),
    Step("step2.q", 2, ("B", "L", "h_q*d_h"), "q = x_norm @ q_proj.weight.T → [2, 8, 512]"),
    Step("step2.k", 2, ("B", "L", "h_kv*d_h"), "k = x_norm @ k_proj.weight.T → [2, 8, 256]"),
    Step("step2.v", 2, ("B", "L", "h_kv*d_h"), "v = x_norm @ v_proj.weight.T → [2, 8, 256]"),
    Step("step2.q_heads", 2, ("B", "L", "h_q", "d_h"), "q: [2, 8, 8, 64]   # (B, L, h_q,  d_h)"),
    Step("step2.k_heads", 2, ("B", "L", "h_kv", "d_h"), "k: [2, 8, 4, 64]   # (B, L, h_kv, d_h)"),
    Step("step2.v_heads", 2, ("B", "L", "h_kv", "d_h"), "v: [2, 8, 4, 64]"),
    Step("step3.q_normed", 3, ("B", "L", "h_q", "d_h"), "q = q_norm(q)   # RMSNorm 沿最后一维，形状不变"),
    Step("step3.k_normed", 3, ("B", "L", "h_kv", "d_h"), "k = k_norm(k)"),
    Step("step4.q_rope", 4, ("B", "L", "h_q", "d_h"), "对 q 和 k 的 head_dim 维度做旋转位置编码，形状不变"),
    Step("step4.k_rope", 4, ("B", "L", "h_kv", "d_h"), "对 q 和 k 的 head_dim 维度做旋转位置编码，形状不变"),
    Step("step5.k_repeated", 5, ("B", "L", "h_q", "d_h"), "k: [2, 8, 4, 64] → repeat_interleave(dim=2, repeats=2) → [2, 8, 8, 64]"),
    Step("step5.v_repeated", 5, ("B", "L", "h_q", "d_h"), "v: [2, 8, 4, 64] → repeat_interleave(dim=2, repeats=2) → [2, 8, 8, 64]"),
    Step("step5.attn_out", 5, ("B", "L", "h_q", "d_h"), "attn_out: [2, 8, 8, 64]"),
    Step("step5.attn_flat", 5, ("B", "L", "h_q*d_h"), "Flatten heads：[2, 8, 8, 64] → [2, 8, 512]"),
    Step("step6.o_proj", 6, ("B", "L", "d"), "attn_out @ o_proj.weight.T → [2, 8, 512]"),
    Step("step7.residual", 7, ("B", "L", "d"), "hidden_states = residual + attn_output    # [2, 8, 512]"),
    Step("step8.h_norm", 8, ("B", "L", "d"), "对 [2, 8, 512] 的 hidden 做 RMSNorm，输出 [2, 8, 512]"),
    Step("step9.gate", 9, ("B", "L", "d_ffn"), "gate  = h @ gate_proj.weight.T       → [2, 8, 1024]"),
    Step("step9.up", 9, ("B", "L", "d_ffn"), "up    = h @ up_proj.weight.T         → [2, 8, 1024]"),
    Step("step9.fused", 9, ("B", "L", "d_ffn"), "fused = F.silu(gate) * up            → [2, 8, 1024]"),
    Step("step9.down", 9, ("B", "L", "d"), "out   = fused @ down_proj.weight.T   → [2, 8, 512]"),
    Step("step10.output", 10, ("B", "L", "d"), "hidden_states = residual + mlp_output    # [2, 8, 512]"),
)

STEP_NAMES: tuple[str, ...] = tuple(s.name for s in STEPS)
STEPS_BY_NAME: Mapping[str, Step] = {s.name: s for s in STEPS}


def resolve_shape(step: Step | str, symbols: Mapping[str, int]) -> list[int]:
    """Evaluate a step's symbolic shape.

    Args:
        step: a :class:`Step` or its name.
        symbols: values for B, L, d, h_q, h_kv, d_h, d_ffn (ints).

    Returns:
        The concrete shape as a list of ints.

    Raises:
        KeyError: unknown step name or a symbol missing from ``symbols``.
    """
    if isinstance(step, str):
        step = STEPS_BY_NAME[step]
    dims = []
    for expr in step.shape:
        value = 1
        for factor in expr.split("*"):
            value *= symbols[factor]
        dims.append(value)
    return dims
