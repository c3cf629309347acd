"""Qwen3 configuration: field names as in transformers' ``Qwen3Config``, validated up front.

Source of the field names and meanings: transformers ``models/qwen3/configuration_qwen3.py``.
The one deliberate difference: transformers 5.x keeps RoPE settings in
``rope_parameters = {"rope_type": "default", "rope_theta": ...}``; this config keeps the flat
``rope_theta`` of the released ``config.json`` files (only default RoPE is modelled).
:meth:`Qwen3Config.to_transformers_kwargs` gives the mapping transformers 5.x expects, and
:func:`read_config_file` reads the ``config.json`` transformers writes (4.x and 5.x formats):
it keeps what shapes the model, ignores by name what does not (:data:`IGNORED_FIELDS`) and
refuses what this model does not implement. Nothing here imports torch.

Symbols used in docstrings across ``model/`` (the walkthrough document's):
  B = batch, L = sequence length, d = hidden_size, h_q = num_attention_heads,
  h_kv = num_key_value_heads, d_h = head_dim, d_ffn = intermediate_size,
  N_L = num_hidden_layers, V = vocab_size.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

__all__ = [
    "Qwen3Config",
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
        """Values of the step-shape symbols, for :func:`model.steps.resolve_shape`
        (:func:`step_symbols` of this config).

        Args:
            batch: B (per rank).
            seq_len: L.
        """
        return step_symbols(self, batch, seq_len)

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


def step_symbols(dims: Any, batch: int, seq_len: int) -> dict[str, int]:
    """The document's symbols ("配置" table) for :func:`model.steps.resolve_shape`.

    B = batch per rank, L = sequence length, d = hidden_size, h_q = num_attention_heads,
    h_kv = num_key_value_heads, d_h = head_dim, d_ffn = intermediate_size. ``dims`` is any
    object with those ``Qwen3Config`` attributes (a :class:`Qwen3Config`, the calculator's
    ``Dims``). Activations are never sharded, so these shapes hold on every rank and for every
    world size. The one definition of the symbols: the model, the calculator and the tests use it.
    """
    return {
        "B": batch,
        "L": seq_len,
        "d": dims.hidden_size,
        "h_q": dims.num_attention_heads,
        "h_kv": dims.num_key_value_heads,
        "d_h": dims.head_dim,
        "d_ffn": dims.intermediate_size,
    }


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
(``"Qwen/Qwen3-8B"`` is ``"Qwen3-8B"``). Nothing is downloaded: the values are the ones above."""


