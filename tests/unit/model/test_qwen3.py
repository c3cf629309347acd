"""Tests for model/: config validation, transformers parity, step observation, construction.

transformers is a test dependency only: tests that need it take the ``hf`` fixture, which
skips them when it is not installed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import model
from model import (
    KNOWN_CONFIGS,
    STEP_NAMES,
    STEPS,
    Qwen3Attention,
    Qwen3Config,
    Qwen3DecoderLayer,
    Qwen3DecoderStack,
    Qwen3ForCausalLM,
    Qwen3MLP,
    Qwen3Model,
    Qwen3RotaryEmbedding,
    StepRecorder,
    get_config,
    init_weights,
    observe_steps,
    resolve_shape,
)
from model.qwen3 import _rope_tables

ATOL = 1e-5  # the required parity bound on max |ours - transformers| in fp32

# Small configs for parity, covering GQA 1:1, 2:1 (the walkthrough's) and 8:1, tied and not.
# The first has h_q*d_h != d, as the released Qwen3-0.6B (1024 vs 16*128).
PARITY_CONFIGS = {
    "mha_1to1_tied": get_config(
        {
            "vocab_size": 96,
            "hidden_size": 48,
            "intermediate_size": 80,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "head_dim": 16,
            "tie_word_embeddings": True,
        }
    ),
    "walkthrough_2to1_tied": get_config("walkthrough"),
    "gqa_8to1_untied": get_config(
        {
            "vocab_size": 128,
            "hidden_size": 64,
            "intermediate_size": 96,
            "num_hidden_layers": 2,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "tie_word_embeddings": False,
        }
    ),
}


@pytest.fixture(scope="module")
def hf():
    return pytest.importorskip("transformers")


def hf_config(hf, config: Qwen3Config):
    """transformers' Qwen3Config for ours, on the sdpa attention path."""
    return hf.Qwen3Config(**config.to_transformers_kwargs(), attn_implementation="sdpa")


