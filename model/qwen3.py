"""Reference Qwen3 dense decoder: transformers' parameters and numerics, observable steps.

Mirrors transformers ``models/qwen3/modeling_qwen3.py`` (5.x): same module tree, parameter
names, shapes, registration order and forward arithmetic, so a ``state_dict`` loads both ways
with ``strict=True`` and fp32 outputs agree with transformers' ``attn_implementation="sdpa"``
path to ~1e-6. What it drops, as the walkthrough document does: KV cache, attention masks
other than causal, position_ids other than 0..L-1 by default, biases, dropout, sliding window,
output dataclasses (forwards return plain tensors).

Module tree (transformers' names; the walkthrough document, section "简化的 Qwen3 结构"):

    Qwen3ForCausalLM
      model: Qwen3Model
        embed_tokens: nn.Embedding            [V, d]
        layers: ModuleList[Qwen3DecoderLayer]
          self_attn: Qwen3Attention           q_proj [h_q*d_h, d], k_proj/v_proj [h_kv*d_h, d],
                                              o_proj [d, h_q*d_h], q_norm/k_norm [d_h]
          mlp: Qwen3MLP                       gate_proj/up_proj [d_ffn, d], down_proj [d, d_ffn]
          input_layernorm, post_attention_layernorm: Qwen3RMSNorm [d]
        norm: Qwen3RMSNorm                    [d]
        rotary_emb: Qwen3RotaryEmbedding      (buffer inv_freq [d_h/2], not in state_dict)
      lm_head: nn.Linear                      [V, d]; IS embed_tokens.weight when tied

A whole model here is embed_tokens, the decoder layers, the final norm and an lm_head that may
share the embedding's weight (the document's sketch, section "简化的 Qwen3 结构", lists the first
three in one ``Qwen3Model`` and notes that lm_head usually shares the embedding's weight).
transformers splits that in two: ``Qwen3Model`` (no lm_head, returns the last hidden state) and
``Qwen3ForCausalLM`` (``.model`` + ``.lm_head``, returns logits). We keep transformers' split so
that both classes' state dicts load into transformers' and back. Tied embeddings appear under
both keys (``model.embed_tokens.weight`` and ``lm_head.weight``, one tensor), exactly as in
transformers' ``state_dict()``; loading a state dict with both keys re-fills the one tensor.

The walkthrough's focus, N_L decoder layers fed with hidden states and no embedding, is
:class:`Qwen3DecoderStack` (parameter names ``layers.<i>.…`` as in ``Qwen3Model``).

Shapes use the document's symbols (see ``model/config.py``). Head tensors are
(B, L, h, d_h) in the document; the SDPA kernel wants (B, h, L, d_h), so the attention
transposes once after the Q/K-norm, exactly where transformers does, and reports transposed
views in the document's layout.

Dtypes: parameters take the ``dtype`` given at construction (default: torch's default dtype);
RMSNorm reduces in float32 and casts back; RoPE's cos/sin are computed in float32 and cast to
the activations' dtype; everything else runs in the activations' dtype.

Every constructor takes ``device=`` and ``dtype=`` keyword arguments and passes them to its
parameters, so models build under ``FakeTensorMode`` or on ``meta`` in half precision
(``module.half()`` does not work under FakeTensorMode).
"""

from __future__ import annotations

from typing import Collection

import torch
import torch.nn.functional as F
from torch import nn

from .config import Qwen3Config
from .observe import StepObservable

__all__ = [
    "Qwen3RMSNorm",
    "Qwen3RotaryEmbedding",
    "Qwen3Attention",
    "Qwen3MLP",
    "Qwen3DecoderLayer",
    "Qwen3DecoderStack",
    "Qwen3Model",
    "Qwen3ForCausalLM",
    "rotate_half",
    "apply_rotary_pos_emb",
    "repeat_kv",
    "init_weights",
]


