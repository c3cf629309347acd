"""Tests for the Qwen3 MoE model (model/qwen3_moe.py) and its configs (model/config.py).

The standard is tests/unit/model/test_qwen3.py's: parity with transformers' ``Qwen3MoeForCausalLM`` in
fp32 within ``ATOL``, state dicts loading both ways with ``strict=True``, names, shapes and
order as transformers', observed steps named and shaped as model/steps.py says. transformers is
a test dependency only (the ``hf`` fixture skips without it).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import model
from model import (
    KNOWN_CONFIGS,
    KNOWN_MOE_CONFIGS,
    MOE_HUB_IDS,
    MOE_LAYER_PARAM_NAMES_REGISTRATION,
    MOE_LAYER_STEP_NAMES,
    MOE_STEP_NAMES,
    MOE_STEPS,
    STEP_NAMES,
    Qwen3Config,
    Qwen3MLP,
    Qwen3MoeConfig,
    Qwen3MoeDecoderLayer,
    Qwen3MoeDecoderStack,
    Qwen3MoeForCausalLM,
    Qwen3MoeModel,
    Qwen3MoeSparseMoeBlock,
    StepRecorder,
    get_config,
    get_moe_config,
    init_weights,
    layer_param_counts,
    load_balancing_loss_func,
    model_param_counts,
    observe_steps,
    resolve_shape,
)
from model.config import from_transformers, read_config_file
from model.names import LAYER_PARAM_NAMES_REGISTRATION
from model.qwen3 import _rope_tables
from tests.support import REPO

ATOL = 1e-5  # the required parity bound on max |ours - transformers| in fp32

_SMALL = {
    "vocab_size": 96,
    "hidden_size": 48,
    "intermediate_size": 80,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}

# Three small MoE configs: E and k vary, norm_topk_prob on and off, all-sparse, every other
# layer sparse (decoder_sparse_step=2) and explicit dense layers (mlp_only_layers), tied and
# untied, and h_q*d_h != d (as the released models: 32*128 vs 2048).
PARITY_CONFIGS = {
    "e8_top2_norm_untied": get_moe_config(
        {
            **_SMALL,
            "num_hidden_layers": 2,
            "tie_word_embeddings": False,
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 24,
            "norm_topk_prob": True,
        }
    ),
    "e6_top3_nonorm_step2_tied": get_moe_config(
        {
            **_SMALL,
            "num_hidden_layers": 4,
            "tie_word_embeddings": True,
            "num_experts": 6,
            "num_experts_per_tok": 3,
            "moe_intermediate_size": 20,
            "norm_topk_prob": False,
            "decoder_sparse_step": 2,
        }
    ),
    "e16_top4_mlp_only_untied": get_moe_config(
        {
            **_SMALL,
            "hidden_size": 40,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "num_hidden_layers": 3,
            "tie_word_embeddings": False,
            "num_experts": 16,
            "num_experts_per_tok": 4,
            "moe_intermediate_size": 12,
            "norm_topk_prob": True,
            "mlp_only_layers": [0, 2],
        }
    ),
}


@pytest.fixture(scope="module")
def hf():
    return pytest.importorskip("transformers")


def hf_moe_config(hf, config: Qwen3MoeConfig, experts: str | None = "eager"):
    """transformers' Qwen3MoeConfig for ours (sdpa attention; eager experts unless told)."""
    kwargs = {"experts_implementation": experts} if experts is not None else {}
    return hf.Qwen3MoeConfig(**config.to_transformers_kwargs(), attn_implementation="sdpa", **kwargs)


