"""Reference Qwen3 MoE decoder: transformers' parameters and numerics, observable steps.

Mirrors transformers ``models/qwen3_moe/modeling_qwen3_moe.py`` (5.x, checked with 5.24.0,
``experts_implementation="eager"``); attention, norms and RoPE are ``model/qwen3.py``'s, what
differs is the sparse layers' MLP (E = num_experts, k = num_experts_per_tok, d_moe =
moe_intermediate_size, T = B*L tokens). Its arithmetic and its two expert paths:
docs/architecture.md, "How model/ mirrors transformers".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import Qwen3MoeConfig
from .observe import StepObservable
from .qwen3 import (
    Qwen3Attention,
    Qwen3DecoderLayer,
    Qwen3DecoderStack,
    Qwen3ForCausalLM,
    Qwen3MLP,
    Qwen3Model,
    Qwen3RMSNorm,
)

__all__ = [
    "Qwen3MoeExperts",
    "Qwen3MoeTopKRouter",
    "Qwen3MoeSparseMoeBlock",
    "Qwen3MoeDecoderLayer",
    "Qwen3MoeDecoderStack",
    "Qwen3MoeModel",
    "Qwen3MoeForCausalLM",
    "Qwen3MoeCausalLMOutput",
    "load_balancing_loss_func",
    "causal_lm_loss",
    "has_no_data",
    "swiglu_expert",
]


def swiglu_expert(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, act_fn) -> torch.Tensor:
    """One expert's SwiGLU, x (n, d) -> (n, d), ``gate_up`` [2*d_moe, d] (gate rows first), ``down``
    [d, d_moe]: transformers' ``Qwen3MoeExperts`` expert (EP calls it with a rank's own)."""
    gate, up = F.linear(x, gate_up).chunk(2, dim=-1)  # (n, d_moe) each
    return F.linear(act_fn(gate) * up, down)  # (n, d)


def has_no_data(t: torch.Tensor) -> bool:
    """A meta or fake tensor: shapes only, so the routing (which expert gets which token) is unknown."""
    if t.device.type == "meta":
        return True
    from torch._subclasses.fake_tensor import is_fake

    return is_fake(t)


def _normal_params(module: nn.Module, names: tuple[str, ...], std: float) -> None:
    with torch.no_grad():
        for name in names:
            getattr(module, name).normal_(0.0, std)


class Qwen3MoeExperts(StepObservable, nn.Module):
    """E SwiGLU experts in ``gate_up_proj`` [E, 2*d_moe, d] (gate rows first) and ``down_proj``
    [E, d, d_moe], drawn N(0, std^2): transformers' ``Qwen3MoeExperts``. forward(x (T, d),
    top_k_index int64 (T, k), top_k_weights (T, k)) -> (T, d) in x's dtype. ``static``: every
    expert on every token (as fake and meta tensors always run), else transformers' eager loop.
    """

    _normal_init_params = ("gate_up_proj", "down_proj")

    def __init__(self, config: Qwen3MoeConfig, layer_idx: int = 0, *, device=None, dtype=None) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_experts = config.num_experts
        self.hidden_dim = config.hidden_size
        self.intermediate_dim = config.moe_intermediate_size
        factory = {"device": device, "dtype": dtype}
        E, d, d_moe = self.num_experts, self.hidden_dim, self.intermediate_dim
        self.gate_up_proj = nn.Parameter(torch.empty(E, 2 * d_moe, d, **factory))  # [E, 2*d_moe, d]
        self.down_proj = nn.Parameter(torch.empty(E, d, d_moe, **factory))  # [E, d, d_moe]
        self.act_fn = nn.SiLU()
        self.static = False
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _normal_params(self, self._normal_init_params, self.config.initializer_range)

    def _expert(self, e, x: torch.Tensor) -> torch.Tensor:
        """Expert e's SwiGLU on x (n, d) -> (n, d), as transformers computes it."""
        return swiglu_expert(x, self.gate_up_proj[e], self.down_proj[e], self.act_fn)

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        obs = self._step_observer
        T, d = hidden_states.shape
        k = top_k_index.shape[-1]
        final_hidden_states = torch.zeros_like(hidden_states)  # (T, d)
        # (T, k, d): expert idx[t, j]'s unweighted output on token t; built only when observed
        slots = hidden_states.new_zeros(T, k, d) if obs is not None else None
        if self.static or has_no_data(hidden_states):
            # Every expert on every token as one batched product over the expert dim: a loop over
            # the experts' numbers up to rounding (one sum over the expert dim instead of E adds),
            # in a handful of ops instead of ~40 per expert (under FakeTensorMode each op is a
            # Python dispatch: a 128-expert layer's loop was most of a simulated rank's step).
            gate, up = torch.matmul(hidden_states, self.gate_up_proj.transpose(1, 2)).chunk(2, dim=-1)  # (E, T, d_moe)
            outs = torch.matmul(self.act_fn(gate) * up, self.down_proj.transpose(1, 2))  # (E, T, d)
            picked = F.one_hot(top_k_index, num_classes=self.num_experts)  # (T, k, E); top-k is distinct
            weights = (top_k_weights[..., None] * picked).sum(dim=1)  # (T, E), 0 where not picked
            final_hidden_states = (outs * weights.t()[..., None]).sum(dim=0).to(final_hidden_states.dtype)
            if slots is not None:  # slot (t, j) holds expert idx[t, j]'s output on token t
                slots = outs.transpose(0, 1).gather(1, top_k_index[..., None].expand(T, k, d))
        else:
            # transformers' eager forward, line for line (num_experts + 1 classes: its
            # expert-parallel sentinel, never hit here).
            with torch.no_grad():
                expert_mask = F.one_hot(top_k_index, num_classes=self.num_experts + 1)  # (T, k, E+1)
                expert_mask = expert_mask.permute(2, 1, 0)  # (E+1, k, T)
                expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()  # (n_hit, 1)
            for expert_idx in expert_hit:
                expert_idx = expert_idx[0]
                if expert_idx == self.num_experts:
                    continue
                top_k_pos, token_idx = torch.where(expert_mask[expert_idx])  # (n_e,) each
                current_state = hidden_states[token_idx]  # (n_e, d)
                current_hidden_states = self._expert(expert_idx, current_state)  # (n_e, d)
                if slots is not None:
                    slots = slots.index_put((token_idx, top_k_pos), current_hidden_states)
                current_hidden_states = current_hidden_states * top_k_weights[token_idx, top_k_pos, None]
                final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))
        if obs is not None:
            obs(self.layer_idx, "step9.expert_outputs", slots)
        return final_hidden_states

    def extra_repr(self) -> str:
        return f"num_experts={self.num_experts}, hidden_dim={self.hidden_dim}, intermediate_dim={self.intermediate_dim}"


