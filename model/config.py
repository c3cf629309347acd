"""Qwen3 and Qwen3 MoE configs with transformers' field names (source: transformers
``models/qwen3/configuration_qwen3.py``), validated up front, and the reader of a transformers
``config.json``. Nothing here imports torch.


Symbols used in docstrings across ``model/`` (the walkthrough document's): B = batch, L =
sequence length, d = hidden_size, h_q = num_attention_heads, h_kv = num_key_value_heads,
d_h = head_dim, d_ffn = intermediate_size, N_L = num_hidden_layers, V = vocab_size.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

__all__ = [
    "Qwen3Config",
    "Qwen3MoeConfig",
    "KNOWN_MOE_CONFIGS",
    "MOE_HUB_IDS",
    "get_moe_config",
    "known_moe_config_name",
    "layer_param_counts",
    "model_param_counts",
    "KNOWN_CONFIGS",
    "HUB_IDS",
    "IGNORED_FIELDS",
    "ConfigFile",
    "get_config",
    "known_config_name",
    "from_transformers",
    "read_config_file",
    "step_symbols",
]

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

    Fields as transformers' (symbols above): ``num_key_value_heads`` None means h_q and must
    divide h_q; ``head_dim`` is independent of d (Qwen3-0.6B: d=1024, h_q*d_h=2048) and even
    (RoPE rotates pairs); ``rope_theta`` is flat (transformers 5.x:
    ``rope_parameters["rope_theta"]``); ``max_position_embeddings`` is kept for fidelity only;
    ``initializer_range`` is the init's std; ``hidden_act`` only "silu", ``attention_bias``
    only False, ``attention_dropout`` only 0.0.

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
                f"Qwen3Config.head_dim must be even for RoPE (it rotates pairs of dims), got {self.head_dim}"
            )
        if self.hidden_act != "silu":
            raise ValueError(f"Qwen3Config.hidden_act must be 'silu' (Qwen3's SwiGLU), got {self.hidden_act!r}")
        for name in ("tie_word_embeddings", "attention_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Qwen3Config.{name} must be a bool, got {getattr(self, name)!r}")
        if self.attention_bias:
            raise ValueError(
                "Qwen3Config.attention_bias=True is not supported: Qwen3 and the walkthrough have no q/k/v/o biases"
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
        """:func:`step_symbols` of this config."""
        return step_symbols(self, batch, seq_len)

    def to_dict(self) -> dict[str, Any]:
        """All fields as a plain dict (``get_config(cfg.to_dict())`` round-trips)."""
        return dataclasses.asdict(self)

    def to_transformers_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``transformers.Qwen3Config`` (5.x): ``rope_theta`` moves into
        ``rope_parameters``."""
        kwargs = self.to_dict()
        kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": float(kwargs.pop("rope_theta"))}
        return kwargs


def step_symbols(dims: Any, batch: int, seq_len: int) -> dict[str, int]:
    """The one definition of the step-shape symbols for :func:`model.steps.resolve_shape`:
    B = ``batch`` per rank, L = ``seq_len``, d, h_q, h_kv, d_h, d_ffn from ``dims`` (any object
    with those ``Qwen3Config`` attributes), and E, k, d_moe when ``dims.num_experts`` is set."""
    return {
        "B": batch,
        "L": seq_len,
        "d": dims.hidden_size,
        "h_q": dims.num_attention_heads,
        "h_kv": dims.num_key_value_heads,
        "d_h": dims.head_dim,
        "d_ffn": dims.intermediate_size,
        # MoE dims (a Qwen3MoeConfig): E experts, top-k, d_moe = moe_intermediate_size
        **(
            {"E": dims.num_experts, "k": dims.num_experts_per_tok, "d_moe": dims.moe_intermediate_size}
            if getattr(dims, "num_experts", None) is not None
            else {}
        ),
    }