def randomize(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """N(0, 0.05^2) matrices and experts, a sharper router (N(0, 0.5^2): distinct top-k), norms 1 + N(0, 0.2^2)."""
    g = torch.Generator().manual_seed(seed)
    init_weights(module, std=0.05, generator=g)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.ndim == 1:
                p.add_(0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("mlp.gate.weight"):
                p.mul_(10.0)
    return module.eval()


def tokens(config, batch=2, seq_len=9, seed=3):
    return torch.randint(0, config.vocab_size, (batch, seq_len), generator=torch.Generator().manual_seed(seed))


def hidden_input(config, batch=2, seq_len=8, seed=1):
    return torch.randn(batch, seq_len, config.hidden_size, generator=torch.Generator().manual_seed(seed))


def _names_shapes(module):
    return [(n, tuple(p.shape)) for n, p in module.named_parameters()]


def _max_diff(a, b) -> float:
    return (a - b).abs().max().item()


# ---------------------------------------------------------------------------------------
# Configs
# ---------------------------------------------------------------------------------------

RELEASED_MOE = {  # hidden, layers, heads, kv, intermediate, moe_intermediate: published config.json
    "Qwen3-30B-A3B": (2048, 48, 32, 4, 6144, 768),
    "Qwen3-235B-A22B": (4096, 94, 64, 4, 12288, 1536),
}


@pytest.mark.parametrize("name", list(RELEASED_MOE))
def test_released_moe_configs(name):
    c = get_moe_config(name)
    hidden, layers, heads, kv, ffn, moe_ffn = RELEASED_MOE[name]
    assert (
        c.hidden_size,
        c.num_hidden_layers,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.intermediate_size,
        c.moe_intermediate_size,
    ) == (hidden, layers, heads, kv, ffn, moe_ffn)
    assert (
        c.head_dim,
        c.vocab_size,
        c.rms_norm_eps,
        c.rope_theta,
        c.max_position_embeddings,
        c.tie_word_embeddings,
        c.initializer_range,
    ) == (128, 151936, 1e-6, 1e6, 40960, False, 0.02)
    assert (
        c.num_experts,
        c.num_experts_per_tok,
        c.norm_topk_prob,
        c.decoder_sparse_step,
        c.mlp_only_layers,
        c.router_aux_loss_coef,
        c.output_router_logits,
    ) == (128, 8, True, 1, (), 0.001, False)
    assert c.moe_layers == tuple(range(layers))  # every layer sparse
    assert get_moe_config(f"Qwen/{name}") == c
    assert MOE_HUB_IDS[f"Qwen/{name}"] == name


def test_transformers_defaults_are_qwen3_30b_a3b_shaped(hf):
    """transformers documents its Qwen3MoeConfig defaults as Qwen3-30B-A3B-Base's: they agree
    with ours on every shape but the layer count and head_dim (transformers has no head_dim
    field: 2048/32 = 64, where the released config.json says 128)."""
    t, c = hf.Qwen3MoeConfig(), get_moe_config("Qwen3-30B-A3B")
    for field in (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "decoder_sparse_step",
        "rms_norm_eps",
        "router_aux_loss_coef",
        "tie_word_embeddings",
    ):
        assert getattr(t, field) == getattr(c, field), field
    assert t.num_hidden_layers == 24 and c.num_hidden_layers == 48
    assert not hasattr(t, "head_dim")
    assert t.norm_topk_prob is False  # transformers' default; the released models set True


def test_moe_configs_are_known_configs_of_their_own_type():
    """One way to name a config: get_config gives the MoE config for a MoE name, hub id or mapping
    (the harness builds the model by the config's type), and a dense one for anything else."""
    assert list(KNOWN_CONFIGS)[-len(KNOWN_MOE_CONFIGS) :] == list(KNOWN_MOE_CONFIGS)
    for name, c in KNOWN_MOE_CONFIGS.items():
        assert KNOWN_CONFIGS[name] is c and get_config(name) is c and isinstance(c, Qwen3MoeConfig)
    assert get_config("Qwen/Qwen3-30B-A3B") is KNOWN_MOE_CONFIGS["Qwen3-30B-A3B"]
    c = get_config("Qwen3-30B-A3B", num_hidden_layers=1, num_experts=16)  # MoE overrides on a MoE name
    assert isinstance(c, Qwen3MoeConfig) and (c.num_hidden_layers, c.num_experts) == (1, 16)
    assert get_config(c.to_dict()) == c  # a mapping with MoE fields is MoE
    assert type(get_config("walkthrough")) is Qwen3Config
    with pytest.raises(ValueError, match="unknown Qwen3Config field.*'num_experts'"):
        get_config("walkthrough", num_experts=8)  # a dense name takes no MoE field
    with pytest.raises(ValueError, match="missing from mapping: num_experts_per_tok, moe_intermediate_size"):
        get_config({**KNOWN_CONFIGS["walkthrough"].to_dict(), "num_experts": 8})
    with pytest.raises(ValueError, match="Qwen3-30B-A3B") as e:
        get_moe_config("Qwen3-30B-A3")
    for name in KNOWN_MOE_CONFIGS:
        assert name in str(e.value)
    with pytest.raises(ValueError, match="'num_expert'"):
        get_moe_config("moe-tiny", num_expert=4)
    with pytest.raises(ValueError, match="moe_intermediate_size"):
        get_moe_config(
            {k: v for k, v in KNOWN_MOE_CONFIGS["moe-tiny"].to_dict().items() if k != "moe_intermediate_size"}
        )


def test_get_moe_config_overrides_and_round_trip():
    c = get_moe_config("Qwen3-30B-A3B", num_hidden_layers=1)
    assert c.num_hidden_layers == 1 and KNOWN_MOE_CONFIGS["Qwen3-30B-A3B"].num_hidden_layers == 48
    assert get_moe_config(c.to_dict()) == c
    assert get_moe_config(c) is c
    m = get_moe_config("moe-tiny", mlp_only_layers=[1])
    assert m.mlp_only_layers == (1,) and m.to_dict()["mlp_only_layers"] == [1]
    assert m.moe_layers == (0,)
    assert hash(m)  # frozen and hashable, the list became a tuple


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("num_experts", 0, "positive"),
        ("num_experts", 8.0, "int"),
        ("num_experts_per_tok", 0, "positive"),
        ("num_experts_per_tok", 9, "at most num_experts=8"),
        ("moe_intermediate_size", -1, "positive"),
        ("decoder_sparse_step", 0, "positive"),
        ("norm_topk_prob", 1, "bool"),
        ("output_router_logits", "yes", "bool"),
        ("router_aux_loss_coef", -0.1, ">= 0"),
        ("router_aux_loss_coef", float("nan"), ">= 0"),
        ("mlp_only_layers", "0", "list"),
        ("mlp_only_layers", [0, -1], "ints >= 0"),
        ("mlp_only_layers", [True], "ints >= 0"),
        ("hidden_size", 0, "positive"),  # the dense fields are validated as before
        ("num_key_value_heads", 3, "divide"),
    ],
)
def test_bad_moe_config_names_the_field(field, value, says):
    with pytest.raises(ValueError, match=re.escape(field)) as e:
        get_moe_config("moe-tiny", **{field: value})
    assert says in str(e.value)