class Qwen3RMSNorm(nn.Module):
    """RMSNorm over the last dim: ``w * x / sqrt(mean(x^2) + eps)``.

    Formula: the document's Step 1, ``RMSNorm(x)_i = x_i / sqrt(1/d * sum_j x_j^2 + eps) * w_i``;
    arithmetic order and dtypes exactly as transformers' ``Qwen3RMSNorm``: the normalization
    runs in float32, is cast back to the input dtype, then multiplied by ``weight`` (so a fp32
    weight with bf16 input gives fp32 output, as in transformers).

    Args:
        hidden_size: size of the normalized (last) dim: d for the layer norms, d_h for
            q_norm / k_norm.
        eps: ``config.rms_norm_eps``.

    Shapes: input (..., hidden_size) -> output (..., hidden_size). Parameter ``weight``
    [hidden_size], initialized to ones.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6, *, device=None, dtype=None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)  # (..., 1), float32
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


def _default_inv_freq(config: Qwen3Config, device=None) -> torch.Tensor:
    """RoPE inverse frequencies ``1 / theta^(2i/d_h)``, i = 0..d_h/2-1: float32 [d_h/2].

    Source: transformers ``Qwen3RotaryEmbedding.compute_default_rope_parameters`` (computed on
    the CPU, as transformers does at construction, then moved to ``device``).
    """
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    return inv_freq.to(device)


def _position_ids(seq_len: int, device) -> torch.Tensor:
    """Positions 0..L-1 as int64 (1, L), as transformers' ``Qwen3Model.forward`` builds them."""
    return torch.arange(seq_len, device=device).unsqueeze(0)