_FIELDS = tuple(f.name for f in dataclasses.fields(Qwen3Config))
_REQUIRED = tuple(
    f.name
    for f in dataclasses.fields(Qwen3Config)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)


_MOE_POSITIVE_INTS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step")


@dataclass(frozen=True, kw_only=True)
class Qwen3MoeConfig(Qwen3Config):
    """A Qwen3 MoE decoder's hyper-parameters (source: transformers
    ``models/qwen3_moe/configuration_qwen3_moe.py``, 5.x): :class:`Qwen3Config`'s plus E =
    ``num_experts`` (5.x writes ``num_local_experts``), k = ``num_experts_per_tok`` (<= E),
    d_moe = ``moe_intermediate_size``, ``norm_topk_prob`` (renormalise the k weights),
    ``decoder_sparse_step`` and ``mlp_only_layers`` (:meth:`is_moe_layer`; d_ffn is the dense
    layers' width), ``router_aux_loss_coef`` and ``output_router_logits``.

    Raises:
        ValueError: naming the offending field.
    """

    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    router_aux_loss_coef: float = 0.001
    output_router_logits: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in _MOE_POSITIVE_INTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"Qwen3MoeConfig.{name} must be an int, got {value!r}")
            if value <= 0:
                raise ValueError(f"Qwen3MoeConfig.{name} must be positive, got {value}")
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(
                f"Qwen3MoeConfig.num_experts_per_tok={self.num_experts_per_tok} must be at most "
                f"num_experts={self.num_experts} (each token picks its top-k experts)"
            )
        for name in ("norm_topk_prob", "output_router_logits"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Qwen3MoeConfig.{name} must be a bool, got {getattr(self, name)!r}")
        coef = self.router_aux_loss_coef
        if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not coef >= 0:
            raise ValueError(f"Qwen3MoeConfig.router_aux_loss_coef must be a number >= 0, got {coef!r}")
        layers = self.mlp_only_layers
        if isinstance(layers, (str, bytes)) or not isinstance(layers, (list, tuple)):
            raise ValueError(f"Qwen3MoeConfig.mlp_only_layers must be a list of layer indices, got {layers!r}")
        for i in layers:
            if isinstance(i, bool) or not isinstance(i, int) or i < 0:
                raise ValueError(
                    f"Qwen3MoeConfig.mlp_only_layers must hold layer indices (ints >= 0), got {i!r} in {list(layers)}"
                )
        object.__setattr__(self, "mlp_only_layers", tuple(layers))  # frozen and hashable

    def is_moe_layer(self, layer_idx: int) -> bool:
        """Whether layer ``layer_idx`` is sparse, as transformers' ``Qwen3MoeDecoderLayer``."""
        return (layer_idx not in self.mlp_only_layers) and (
            self.num_experts > 0 and (layer_idx + 1) % self.decoder_sparse_step == 0
        )

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """Indices of the sparse layers, ascending."""
        return tuple(i for i in range(self.num_hidden_layers) if self.is_moe_layer(i))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["mlp_only_layers"] = list(d["mlp_only_layers"])
        return d


_MOE_FIELDS = tuple(f.name for f in dataclasses.fields(Qwen3MoeConfig))
_MOE_REQUIRED = tuple(
    f.name
    for f in dataclasses.fields(Qwen3MoeConfig)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)


def layer_param_counts(config: Qwen3Config, layer_idx: int = 0) -> dict[str, int]:
    """Parameters of decoder layer ``layer_idx`` by kind: ``attention``, ``norms``, ``mlp``
    (3 d d_ffn, dense layers), ``router`` (E d) and ``experts`` (3 E d_moe d; sparse layers),
    ``total``. Checked against transformers in tests/unit/model/test_model_moe.py."""
    d, h_q, h_kv, d_h = config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim
    counts = {
        "attention": d * h_q * d_h + 2 * d * h_kv * d_h + h_q * d_h * d,
        "norms": 2 * d_h + 2 * d,
        "mlp": 0,
        "router": 0,
        "experts": 0,
    }
    if isinstance(config, Qwen3MoeConfig) and config.is_moe_layer(layer_idx):
        counts["router"] = config.num_experts * d
        counts["experts"] = config.num_experts * 3 * config.moe_intermediate_size * d
    else:
        counts["mlp"] = 3 * d * config.intermediate_size
    counts["total"] = sum(counts.values())
    return counts


def model_param_counts(config: Qwen3Config) -> dict[str, int]:
    """Parameters of the causal LM: ``embed_tokens``, ``layers`` (of which ``experts`` and
    ``router``), ``norm``, ``lm_head`` (0 when tied, as ``parameters()`` counts), ``total``."""
    per_layer = [layer_param_counts(config, i) for i in range(config.num_hidden_layers)]
    embed = config.vocab_size * config.hidden_size
    counts = {
        "embed_tokens": embed,
        "layers": sum(c["total"] for c in per_layer),
        "experts": sum(c["experts"] for c in per_layer),
        "router": sum(c["router"] for c in per_layer),
        "norm": config.hidden_size,
        "lm_head": 0 if config.tie_word_embeddings else embed,
    }
    counts["total"] = counts["embed_tokens"] + counts["layers"] + counts["norm"] + counts["lm_head"]
    return counts


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
    # The one definition of the walkthrough's config: the calculator's WALKTHROUGH and the
    # synthetic observation of tests/support/observations.py derive from this entry.
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

HUB_IDS: dict[str, str] = {f"Qwen/{name}": name for name in KNOWN_CONFIGS if name.startswith("Qwen3-")}
"""Model-hub ids of the released configs, each an alias of its :data:`KNOWN_CONFIGS` name
(``"Qwen/Qwen3-8B"`` is ``"Qwen3-8B"``; the MoE ones too, ``"Qwen/Qwen3-30B-A3B"``). Nothing is
downloaded: the values are the ones here."""


def _released_moe(hidden: int, layers: int, ffn: int, heads: int, moe_ffn: int) -> Qwen3MoeConfig:
    """A released Qwen3 MoE model: values shared by the published config.json of both."""
    return Qwen3MoeConfig(
        vocab_size=151936,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=4,
        head_dim=128,
        max_position_embeddings=40960,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        tie_word_embeddings=False,
        num_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=moe_ffn,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=(),
        router_aux_loss_coef=0.001,
        output_router_logits=False,
    )


KNOWN_MOE_CONFIGS: dict[str, Qwen3MoeConfig] = {
    # A small MoE for specs and tests: 8 experts, top-2, every layer sparse (as released).
    "moe-tiny": Qwen3MoeConfig(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=False,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
    ),
    # Released MoE models, from the published config.json of Qwen/Qwen3-*:
    #                                     hidden layers intermediate heads moe_intermediate
    "Qwen3-30B-A3B": _released_moe(2048, 48, 6144, 32, 768),
    "Qwen3-235B-A22B": _released_moe(4096, 94, 12288, 64, 1536),
}
"""The MoE configs: also entries of :data:`KNOWN_CONFIGS` (after the dense ones), so one name
works everywhere a config is named (``get_config``, a spec's ``setup.model.config``,
``harness draft --config``); the model built from one dispatches on its type
(:class:`Qwen3MoeConfig`). :func:`get_moe_config` reads only these names and their hub ids
(:data:`MOE_HUB_IDS`)."""

MOE_HUB_IDS: dict[str, str] = {f"Qwen/{name}": name for name in KNOWN_MOE_CONFIGS if name.startswith("Qwen3-")}
"""Hub ids of the released MoE configs (``"Qwen/Qwen3-30B-A3B"`` is ``"Qwen3-30B-A3B"``)."""

KNOWN_CONFIGS.update(KNOWN_MOE_CONFIGS)  # one namespace of config names: dense first, then MoE
HUB_IDS.update(MOE_HUB_IDS)


def known_moe_config_name(name: str) -> str | None:
    """The :data:`KNOWN_MOE_CONFIGS` name of ``name`` (a known name or a hub id), else None."""
    if name in KNOWN_MOE_CONFIGS:
        return name
    return MOE_HUB_IDS.get(name)


def get_moe_config(name_or_mapping: str | Mapping[str, Any] | Qwen3MoeConfig, **overrides: Any) -> Qwen3MoeConfig:
    """:func:`get_config` for :data:`KNOWN_MOE_CONFIGS` names, their hub ids and MoE fields only."""
    return _resolve_config(
        name_or_mapping, overrides, cls=Qwen3MoeConfig, known=KNOWN_MOE_CONFIGS, hub_ids=MOE_HUB_IDS, what="MoE config"
    )


def known_config_name(name: str) -> str | None:
    """The :data:`KNOWN_CONFIGS` name of ``name`` (a known name or a hub id), else None."""
    if name in KNOWN_CONFIGS:
        return name
    return HUB_IDS.get(name)


_MOE_ONLY_FIELDS = frozenset(_MOE_FIELDS) - frozenset(_FIELDS)


def _names_moe_fields(fields: Mapping[str, Any]) -> bool:
    """A mapping of fields that describes a MoE model: it has a field only ``Qwen3MoeConfig`` has."""
    return any(k in _MOE_ONLY_FIELDS for k in fields)


def get_config(name_or_mapping: str | Mapping[str, Any] | Qwen3Config, **overrides: Any) -> Qwen3Config:
    """A validated config from a :data:`KNOWN_CONFIGS` name or hub id, a mapping of all
    required fields, or a config, with ``overrides`` replacing fields: a
    :class:`Qwen3MoeConfig` for a MoE name, instance or a mapping with a MoE-only field.

    Raises:
        ValueError: unknown name or field, missing required field, or invalid value (named).
    """
    if (
        isinstance(name_or_mapping, Qwen3MoeConfig)
        or (isinstance(name_or_mapping, str) and known_moe_config_name(name_or_mapping) is not None)
        or (isinstance(name_or_mapping, Mapping) and _names_moe_fields(name_or_mapping))
    ):
        return get_moe_config(name_or_mapping, **overrides)
    return _resolve_config(
        name_or_mapping, overrides, cls=Qwen3Config, known=KNOWN_CONFIGS, hub_ids=HUB_IDS, what="config"
    )


def _resolve_config(
    name_or_mapping: Any,
    overrides: Mapping[str, Any],
    *,
    cls: type[Qwen3Config],
    known: Mapping[str, Qwen3Config],
    hub_ids: Mapping[str, str],
    what: str,
) -> Any:
    """The one body of :func:`get_config` (dense) and :func:`get_moe_config`: ``cls`` from a
    known name or hub id, a mapping of its fields, or an instance, with ``overrides`` applied."""
    fields_of, required = (_MOE_FIELDS, _MOE_REQUIRED) if cls is Qwen3MoeConfig else (_FIELDS, _REQUIRED)

    def check_fields(fields: Mapping[str, Any], where: str) -> None:
        unknown = sorted(k for k in fields if k not in fields_of)
        if unknown:
            raise ValueError(
                f"unknown {cls.__name__} field(s) in {where}: {', '.join(map(repr, unknown))}; "
                f"known fields: {', '.join(fields_of)}"
            )

    check_fields(overrides, "overrides")
    if isinstance(name_or_mapping, cls):
        base = name_or_mapping
    elif isinstance(name_or_mapping, str):
        name = name_or_mapping if name_or_mapping in known else hub_ids.get(name_or_mapping)
        if name is None:
            raise ValueError(
                f"unknown {what} name {name_or_mapping!r}; known names: {', '.join(known)} "
                f"(or their hub ids: {', '.join(hub_ids)})"
            )
        base = known[name]
    elif isinstance(name_or_mapping, Mapping):
        check_fields(name_or_mapping, "mapping")
        fields = {**name_or_mapping, **overrides}
        missing = [k for k in required if k not in fields]
        if missing:
            raise ValueError(f"{cls.__name__} field(s) missing from mapping: {', '.join(missing)}")
        return cls(**fields)
    else:
        caller = "get_moe_config" if cls is Qwen3MoeConfig else "get_config"
        raise ValueError(
            f"{caller} expects a config name, a mapping of fields or a {cls.__name__}, "
            f"got {type(name_or_mapping).__name__}"
        )
    if not overrides:
        return base
    # The base's resolved h_kv is kept unless overridden; validation (__post_init__) flags a
    # non-divisor. replace, not a round trip through to_dict: asdict deep-copies every field.
    return dataclasses.replace(base, **overrides)


# ---- a transformers config.json ------------------------------------------------------------

IGNORED_FIELDS: Mapping[str, str] = {
    # what the checkpoint is, and who wrote the file
    "architectures": "the transformers class that loads the checkpoint; the harness builds its own model",
    "transformers_version": "the transformers version that wrote the file",
    "_name_or_path": "where transformers loaded the config from",
    # tokens and generation
    "bos_token_id": "a token id for tokenizing and generating; a training step takes the ids it is given",
    "eos_token_id": "a token id for tokenizing and generating; a training step takes the ids it is given",
    "pad_token_id": "a token id for tokenizing and generating; a training step takes the ids it is given",
    "use_cache": "the key/value cache of generation; a training step has none",
    # the sliding window's details; the switch itself (use_sliding_window, layer_types) is checked
    "sliding_window": "the window length, used only with use_sliding_window: true (refused)",
    "max_window_layers": "which layers slide, used only with use_sliding_window: true (refused)",
    # PreTrainedConfig's generic fields, written by to_json_string(use_diff=False)
    "id2label": "labels of a classification head; a causal LM has none",
    "label2id": "labels of a classification head; a causal LM has none",
    "problem_type": "the loss of a classification head; a causal LM has none",
    "output_attentions": "what a forward returns besides the output, not what it computes",
    "output_hidden_states": "what a forward returns besides the output, not what it computes",
    "return_dict": "what a forward returns besides the output, not what it computes",
    "chunk_size_feed_forward": "0 in Qwen3: the MLP runs unchunked, as here",
    "is_encoder_decoder": "false for Qwen3, a decoder-only model",
}
"""Fields of a transformers ``config.json`` that are accepted and ignored, with why: none of them
changes the model's parameters, its forward and backward, or what FSDP2 does with them.
Besides these and ``Qwen3Config``'s own fields, :func:`from_transformers` reads ``model_type``,
``torch_dtype`` / ``dtype``, ``rope_theta``, ``rope_scaling``, ``rope_parameters``,
``use_sliding_window`` and ``layer_types``; any other field is refused by name."""

_READ_FIELDS = (
    "model_type",
    "torch_dtype",
    "dtype",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "use_sliding_window",
    "layer_types",
)

# transformers' Qwen3Config defaults where they differ from this Qwen3Config's (which are the
# released models'): a config.json that names its model_type means transformers' defaults.
_TRANSFORMERS_DEFAULTS = {"rope_theta": 10_000.0, "max_position_embeddings": 32768}


@dataclass(frozen=True)
class ConfigFile:
    """A model config read from a transformers ``config.json`` (or a mapping of its fields):
    the validated ``config``; the checkpoint's ``dtype`` (e.g. "bfloat16", no ``torch.``) and
    the ``dtype_field`` it came from ("torch_dtype" in 4.x, "dtype" in 5.x), None when absent;
    the :data:`IGNORED_FIELDS` present (``ignored``); the ``path`` read, None for a mapping."""

    config: Qwen3Config
    dtype: str | None = None
    ignored: tuple[str, ...] = ()
    path: str | None = None
    dtype_field: str | None = None


def from_transformers(fields: Mapping[str, Any], *, moe: bool = True) -> ConfigFile:
    """Read the fields of a transformers Qwen3 ``config.json`` (4.x or 5.x format): a
    :class:`Qwen3MoeConfig` for a qwen3_moe one (unless ``moe=False``, which refuses it). What
    is kept, ignored and defaulted: docs/architecture.md, "How model/ mirrors transformers".

    Raises:
        ValueError: one line naming the field: a ``model_type`` not modelled, sliding-window
            attention, a RoPE type other than "default", ``attention_bias: true``, an unknown
            or missing field, or an invalid value.
    """
    if not isinstance(fields, Mapping):
        raise ValueError(f"expected a mapping of config fields, got {type(fields).__name__}")
    model_type = fields.get("model_type")
    is_moe = moe and (
        model_type == "qwen3_moe" or (model_type is None and ("num_experts" in fields or "num_local_experts" in fields))
    )
    if is_moe:
        known, required, name = _MOE_FIELDS, _MOE_REQUIRED, "Qwen3MoeConfig"
    else:
        known, required, name = _FIELDS, _REQUIRED, "Qwen3Config"
    if model_type is not None and model_type != "qwen3" and not is_moe:
        modelled = (
            "model/qwen3.py and model/qwen3_moe.py implement the Qwen3 dense and MoE decoders "
            "(model_type 'qwen3' and 'qwen3_moe') only"
            if moe
            else "model/qwen3.py implements the dense Qwen3 decoder (model_type 'qwen3') only"
        )
        raise ValueError(
            f"model_type {model_type!r} is not modelled: {modelled}, and another architecture has other "
            f"parameters and numbers"
        )
    read_fields = _READ_FIELDS + (("num_local_experts",) if is_moe else ())
    unknown = sorted(k for k in fields if k not in known and k not in IGNORED_FIELDS and k not in read_fields)
    if unknown:
        raise ValueError(
            f"unknown field(s) {', '.join(map(repr, unknown))}: neither a {name} field nor one known "
            f"to leave the numbers unchanged (model.config.IGNORED_FIELDS); {name} fields: {', '.join(known)}"
        )
    if fields.get("use_sliding_window"):
        raise ValueError(
            f"use_sliding_window: {fields['use_sliding_window']!r}: sliding-window attention is not modelled "
            f"(model/qwen3.py attends over the whole causal context), and it changes the attention output"
        )
    layer_types = fields.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list):
            raise ValueError(f"layer_types must be a list of 'full_attention', got {layer_types!r}")
        for i, kind in enumerate(layer_types):
            if kind != "full_attention":
                raise ValueError(
                    f"layer_types[{i}] is {kind!r}: only 'full_attention' is modelled "
                    f"(model/qwen3.py has no sliding-window attention, which would change the attention output)"
                )
    rope_theta = fields.get("rope_theta")
    for key in ("rope_scaling", "rope_parameters"):
        rope = fields.get(key)
        if rope is None:
            continue
        if not isinstance(rope, Mapping):
            raise ValueError(f"{key} must be a mapping or null, got {rope!r}")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ValueError(
                f"{key}: RoPE type {rope_type!r} is not modelled: model/qwen3.py computes the default RoPE "
                f"only, and {rope_type!r} changes the rotary frequencies"
            )
        extra = sorted(k for k in rope if k not in ("rope_type", "type", "rope_theta"))
        if extra:
            raise ValueError(
                f"{key}: {', '.join(map(repr, extra))} not modelled: the default RoPE takes only rope_theta"
            )
        if "rope_theta" in rope:
            if rope_theta is not None and rope["rope_theta"] != rope_theta:
                raise ValueError(f"{key}.rope_theta {rope['rope_theta']!r} and rope_theta {rope_theta!r} disagree")
            rope_theta = rope["rope_theta"]
    dtypes = {k: str(fields[k]).removeprefix("torch.") for k in ("torch_dtype", "dtype") if fields.get(k) is not None}
    if len(set(dtypes.values())) > 1:
        raise ValueError(f"torch_dtype {dtypes['torch_dtype']!r} and dtype {dtypes['dtype']!r} disagree")

    kwargs = {k: fields[k] for k in known if k in fields and k != "rope_theta"}
    if rope_theta is not None:
        kwargs["rope_theta"] = (
            float(rope_theta) if isinstance(rope_theta, int) and not isinstance(rope_theta, bool) else rope_theta
        )
    if model_type is not None:
        for key, value in _TRANSFORMERS_DEFAULTS.items():
            kwargs.setdefault(key, value)
    if is_moe:
        _read_moe_fields(fields, kwargs, model_type is not None)
    missing = [k for k in required if k not in kwargs]
    if missing:
        raise ValueError(f"missing field(s): {', '.join(missing)}")
    ignored = tuple(k for k in fields if k in IGNORED_FIELDS)
    config = (Qwen3MoeConfig if is_moe else Qwen3Config)(**kwargs)
    return ConfigFile(config, next(iter(dtypes.values()), None), ignored, dtype_field=" / ".join(dtypes) or None)


