"""Reference Qwen3 dense decoder: transformers' parameters and numerics, observable steps.

Mirrors transformers ``models/qwen3/modeling_qwen3.py`` (5.x): module tree, parameter names,
shapes, registration order and forward arithmetic, so a ``state_dict`` loads both ways with
``strict=True``. Shapes use the document's symbols (``model/config.py``); every constructor
takes ``device=`` and ``dtype=``. What it drops, and why it is laid out so:
docs/architecture.md, "How model/ mirrors transformers".
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
    """RMSNorm over the last dim (d, or d_h for q_norm/k_norm): ``w * x / sqrt(mean(x^2) + eps)``
    (the document's Step 1), ``weight`` [hidden_size] of ones. As transformers' ``Qwen3RMSNorm``:
    normalizes in float32, casts back to the input dtype, then multiplies by ``weight``."""

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
    """``1 / theta^(2i/d_h)``: float32 [d_h/2], computed on the CPU as transformers'
    ``compute_default_rope_parameters``, then moved to ``device``."""
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    return inv_freq.to(device)


def _position_ids(seq_len: int, device) -> torch.Tensor:
    """Positions 0..L-1 as int64 (1, L), as transformers' ``Qwen3Model.forward`` builds them."""
    return torch.arange(seq_len, device=device).unsqueeze(0)


class Qwen3RotaryEmbedding(nn.Module):
    """RoPE cos/sin tables (default rope type): transformers' ``Qwen3RotaryEmbedding``.

    ``inv_freq`` [d_h/2] is a float32, non-persistent buffer, float32 also after ``.half()``;
    after ``to_empty()`` call :meth:`reset_parameters`. forward(x, position_ids int64 (B|1, L))
    -> cos, sin (B|1, L, d_h) in x's dtype, computed in float32.
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
    """RoPE on q (B, h_q, L, d_h) and k (B, h_kv, L, d_h): ``x * cos + rotate_half(x) * sin``
    (the document's Step 4; transformers' ``apply_rotary_pos_emb``), cos/sin (B|1, L, d_h)
    getting a head axis at ``unsqueeze_dim``. Shapes and dtypes are kept."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """GQA repeat (Step 5.1; transformers' ``repeat_kv``): (B, h_kv, L, d_h) ->
    (B, h_kv * n_rep, L, d_h), query head j using KV head j // n_rep."""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class Qwen3Attention(StepObservable, nn.Module):
    """Causal GQA self-attention with per-head Q/K RMSNorm and RoPE, Steps 2-6: transformers'
    ``Qwen3Attention`` (sdpa). forward(hidden_states (B, L, d), (cos, sin)) -> (B, L, d), the
    o_proj output only (transformers also returns the attention weights)."""

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
    """SwiGLU MLP, Step 9: ``down_proj(silu(gate_proj(x)) * up_proj(x))``, (B, L, d) -> (B, L, d);
    transformers' ``Qwen3MLP``."""

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
    """One pre-norm decoder layer, Steps 1-10: transformers' ``Qwen3DecoderLayer``,
    ``h = x + self_attn(input_layernorm(x))``, ``out = h + mlp(post_attention_layernorm(h))``.

    forward(hidden_states (B, L, d), (cos, sin) or None for positions 0..L-1, skip) -> (B, L, d);
    ``skip`` names residual blocks not to run ("self_attn": Steps 1-6, "mlp": Steps 8-9).
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
    """Run the layers on (B, L, d), cos/sin computed once; ``skip_layers`` holds layer indices
    not to call and ``(index, "mlp"|"self_attn")`` blocks not to run."""
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
    """The walkthrough's focus: N_L decoder layers (``layers.<i>.…``, as in ``Qwen3Model``),
    no embedding or norm. forward(hidden_states (B, L, d), position_ids, skip_layers) -> (B, L, d)."""

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
    """Embedding [V, d], N_L decoder layers, final norm: transformers' ``Qwen3Model``.
    forward(input_ids int64 (B, L), position_ids, skip_layers) -> (B, L, d), after the norm."""

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
    """``Qwen3Model`` plus ``lm_head`` [V, d]: transformers' ``Qwen3ForCausalLM``; forward -> logits
    (B, L, V). When tied, ``lm_head.weight`` IS the embedding's; after ``to_empty()`` call
    :meth:`tie_weights` again."""

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

    def last_hidden_state(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        skip_layers: Collection[int | tuple[int, str]] = (),
    ) -> torch.Tensor:
        """The final norm's output (B, L, d), no lm_head: a method FSDP wraps only if registered."""
        return self.model(input_ids, position_ids, skip_layers)


def _find_config(module: nn.Module) -> Qwen3Config | None:
    for m in module.modules():
        config = getattr(m, "config", None)
        if isinstance(config, Qwen3Config):
            return config
    return None


def _normal_(weight: torch.Tensor, std: float, generator: torch.Generator | None, fill=None) -> None:
    """weight <- N(0, std^2), drawn in float32 on the generator's device (the same seed gives
    the same model on CPU and CUDA), then copied, or put by ``fill(weight, sample)``."""
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
    """transformers' Qwen3 initialization (``PreTrainedModel._init_weights``), deterministic
    given a seeded ``generator``; returns ``module``.

    Linear, Embedding and ``_normal_init_params`` weights ~ N(0, std^2) (``std`` defaults to the
    config's ``initializer_range``; a tied weight drawn once, ``meta`` ones skipped), biases and
    padding rows zero; RMSNorm weights 1 and RoPE's ``inv_freq`` recomputed unless
    ``reset_norms_and_rope`` is False. ``fill(weight, sample)`` puts a full-shape float32 sample
    into a weight (a DTensor keeps its rank's slice).
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