class Qwen3MoeTopKRouter(nn.Module):
    """The router (the block's ``gate``), ``weight`` [E, d], drawn at construction:
    transformers' ``Qwen3MoeTopKRouter``. forward(x (..., d)) -> router logits (T, E), top-k
    weights (T, k) in x's dtype (softmax and renormalisation in float32), indices int64 (T, k)."""

    _normal_init_params = ("weight",)

    def __init__(self, config: Qwen3MoeConfig, *, device=None, dtype=None) -> None:
        super().__init__()
        self.config = config
        self.top_k = config.num_experts_per_tok
        self.num_experts = config.num_experts
        self.norm_topk_prob = config.norm_topk_prob
        self.hidden_dim = config.hidden_size
        self.weight = nn.Parameter(torch.empty(self.num_experts, self.hidden_dim, device=device, dtype=dtype))  # [E, d]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _normal_params(self, self._normal_init_params, self.config.initializer_range)

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)  # (T, d)
        router_logits = F.linear(hidden_states, self.weight)  # (T, E)
        router_probs = F.softmax(router_logits, dtype=torch.float, dim=-1)  # (T, E), float32
        router_top_value, router_indices = torch.topk(router_probs, self.top_k, dim=-1)  # (T, k) each
        if self.norm_topk_prob:
            router_top_value /= router_top_value.sum(dim=-1, keepdim=True)  # rows sum to 1
        router_top_value = router_top_value.to(router_logits.dtype)  # (T, k)
        return router_logits, router_top_value, router_indices


