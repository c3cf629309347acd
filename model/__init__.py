"""Reference Qwen3 dense and MoE models for the FSDP2 walkthrough, observable step by step.

``model.config``: configs (transformers' field names, validated; :data:`KNOWN_CONFIGS`,
:func:`get_config`, :func:`read_config_file`); ``model.qwen3`` and ``model.qwen3_moe``: the
modules, parameter-for-parameter transformers'; ``model.steps``: the walkthrough's Steps 1-10 as
names; ``model.observe``: :func:`observe_steps`. See docs/architecture.md.
"""

from .config import (
    HUB_IDS,
    IGNORED_FIELDS,
    KNOWN_CONFIGS,
    KNOWN_MOE_CONFIGS,
    MOE_HUB_IDS,
    Qwen3Config,
    Qwen3MoeConfig,
    get_config,
    get_moe_config,
    layer_param_counts,
    model_param_counts,
    read_config_file,
)
from .names import LAYER_PARAM_NAMES_DOCUMENT, LAYER_PARAM_NAMES_REGISTRATION, MOE_LAYER_PARAM_NAMES_REGISTRATION
from .steps import (
    ALL_STEPS_BY_NAME,
    MOE_LAYER_STEP_NAMES,
    MOE_STEP_NAMES,
    MOE_STEPS,
    STEP_NAMES,
    STEPS,
    STEPS_BY_NAME,
    Step,
    resolve_shape,
)

# The modules need torch (a second or two to import); the config, names and steps do not, and
# spec validation uses only those. So the torch side is imported on first use (PEP 562).
_LAZY = {
    "StepCallback": "observe",
    "StepRecord": "observe",
    "StepRecorder": "observe",
    "observe_steps": "observe",
    "Qwen3Attention": "qwen3",
    "Qwen3DecoderLayer": "qwen3",
    "Qwen3DecoderStack": "qwen3",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MLP": "qwen3",
    "Qwen3Model": "qwen3",
    "Qwen3RMSNorm": "qwen3",
    "Qwen3RotaryEmbedding": "qwen3",
    "init_weights": "qwen3",
    "Qwen3MoeExperts": "qwen3_moe",
    "Qwen3MoeTopKRouter": "qwen3_moe",
    "Qwen3MoeSparseMoeBlock": "qwen3_moe",
    "Qwen3MoeDecoderLayer": "qwen3_moe",
    "Qwen3MoeDecoderStack": "qwen3_moe",
    "Qwen3MoeModel": "qwen3_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen3MoeCausalLMOutput": "qwen3_moe",
    "load_balancing_loss_func": "qwen3_moe",
    "causal_lm_loss": "qwen3_moe",
    "has_no_data": "qwen3_moe",
    "swiglu_expert": "qwen3_moe",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Qwen3Config",
    "KNOWN_CONFIGS",
    "get_config",
    "HUB_IDS",
    "IGNORED_FIELDS",
    "read_config_file",
    "Qwen3RMSNorm",
    "Qwen3RotaryEmbedding",
    "Qwen3Attention",
    "Qwen3MLP",
    "Qwen3DecoderLayer",
    "Qwen3DecoderStack",
    "Qwen3Model",
    "Qwen3ForCausalLM",
    "init_weights",
    "Step",
    "STEPS",
    "STEP_NAMES",
    "STEPS_BY_NAME",
    "resolve_shape",
    "LAYER_PARAM_NAMES_REGISTRATION",
    "LAYER_PARAM_NAMES_DOCUMENT",
    "observe_steps",
    "StepCallback",
    "StepRecord",
    "StepRecorder",
    "Qwen3MoeConfig",
    "KNOWN_MOE_CONFIGS",
    "MOE_HUB_IDS",
    "get_moe_config",
    "layer_param_counts",
    "model_param_counts",
    "MOE_STEPS",
    "MOE_STEP_NAMES",
    "MOE_LAYER_STEP_NAMES",
    "ALL_STEPS_BY_NAME",
    "MOE_LAYER_PARAM_NAMES_REGISTRATION",
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