@pytest.mark.parametrize("step, mlp_only", [(1, []), (2, []), (3, [4]), (1, [0, 2, 5]), (2, [1, 3])])
def test_which_layers_are_sparse_agrees_with_transformers(hf, step, mlp_only):
    from transformers.models.qwen3_moe import modeling_qwen3_moe as hm

    config = get_moe_config(
        PARITY_CONFIGS["e8_top2_norm_untied"], num_hidden_layers=6, decoder_sparse_step=step, mlp_only_layers=mlp_only
    )
    hc = hf_moe_config(hf, config)
    theirs = [isinstance(hm.Qwen3MoeDecoderLayer(hc, i).mlp, hm.Qwen3MoeSparseMoeBlock) for i in range(6)]
    ours = [isinstance(Qwen3MoeDecoderLayer(config, i, device="meta").mlp, Qwen3MoeSparseMoeBlock) for i in range(6)]
    assert ours == theirs == [config.is_moe_layer(i) for i in range(6)]
    assert config.moe_layers == tuple(i for i, sparse in enumerate(theirs) if sparse)


def test_step_symbols_add_the_moe_dims_only_for_moe():
    c = get_moe_config("Qwen3-30B-A3B")
    assert c.step_symbols(2, 8) == {
        "B": 2,
        "L": 8,
        "d": 2048,
        "h_q": 32,
        "h_kv": 4,
        "d_h": 128,
        "d_ffn": 6144,
        "E": 128,
        "k": 8,
        "d_moe": 768,
    }
    assert set(get_config("walkthrough").step_symbols(2, 8)) == {"B", "L", "d", "h_q", "h_kv", "d_h", "d_ffn"}


# ---- parameter counts --------------------------------------------------------------------


def test_qwen3_30b_a3b_layer_count_matches_transformers_on_meta(hf):
    from transformers.models.qwen3_moe import modeling_qwen3_moe as hm

    config = get_moe_config("Qwen3-30B-A3B")
    hc = hf_moe_config(hf, config)
    with torch.device("meta"):
        theirs = hm.Qwen3MoeDecoderLayer(hc, 0)
    ours = Qwen3MoeDecoderLayer(config, 0, device="meta")
    total = sum(p.numel() for p in theirs.parameters())
    experts = theirs.mlp.experts.gate_up_proj.numel() + theirs.mlp.experts.down_proj.numel()
    assert (total, experts) == (623_120_640, 603_979_776)  # the figures
    counts = layer_param_counts(config, 0)
    assert counts["total"] == total and counts["experts"] == experts
    assert counts["router"] == theirs.mlp.gate.weight.numel() == 128 * 2048
    assert counts["attention"] == sum(
        getattr(theirs.self_attn, n).weight.numel() for n in ("q_proj", "k_proj", "v_proj", "o_proj")
    )
    assert sum(p.numel() for p in ours.parameters()) == total
    assert _names_shapes(ours) == _names_shapes(theirs)


@pytest.mark.parametrize("name", list(RELEASED_MOE))
def test_whole_model_count_matches_transformers_on_meta(hf, name):
    config = get_moe_config(name)
    with torch.device("meta"):
        theirs = hf.Qwen3MoeForCausalLM(hf_moe_config(hf, config))
    ours = Qwen3MoeForCausalLM(config, device="meta")
    expected = sum(p.numel() for p in theirs.parameters())
    experts = sum(p.numel() for n, p in theirs.named_parameters() if ".mlp.experts." in n)
    counts = model_param_counts(config)
    assert counts["total"] == expected == sum(p.numel() for p in ours.parameters())
    assert counts["experts"] == experts
    assert {"Qwen3-30B-A3B": 30_532_122_624, "Qwen3-235B-A22B": 235_093_634_560}[name] == expected


def test_param_counts_of_a_mixed_model_match_transformers(hf):
    config = PARITY_CONFIGS["e16_top4_mlp_only_untied"]
    theirs = hf.Qwen3MoeForCausalLM(hf_moe_config(hf, config))
    for i, layer in enumerate(theirs.model.layers):
        counts = layer_param_counts(config, i)
        assert counts["total"] == sum(p.numel() for p in layer.parameters()), i
        assert (counts["mlp"] > 0) == (i in (0, 2)) and (counts["experts"] > 0) == (i == 1), i
    assert model_param_counts(config)["total"] == sum(p.numel() for p in theirs.parameters())
    tied = get_moe_config(config, tie_word_embeddings=True)
    assert model_param_counts(tied)["total"] == sum(
        p.numel() for p in hf.Qwen3MoeForCausalLM(hf_moe_config(hf, tied)).parameters()
    )


# ---- a transformers config.json ------------------------------------------------------------

# The config.json of Qwen/Qwen3-30B-A3B as published (transformers 4.51 format).
QWEN3_30B_A3B_PUBLISHED = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "output_router_logits": False,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}


@pytest.mark.parametrize("name", list(PARITY_CONFIGS) + list(RELEASED_MOE))
def test_config_json_written_by_transformers_reads_into_the_moe_config(hf, tmp_path, name):
    known = PARITY_CONFIGS.get(name) or KNOWN_MOE_CONFIGS[name]
    hf.Qwen3MoeConfig(**known.to_transformers_kwargs(), dtype="bfloat16").save_pretrained(str(tmp_path))
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["model_type"] == "qwen3_moe" and "num_local_experts" in written  # this release's format
    read = read_config_file(tmp_path, moe=True)
    assert isinstance(read.config, Qwen3MoeConfig)
    assert read.config == known
    assert read.dtype == "bfloat16"
    assert read_config_file(tmp_path) == read  # moe=True is the default: harness draft and specs read it
    with pytest.raises(ValueError, match="model_type 'qwen3_moe' is not modelled"):
        read_config_file(tmp_path, moe=False)  # the dense-only reader refuses it