class Qwen3RotaryEmbedding(nn.Module):
    """RoPE cos/sin tables for given positions (default rope type only).

    Source: transformers ``Qwen3RotaryEmbedding`` (``attention_scaling`` is 1.0 for the
    default type, so it is left out). The buffer ``inv_freq`` [d_h/2] is float32 and not
    persistent (not in ``state_dict``); it stays float32 through ``.half()``/``.to(dtype)``
    (unlike transformers' module); after ``to_empty()`` call :meth:`reset_parameters`
    (``init_weights`` does).

    forward(x, position_ids) -> (cos, sin):
        x: any tensor whose device and dtype the tables should have (the hidden states).
        position_ids: int64 (B or 1, L).
        cos, sin: (B or 1, L, d_h) in x.dtype; entry [.., p, j] = cos/sin(p * inv_freq[j mod d_h/2]),
        computed in float32.
    """

    def __init__(self, config: Qwen3Config, *, device=None, dtype=None) -> None:
        # dtype is accepted for a uniform constructor signature; inv_freq is always float32.
        super().__init__()
        self.config = config
        self.register_buffer("inv_freq", _default_inv_freq(config, device), persistent=False)

    def reset_parameters(self) -> None:
        self.inv_freq = _default_inv_freq(self.config, self.inv_freq.device)

    def _apply(self, fn, recurse=True):
        # ``.half()`` / ``.to(torch.bfloat16)`` would round inv_freq to 8-11 bits and shift
        # every RoPE angle (transformers' own module has that pitfall; its from_pretrained
        # keeps the buffer in float32). Keep it float32, recomputed exactly.
        super()._apply(fn, recurse)
        if self.inv_freq.dtype != torch.float32:
            self.inv_freq = _default_inv_freq(self.config, self.inv_freq.device)
        return self

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = self.inv_freq.to(device=x.device, dtype=torch.float)
        freqs = position_ids[..., None].float() * inv_freq  # (B|1, L, d_h/2), float32
        emb = torch.cat((freqs, freqs), dim=-1)  # (B|1, L, d_h)
        return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dim (transformers' ``rotate_half``)."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE: ``x * cos + rotate_half(x) * sin`` for q and k (the document's Step 4).

    Source: transformers ``apply_rotary_pos_emb`` (the "rotate half" pairing of dims j and
    j + d_h/2, not interleaved pairs).

    Args:
        q: (B, h_q, L, d_h) with the default ``unsqueeze_dim=1``; (B, L, h_q, d_h) with 2.
        k: (B, h_kv, L, d_h) likewise.
        cos, sin: (B|1, L, d_h); a head axis is inserted at ``unsqueeze_dim``.

    Returns:
        (q_embed, k_embed), same shapes and dtypes as q and k.
    """
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """GQA repeat, materialized: (B, h_kv, L, d_h) -> (B, h_kv * n_rep, L, d_h).

    Equals ``torch.repeat_interleave(x, n_rep, dim=1)``: query head j uses KV head j // n_rep
    (the document's Step 5.1, "repeat_interleave(dim=2, repeats=2)" in its (B, L, h, d_h)
    layout). Source: transformers ``repeat_kv``; like it, returns the input itself when
    ``n_rep == 1``.
    """
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class Qwen3Attention(StepObservable, nn.Module):
    """Causal GQA self-attention with per-head Q/K RMSNorm and RoPE: Steps 2-6.

    Source: transformers ``Qwen3Attention`` with the sdpa attention interface; the document's
    ``Qwen3Attention`` sketch and Steps 2-6.

    Parameters (registration order as transformers): ``q_proj`` [h_q*d_h, d],
    ``k_proj`` [h_kv*d_h, d], ``v_proj`` [h_kv*d_h, d], ``o_proj`` [d, h_q*d_h],
    ``q_norm`` [d_h], ``k_norm`` [d_h]. No biases.

    forward(hidden_states (B, L, d), position_embeddings (cos, sin) each (B|1, L, d_h))
        -> (B, L, d), the o_proj output (Step 6), in the input dtype. (transformers returns a
        tuple (output, attn_weights); here only the output.)

    Emits step2.q .. step6.o_proj (see ``model/steps.py``) when observed.
    """

    def __init__(self, config: Qwen3Config, layer_idx: int, *, device=None, dtype=None) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_key_value_groups
        self.scaling = self.head_dim**-0.5  # 1/sqrt(d_h), the document's Step 5 formula
        self.is_causal = True
        d, h_q, h_kv, d_h = config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim
        factory = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(d, h_q * d_h, bias=False, **factory)
        self.k_proj = nn.Linear(d, h_kv * d_h, bias=False, **factory)
        self.v_proj = nn.Linear(d, h_kv * d_h, bias=False, **factory)
        self.o_proj = nn.Linear(h_q * d_h, d, bias=False, **factory)
        self.q_norm = Qwen3RMSNorm(d_h, eps=config.rms_norm_eps, **factory)  # on d_h, per head
        self.k_norm = Qwen3RMSNorm(d_h, eps=config.rms_norm_eps, **factory)

    def forward(
        self, hidden_states: torch.Tensor, position_embeddings: tuple[torch.Tensor, torch.Tensor]
    ) -> torch.Tensor:
        obs = self._step_observer
        i = self.layer_idx
        B, L, _ = hidden_states.shape
        # Step 2: Q/K/V projections, then split into heads.
        q = self.q_proj(hidden_states)  # (B, L, h_q*d_h)
        k = self.k_proj(hidden_states)  # (B, L, h_kv*d_h)
        v = self.v_proj(hidden_states)  # (B, L, h_kv*d_h)
        if obs is not None:
            obs(i, "step2.q", q)
            obs(i, "step2.k", k)
            obs(i, "step2.v", v)
        q = q.view(B, L, -1, self.head_dim)  # (B, L, h_q, d_h)
        k = k.view(B, L, -1, self.head_dim)  # (B, L, h_kv, d_h)
        v = v.view(B, L, -1, self.head_dim)  # (B, L, h_kv, d_h)
        if obs is not None:
            obs(i, "step2.q_heads", q)
            obs(i, "step2.k_heads", k)
            obs(i, "step2.v_heads", v)
        # Step 3: Qwen3's per-head RMSNorm over d_h (shape unchanged).
        q = self.q_norm(q)  # (B, L, h_q, d_h)
        k = self.k_norm(k)  # (B, L, h_kv, d_h)
        if obs is not None:
            obs(i, "step3.q_normed", q)
            obs(i, "step3.k_normed", k)
        # To the kernel's layout, where transformers transposes.
        q = q.transpose(1, 2)  # (B, h_q, L, d_h)
        k = k.transpose(1, 2)  # (B, h_kv, L, d_h)
        v = v.transpose(1, 2)  # (B, h_kv, L, d_h)
        # Step 4: RoPE on q and k (shape unchanged).
        cos, sin = position_embeddings  # (B|1, L, d_h) each
        q, k = apply_rotary_pos_emb(q, k, cos, sin)  # (B, h_q, L, d_h), (B, h_kv, L, d_h)
        if obs is not None:
            obs(i, "step4.q_rope", q.transpose(1, 2))  # (B, L, h_q, d_h) view
            obs(i, "step4.k_rope", k.transpose(1, 2))  # (B, L, h_kv, d_h) view
        # Step 5.1: GQA repeat, materialized (each KV head serves h_q/h_kv query heads).
        k = repeat_kv(k, self.num_key_value_groups)  # (B, h_q, L, d_h)
        v = repeat_kv(v, self.num_key_value_groups)  # (B, h_q, L, d_h)
        if obs is not None:
            obs(i, "step5.k_repeated", k.transpose(1, 2))  # (B, L, h_q, d_h) view
            obs(i, "step5.v_repeated", v.transpose(1, 2))  # (B, L, h_q, d_h) view
        # Step 5.2: softmax(q k^T / sqrt(d_h) + causal_mask) v.
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scaling)  # (B, h_q, L, d_h)
        attn = attn.transpose(1, 2).contiguous()  # (B, L, h_q, d_h)
        if obs is not None:
            obs(i, "step5.attn_out", attn)
        # Step 5.3: flatten heads.
        attn = attn.reshape(B, L, -1)  # (B, L, h_q*d_h)
        if obs is not None:
            obs(i, "step5.attn_flat", attn)
        # Step 6: output projection.
        out = self.o_proj(attn)  # (B, L, d)
        if obs is not None:
            obs(i, "step6.o_proj", out)
        return out


class Qwen3MLP(StepObservable, nn.Module):
    """SwiGLU MLP: ``down_proj(silu(gate_proj(x)) * up_proj(x))``: Step 9.

    Source: transformers ``Qwen3MLP`` (``hidden_act="silu"``); the document's ``Qwen3MLP``.

    Parameters: ``gate_proj`` [d_ffn, d], ``up_proj`` [d_ffn, d], ``down_proj`` [d, d_ffn].

    forward(x (B, L, d)) -> (B, L, d), input dtype. Emits step9.gate, up, fused, down.

    Args:
        layer_idx: the decoder layer it belongs to (only reported to observers).
    """

    def __init__(self, config: Qwen3Config, layer_idx: int = 0, *, device=None, dtype=None) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        factory = {"device": device, "dtype": dtype}
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False, **factory)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False, **factory)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False, **factory)
        self.act_fn = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        obs = self._step_observer
        gate = self.gate_proj(x)  # (B, L, d_ffn)
        up = self.up_proj(x)  # (B, L, d_ffn)
        fused = self.act_fn(gate) * up  # (B, L, d_ffn), element-wise
        down = self.down_proj(fused)  # (B, L, d)
        if obs is not None:
            i = self.layer_idx
            obs(i, "step9.gate", gate)
            obs(i, "step9.up", up)
            obs(i, "step9.fused", fused)
            obs(i, "step9.down", down)
        return down


class Qwen3DecoderLayer(StepObservable, nn.Module):
    """One pre-norm decoder layer with two residuals: Steps 1-10 of the walkthrough.

    Source: transformers ``Qwen3DecoderLayer``; the document's ``Qwen3DecoderLayer``:

        h = x + self_attn(input_layernorm(x))        # Steps 1-7
        out = h + mlp(post_attention_layernorm(h))   # Steps 8-10

    Submodules (registration order as transformers): ``self_attn``, ``mlp``,
    ``input_layernorm`` [d], ``post_attention_layernorm`` [d]. 11 parameters.

    forward(hidden_states (B, L, d), position_embeddings (cos, sin) each (B|1, L, d_h) or
    None, skip) -> (B, L, d). With None, positions 0..L-1 are computed here exactly as
    :class:`Qwen3RotaryEmbedding` does (convenient for a lone layer; a stack computes them
    once for all layers). ``skip`` may name the blocks "self_attn" (input_layernorm and
    attention, Steps 1-6) and "mlp" (post_attention_layernorm and MLP, Steps 8-9) not to run:
    the hidden states pass that residual block unchanged (a module used only in some
    microbatches); Steps 7 and 10 are still reported.

    Attributes:
        layer_idx: passed to observers with every step.
    """

    def __init__(self, config: Qwen3Config, layer_idx: int, *, device=None, dtype=None) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.hidden_size = config.hidden_size
        factory = {"device": device, "dtype": dtype}
        self.self_attn = Qwen3Attention(config, layer_idx, **factory)
        self.mlp = Qwen3MLP(config, layer_idx, **factory)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps, **factory)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps, **factory)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        skip: Collection[str] = (),
    ) -> torch.Tensor:
        if position_embeddings is None:
            position_embeddings = _rope_tables(self.config, hidden_states)
        obs = self._step_observer
        i = self.layer_idx
        if "self_attn" not in skip:
            residual = hidden_states  # (B, L, d)
            hidden_states = self.input_layernorm(hidden_states)  # (B, L, d)
            if obs is not None:
                obs(i, "step1.x_norm", hidden_states)
            hidden_states = self.self_attn(hidden_states, position_embeddings)  # Steps 2-6, (B, L, d)
            hidden_states = residual + hidden_states  # (B, L, d)
        if obs is not None:
            obs(i, "step7.residual", hidden_states)
        if "mlp" not in skip:
            residual = hidden_states
            hidden_states = self.post_attention_layernorm(hidden_states)  # (B, L, d)
            if obs is not None:
                obs(i, "step8.h_norm", hidden_states)
            hidden_states = self.mlp(hidden_states)  # Step 9, (B, L, d)
            hidden_states = residual + hidden_states  # (B, L, d)
        if obs is not None:
            obs(i, "step10.output", hidden_states)
        return hidden_states


def _rope_tables(config: Qwen3Config, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin (1, L, d_h) for positions 0..L-1, as ``Qwen3RotaryEmbedding`` computes them."""
    inv_freq = _default_inv_freq(config, hidden_states.device)  # (d_h/2,), float32
    position_ids = _position_ids(hidden_states.shape[1], hidden_states.device)  # (1, L)
    freqs = position_ids[..., None].float() * inv_freq  # (1, L, d_h/2), float32
    emb = torch.cat((freqs, freqs), dim=-1)  # (1, L, d_h)
    return emb.cos().to(hidden_states.dtype), emb.sin().to(hidden_states.dtype)