class Qwen3MoeSparseMoeBlock(StepObservable, nn.Module):
    """Router plus experts, a sparse layer's ``mlp`` (B, L, d) -> (B, L, d): transformers'
    ``Qwen3MoeSparseMoeBlock``, ``experts`` registered before ``gate`` as there."""

    def __init__(self, config: Qwen3MoeConfig, layer_idx: int = 0, *, device=None, dtype=None) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        factory = {"device": device, "dtype": dtype}
        self.experts = Qwen3MoeExperts(config, layer_idx, **factory)
        self.gate = Qwen3MoeTopKRouter(config, **factory)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        obs = self._step_observer
        i = self.layer_idx
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states_reshaped = hidden_states.view(-1, hidden_dim)  # (T, d), T = B*L
        router_logits, routing_weights, selected_experts = self.gate(hidden_states_reshaped)  # (T, E), (T, k), (T, k)
        if obs is not None:
            obs(i, "step9.router_logits", router_logits)
            obs(i, "step9.topk_weights", routing_weights)
            obs(i, "step9.topk_indices", selected_experts)
            experts = torch.arange(self.config.num_experts, device=selected_experts.device)
            obs(i, "step9.tokens_per_expert", (selected_experts[..., None] == experts).sum(dim=(0, 1)))  # (E,)
        final_hidden_states = self.experts(hidden_states_reshaped, selected_experts, routing_weights)  # (T, d)
        out = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)  # (B, L, d)
        if obs is not None:
            obs(i, "step9.moe_out", out)
        return out


class Qwen3MoeDecoderLayer(Qwen3DecoderLayer):
    """transformers' ``Qwen3MoeDecoderLayer``: the dense layer with a sparse ``mlp`` where
    ``config.is_moe_layer(layer_idx)``, else a dense ``Qwen3MLP``."""

    def __init__(self, config: Qwen3MoeConfig, layer_idx: int, *, device=None, dtype=None) -> None:
        nn.Module.__init__(self)  # not Qwen3DecoderLayer's: it would build a dense MLP first
        self.config = config
        self.layer_idx = layer_idx
        self.hidden_size = config.hidden_size
        factory = {"device": device, "dtype": dtype}
        self.self_attn = Qwen3Attention(config, layer_idx, **factory)
        if config.is_moe_layer(layer_idx):
            self.mlp = Qwen3MoeSparseMoeBlock(config, layer_idx, **factory)
        else:
            self.mlp = Qwen3MLP(config, layer_idx, **factory)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps, **factory)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps, **factory)

    @property
    def is_sparse(self) -> bool:
        return isinstance(self.mlp, Qwen3MoeSparseMoeBlock)


class Qwen3MoeDecoderStack(Qwen3DecoderStack):
    """N_L MoE decoder layers fed with hidden states (``layers.<i>.…``), as
    :class:`~model.qwen3.Qwen3DecoderStack`."""

    layer_class = Qwen3MoeDecoderLayer


class Qwen3MoeModel(Qwen3Model):
    """Embedding, N_L MoE decoder layers, final norm: transformers' ``Qwen3MoeModel``
    (returns the last hidden state (B, L, d))."""

    layer_class = Qwen3MoeDecoderLayer


@dataclass
class Qwen3MoeCausalLMOutput:
    """:meth:`Qwen3MoeForCausalLM.forward_moe`'s result (transformers' ``MoeCausalLMOutputWithPast``):
    logits (B, L, V); per sparse layer a (B*L, E) router logits tensor and their 0-d float32
    aux loss, None when not asked; with labels the loss, plus ``router_aux_loss_coef * aux_loss``."""

    logits: torch.Tensor
    router_logits: tuple[torch.Tensor, ...] | None = None
    aux_loss: torch.Tensor | None = None
    loss: torch.Tensor | None = None