def randomize(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random weights that exercise every parameter: N(0, 0.05^2) matrices, norms 1 + N(0, 0.2^2)."""
    g = torch.Generator().manual_seed(seed)
    init_weights(module, std=0.05, generator=g)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.ndim == 1:
                p.add_(0.2 * torch.randn(p.shape, generator=g))
    return module.eval()


def walkthrough_input(config: Qwen3Config, batch: int = 2, seq_len: int = 8, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, seq_len, config.hidden_size, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------

RELEASED = {  # hidden, layers, heads, kv, intermediate, tie: published config.json values
    "Qwen3-0.6B": (1024, 28, 16, 8, 3072, True),
    "Qwen3-1.7B": (2048, 28, 16, 8, 6144, True),
    "Qwen3-4B": (2560, 36, 32, 8, 9728, True),
    "Qwen3-8B": (4096, 36, 32, 8, 12288, False),
    "Qwen3-14B": (5120, 40, 40, 8, 17408, False),
    "Qwen3-32B": (5120, 64, 64, 8, 25600, False),
}


def test_known_config_names():
    # one namespace of names: the dense configs first, then the MoE ones (model.KNOWN_MOE_CONFIGS)
    assert list(KNOWN_CONFIGS) == ["walkthrough", *RELEASED, "moe-tiny", "Qwen3-30B-A3B", "Qwen3-235B-A22B"]
    assert list(model.KNOWN_MOE_CONFIGS) == ["moe-tiny", "Qwen3-30B-A3B", "Qwen3-235B-A22B"]
    for name, c in KNOWN_CONFIGS.items():  # every dense name is dense, every MoE name MoE
        assert isinstance(c, model.Qwen3MoeConfig) == (name in model.KNOWN_MOE_CONFIGS), name
        assert get_config(name) is c


@pytest.mark.parametrize("name", list(RELEASED))
def test_released_configs(name):
    c = get_config(name)
    hidden, layers, heads, kv, ffn, tie = RELEASED[name]
    assert (
        c.hidden_size,
        c.num_hidden_layers,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.intermediate_size,
        c.tie_word_embeddings,
    ) == (hidden, layers, heads, kv, ffn, tie)
    assert (
        c.head_dim,
        c.vocab_size,
        c.rms_norm_eps,
        c.rope_theta,
        c.max_position_embeddings,
        c.attention_bias,
        c.initializer_range,
    ) == (128, 151936, 1e-6, 1e6, 40960, False, 0.02)


def test_walkthrough_config_is_the_documents():
    c = get_config("walkthrough")
    # The document's table: d=512, h_q=8, h_kv=4 (GQA 2:1), d_h=64, d_ffn=1024.
    assert c.step_symbols(2, 8) == {"B": 2, "L": 8, "d": 512, "h_q": 8, "h_kv": 4, "d_h": 64, "d_ffn": 1024}
    assert c.num_key_value_groups == 2


def test_get_config_overrides_and_mappings():
    c = get_config("Qwen3-8B", num_hidden_layers=2)
    assert c.num_hidden_layers == 2 and c.hidden_size == 4096
    assert KNOWN_CONFIGS["Qwen3-8B"].num_hidden_layers == 36  # not mutated
    assert get_config(c.to_dict()) == c
    assert get_config(c) is c
    # num_key_value_heads defaults to num_attention_heads, as in transformers
    m = get_config(
        {
            "vocab_size": 8,
            "hidden_size": 8,
            "intermediate_size": 8,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "head_dim": 4,
        }
    )
    assert m.num_key_value_heads == 2
    with pytest.raises(Exception):
        c.hidden_size = 1  # frozen


def test_get_config_unknown_name_lists_known_names():
    with pytest.raises(ValueError, match="Qwen3-7B") as e:
        get_config("Qwen3-7B")
    for name in KNOWN_CONFIGS:
        assert name in str(e.value)


def test_get_config_unknown_field_is_named():
    with pytest.raises(ValueError, match="'hidden_dim'"):
        get_config("walkthrough", hidden_dim=4)
    with pytest.raises(ValueError, match="'rope_scaling'"):
        get_config({**get_config("walkthrough").to_dict(), "rope_scaling": None})
    with pytest.raises(ValueError, match="head_dim"):
        get_config(
            {
                "vocab_size": 8,
                "hidden_size": 8,
                "intermediate_size": 8,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
            }
        )


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("hidden_size", 0, "positive"),
        ("vocab_size", -1, "positive"),
        ("intermediate_size", 0, "positive"),
        ("num_hidden_layers", 0, "positive"),
        ("num_attention_heads", 0, "positive"),
        ("num_key_value_heads", 3, "divide"),
        ("head_dim", 63, "even"),
        ("head_dim", 64.0, "int"),
        ("max_position_embeddings", 0, "positive"),
        ("rms_norm_eps", 0.0, "> 0"),
        ("rms_norm_eps", float("nan"), "> 0"),
        ("rope_theta", -1.0, "> 0"),
        ("initializer_range", 0.0, "> 0"),
        ("attention_bias", True, "not supported"),
        ("hidden_act", "gelu", "silu"),
        ("attention_dropout", 0.1, "0.0"),
        ("tie_word_embeddings", 1, "bool"),
    ],
)
def test_bad_config_names_the_field(field, value, says):
    with pytest.raises(ValueError, match=re.escape(field)) as e:
        get_config("walkthrough", **{field: value})
    assert says in str(e.value)


def test_heads_not_divisible_by_kv_heads():
    with pytest.raises(ValueError, match="num_key_value_heads=3 must divide num_attention_heads=8"):
        Qwen3Config(
            vocab_size=8,
            hidden_size=8,
            intermediate_size=8,
            num_hidden_layers=1,
            num_attention_heads=8,
            num_key_value_heads=3,
            head_dim=4,
        )


# ---------------------------------------------------------------------------------------
# Structure: the document's parameter table, and transformers' names/shapes/order
# ---------------------------------------------------------------------------------------

DOC_LAYER_PARAMS = {  # the document's "参数列表（单层）"
    "input_layernorm.weight": (512,),
    "self_attn.q_proj.weight": (512, 512),
    "self_attn.k_proj.weight": (256, 512),
    "self_attn.v_proj.weight": (256, 512),
    "self_attn.q_norm.weight": (64,),
    "self_attn.k_norm.weight": (64,),
    "self_attn.o_proj.weight": (512, 512),
    "post_attention_layernorm.weight": (512,),
    "mlp.gate_proj.weight": (1024, 512),
    "mlp.up_proj.weight": (1024, 512),
    "mlp.down_proj.weight": (512, 1024),
}


def test_walkthrough_layer_matches_document_parameter_table():
    layer = Qwen3DecoderLayer(get_config("walkthrough"), 0, device="meta")
    params = {n: tuple(p.shape) for n, p in layer.named_parameters()}
    assert params == DOC_LAYER_PARAMS
    assert sum(p.numel() for p in layer.parameters()) == 2_360_448  # ≈ 2.36M
    assert layer.layer_idx == 0


def _names_shapes(module):
    return [(n, tuple(p.shape)) for n, p in module.named_parameters()]


@pytest.mark.parametrize("name", list(PARITY_CONFIGS))
def test_names_shapes_order_match_transformers(hf, name):
    config = PARITY_CONFIGS[name]
    hc = hf_config(hf, config)
    from transformers.models.qwen3 import modeling_qwen3 as hq

    assert _names_shapes(Qwen3DecoderLayer(config, 0)) == _names_shapes(hq.Qwen3DecoderLayer(hc, 0))
    assert _names_shapes(Qwen3Model(config)) == _names_shapes(hf.Qwen3Model(hc))
    ours, theirs = Qwen3ForCausalLM(config), hf.Qwen3ForCausalLM(hc)
    assert _names_shapes(ours) == _names_shapes(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [(n, tuple(b.shape)) for n, b in ours.named_buffers()] == [
        (n, tuple(b.shape)) for n, b in theirs.named_buffers() if not n.endswith("original_inv_freq")
    ]


@pytest.mark.parametrize("tie", [True, False])
def test_state_dict_loads_both_ways_strict(hf, tie):
    config = get_config(PARITY_CONFIGS["gqa_8to1_untied"], tie_word_embeddings=tie)
    hc = hf_config(hf, config)
    ours = randomize(Qwen3ForCausalLM(config))
    theirs = hf.Qwen3ForCausalLM(hc)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    for k, v in ours.state_dict().items():
        assert torch.equal(theirs.state_dict()[k], v), k
    back = Qwen3ForCausalLM(config)
    back.load_state_dict(theirs.state_dict(), strict=True)
    assert (back.lm_head.weight is back.model.embed_tokens.weight) == tie
    # base model and the layer stack
    base = Qwen3Model(config)
    base.load_state_dict(hf.Qwen3Model(hc).state_dict(), strict=True)
    hf.Qwen3Model(hc).load_state_dict(base.state_dict(), strict=True)
    stack = Qwen3DecoderStack(config)
    stack.load_state_dict({k: v for k, v in base.state_dict().items() if k.startswith("layers.")}, strict=True)


def test_tied_embedding_is_one_parameter():
    tied = Qwen3ForCausalLM(get_config("walkthrough"))
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    names = [n for n, _ in tied.named_parameters()]
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    assert {"lm_head.weight", "model.embed_tokens.weight"} <= set(tied.state_dict())
    untied = Qwen3ForCausalLM(get_config("walkthrough", tie_word_embeddings=False))
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight


# ---------------------------------------------------------------------------------------
# Numerical parity with transformers (fp32, sdpa path)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PARITY_CONFIGS))
def test_rotary_matches_transformers(hf, name):
    config = PARITY_CONFIGS[name]
    from transformers.models.qwen3 import modeling_qwen3 as hq

    x = walkthrough_input(config, seq_len=13)
    pos = torch.arange(13).unsqueeze(0)
    ours = Qwen3RotaryEmbedding(config)(x, pos)
    theirs = hq.Qwen3RotaryEmbedding(hf_config(hf, config))(x, pos)
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])
    assert torch.equal(ours[0], _rope_tables(config, x)[0])  # the lone-layer path agrees


@pytest.mark.parametrize("name", list(PARITY_CONFIGS))
def test_decoder_layer_matches_transformers(hf, name):
    config = PARITY_CONFIGS[name]
    hc = hf_config(hf, config)
    from transformers.models.qwen3 import modeling_qwen3 as hq

    ours = randomize(Qwen3DecoderLayer(config, 0))
    theirs = hq.Qwen3DecoderLayer(hc, 0).eval()
    theirs.load_state_dict(ours.state_dict(), strict=True)
    x = walkthrough_input(config, seq_len=11)
    pe = hq.Qwen3RotaryEmbedding(hc)(x, torch.arange(11).unsqueeze(0))
    with torch.no_grad():
        expected = theirs(x, attention_mask=None, position_embeddings=pe)
        got = ours(x, pe)
        got_default_positions = ours(x)
    assert got.shape == expected.shape == x.shape
    assert (got - expected).abs().max().item() <= ATOL
    assert torch.equal(got, got_default_positions)


@pytest.mark.parametrize("name", list(PARITY_CONFIGS))
def test_steps_match_transformers_submodules(hf, name):
    """The observed steps are the tensors transformers' own submodules produce."""
    config = PARITY_CONFIGS[name]
    hc = hf_config(hf, config)
    from transformers.models.qwen3 import modeling_qwen3 as hq

    ours = randomize(Qwen3DecoderLayer(config, 0))
    theirs = hq.Qwen3DecoderLayer(hc, 0).eval()
    theirs.load_state_dict(ours.state_dict(), strict=True)
    seen = {}

    def keep(name):
        def hook(module, args, out):
            seen[name] = out[0] if isinstance(out, tuple) else out

        return hook

    pairs = {  # our step -> the transformers submodule whose output it is
        "step1.x_norm": theirs.input_layernorm,
        "step2.q": theirs.self_attn.q_proj,
        "step2.k": theirs.self_attn.k_proj,
        "step2.v": theirs.self_attn.v_proj,
        "step3.q_normed": theirs.self_attn.q_norm,
        "step3.k_normed": theirs.self_attn.k_norm,
        "step6.o_proj": theirs.self_attn,
        "step8.h_norm": theirs.post_attention_layernorm,
        "step9.gate": theirs.mlp.gate_proj,
        "step9.up": theirs.mlp.up_proj,
        "step9.down": theirs.mlp,
        "step10.output": theirs,
    }
    handles = [m.register_forward_hook(keep(n)) for n, m in pairs.items()]
    x = walkthrough_input(config)
    rec = StepRecorder(keep_tensors=True)
    with torch.no_grad():
        theirs(x, attention_mask=None, position_embeddings=_rope_tables(config, x))
        with observe_steps(ours, rec):
            ours(x)
    for h in handles:
        h.remove()
    for step_name in pairs:
        got, expected = rec.get(0, step_name).tensor, seen[step_name]
        assert got.shape == expected.shape, step_name
        assert (got - expected).abs().max().item() <= ATOL, step_name


@pytest.mark.parametrize("name", list(PARITY_CONFIGS))
@pytest.mark.parametrize("tie", [True, False])
def test_model_and_causal_lm_match_transformers(hf, name, tie):
    config = get_config(PARITY_CONFIGS[name], tie_word_embeddings=tie)
    hc = hf_config(hf, config)
    ours = randomize(Qwen3ForCausalLM(config))
    theirs = hf.Qwen3ForCausalLM(hc).eval()
    theirs.load_state_dict(ours.state_dict(), strict=True)
    ids = torch.randint(0, config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits, expected_logits = ours(ids), theirs(ids).logits
        hidden, expected_hidden = ours.model(ids), theirs.model(ids).last_hidden_state
    assert logits.shape == (2, 9, config.vocab_size)
    assert hidden.shape == (2, 9, config.hidden_size)
    assert (hidden - expected_hidden).abs().max().item() <= ATOL
    assert (logits - expected_logits).abs().max().item() <= ATOL


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_matches_transformers(hf, dtype):
    """Same arithmetic in half precision too (transformers built under that default dtype,
    which keeps its inv_freq in float32 as from_pretrained does)."""
    config = PARITY_CONFIGS["walkthrough_2to1_tied"]
    ours = randomize(Qwen3ForCausalLM(config, dtype=dtype))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        theirs = hf.Qwen3ForCausalLM(hf_config(hf, config)).eval()
    finally:
        torch.set_default_dtype(previous)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    ids = torch.randint(0, config.vocab_size, (2, 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got, expected = ours(ids), theirs(ids).logits
    assert got.dtype == expected.dtype == dtype
    assert (got.float() - expected.float()).abs().max().item() <= 1e-2


def test_stack_equals_model_layers():
    config = PARITY_CONFIGS["gqa_8to1_untied"]
    base = randomize(Qwen3Model(config))
    stack = Qwen3DecoderStack(config)
    stack.load_state_dict({k: v for k, v in base.state_dict().items() if k.startswith("layers.")}, strict=True)
    x = walkthrough_input(config)
    with torch.no_grad():
        expected = x
        for layer in base.layers:
            expected = layer(expected)
        assert torch.equal(stack(x), expected)


# ---------------------------------------------------------------------------------------
# Step observation
# ---------------------------------------------------------------------------------------

# The brief's and the document's literal shapes for the walkthrough config, B=2, L=8.
DOC_SHAPES = {
    "step1.x_norm": [2, 8, 512],
    "step2.q": [2, 8, 512],
    "step2.k": [2, 8, 256],
    "step2.v": [2, 8, 256],
    "step2.q_heads": [2, 8, 8, 64],
    "step2.k_heads": [2, 8, 4, 64],
    "step2.v_heads": [2, 8, 4, 64],
    "step3.q_normed": [2, 8, 8, 64],
    "step3.k_normed": [2, 8, 4, 64],
    "step4.q_rope": [2, 8, 8, 64],
    "step4.k_rope": [2, 8, 4, 64],
    "step5.k_repeated": [2, 8, 8, 64],
    "step5.v_repeated": [2, 8, 8, 64],
    "step5.attn_out": [2, 8, 8, 64],
    "step5.attn_flat": [2, 8, 512],
    "step6.o_proj": [2, 8, 512],
    "step7.residual": [2, 8, 512],
    "step8.h_norm": [2, 8, 512],
    "step9.gate": [2, 8, 1024],
    "step9.up": [2, 8, 1024],
    "step9.fused": [2, 8, 1024],
    "step9.down": [2, 8, 512],
    "step10.output": [2, 8, 512],
}


def test_every_document_step_observed_with_document_shape():
    config = get_config("walkthrough")
    stack = randomize(Qwen3DecoderStack(config))
    rec = StepRecorder()
    with observe_steps(stack, rec):
        stack(walkthrough_input(config))
    assert set(DOC_SHAPES) == set(STEP_NAMES)
    for layer_idx in range(config.num_hidden_layers):
        assert rec.names(layer_idx) == list(STEP_NAMES)  # every name, once, in STEPS order
        for step in STEPS:
            got = list(rec.get(layer_idx, step.name).shape)
            assert got == DOC_SHAPES[step.name], step.name
            assert got == resolve_shape(step, config.step_symbols(2, 8)), step.name
            quoted = re.findall(r"\[(\d+(?:, \d+)*)\]", step.says)  # the shape its text quotes
            if quoted:
                assert got == [int(v) for v in quoted[-1].split(", ")], step.name
    assert [r.layer_idx for r in rec.records] == [0] * len(STEPS) + [1] * len(STEPS)


def test_emitted_names_are_exactly_the_contract():
    """Every step literal in the model source is a STEPS name, and all of them appear."""
    source = (Path(model.__file__).parent / "qwen3.py").read_text()
    emitted = re.findall(r'obs\(i, "(step[^"]+)"', source)
    assert sorted(emitted) == sorted(STEP_NAMES)


def _run_with_and_without_observer(module, make_input, forward):
    """Output and gradients, off then on (an observer that clones and reads every tensor)."""
    results = []
    for observe in (False, True):
        module.zero_grad(set_to_none=True)
        rec = StepRecorder(keep_tensors=True)
        if observe:
            with observe_steps(module, rec):
                out = forward(module, make_input())
            assert len(rec.records) > 0
        else:
            out = forward(module, make_input())
        out.float().pow(2).mean().backward()
        grads = {n: p.grad.clone() for n, p in module.named_parameters()}
        results.append((out.detach(), grads))
    return results


@pytest.mark.parametrize("body", ["stack", "causal_lm"])
def test_observation_on_off_bit_identical(body):
    config = PARITY_CONFIGS["walkthrough_2to1_tied"]
    if body == "stack":
        module = randomize(Qwen3DecoderStack(config))
        make_input = lambda: walkthrough_input(config)  # noqa: E731
    else:
        module = randomize(Qwen3ForCausalLM(config))
        make_input = lambda: torch.randint(0, config.vocab_size, (2, 8), generator=torch.Generator().manual_seed(5))  # noqa: E731
    (out_off, grads_off), (out_on, grads_on) = _run_with_and_without_observer(module, make_input, lambda m, x: m(x))
    assert torch.equal(out_off, out_on)
    assert grads_off.keys() == grads_on.keys()
    for n in grads_off:
        assert torch.equal(grads_off[n], grads_on[n]), n


def test_observed_steps_follow_the_documents_formulas():
    """Each observed tensor is what the document says it is, computed from the others."""
    config = PARITY_CONFIGS["walkthrough_2to1_tied"]
    layer = randomize(Qwen3DecoderLayer(config, 0))
    x = walkthrough_input(config)
    rec = StepRecorder(keep_tensors=True)
    with torch.no_grad(), observe_steps(layer, rec):
        out = layer(x)
    t = {r.name: r.tensor for r in rec.records}
    B, L, h_q, d_h = 2, 8, config.num_attention_heads, config.head_dim
    assert torch.equal(t["step2.q_heads"], t["step2.q"].view(B, L, h_q, d_h))
    # Step 5.1: repeat_interleave along the head dim (dim=2 in (B, L, h, d_h))
    assert torch.equal(t["step5.k_repeated"], t["step4.k_rope"].repeat_interleave(2, dim=2))
    assert torch.equal(t["step5.v_repeated"], t["step2.v_heads"].repeat_interleave(2, dim=2))
    # Step 5.2: softmax(QK^T / sqrt(d_h) + causal_mask) V
    q = t["step4.q_rope"].transpose(1, 2)
    k = t["step5.k_repeated"].transpose(1, 2)
    v = t["step5.v_repeated"].transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / d_h**0.5
    scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    manual = (scores.softmax(-1) @ v).transpose(1, 2)  # (B, L, h_q, d_h)
    assert (manual - t["step5.attn_out"]).abs().max().item() <= ATOL
    assert torch.equal(t["step5.attn_flat"], t["step5.attn_out"].reshape(B, L, -1))
    assert torch.equal(t["step7.residual"], x + t["step6.o_proj"])
    assert torch.equal(t["step9.fused"], F.silu(t["step9.gate"]) * t["step9.up"])
    assert torch.equal(t["step10.output"], t["step7.residual"] + t["step9.down"])
    assert torch.equal(t["step10.output"], out)
    # Step 3: RMSNorm over d_h, per head
    qn = t["step2.q_heads"]
    expected = qn * torch.rsqrt(qn.pow(2).mean(-1, keepdim=True) + config.rms_norm_eps) * layer.self_attn.q_norm.weight
    assert (expected - t["step3.q_normed"]).abs().max().item() <= ATOL


def test_observe_nesting_restores_and_lone_submodules():
    config = PARITY_CONFIGS["mha_1to1_tied"]
    stack = Qwen3DecoderStack(config)
    x = walkthrough_input(config)
    outer, inner = StepRecorder(), StepRecorder()
    with observe_steps(stack, outer):
        with observe_steps(stack, inner):
            stack(x)
        stack(x)
    assert len(inner.records) == 2 * len(STEPS)
    assert len(outer.records) == 4 * len(STEPS)
    for m in stack.modules():
        assert "_step_observer" not in m.__dict__
    with pytest.raises(RuntimeError), observe_steps(stack, outer):
        raise RuntimeError
    assert all(getattr(m, "_step_observer", None) is None for m in stack.modules())
    # a lone attention or MLP can be observed too
    attn, mlp = Qwen3Attention(config, 3), Qwen3MLP(config, 5)
    rec = StepRecorder()
    with observe_steps(attn, rec), observe_steps(mlp, rec):
        attn(x, _rope_tables(config, x))
        mlp(x)
    assert {r.layer_idx for r in rec.records if r.name.startswith("step9")} == {5}
    assert [r.name for r in rec.records if r.layer_idx == 3][-1] == "step6.o_proj"
    with pytest.raises(ValueError, match="no Qwen3"):
        with observe_steps(torch.nn.Linear(2, 2), rec):
            pass


# ---------------------------------------------------------------------------------------
# Construction: device/dtype, meta, FakeTensorMode, init
# ---------------------------------------------------------------------------------------


def test_dtype_and_device_at_construction():
    config = get_config("walkthrough")
    m = Qwen3ForCausalLM(config, device="meta", dtype=torch.float16)
    assert {p.dtype for p in m.parameters()} == {torch.float16}
    assert {p.device.type for p in m.parameters()} == {"meta"}
    assert m.model.rotary_emb.inv_freq.dtype == torch.float32
    out = m(torch.zeros(2, 8, dtype=torch.long, device="meta"))
    assert out.shape == (2, 8, config.vocab_size) and out.dtype == torch.float16


def test_half_keeps_rope_in_float32():
    config = get_config("walkthrough")
    stack = Qwen3DecoderStack(config)
    expected = stack.rotary_emb.inv_freq.clone()
    stack.half()
    assert stack.rotary_emb.inv_freq.dtype == torch.float32
    assert torch.equal(stack.rotary_emb.inv_freq, expected)


def test_fake_tensor_mode_qwen3_32b_layer():
    from torch._subclasses.fake_tensor import FakeTensorMode

    config = get_config("Qwen3-32B", num_hidden_layers=1)
    with FakeTensorMode():
        stack = Qwen3DecoderStack(config, dtype=torch.float16)
        x = torch.empty(1, 8, config.hidden_size, dtype=torch.float16)
        rec = StepRecorder()
        with observe_steps(stack, rec):
            out = stack(x)
    assert out.shape == (1, 8, 5120) and out.dtype == torch.float16
    assert sum(p.numel() for p in stack.parameters()) == 487_598_336
    for step in STEPS:
        assert list(rec.get(0, step.name).shape) == resolve_shape(step, config.step_symbols(1, 8)), step.name
        assert rec.get(0, step.name).dtype == torch.float16


def test_fake_tensor_mode_tied_causal_lm():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        m = Qwen3ForCausalLM(get_config("Qwen3-0.6B", num_hidden_layers=1), dtype=torch.bfloat16)
        logits = m(torch.zeros(1, 4, dtype=torch.long))
    assert m.lm_head.weight is m.model.embed_tokens.weight
    assert logits.shape == (1, 4, 151936) and logits.dtype == torch.bfloat16


def test_init_weights_deterministic_and_transformers_like():
    config = PARITY_CONFIGS["gqa_8to1_untied"]
    a = init_weights(Qwen3ForCausalLM(config), generator=torch.Generator().manual_seed(7))
    b = init_weights(Qwen3ForCausalLM(config), generator=torch.Generator().manual_seed(7))
    c = init_weights(Qwen3ForCausalLM(config), generator=torch.Generator().manual_seed(8))
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)
    for name, p in a.named_parameters():
        if "norm" in name:
            assert torch.equal(p, torch.ones_like(p)), name
        else:
            assert abs(p.std().item() - config.initializer_range) < 0.2 * config.initializer_range, name
    # tied: drawn once, still tied
    t = init_weights(
        Qwen3ForCausalLM(get_config(config, tie_word_embeddings=True)), generator=torch.Generator().manual_seed(7)
    )
    assert t.lm_head.weight is t.model.embed_tokens.weight
    assert torch.equal(t.model.embed_tokens.weight, a.model.embed_tokens.weight)


def test_meta_build_then_to_empty_equals_cpu_build():
    config = get_config("walkthrough")
    cpu = init_weights(Qwen3ForCausalLM(config), generator=torch.Generator().manual_seed(0))
    meta = Qwen3ForCausalLM(config, device="meta")
    meta.to_empty(device="cpu")
    meta.tie_weights()  # to_empty makes one Parameter per module
    init_weights(meta, generator=torch.Generator().manual_seed(0))
    assert meta.lm_head.weight is meta.model.embed_tokens.weight
    for k, v in cpu.state_dict().items():
        assert torch.equal(v, meta.state_dict()[k]), k
    assert torch.equal(meta.model.rotary_emb.inv_freq, cpu.model.rotary_emb.inv_freq)
    ids = torch.randint(0, config.vocab_size, (2, 8))
    assert torch.equal(meta(ids), cpu(ids))


def test_init_weights_same_values_in_any_dtype():
    config = PARITY_CONFIGS["mha_1to1_tied"]
    fp32 = init_weights(Qwen3DecoderLayer(config, 0), generator=torch.Generator().manual_seed(1))
    bf16 = init_weights(Qwen3DecoderLayer(config, 0, dtype=torch.bfloat16), generator=torch.Generator().manual_seed(1))
    for (n, p32), (_, p16) in zip(fp32.named_parameters(), bf16.named_parameters()):
        assert p16.dtype == torch.bfloat16
        assert torch.equal(p32.to(torch.bfloat16), p16), n