def _run_layers(
    layers: nn.ModuleList,
    rotary_emb: Qwen3RotaryEmbedding,
    hidden_states: torch.Tensor,
    position_ids,
    skip_layers: Collection[int | tuple[int, str]] = (),
) -> torch.Tensor:
    """Run the decoder layers on (B, L, d) with cos/sin computed once (as transformers does).

    ``skip_layers``: a layer index in it is not called (its input passes on unchanged); a pair
    ``(index, "mlp")`` or ``(index, "self_attn")`` skips that block of the layer (see
    :class:`Qwen3DecoderLayer`). For a module used only in some microbatches: its parameters
    get no gradient from this pass.
    """
    if position_ids is None:
        position_ids = _position_ids(hidden_states.shape[1], hidden_states.device)  # (1, L)
    position_embeddings = rotary_emb(hidden_states, position_ids)  # (B|1, L, d_h) x 2
    for i, layer in enumerate(layers):
        if i in skip_layers:
            continue
        blocks = tuple(
            block for entry in skip_layers if isinstance(entry, tuple) and entry[0] == i for block in entry[1:]
        )
        if blocks:
            hidden_states = layer(hidden_states, position_embeddings, skip=blocks)  # (B, L, d)
        else:
            hidden_states = layer(hidden_states, position_embeddings)  # (B, L, d)
    return hidden_states