def test_config_json_in_the_published_4x_format():
    read = from_transformers(QWEN3_30B_A3B_PUBLISHED, moe=True)
    assert read.config == KNOWN_MOE_CONFIGS["Qwen3-30B-A3B"]
    assert read.dtype == "bfloat16"
    assert set(read.ignored) == {
        "architectures",
        "bos_token_id",
        "eos_token_id",
        "max_window_layers",
        "sliding_window",
        "transformers_version",
        "use_cache",
    }
    # a dense file still reads as dense with moe=True
    dense = {
        k: v
        for k, v in QWEN3_30B_A3B_PUBLISHED.items()
        if k
        not in (
            "decoder_sparse_step",
            "mlp_only_layers",
            "moe_intermediate_size",
            "norm_topk_prob",
            "num_experts",
            "num_experts_per_tok",
            "output_router_logits",
            "router_aux_loss_coef",
        )
    }
    read = from_transformers({**dense, "model_type": "qwen3"}, moe=True)
    assert type(read.config).__name__ == "Qwen3Config"


def test_config_json_moe_defaults_and_refusals(hf, tmp_path):
    # transformers writes no head_dim: its attention uses hidden_size // num_attention_heads
    hf.Qwen3MoeConfig(
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
        num_hidden_layers=2,
        vocab_size=100,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
    ).save_pretrained(str(tmp_path))
    c = read_config_file(tmp_path, moe=True).config
    theirs = hf.Qwen3MoeForCausalLM(hf.Qwen3MoeConfig.from_pretrained(str(tmp_path)))
    assert c.head_dim == 16 and c.norm_topk_prob is False and c.rope_theta == 10000.0
    assert _names_shapes(Qwen3MoeForCausalLM(c, device="meta")) == _names_shapes(theirs)
    # a file that omits the MoE switches means transformers' defaults
    fields = {k: v for k, v in QWEN3_30B_A3B_PUBLISHED.items() if k not in ("norm_topk_prob", "mlp_only_layers")}
    assert from_transformers(fields, moe=True).config.norm_topk_prob is False
    assert (
        from_transformers({**QWEN3_30B_A3B_PUBLISHED, "mlp_only_layers": None}, moe=True).config.mlp_only_layers == ()
    )
    with pytest.raises(ValueError, match="num_experts 128 and num_local_experts 64 disagree"):
        from_transformers({**QWEN3_30B_A3B_PUBLISHED, "num_local_experts": 64}, moe=True)
    with pytest.raises(ValueError, match="'shared_expert_intermediate_size'.*Qwen3MoeConfig"):
        from_transformers({**QWEN3_30B_A3B_PUBLISHED, "shared_expert_intermediate_size": 512}, moe=True)
    with pytest.raises(ValueError, match="missing field.*num_experts_per_tok"):
        from_transformers({k: v for k, v in QWEN3_30B_A3B_PUBLISHED.items() if k != "num_experts_per_tok"}, moe=True)
    with pytest.raises(ValueError, match="use_sliding_window"):
        from_transformers({**QWEN3_30B_A3B_PUBLISHED, "use_sliding_window": True}, moe=True)
    with pytest.raises(ValueError, match="model_type 'llama' is not modelled"):
        from_transformers({**QWEN3_30B_A3B_PUBLISHED, "model_type": "llama"}, moe=True)


