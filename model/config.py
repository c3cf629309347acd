"""Qwen3 configuration: field names as in transformers' ``Qwen3Config``, validated up front.

Source of the field names and meanings: transformers ``models/qwen3/configuration_qwen3.py``.
The one deliberate difference: transformers 5.x keeps RoPE settings in
``rope_parameters = {"rope_type": "default", "rope_theta": ...}``; this config keeps the flat
``rope_theta`` of the released ``config.json`` files (only default RoPE is modelled).
:meth:`Qwen3Config.to_transformers_kwargs` gives the mapping transformers 5.x expects.

Symbols used in docstrings across ``model/`` (the walkthrough document's):
  B = batch, L = sequence length, d = hidden_size, h_q = num_attention_heads,
  h_kv = num_key_value_heads, d_h = head_dim, d_ffn = intermediate_size,
  N_L = num_hidden_layers, V = vocab_size.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["Qwen3Config", "KNOWN_CONFIGS", "get_config"]

_POSITIVE_INTS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
)
_POSITIVE_FLOATS = ("rms_norm_eps", "rope_theta", "initializer_range")


@dataclass(frozen=True, kw_only=True)
class Qwen3Config:
    """Hyper-parameters of a dense Qwen3 decoder (frozen; use :func:`get_config` to derive).

    Attributes:
        vocab_size: V, rows of ``embed_tokens`` / ``lm_head``.
        hidden_size: d, the residual stream width.
        intermediate_size: d_ffn, the SwiGLU width.
        num_hidden_layers: N_L, decoder layers.
        num_attention_heads: h_q.
        num_key_value_heads: h_kv (GQA); None means h_kv = h_q, as in transformers.
            Must divide h_q.
        head_dim: d_h. Independent of d in Qwen3 (Qwen3-0.6B: d=1024, h_q*d_h=2048).
            Must be even (RoPE rotates pairs).
        hidden_act: MLP activation; only "silu" (SwiGLU) exists in Qwen3.
        max_position_embeddings: context length of the released models; kept for fidelity,
            RoPE here is computed for any position.
        initializer_range: std of the normal init of Linear/Embedding weights.
        rms_norm_eps: epsilon inside every RMSNorm (> 0).
        rope_theta: RoPE base (> 0); transformers 5.x: ``rope_parameters["rope_theta"]``.
        tie_word_embeddings: ``lm_head.weight`` is ``embed_tokens.weight``.
        attention_bias: only False: Qwen3 and the walkthrough have no projection biases.
        attention_dropout: only 0.0: the walkthrough has no dropout.

    Raises:
        ValueError: naming the offending field, for any impossible or unsupported value.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int
    hidden_act: str = "silu"
    max_position_embeddings: int = 40960
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    attention_dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.num_key_value_heads is None:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"Qwen3Config.{name} must be an int, got {value!r}")
            if value <= 0:
                raise ValueError(f"Qwen3Config.{name} must be positive, got {value}")
        for name in _POSITIVE_FLOATS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"Qwen3Config.{name} must be a number, got {value!r}")
            if not value > 0:  # also rejects NaN
                raise ValueError(f"Qwen3Config.{name} must be > 0, got {value}")
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError(
                f"Qwen3Config.num_key_value_heads={self.num_key_value_heads} must divide "
                f"num_attention_heads={self.num_attention_heads} (GQA shares each KV head "
                f"among num_attention_heads / num_key_value_heads query heads)"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(
                f"Qwen3Config.head_dim must be even for RoPE (it rotates pairs of dims), "
                f"got {self.head_dim}"
            )
        if self.hidden_act != "silu":
            raise ValueError(
                f"Qwen3Config.hidden_act must be 'silu' (Qwen3's SwiGLU), got {self.hidden_act!r}"
            )
        for name in ("tie_word_embeddings", "attention_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Qwen3Config.{name} must be a bool, got {getattr(self, name)!r}")
        if self.attention_bias:
            raise ValueError(
                "Qwen3Config.attention_bias=True is not supported: Qwen3 and the walkthrough "
                "have no q/k/v/o biases"
            )
        if self.attention_dropout != 0.0:
            raise ValueError(
                f"Qwen3Config.attention_dropout must be 0.0 (no dropout in the walkthrough), "
                f"got {self.attention_dropout!r}"
            )

    # ---- derived values -------------------------------------------------------------

    @property
    def num_key_value_groups(self) -> int:
        """h_q / h_kv: query heads per KV head (the GQA repeat factor of Step 5)."""
        return self.num_attention_heads // self.num_key_value_heads

    def step_symbols(self, batch: int, seq_len: int) -> dict[str, int]:
        """Values of the step-shape symbols, for :func:`model.steps.resolve_shape`.

        Args:
            batch: B (per rank).
            seq_len: L.
        """
        return {
            "B": batch,
            "L": seq_len,
            "d": self.hidden_size,
            "h_q": self.num_attention_heads,
            "h_kv": self.num_key_value_heads,
            "d_h": self.head_dim,
            "d_ffn": self.intermediate_size,
        }

    def to_dict(self) -> dict[str, Any]:
        """All fields as a plain dict (``get_config(cfg.to_dict())`` round-trips)."""
        return dataclasses.asdict(self)

    def to_transformers_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``transformers.Qwen3Config`` (5.x) describing the same model.

        transformers is not imported here; the flat ``rope_theta`` becomes
        ``rope_parameters={"rope_type": "default", "rope_theta": ...}``.
        """
        kwargs = self.to_dict()
        kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": float(kwargs.pop("rope_theta"))}
        return kwargs


_FIELDS = tuple(f.name for f in dataclasses.fields(Qwen3Config))
_REQUIRED = tuple(
    f.name
    for f in dataclasses.fields(Qwen3Config)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)


def _released(hidden: int, layers: int, heads: int, kv: int, ffn: int, tie: bool) -> Qwen3Config:
    """A released Qwen3 dense model: values shared by all their published config.json files."""
    return Qwen3Config(
        vocab_size=151936,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=128,
        max_position_embeddings=40960,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        tie_word_embeddings=tie,
    )


KNOWN_CONFIGS: dict[str, Qwen3Config] = {
    # The walkthrough document's table ("配置（精简版，便于数值追踪）") fixes only d=512,
    # h_q=8, h_kv=4, d_h=64, d_ffn=1024. It does NOT fix: num_hidden_layers (2 here: enough to
    # see one all-gather per layer), vocab_size (1024 here: small), rms_norm_eps, rope_theta,
    # max_position_embeddings (Qwen3's 1e-6, 1e6, 40960 here), tie_word_embeddings (True here:
    # the document, section "简化的 Qwen3 结构", notes lm_head usually shares embed_tokens' weight).
    "walkthrough": Qwen3Config(
        vocab_size=1024,
        hidden_size=512,
        intermediate_size=1024,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=40960,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
    ),
    # Released dense models, from the published config.json of Qwen/Qwen3-*:
    #                                hidden layers heads kv  intermediate tie
    "Qwen3-0.6B": _released(1024, 28, 16, 8, 3072, True),
    "Qwen3-1.7B": _released(2048, 28, 16, 8, 6144, True),
    "Qwen3-4B": _released(2560, 36, 32, 8, 9728, True),
    "Qwen3-8B": _released(4096, 36, 32, 8, 12288, False),
    "Qwen3-14B": _released(5120, 40, 40, 8, 17408, False),
    "Qwen3-32B": _released(5120, 64, 64, 8, 25600, False),
}


def _check_fields(fields: Mapping[str, Any], what: str) -> None:
    unknown = sorted(k for k in fields if k not in _FIELDS)
    if unknown:
        raise ValueError(
            f"unknown Qwen3Config field(s) in {what}: {', '.join(map(repr, unknown))}; "
            f"known fields: {', '.join(_FIELDS)}"
        )


def get_config(name_or_mapping: str | Mapping[str, Any] | Qwen3Config, **overrides: Any) -> Qwen3Config:
    """A validated :class:`Qwen3Config` from a known name or a mapping of fields.

    Args:
        name_or_mapping: a key of :data:`KNOWN_CONFIGS`, a mapping of ``Qwen3Config`` fields
            (all required fields present), or a ``Qwen3Config``.
        **overrides: fields replacing those of the base config (e.g. ``num_hidden_layers=1``).

    Raises:
        ValueError: unknown name (lists the known names), unknown field (names it), a missing
            required field (names it), or an invalid value (names the field).
    """
    _check_fields(overrides, "overrides")
    if isinstance(name_or_mapping, Qwen3Config):
        base = name_or_mapping
    elif isinstance(name_or_mapping, str):
        if name_or_mapping not in KNOWN_CONFIGS:
            raise ValueError(
                f"unknown config name {name_or_mapping!r}; known names: {', '.join(KNOWN_CONFIGS)}"
            )
        base = KNOWN_CONFIGS[name_or_mapping]
    elif isinstance(name_or_mapping, Mapping):
        _check_fields(name_or_mapping, "mapping")
        fields = {**name_or_mapping, **overrides}
        missing = [k for k in _REQUIRED if k not in fields]
        if missing:
            raise ValueError(f"Qwen3Config field(s) missing from mapping: {', '.join(missing)}")
        return Qwen3Config(**fields)
    else:
        raise ValueError(
            f"get_config expects a config name, a mapping of fields or a Qwen3Config, "
            f"got {type(name_or_mapping).__name__}"
        )
    if not overrides:
        return base
    # The base's resolved h_kv is kept unless overridden; validation flags a non-divisor.
    return Qwen3Config(**{**base.to_dict(), **overrides})