class Qwen3DecoderStack(nn.Module):
    """The walkthrough's focus: N_L decoder layers fed with hidden states, no embedding/norm.

    Parameter names are ``layers.<i>.…``, as in transformers' ``Qwen3Model`` minus
    ``embed_tokens`` and ``norm``; so ``Qwen3Model``'s state dict restricted to ``layers.*``
    loads here with ``strict=True``.

    forward(hidden_states (B, L, d), position_ids int64 (B|1, L) or None for 0..L-1,
            skip_layers: layers (indices) or blocks ((index, "mlp"|"self_attn")) not to run)
        -> (B, L, d), the last layer's output (no final norm).
    """

    layer_class: type[nn.Module] = Qwen3DecoderLayer  # the MoE stack builds its own layers

    def __init__(self, config: Qwen3Config, *, device=None, dtype=None) -> None:
        super().__init__()
        self.config = config
        factory = {"device": device, "dtype": dtype}
        self.layers = nn.ModuleList(
            [self.layer_class(config, layer_idx, **factory) for layer_idx in range(config.num_hidden_layers)]
        )
        self.rotary_emb = Qwen3RotaryEmbedding(config, **factory)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        skip_layers: Collection[int | tuple[int, str]] = (),
    ) -> torch.Tensor:
        return _run_layers(self.layers, self.rotary_emb, hidden_states, position_ids, skip_layers)