class Qwen3MoeForCausalLM(Qwen3ForCausalLM):
    """``Qwen3MoeModel`` plus ``lm_head``: transformers' ``Qwen3MoeForCausalLM``; forward gives
    logits, :meth:`forward_moe` also the router logits and losses."""

    model_class = Qwen3MoeModel

    def forward_moe(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_router_logits: bool | None = None,
        skip_layers=(),
    ) -> Qwen3MoeCausalLMOutput:
        """transformers' ``Qwen3MoeForCausalLM.forward`` (no mask, no cache); the router logits
        come live through :func:`model.observe.observe_steps`, so the aux loss reaches every router."""
        from .observe import observe_steps

        if output_router_logits is None:
            output_router_logits = self.config.output_router_logits
        router_logits: list[torch.Tensor] = []
        if output_router_logits:

            def keep(layer_idx: int, name: str, tensor: torch.Tensor) -> None:
                if name == "step9.router_logits":
                    router_logits.append(tensor)

            with observe_steps(self, keep):
                logits = self(input_ids, position_ids, skip_layers)
        else:
            logits = self(input_ids, position_ids, skip_layers)
        loss = causal_lm_loss(logits, labels, self.config.vocab_size) if labels is not None else None
        aux_loss = None
        if output_router_logits:
            aux_loss = load_balancing_loss_func(
                tuple(router_logits), self.config.num_experts, self.config.num_experts_per_tok
            )
            if loss is not None:
                loss = loss + self.config.router_aux_loss_coef * aux_loss.to(loss.device)
        return Qwen3MoeCausalLMOutput(logits, tuple(router_logits) if output_router_logits else None, aux_loss, loss)


def causal_lm_loss(
    logits: torch.Tensor, labels: torch.Tensor, vocab_size: int, ignore_index: int = -100
) -> torch.Tensor:
    """transformers' ``ForCausalLMLoss`` (no ``num_items_in_batch``): the mean cross entropy, in
    float32, of logits (B, L, V) at position p against labels (B, L) at p + 1 (the last
    position has none: ``ignore_index``)."""
    logits = logits.float()
    labels = F.pad(labels, (0, 1), value=ignore_index)
    shift_labels = labels[..., 1:].contiguous()  # (B, L)
    logits = logits.view(-1, vocab_size)  # (B*L, V)
    shift_labels = shift_labels.view(-1).to(logits.device)  # (B*L,)
    return F.cross_entropy(logits, shift_labels, ignore_index=ignore_index, reduction="mean")


def load_balancing_loss_func(
    gate_logits: torch.Tensor | tuple[torch.Tensor, ...] | None,
    num_experts: int | None = None,
    top_k: int = 2,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor | int:
    """The Switch Transformer auxiliary loss, transformers' ``load_balancing_loss_func`` (5.24):
    ``E * sum_e f_e * P_e`` over all layers' rows, f_e the fraction of top-k slots routed to
    expert e, P_e its mean routing probability. As transformers, the top-k is taken again from a
    softmax in the logits' dtype. ``gate_logits``: a tuple of (B*L, E), one per sparse layer
    (anything else gives the int 0); ``attention_mask`` (B, L), 1 for real tokens. Returns a
    0-d float32 tensor.
    """

    if gate_logits is None or not isinstance(gate_logits, tuple):
        return 0

    compute_device = gate_logits[0].device
    histc_dtype = torch.float32 if compute_device.type in ("cpu", "mps") else torch.int32
    tokens_per_expert_sum = torch.zeros(num_experts, dtype=torch.float32, device=compute_device)  # (E,)
    router_prob_sum = torch.zeros(num_experts, dtype=torch.float32, device=compute_device)  # (E,)
    total_rows = 0.0

    if attention_mask is not None:
        flat_mask = attention_mask.reshape(-1).to(device=compute_device, dtype=torch.float32)  # (B*L,)

    for layer_gate in gate_logits:
        routing_weights = F.softmax(layer_gate.to(compute_device), dim=-1)  # (T, E), logits' dtype
        _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)  # (T, k)
        if attention_mask is None:
            tokens_per_expert_sum = tokens_per_expert_sum + torch.histc(
                selected_experts.reshape(-1).to(histc_dtype), bins=num_experts, min=0, max=num_experts
            )
            router_prob_sum = router_prob_sum + routing_weights.float().sum(dim=0)
            total_rows = total_rows + routing_weights.shape[0]
        else:
            tokens_per_expert_sum = tokens_per_expert_sum + torch.zeros(
                num_experts, dtype=torch.float32, device=compute_device
            ).scatter_add_(0, selected_experts.reshape(-1), flat_mask.repeat_interleave(top_k))
            router_prob_sum = router_prob_sum + (routing_weights.float() * flat_mask.unsqueeze(-1)).sum(dim=0)
            total_rows = total_rows + flat_mask.sum()

    tokens_per_expert = tokens_per_expert_sum / total_rows  # (E,)
    router_prob_per_expert = router_prob_sum / total_rows  # (E,)

    overall_loss = torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0))
    return overall_loss * num_experts
