"""Reference Qwen3 dense model for the FSDP2 walkthrough, observable step by step.

- ``model.config``: :class:`Qwen3Config` (transformers' field names, validated),
  :data:`KNOWN_CONFIGS` ("walkthrough" and the released Qwen3 dense models), :func:`get_config`.
- ``model.qwen3``: the modules, parameter-for-parameter identical to transformers' Qwen3
  (see that module's docstring for why ``lm_head`` lives in ``Qwen3ForCausalLM``), and
  :func:`init_weights`.
- ``model.steps``: the walkthrough's Steps 1-10 as stable names (:data:`STEPS`).
- ``model.observe``: :func:`observe_steps`, reporting those steps from inside any model.
"""

from .config import KNOWN_CONFIGS, Qwen3Config, get_config
from .observe import StepCallback, StepRecord, StepRecorder, observe_steps
from .qwen3 import (
    Qwen3Attention,
    Qwen3DecoderLayer,
    Qwen3DecoderStack,
    Qwen3ForCausalLM,
    Qwen3MLP,
    Qwen3Model,
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
    init_weights,
)
from .steps import STEP_NAMES, STEPS, STEPS_BY_NAME, Step, resolve_shape

__all__ = [
    "Qwen3Config",
    "KNOWN_CONFIGS",
    "get_config",
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
    "observe_steps",
    "StepCallback",
    "StepRecord",
    "StepRecorder",
]