class Qwen3Model(nn.Module):
    """Embedding, N_L decoder layers, final RMSNorm: transformers' ``Qwen3Model``.

    Submodules (registration order as transformers): ``embed_tokens`` [V, d], ``layers``,
    ``norm`` [d], ``rotary_emb``. No ``lm_head`` (see :class:`Qwen3ForCausalLM`).

    forward(input_ids int64 (B, L), position_ids int64 (B|1, L) or None for 0..L-1)
        -> last hidden state (B, L, d), after the final norm, in the parameters' dtype.
    """

    layer_class: type[nn.Module] = Qwen3DecoderLayer  # the MoE model builds its own layers

    def __init__(self, config: Qwen3Config, *, device=None, dtype=None) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = config.vocab_size
        factory = {"device": device, "dtype": dtype}
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, **factory)
        self.layers = nn.ModuleList(
            [self.layer_class(config, layer_idx, **factory) for layer_idx in range(config.num_hidden_layers)]
        )
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps, **factory)
        self.rotary_emb = Qwen3RotaryEmbedding(config, **factory)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        skip_layers: Collection[int | tuple[int, str]] = (),
    ) -> torch.Tensor:
        hidden_states = self.embed_tokens(input_ids)  # (B, L, d)
        hidden_states = _run_layers(self.layers, self.rotary_emb, hidden_states, position_ids, skip_layers)  # (B, L, d)
        return self.norm(hidden_states)  # (B, L, d)


class Qwen3ForCausalLM(nn.Module):
    """``Qwen3Model`` plus ``lm_head``: transformers' ``Qwen3ForCausalLM``.

    ``lm_head`` [V, d], no bias. With ``config.tie_word_embeddings`` its weight IS
    ``model.embed_tokens.weight`` (one Parameter; ``named_parameters()`` lists it once, as
    ``model.embed_tokens.weight``; ``state_dict()`` lists it under both keys, as
    transformers does). ``to_empty()`` breaks the tie (it makes a new Parameter per module):
    call :meth:`tie_weights` after it.

    forward(input_ids int64 (B, L), position_ids or None) -> logits (B, L, V).
    """

    model_class: type[nn.Module] = Qwen3Model  # the MoE causal LM wraps Qwen3MoeModel

    def __init__(self, config: Qwen3Config, *, device=None, dtype=None) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = config.vocab_size
        self.model = self.model_class(config, device=device, dtype=dtype)
        # When tied, build lm_head on meta (no second V x d allocation) and share the weight.
        lm_device = "meta" if config.tie_word_embeddings else device
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False, device=lm_device, dtype=dtype)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Make ``lm_head.weight`` the embedding's Parameter if the config ties them."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        skip_layers: Collection[int | tuple[int, str]] = (),
    ) -> torch.Tensor:
        hidden_states = self.model(input_ids, position_ids, skip_layers)  # (B, L, d)
        return self.lm_head(hidden_states)  # (B, L, V)