def known_config_name(name: str) -> str | None:
    """The :data:`KNOWN_CONFIGS` name of ``name`` (a known name or a hub id), else None."""
    if name in KNOWN_CONFIGS:
        return name
    return HUB_IDS.get(name)


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
        name_or_mapping: a key of :data:`KNOWN_CONFIGS` or its hub id (:data:`HUB_IDS`), a
            mapping of ``Qwen3Config`` fields (all required fields present), or a
            ``Qwen3Config``. A transformers ``config.json`` is read by :func:`read_config_file`.
        **overrides: fields replacing those of the base config (e.g. ``num_hidden_layers=1``).

    Raises:
        ValueError: unknown name (lists the known names), unknown field (names it), a missing
            required field (names it), or an invalid value (names the field).
    """
    _check_fields(overrides, "overrides")
    if isinstance(name_or_mapping, Qwen3Config):
        base = name_or_mapping
    elif isinstance(name_or_mapping, str):
        name = known_config_name(name_or_mapping)
        if name is None:
            raise ValueError(
                f"unknown config name {name_or_mapping!r}; known names: {', '.join(KNOWN_CONFIGS)} "
                f"(or their hub ids: {', '.join(HUB_IDS)})"
            )
        base = KNOWN_CONFIGS[name]
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

_READ_FIELDS = ("model_type", "torch_dtype", "dtype", "rope_theta", "rope_scaling", "rope_parameters",
                "use_sliding_window", "layer_types")

# transformers' Qwen3Config defaults where they differ from this Qwen3Config's (which are the
# released models'): a config.json that names its model_type means transformers' defaults.
_TRANSFORMERS_DEFAULTS = {"rope_theta": 10_000.0, "max_position_embeddings": 32768}


@dataclass(frozen=True)
class ConfigFile:
    """A model config read from a transformers ``config.json`` (or a mapping of its fields).

    Attributes:
        config: the validated :class:`Qwen3Config`.
        dtype: the file's ``torch_dtype`` (transformers 4.x) or ``dtype`` (5.x) without a
            ``torch.`` prefix, e.g. "bfloat16": the dtype the checkpoint's parameters are
            stored in; None when the file has neither.
        ignored: the fields present in the file and accepted as :data:`IGNORED_FIELDS`.
        path: the file read, or None for a mapping.
        dtype_field: the field ``dtype`` was read from ("torch_dtype" or "dtype"; both when
            the file has both, equal), None when the file has neither.
    """

    config: Qwen3Config
    dtype: str | None = None
    ignored: tuple[str, ...] = ()
    path: str | None = None
    dtype_field: str | None = None


def from_transformers(fields: Mapping[str, Any]) -> ConfigFile:
    """Read the fields of a transformers Qwen3 ``config.json`` (4.x or 5.x format).

    Kept: ``Qwen3Config``'s fields. The RoPE base comes from ``rope_theta`` (4.x: top level)
    or ``rope_parameters["rope_theta"]`` (5.x). The dtype from ``torch_dtype`` (4.x) or
    ``dtype`` (5.x). Accepted and ignored: :data:`IGNORED_FIELDS`. When ``model_type`` is
    given (a file transformers wrote), a missing ``rope_theta`` or ``max_position_embeddings``
    takes transformers' Qwen3 default (10000.0, 32768); without it, this ``Qwen3Config``'s.

    Raises:
        ValueError: one line naming the field, for what this model does not implement and that
            would change the numbers: a ``model_type`` other than "qwen3" (e.g. "qwen3_moe",
            "llama"), sliding-window attention switched on (``use_sliding_window: true`` or a
            "sliding_attention" entry in ``layer_types``), a RoPE type other than "default"
            (``rope_scaling`` / ``rope_parameters``), ``attention_bias: true``; and for an
            unknown field, a missing required field or an invalid value.
    """
    if not isinstance(fields, Mapping):
        raise ValueError(f"expected a mapping of config fields, got {type(fields).__name__}")
    model_type = fields.get("model_type")
    if model_type is not None and model_type != "qwen3":
        raise ValueError(
            f"model_type {model_type!r} is not modelled: model/qwen3.py implements the dense Qwen3 "
            f"decoder (model_type 'qwen3') only, and another architecture has other parameters and numbers"
        )
    unknown = sorted(k for k in fields if k not in _FIELDS and k not in IGNORED_FIELDS and k not in _READ_FIELDS)
    if unknown:
        raise ValueError(
            f"unknown field(s) {', '.join(map(repr, unknown))}: neither a Qwen3Config field nor one known "
            f"to leave the numbers unchanged (model.config.IGNORED_FIELDS); Qwen3Config fields: {', '.join(_FIELDS)}"
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
            raise ValueError(f"{key}: {', '.join(map(repr, extra))} not modelled: the default RoPE takes only rope_theta")
        if "rope_theta" in rope:
            if rope_theta is not None and rope["rope_theta"] != rope_theta:
                raise ValueError(f"{key}.rope_theta {rope['rope_theta']!r} and rope_theta {rope_theta!r} disagree")
            rope_theta = rope["rope_theta"]
    dtypes = {k: str(fields[k]).removeprefix("torch.") for k in ("torch_dtype", "dtype") if fields.get(k) is not None}
    if len(set(dtypes.values())) > 1:
        raise ValueError(f"torch_dtype {dtypes['torch_dtype']!r} and dtype {dtypes['dtype']!r} disagree")

    kwargs = {k: fields[k] for k in _FIELDS if k in fields and k != "rope_theta"}
    if rope_theta is not None:
        kwargs["rope_theta"] = float(rope_theta) if isinstance(rope_theta, int) and not isinstance(rope_theta, bool) else rope_theta
    if model_type is not None:
        for name, value in _TRANSFORMERS_DEFAULTS.items():
            kwargs.setdefault(name, value)
    missing = [k for k in _REQUIRED if k not in kwargs]
    if missing:
        raise ValueError(f"missing field(s): {', '.join(missing)}")
    ignored = tuple(k for k in fields if k in IGNORED_FIELDS)
    return ConfigFile(Qwen3Config(**kwargs), next(iter(dtypes.values()), None), ignored,
                      dtype_field=" / ".join(dtypes) or None)


def read_config_file(path: str | Path) -> ConfigFile:
    """Read a transformers ``config.json`` (:func:`from_transformers`); nothing is downloaded.

    ``path`` is the file, or a folder holding ``config.json`` (a downloaded checkpoint). The text
    is read as JSON; a file whose name does not end in ``.json`` may also be YAML (a mapping of
    ``Qwen3Config`` fields, as ``harness draft`` has always read).

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
        read = from_transformers(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return dataclasses.replace(read, path=str(path))
