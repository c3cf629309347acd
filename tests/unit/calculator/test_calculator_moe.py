"""The closed-form calculator for sparse (MoE) layers: the fused experts under Shard(0) and
Shard(1), the router, the padded all-gather and reduce-scatter, and memory; held against the
model's own parameters and against FSDP2 itself on the fake backend (as tests/unit/calculator/test_calculator_vs_fake.py
does for dense layers). Neither side reads the other."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness import calculator as calc
from harness.language.observed import ring_bytes
from model.config import KNOWN_CONFIGS, layer_param_counts

QWEN3_30B_A3B = calc.to_dims(KNOWN_CONFIGS["Qwen3-30B-A3B"])
QWEN3_235B_A22B = calc.to_dims(KNOWN_CONFIGS["Qwen3-235B-A22B"])
MOE_TINY = calc.to_dims(KNOWN_CONFIGS["moe-tiny"])


def test_a_qwen3_30b_a3b_layer_in_closed_form():
    """The issue's figures: 623,120,640 parameters, 603,979,776 of them experts; ~1.25 GB in bf16,
    ~264 walkthrough layers (4,720,896 B)."""
    t = calc.layer_tables(QWEN3_30B_A3B, 8, storage_dtype="bfloat16")
    assert t.numel == 623_120_640 == layer_param_counts(KNOWN_CONFIGS["Qwen3-30B-A3B"])["total"]
    experts = sum(t.param(n).numel for n in calc.EXPERT_PARAMS)
    assert experts == 603_979_776 == layer_param_counts(KNOWN_CONFIGS["Qwen3-30B-A3B"])["experts"]
    assert t.param("mlp.gate.weight").full_shape == (128, 2048)
    assert t.unsharded_bytes == 1_246_241_280
    assert round(t.unsharded_bytes / calc.layer_tables(calc.WALKTHROUGH, 4).unsharded_bytes) == 264


def test_registration_order_puts_the_experts_before_the_router():
    names = [p.name for p in calc.layer_params(MOE_TINY)]
    assert names[6:9] == ["mlp.experts.gate_up_proj", "mlp.experts.down_proj", "mlp.gate.weight"]
    doc = [p.name for p in calc.layer_params(MOE_TINY, "document")]
    assert doc[-3:] == ["mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    assert sorted(names) == sorted(doc)


def test_layer_params_are_the_models():
    torch = pytest.importorskip("torch")
    import model

    for name in ("moe-tiny", "Qwen3-30B-A3B"):
        with torch.device("meta"):
            layer = model.Qwen3MoeDecoderLayer(KNOWN_CONFIGS[name], 0)
        ours = [(p.name, p.shape) for p in calc.layer_params(KNOWN_CONFIGS[name])]
        assert ours == [(n, tuple(p.shape)) for n, p in layer.named_parameters()]


def test_dense_layers_of_a_moe_model():
    cfg = calc.Dims(**{**MOE_TINY.__dict__, "num_hidden_layers": 4, "decoder_sparse_step": 2, "mlp_only_layers": (3,)})
    assert [cfg.is_moe_layer(i) for i in range(4)] == [False, True, False, False]
    assert [p.name for p in calc.layer_params(cfg, layer_idx=0)][6:9] == [
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
    ]
    m = calc.model_tables(cfg, 4, storage_dtype="float32")
    sparse = calc.layer_tables(cfg, 4, storage_dtype="float32", layer_idx=1)
    dense = calc.layer_tables(cfg, 4, storage_dtype="float32", layer_idx=0)
    assert m.total_ring_bytes == 3 * dense.total_ring_bytes + sparse.total_ring_bytes
    assert m.local_bytes[0] == 3 * dense.local_bytes[0] + sparse.local_bytes[0]


def test_whole_experts_per_rank_under_shard0():
    t = calc.layer_tables(MOE_TINY, 4, storage_dtype="float32")
    gate_up = t.param("mlp.experts.gate_up_proj")
    assert gate_up.local_shapes == ((2, 64, 64),) * 4 and gate_up.padding_numel == 0
    assert [gate_up.experts_held(r) for r in range(4)] == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert t.param("mlp.gate.weight").local_shapes == ((2, 64),) * 4  # the router's rows: the same experts
    assert (t.numel, t.padded_shard_numel, t.local_bytes[0]) == (62_112, 15_528, 62_112)


def test_more_ranks_than_experts_leaves_empty_expert_shards():
    """E = 8 on 16 ranks: ranks 0-7 hold one expert each, ranks 8-15 none, yet every rank
    all-gathers and reduce-scatters a padded one-expert shard."""
    t = calc.layer_tables(MOE_TINY, 16, storage_dtype="float32")
    gate_up, down = t.param("mlp.experts.gate_up_proj"), t.param("mlp.experts.down_proj")
    assert gate_up.local_shapes[:8] == ((1, 64, 64),) * 8 and gate_up.local_shapes[8:] == ((0, 64, 64),) * 8
    assert [gate_up.experts_held(r) for r in (0, 7, 8, 15)] == [(0, 1), (7, 8), (8, 8), (8, 8)]
    assert gate_up.padded_shard_shape == (1, 64, 64) and gate_up.padding_numel == 8 * 4096
    assert down.padding_numel == 8 * 2048 and t.param("mlp.gate.weight").padding_numel == 8 * 64
    assert t.padding_numel == 8 * (4096 + 2048 + 64)


def test_shard1_cuts_every_expert_and_needs_no_padding():
    dims = {"mlp.experts.gate_up_proj": 1, "mlp.experts.down_proj": 1}
    t = calc.layer_tables(MOE_TINY, 16, storage_dtype="float32", shard_dims=dims)
    gate_up, down = t.param("mlp.experts.gate_up_proj"), t.param("mlp.experts.down_proj")
    assert gate_up.local_shapes == ((8, 4, 64),) * 16 and down.local_shapes == ((8, 4, 32),) * 16
    assert gate_up.placement == "Shard(dim=1)" and gate_up.experts_held(15) == (0, 8)
    assert gate_up.padding_numel == down.padding_numel == 0
    # the router stays on Shard(0): 8 rows over 16 ranks still pad
    assert t.padding_numel == t.param("mlp.gate.weight").padding_numel == 8 * 64


def test_shard1_that_does_not_divide_is_refused_as_torch_refuses_it():
    with pytest.raises(
        ValueError,
        match=r"mlp.experts.gate_up_proj: FSDP does not support uneven sharding on dim 1: "
        r"\[128, 1536, 2048\] \(world size: 1024\)",
    ):
        calc.layer_tables(QWEN3_30B_A3B, 1024, shard_dims={"mlp.experts.gate_up_proj": 1})
    with pytest.raises(ValueError, match="names no parameter"):
        calc.layer_tables(MOE_TINY, 4, shard_dims={"mlp.gate_up_proj": 1})
    with pytest.raises(ValueError, match="Shard dim 3 is invalid for 3D tensor"):
        calc.layer_tables(MOE_TINY, 4, shard_dims={"mlp.experts.gate_up_proj": 3})


@pytest.mark.parametrize(
    "dims, world, shard_dims, expected",
    [
        # (numel, padded all-gather output, per-rank input) worked out in specs/qwen3_moe_1024_ranks.yaml
        (QWEN3_30B_A3B, 1024, {}, (623_120_640, 4_854_913_024, 4_741_126)),
        (QWEN3_30B_A3B, 1024, {"mlp.experts.down_proj": 1}, (623_120_640, 3_445_626_880, 3_364_870)),
        (QWEN3_235B_A22B, 1024, {}, (2_487_755_008, 19_407_054_848, 18_952_202)),
    ],
)
def test_released_moe_layers_on_1024_ranks(dims, world, shard_dims, expected):
    t = calc.layer_tables(dims, world, storage_dtype="bfloat16", shard_dims=shard_dims)
    assert (t.numel, t.padded_numel, t.padded_shard_numel) == expected
    ag = t.collective("all_gather", "forward")
    assert ag.buffer_bytes == 2 * t.padded_numel and ag.ring_bytes == ag.buffer_bytes * 1023 // 1024


@st.composite
def moe_layer_and_world(draw):
    kv = draw(st.integers(1, 2))
    experts = draw(st.integers(1, 16))
    config = {
        "hidden_size": 2 * draw(st.integers(1, 24)),
        "num_attention_heads": kv * draw(st.integers(1, 2)),
        "num_key_value_heads": kv,
        "head_dim": 2 * draw(st.integers(1, 8)),
        "intermediate_size": 8,
        "num_hidden_layers": 1,
        "vocab_size": 32,
        "num_experts": experts,
        "num_experts_per_tok": draw(st.integers(1, experts)),
        "moe_intermediate_size": draw(st.integers(1, 24)),
        "tie_word_embeddings": False,
    }
    world = draw(st.one_of(st.integers(1, 9), st.integers(10, 256)))
    rank = draw(st.integers(0, world - 1))
    dtype = draw(st.sampled_from(["bfloat16", "float32"]))
    # Shard(1) for each fused expert parameter whose dim 1 the world divides (torch refuses the rest)
    rows = {
        "mlp.experts.gate_up_proj": 2 * config["moe_intermediate_size"],
        "mlp.experts.down_proj": config["hidden_size"],
    }
    shard1 = sorted(n for n, r in rows.items() if r % world == 0 and draw(st.booleans()))
    return config, world, rank, dtype, shard1


@pytest.mark.slow
@settings(
    max_examples=max(1, settings.default.max_examples // 25),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(moe_layer_and_world())
# E = 8 on 16 ranks, an empty expert shard; and the same with both fused experts on Shard(1)
@example(({**KNOWN_CONFIGS["moe-tiny"].to_dict(), "num_hidden_layers": 1}, 16, 15, "float32", []))
@example(
    (
        {**KNOWN_CONFIGS["moe-tiny"].to_dict(), "num_hidden_layers": 1},
        16,
        9,
        "bfloat16",
        ["mlp.experts.down_proj", "mlp.experts.gate_up_proj"],
    )
)
def test_moe_calculator_matches_fake_backend(case):
    from harness.load.setup import RunSetup
    from harness.run.runner import run_setup

    config, world, rank, dtype, shard1 = case
    fsdp = {"shard_placement": {f"layers.*.{n}": 1 for n in shard1}} if shard1 else {}
    setup = RunSetup.from_mapping(
        {
            "model": {"config": config, "body": "decoder_layers", "dtype": dtype},
            "mesh": {"shape": [world], "dim_names": ["dp"]},
            "batch_per_rank": 1,
            "seq_len": 4,
            "observe_ranks": [rank],
            "fsdp": fsdp,
        }
    )
    obs = run_setup(setup, backend="fake", timeout_s=120)
    tables = calc.layer_tables(config, world, storage_dtype=dtype, shard_dims={n: 1 for n in shard1})
    doc = obs["ranks"][0]
    assert doc["rank"] == rank
    params = {p["fqn"].removeprefix("layers.0."): p for p in doc["params"]}
    assert list(params) == [p.name for p in tables.params]  # registration order: experts, then router
    for p in tables.params:
        assert tuple(params[p.name]["local_shape"]) == p.local_shapes[rank], p.name
        assert params[p.name]["placements"] == [p.placement], p.name
    by = {(c["phase"], c["op"]): c for c in doc["collectives"] if c["unit"] == "layers.0"}
    for expected in tables.collectives:
        got, fields = by[expected.phase, expected.op], expected.fields()
        assert {k: got[k] for k in fields if k != "ring_bytes"} == {
            k: v for k, v in fields.items() if k != "ring_bytes"
        }
        assert ring_bytes(got) == pytest.approx(expected.ring_bytes)
    assert len(by) == len(tables.collectives)