def _find_config(module: nn.Module) -> Qwen3Config | None:
    for m in module.modules():
        config = getattr(m, "config", None)
        if isinstance(config, Qwen3Config):
            return config
    return None


def _normal_(weight: torch.Tensor, std: float, generator: torch.Generator | None, fill=None) -> None:
    """weight <- N(0, std^2), drawn in float32 on the generator's device, then copied.

    Drawing in float32 on one device makes the values independent of the parameter's device
    and (up to rounding) dtype: the same seed gives the same model on CPU and CUDA.
    ``fill(weight, sample)`` replaces the copy (a sharded weight keeps its slice of the full
    sample, which has the weight's full shape).
    """
    device = generator.device if generator is not None else weight.device
    sample = torch.empty(weight.shape, dtype=torch.float32, device=device)
    sample.normal_(0.0, std, generator=generator)
    if fill is not None:
        fill(weight, sample)
    else:
        weight.copy_(sample)


@torch.no_grad()
def init_weights(
    module: nn.Module,
    std: float | None = None,
    generator: torch.Generator | None = None,
    fill=None,
    *,
    reset_norms_and_rope: bool = True,
) -> nn.Module:
    """transformers' Qwen3 initialization, deterministic given a ``torch.Generator``.

    Source: transformers ``PreTrainedModel._init_weights``: Linear and Embedding weights
    ~ N(0, std^2) (biases zero, an Embedding's padding row zero), RMSNorm weights = 1. Also
    recomputes RoPE's ``inv_freq`` (needed after ``to_empty()``). A tied weight is drawn once.
    A module's parameters named in its ``_normal_init_params`` (the MoE experts and router)
    are drawn like a Linear's weight.
    Parameters on ``meta`` are skipped.

    Args:
        module: any module (a layer, a stack, a model).
        std: defaults to the ``initializer_range`` of the first ``Qwen3Config`` found in
            ``module`` (0.02 if none).
        generator: a seeded ``torch.Generator``; None uses torch's global RNG on each
            parameter's device.
        fill: ``fill(weight, sample)`` puts a drawn float32 ``sample`` of the weight's full
            shape into the weight (default: ``weight.copy_(sample)``); for a sharded (DTensor)
            weight it keeps this rank's slice, so the draws and values are a full init's.
        reset_norms_and_rope: False leaves RMSNorm weights and RoPE's ``inv_freq`` as they are:
            what an init of only the Linear and Embedding weights does to a model materialized
            with ``to_empty()`` (the repair forgotten).

    Returns:
        ``module``, for chaining.
    """
    if std is None:
        config = _find_config(module)
        std = config.initializer_range if config is not None else 0.02
    seen: set[int] = set()
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            if id(m.weight) in seen or m.weight.is_meta:
                continue
            seen.add(id(m.weight))
            _normal_(m.weight, std, generator, fill)
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.zero_()
            if isinstance(m, nn.Embedding) and m.padding_idx is not None:
                m.weight[m.padding_idx].zero_()
        elif isinstance(m, Qwen3RMSNorm):
            if not m.weight.is_meta and reset_norms_and_rope:
                m.reset_parameters()
        elif isinstance(m, Qwen3RotaryEmbedding):
            if reset_norms_and_rope:
                m.reset_parameters()
        else:
            # Parameters that are not a Linear's or an Embedding's but drawn like them
            # (model/qwen3_moe.py: the experts' 3-D gate_up_proj/down_proj, the router's weight;
            # transformers' Qwen3MoePreTrainedModel._init_weights draws them N(0, std^2) too).
            for name in getattr(m, "_normal_init_params", ()):
                weight = getattr(m, name)
                if id(weight) in seen or weight.is_meta:
                    continue
                seen.add(id(weight))
                _normal_(weight, std, generator, fill)
    return module