def test_config_side_imports_no_torch():
    code = (
        "import sys, model; from model.config import get_moe_config, layer_param_counts, from_transformers; "
        "from model.steps import MOE_STEPS, resolve_shape; "
        "c = get_moe_config('Qwen/Qwen3-30B-A3B'); layer_param_counts(c); "
        "resolve_shape('step9.router_logits', c.step_symbols(1, 8)); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------
# Structure: transformers' names, shapes, order, modules
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PARITY_CONFIGS))
def test_names_shapes_order_match_transformers(hf, name):
    from transformers.models.qwen3_moe import modeling_qwen3_moe as hm

    config = PARITY_CONFIGS[name]
    hc = hf_moe_config(hf, config)
    for i in range(config.num_hidden_layers):
        ours_layer, theirs_layer = Qwen3MoeDecoderLayer(config, i), hm.Qwen3MoeDecoderLayer(hc, i)
        assert _names_shapes(ours_layer) == _names_shapes(theirs_layer), i
        assert [n for n, _ in ours_layer.named_modules()] == [n for n, _ in theirs_layer.named_modules()], i
        expected = MOE_LAYER_PARAM_NAMES_REGISTRATION if config.is_moe_layer(i) else LAYER_PARAM_NAMES_REGISTRATION
        assert [n for n, _ in ours_layer.named_parameters()] == list(expected), i
    assert _names_shapes(Qwen3MoeModel(config)) == _names_shapes(hf.Qwen3MoeModel(hc))
    ours, theirs = Qwen3MoeForCausalLM(config), hf.Qwen3MoeForCausalLM(hc)
    assert _names_shapes(ours) == _names_shapes(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert [(n, tuple(b.shape)) for n, b in ours.named_buffers()] == [
        (n, tuple(b.shape)) for n, b in theirs.named_buffers() if not n.endswith("original_inv_freq")
    ]


def test_moe_layer_names_in_model_names():
    from model import names

    layer = Qwen3MoeDecoderLayer(KNOWN_MOE_CONFIGS["moe-tiny"], 0, device="meta")
    assert [n for n, _ in layer.named_modules()][1:] == list(names.MOE_LAYER_MODULE_NAMES)
    shapes = {n: tuple(p.shape) for n, p in layer.named_parameters()}
    assert shapes["mlp.experts.gate_up_proj"] == (8, 64, 64)  # [E, 2*d_moe, d]
    assert shapes["mlp.experts.down_proj"] == (8, 64, 32)  # [E, d, d_moe]
    assert shapes["mlp.gate.weight"] == (8, 64)  # [E, d]


@pytest.mark.parametrize("tie", [True, False])
def test_state_dict_loads_both_ways_strict(hf, tie):
    config = get_moe_config(PARITY_CONFIGS["e16_top4_mlp_only_untied"], tie_word_embeddings=tie)
    hc = hf_moe_config(hf, config)
    ours = randomize(Qwen3MoeForCausalLM(config))
    theirs = hf.Qwen3MoeForCausalLM(hc)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    for k, v in ours.state_dict().items():
        assert torch.equal(theirs.state_dict()[k], v), k
    back = Qwen3MoeForCausalLM(config)
    back.load_state_dict(theirs.state_dict(), strict=True)
    for k, v in theirs.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k
    assert (back.lm_head.weight is back.model.embed_tokens.weight) == tie
    base = Qwen3MoeModel(config)
    base.load_state_dict(hf.Qwen3MoeModel(hc).state_dict(), strict=True)
    hf.Qwen3MoeModel(hc).load_state_dict(base.state_dict(), strict=True)
    stack = Qwen3MoeDecoderStack(config)
    stack.load_state_dict({k: v for k, v in base.state_dict().items() if k.startswith("layers.")}, strict=True)


# ---------------------------------------------------------------------------------------
# Numerical parity with transformers (fp32)
# ---------------------------------------------------------------------------------------


def _parity_layer(config):
    return next(i for i in range(config.num_hidden_layers) if config.is_moe_layer(i))


@pytest.mark.parametrize("name", list(PARITY_CONFIGS))
def test_sparse_decoder_layer_matches_transformers(hf, name):
    from transformers.models.qwen3_moe import modeling_qwen3_moe as hm

    config = PARITY_CONFIGS[name]
    hc = hf_moe_config(hf, config)
    i = _parity_layer(config)
    ours = randomize(Qwen3MoeDecoderLayer(config, i))
    theirs = hm.Qwen3MoeDecoderLayer(hc, i).eval()
    theirs.load_state_dict(ours.state_dict(), strict=True)
    x = hidden_input(config, seq_len=11)
    pe = hm.Qwen3MoeRotaryEmbedding(hc)(x, torch.arange(11).unsqueeze(0))
    with torch.no_grad():
        expected = theirs(x, attention_mask=None, position_embeddings=pe)
        got = ours(x, pe)
        # the sparse block alone, on the same input
        h = hidden_input(config, seed=5)
        block_diff = _max_diff(ours.mlp(h), theirs.mlp(h))
    assert isinstance(ours.mlp, Qwen3MoeSparseMoeBlock)
    assert got.shape == expected.shape == x.shape
    assert _max_diff(got, expected) <= ATOL
    assert block_diff <= ATOL


@pytest.mark.parametrize("name", list(PARITY_CONFIGS))
@pytest.mark.parametrize("experts", ["eager", None])  # None: transformers' default (grouped_mm)
def test_causal_lm_matches_transformers(hf, name, experts):
    config = PARITY_CONFIGS[name]
    ours = randomize(Qwen3MoeForCausalLM(config))
    theirs = hf.Qwen3MoeForCausalLM(hf_moe_config(hf, config, experts)).eval()
    assert theirs.config._experts_implementation == (experts or "grouped_mm")  # what transformers runs
    theirs.load_state_dict(ours.state_dict(), strict=True)
    ids = tokens(config)
    with torch.no_grad():
        logits, expected = ours(ids), theirs(ids).logits
        hidden, expected_hidden = ours.model(ids), theirs.model(ids).last_hidden_state
    assert logits.shape == (2, 9, config.vocab_size)
    assert _max_diff(hidden, expected_hidden) <= ATOL
    assert _max_diff(logits, expected) <= ATOL


@pytest.mark.parametrize("name", list(PARITY_CONFIGS))
def test_router_logits_aux_loss_and_loss_match_transformers(hf, name):
    config = PARITY_CONFIGS[name]
    ours = randomize(Qwen3MoeForCausalLM(config))
    theirs = hf.Qwen3MoeForCausalLM(hf_moe_config(hf, config)).eval()
    theirs.load_state_dict(ours.state_dict(), strict=True)
    ids = tokens(config)
    labels = ids.clone()
    labels[0, :3] = -100
    with torch.no_grad():
        got = ours.forward_moe(ids, labels=labels, output_router_logits=True)
        expected = theirs(ids, labels=labels, output_router_logits=True)
        plain = ours.forward_moe(ids, labels=labels)  # config.output_router_logits is False
    assert len(got.router_logits) == len(expected.router_logits) == len(config.moe_layers)
    for ours_logits, theirs_logits in zip(got.router_logits, expected.router_logits):
        assert ours_logits.shape == theirs_logits.shape == (2 * 9, config.num_experts)
        assert _max_diff(ours_logits, theirs_logits) <= ATOL
    assert abs(got.aux_loss.item() - expected.aux_loss.item()) <= ATOL
    assert got.aux_loss.item() >= 1.0 - 1e-6  # E * sum f_e P_e >= 1, equality only when balanced
    assert abs(got.loss.item() - expected.loss.item()) <= ATOL
    assert plain.router_logits is None and plain.aux_loss is None
    assert abs(plain.loss.item() - theirs(ids, labels=labels).loss.item()) <= ATOL
    assert abs(got.loss.item() - plain.loss.item() - config.router_aux_loss_coef * got.aux_loss.item()) <= 1e-6


def test_gradients_match_transformers(hf):
    """Backward through router, experts and aux loss; an expert no token picked gets zeros."""
    config = get_moe_config(PARITY_CONFIGS["e16_top4_mlp_only_untied"], router_aux_loss_coef=0.5)
    ours = randomize(Qwen3MoeForCausalLM(config))
    theirs = hf.Qwen3MoeForCausalLM(hf_moe_config(hf, config))
    theirs.load_state_dict(ours.state_dict(), strict=True)
    ids = tokens(config, batch=1, seq_len=3)  # 3 tokens x top-4 of 16 experts: some experts idle
    ours.forward_moe(ids, labels=ids, output_router_logits=True).loss.backward()
    theirs(ids, labels=ids, output_router_logits=True).loss.backward()
    theirs_grads = dict(theirs.named_parameters())
    for n, p in ours.named_parameters():
        assert p.grad is not None and theirs_grads[n].grad is not None, n
        assert _max_diff(p.grad, theirs_grads[n].grad) <= ATOL, n
    rec = StepRecorder(keep_tensors=True)
    with torch.no_grad(), observe_steps(ours, rec):
        ours(ids)
    idle = rec.get(1, "step9.tokens_per_expert").tensor == 0
    assert idle.any()
    experts = ours.model.layers[1].mlp.experts
    assert torch.equal(experts.gate_up_proj.grad[idle], torch.zeros_like(experts.gate_up_proj.grad[idle]))
    # an expert that a token with a label picked gets a gradient (the last token has none:
    # its logits predict past the sequence, so an expert only it picked gets zeros too)
    labelled = torch.bincount(rec.get(1, "step9.topk_indices").tensor[:-1].reshape(-1), minlength=16) > 0
    assert labelled.any()
    assert experts.down_proj.grad[labelled].abs().sum(dim=(1, 2)).gt(0).all()
    assert ours.model.layers[1].mlp.gate.weight.grad.abs().gt(0).all()  # every router row, via softmax and aux loss


def test_load_balancing_loss_func_is_transformers(hf):
    from transformers.models.qwen3_moe import modeling_qwen3_moe as hm

    g = torch.Generator().manual_seed(0)
    logits = tuple(torch.randn(12, 8, generator=g) for _ in range(3))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    for top_k in (1, 2, 3):
        assert torch.equal(load_balancing_loss_func(logits, 8, top_k), hm.load_balancing_loss_func(logits, 8, top_k))
        assert torch.equal(
            load_balancing_loss_func(logits, 8, top_k, mask), hm.load_balancing_loss_func(logits, 8, top_k, mask)
        )
    assert load_balancing_loss_func(None, 8, 2) == 0 == load_balancing_loss_func(logits[0], 8, 2)
    # bf16 router logits: the softmax runs in bf16 (not float32, as the router's own does)
    half = tuple((3 * x).bfloat16() for x in logits)
    assert torch.equal(load_balancing_loss_func(half, 8, 2), hm.load_balancing_loss_func(half, 8, 2))
    assert not torch.equal(
        load_balancing_loss_func(half, 8, 2), load_balancing_loss_func(tuple(x.float() for x in half), 8, 2)
    )
    # balanced routing, each expert a quarter of the tokens and of the probability: E * sum_e (1/E)(1/E) = 1
    balanced = (torch.eye(4).repeat(2, 1) * 50.0,)  # token t prefers expert t % 4: f_e = 1/4, P_e ≈ 1/4
    assert abs(load_balancing_loss_func(balanced, 4, 1).item() - 1.0) < 1e-6


# ---------------------------------------------------------------------------------------
# Step observation
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PARITY_CONFIGS))
def test_observed_steps_names_and_shapes(name):
    config = PARITY_CONFIGS[name]
    m = randomize(Qwen3MoeForCausalLM(config))
    rec = StepRecorder()
    with torch.no_grad(), observe_steps(m, rec):
        m(tokens(config, batch=2, seq_len=7))
    symbols = config.step_symbols(2, 7)
    for i in range(config.num_hidden_layers):
        expected = MOE_LAYER_STEP_NAMES if config.is_moe_layer(i) else STEP_NAMES
        assert rec.names(i) == list(expected), i
        for step_name in expected:
            assert list(rec.get(i, step_name).shape) == resolve_shape(step_name, symbols), (i, step_name)
    sparse = config.moe_layers[0]
    assert rec.get(sparse, "step9.topk_indices").dtype == torch.int64
    assert rec.get(sparse, "step9.tokens_per_expert").dtype == torch.int64