# transformers' Qwen3MoeConfig defaults (5.x) where a file may omit a MoE switch.
_MOE_TRANSFORMERS_DEFAULTS = {
    "norm_topk_prob": False,
    "decoder_sparse_step": 1,
    "mlp_only_layers": (),
    "router_aux_loss_coef": 0.001,
    "output_router_logits": False,
}


def _read_moe_fields(fields: Mapping[str, Any], kwargs: dict[str, Any], from_transformers_file: bool) -> None:
    """The MoE part of :func:`from_transformers`: the experts' count under either name, the
    head_dim transformers derives when the file has none, transformers' defaults."""
    names = [k for k in ("num_experts", "num_local_experts") if fields.get(k) is not None]
    if len(names) == 2 and fields["num_experts"] != fields["num_local_experts"]:
        raise ValueError(
            f"num_experts {fields['num_experts']!r} and num_local_experts "
            f"{fields['num_local_experts']!r} disagree (transformers: the same field)"
        )
    if names:
        kwargs["num_experts"] = fields[names[0]]
    if fields.get("mlp_only_layers", ()) is None:
        kwargs["mlp_only_layers"] = ()  # transformers: None is []
    if from_transformers_file:
        for key, value in _MOE_TRANSFORMERS_DEFAULTS.items():
            kwargs.setdefault(key, value)
        # transformers' Qwen3MoeConfig has no head_dim field; its attention uses
        # getattr(config, "head_dim", hidden_size // num_attention_heads).
        if (
            "head_dim" not in kwargs
            and isinstance(kwargs.get("hidden_size"), int)
            and isinstance(kwargs.get("num_attention_heads"), int)
            and kwargs["num_attention_heads"] > 0
        ):
            kwargs["head_dim"] = kwargs["hidden_size"] // kwargs["num_attention_heads"]


def read_config_file(path: str | Path, *, moe: bool = True) -> ConfigFile:
    """Read a transformers ``config.json``, or a folder holding one, by :func:`from_transformers`;
    nothing is downloaded. A file not named ``*.json`` may be a YAML mapping of fields.

    Raises:
        ValueError: one line starting with the path: unreadable file, invalid JSON, not a
            mapping, or any refusal of :func:`from_transformers`.
    """

    path = Path(path)
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if path.suffix == ".json":
            raise ValueError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
        import yaml  # a YAML mapping of fields; only when the file is not JSON

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as yexc:
            raise ValueError(f"{path}: neither JSON nor YAML: {getattr(yexc, 'problem', None) or yexc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object of config fields, got {type(data).__name__}")
    try:
        read = from_transformers(data, moe=moe)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return dataclasses.replace(read, path=str(path))