def test_moe_steps_says_quote_their_shape_and_names_are_emitted():
    for step in MOE_STEPS:
        quoted = re.findall(r"\[([^\]]+)\]$", step.says)
        assert quoted and quoted[0].replace(" ", "").split(",") == list(step.shape), step.name
    source = (Path(model.__file__).parent / "qwen3_moe.py").read_text()
    emitted = re.findall(r'obs\((?:i|self\.layer_idx), "(step[^"]+)"', source)
    assert sorted(emitted) == sorted(MOE_STEP_NAMES)
    assert not set(MOE_STEP_NAMES) & set(STEP_NAMES)


@pytest.mark.parametrize("name", list(PARITY_CONFIGS))
def test_observed_moe_steps_are_transformers_tensors(hf, name):
    """Router logits, top-k and block output are what transformers' own submodules produce;
    tokens per expert and expert outputs are what they say."""
    from transformers.models.qwen3_moe import modeling_qwen3_moe as hm

    config = PARITY_CONFIGS[name]
    hc = hf_moe_config(hf, config)
    i = _parity_layer(config)
    ours = randomize(Qwen3MoeDecoderLayer(config, i))
    theirs = hm.Qwen3MoeDecoderLayer(hc, i).eval()
    theirs.load_state_dict(ours.state_dict(), strict=True)
    seen = {}
    handles = [
        theirs.mlp.gate.register_forward_hook(lambda m, a, out: seen.__setitem__("gate", out)),
        theirs.mlp.register_forward_hook(lambda m, a, out: seen.__setitem__("mlp", out)),
    ]
    x = hidden_input(config)
    rec = StepRecorder(keep_tensors=True)
    with torch.no_grad():
        theirs(x, attention_mask=None, position_embeddings=_rope_tables(config, x))
        with observe_steps(ours, rec):
            ours(x)
    for h in handles:
        h.remove()
    t = {r.name: r.tensor for r in rec.records}
    logits, weights, indices = seen["gate"]
    assert _max_diff(t["step9.router_logits"], logits) <= ATOL
    assert _max_diff(t["step9.topk_weights"], weights) <= ATOL
    assert torch.equal(t["step9.topk_indices"], indices)
    assert _max_diff(t["step9.moe_out"], seen["mlp"]) <= ATOL
    T, k = 2 * 8, config.num_experts_per_tok
    assert torch.equal(t["step9.tokens_per_expert"], torch.bincount(indices.reshape(-1), minlength=config.num_experts))
    assert t["step9.tokens_per_expert"].sum().item() == T * k
    if config.norm_topk_prob:
        assert torch.allclose(t["step9.topk_weights"].sum(-1), torch.ones(T))
    else:
        probs = t["step9.router_logits"].softmax(-1)
        assert torch.allclose(t["step9.topk_weights"], probs.gather(-1, indices))
    # expert_outputs[t, j] is expert indices[t, j]'s SwiGLU on token t
    h = t["step8.h_norm"].reshape(T, -1)
    experts = ours.mlp.experts
    for tok, j in [(0, 0), (T - 1, k - 1), (5, k // 2)]:
        e = indices[tok, j]
        gate, up = (experts.gate_up_proj[e] @ h[tok]).chunk(2)
        manual = experts.down_proj[e] @ (F.silu(gate) * up)
        assert _max_diff(t["step9.expert_outputs"][tok, j], manual) <= ATOL
    combined = (t["step9.topk_weights"][..., None] * t["step9.expert_outputs"]).sum(1)
    assert _max_diff(combined.reshape(2, 8, -1), t["step9.moe_out"]) <= ATOL
    assert torch.equal(t["step10.output"], t["step7.residual"] + t["step9.moe_out"])


@pytest.mark.parametrize("observe", [False, True])
def test_static_experts_path_equals_eager_path(observe):
    """The path fake and meta tensors take computes the same numbers and gradients."""
    config = PARITY_CONFIGS["e8_top2_norm_untied"]
    results = []
    for static in (False, True):
        m = randomize(Qwen3MoeForCausalLM(config))
        for layer in m.model.layers:
            layer.mlp.experts.static = static
        rec = StepRecorder(keep_tensors=True)
        ids = tokens(config)
        if observe:
            with observe_steps(m, rec):
                out = m.forward_moe(ids, labels=ids, output_router_logits=True)
        else:
            out = m.forward_moe(ids, labels=ids, output_router_logits=True)
        out.loss.backward()
        results.append((out.logits.detach(), {n: p.grad for n, p in m.named_parameters()}, rec))
    (eager_logits, eager_grads, eager_rec), (static_logits, static_grads, static_rec) = results
    assert _max_diff(eager_logits, static_logits) <= 1e-6
    for n in eager_grads:
        assert _max_diff(eager_grads[n], static_grads[n]) <= 1e-6, n
    if observe:
        for a, b in zip(eager_rec.records, static_rec.records):
            assert a.name == b.name and a.shape == b.shape
            if a.tensor.dtype == torch.int64:  # the same routing, the same counts
                assert torch.equal(a.tensor, b.tensor), a.name
            else:  # layer 1's input differs by layer 0's rounding (matmuls over other row sets)
                assert _max_diff(a.tensor, b.tensor) <= ATOL, a.name


def test_observation_on_off_bit_identical():
    config = PARITY_CONFIGS["e6_top3_nonorm_step2_tied"]
    m = randomize(Qwen3MoeForCausalLM(config))
    results = []
    for observe in (False, True):
        m.zero_grad(set_to_none=True)
        rec = StepRecorder(keep_tensors=True)
        ids = tokens(config)
        if observe:
            with observe_steps(m, rec):
                out = m(ids)
            assert len(rec.records) > 0
        else:
            out = m(ids)
        out.pow(2).mean().backward()
        results.append((out.detach(), {n: p.grad.clone() for n, p in m.named_parameters()}))
    (off, grads_off), (on, grads_on) = results
    assert torch.equal(off, on)
    for n in grads_off:
        assert torch.equal(grads_off[n], grads_on[n]), n


# ---------------------------------------------------------------------------------------
# Construction: meta, FakeTensorMode, init
# ---------------------------------------------------------------------------------------


def test_fake_tensor_mode_qwen3_30b_a3b_layer():
    from torch._subclasses.fake_tensor import FakeTensorMode

    config = get_moe_config("Qwen3-30B-A3B", num_hidden_layers=1)
    with FakeTensorMode():
        stack = Qwen3MoeDecoderStack(config, dtype=torch.bfloat16)
        x = torch.empty(1, 8, config.hidden_size, dtype=torch.bfloat16)
        rec = StepRecorder()
        with observe_steps(stack, rec):
            out = stack(x)
        out.float().sum().backward()
    assert out.shape == (1, 8, 2048) and out.dtype == torch.bfloat16
    assert sum(p.numel() for p in stack.parameters()) == 623_120_640
    assert stack.layers[0].mlp.experts.gate_up_proj.grad.shape == (128, 1536, 2048)
    symbols = config.step_symbols(1, 8)
    assert rec.names(0) == list(MOE_LAYER_STEP_NAMES)
    for step_name in MOE_LAYER_STEP_NAMES:
        assert list(rec.get(0, step_name).shape) == resolve_shape(step_name, symbols), step_name
    assert rec.get(0, "step9.router_logits").dtype == torch.bfloat16
    assert rec.get(0, "step9.topk_weights").dtype == torch.bfloat16  # cast back from float32


def test_meta_causal_lm_forward_and_dtype():
    config = get_moe_config("Qwen3-30B-A3B", num_hidden_layers=2, mlp_only_layers=[1])
    m = Qwen3MoeForCausalLM(config, device="meta", dtype=torch.bfloat16)
    assert {p.dtype for p in m.parameters()} == {torch.bfloat16}
    assert m.model.rotary_emb.inv_freq.dtype == torch.float32
    assert isinstance(m.model.layers[1].mlp, Qwen3MLP) and m.model.layers[0].is_sparse
    logits = m(torch.zeros(1, 4, dtype=torch.long, device="meta"))
    assert logits.shape == (1, 4, 151936) and logits.dtype == torch.bfloat16


def test_init_weights_deterministic_and_transformers_like():
    config = PARITY_CONFIGS["e16_top4_mlp_only_untied"]
    a = init_weights(Qwen3MoeForCausalLM(config), generator=torch.Generator().manual_seed(7))
    b = init_weights(Qwen3MoeForCausalLM(config), generator=torch.Generator().manual_seed(7))
    c = init_weights(Qwen3MoeForCausalLM(config), generator=torch.Generator().manual_seed(8))
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k
    experts = a.model.layers[1].mlp.experts
    assert not torch.equal(experts.gate_up_proj, c.model.layers[1].mlp.experts.gate_up_proj)
    for name, p in a.named_parameters():
        if "norm" in name:
            assert torch.equal(p, torch.ones_like(p)), name
        else:
            assert abs(p.std().item() - config.initializer_range) < 0.2 * config.initializer_range, name
    # every expert drawn, not only the first: each expert's slice has the std
    stds = experts.gate_up_proj.reshape(config.num_experts, -1).std(dim=1)
    assert (stds - config.initializer_range).abs().max().item() < 0.2 * config.initializer_range


def test_meta_build_then_to_empty_equals_cpu_build():
    config = PARITY_CONFIGS["e6_top3_nonorm_step2_tied"]
    cpu = init_weights(Qwen3MoeForCausalLM(config), generator=torch.Generator().manual_seed(0))
    meta = Qwen3MoeForCausalLM(config, device="meta")
    meta.to_empty(device="cpu")
    meta.tie_weights()
    init_weights(meta, generator=torch.Generator().manual_seed(0))
    for k, v in cpu.state_dict().items():
        assert torch.equal(v, meta.state_dict()[k]), k
    ids = tokens(config)
    assert torch.equal(meta(ids), cpu(ids))


def test_router_softmax_in_float32_weights_in_the_activations_dtype(hf):
    """bf16: the router's softmax and renormalisation run in float32, as transformers' do,
    then the weights are cast to bf16; the same indices and weights as transformers'."""
    from transformers.models.qwen3_moe import modeling_qwen3_moe as hm

    config = PARITY_CONFIGS["e8_top2_norm_untied"]
    ours = randomize(Qwen3MoeSparseMoeBlock(config)).to(torch.bfloat16)
    theirs = hm.Qwen3MoeSparseMoeBlock(hf_moe_config(hf, config)).to(torch.bfloat16)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    x = hidden_input(config).bfloat16().reshape(-1, config.hidden_size)
    got, expected = ours.gate(x), theirs.gate(x)
    assert [t.dtype for t in got] == [torch.bfloat16, torch.bfloat16, torch.int64]
    for a, b in zip(got, expected):
        assert torch.equal(a, b)
    manual = torch.topk(F.softmax(got[0], dtype=torch.float, dim=-1), 2, dim=-1).values
    assert torch.equal(got[1], (manual / manual.sum(-1, keepdim=True)).bfloat16())
    with torch.no_grad():
        assert torch.equal(ours(x.reshape(2, 8, -1)), theirs(x.reshape(2, 8, -1)))
