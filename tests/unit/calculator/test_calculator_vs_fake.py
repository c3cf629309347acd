"""The closed-form calculator agrees with FSDP2 itself (simulated) over random configs.

Property (hypothesis): for a random Qwen3 decoder layer, world size and observed rank, the
fake-backend run of ``fully_shard`` records exactly the local shard shapes, all-gather and
reduce-scatter sizes, dtypes and per-layer ring bytes that ``harness.calculator`` derives
from torch.chunk semantics and FSDP2's padding rule. Neither side reads the other.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness import calculator as calc
from harness.language.observed import ring_bytes
from harness.load.setup import RunSetup
from harness.run.runner import run_setup


@st.composite
def layer_and_world(draw):
    kv = draw(st.integers(1, 4))
    group = draw(st.integers(1, 4))
    head_dim = 2 * draw(st.integers(1, 16))
    config = {
        "hidden_size": draw(st.integers(1, 96)),
        "num_attention_heads": kv * group,
        "num_key_value_heads": kv,
        "head_dim": head_dim,
        "intermediate_size": draw(st.integers(1, 160)),
        "num_hidden_layers": 1,
        "vocab_size": 32,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
    }
    world = draw(st.one_of(st.integers(1, 9), st.integers(10, 4096)))
    rank = draw(st.integers(0, world - 1))
    dtype = draw(st.sampled_from(["float16", "bfloat16", "float32"]))
    return config, world, rank, dtype


@pytest.mark.slow
# every case is a simulated run: a 25th of the profile's count (4 by default, 40 when thorough)
@settings(
    max_examples=max(1, settings.default.max_examples // 25),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(layer_and_world())
# the walkthrough layer on 4096 ranks, last rank: every parameter has fewer rows than ranks
@example(
    (
        {
            "hidden_size": 512,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 64,
            "intermediate_size": 1024,
            "num_hidden_layers": 1,
            "vocab_size": 32,
            "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0,
            "tie_word_embeddings": False,
        },
        4096,
        4095,
        "float16",
    )
)
def test_calculator_matches_fake_backend(case):
    config, world, rank, dtype = case
    setup = RunSetup.from_mapping(
        {
            "model": {"config": config, "body": "decoder_layers", "dtype": dtype},
            "mesh": {"shape": [world], "dim_names": ["dp"]},
            "batch_per_rank": 1,
            "seq_len": 4,
            "observe_ranks": [rank],
        }
    )
    obs = run_setup(setup, backend="fake", timeout_s=120)
    tables = calc.layer_tables(config, world, storage_dtype=dtype)
    doc = obs["ranks"][0]
    assert doc["rank"] == rank

    params = {p["fqn"].removeprefix("layers.0."): p for p in doc["params"]}
    assert sorted(params) == sorted(p.name for p in tables.params)
    for p in tables.params:
        assert tuple(params[p.name]["local_shape"]) == p.local_shapes[rank], p.name
        assert tuple(params[p.name]["full_shape"]) == p.full_shape, p.name

    by = {(c["phase"], c["op"]): c for c in doc["collectives"] if c["unit"] == "layers.0"}
    for expected in tables.collectives:
        got = by[expected.phase, expected.op]
        # the calculator's rows carry the observation's own field names
        fields = expected.fields()
        assert {k: got[k] for k in fields if k != "ring_bytes"} == {
            k: v for k, v in fields.items() if k != "ring_bytes"
        }
        assert ring_bytes(got) == pytest.approx(expected.ring_bytes)
    assert len(by) == len(tables.collectives)


@st.composite
def tp_layer_and_mesh(draw):
    tp = draw(st.sampled_from([2, 4]))
    kv = tp * draw(st.integers(1, 2))
    config = {
        "hidden_size": draw(st.integers(1, 48)),
        "num_attention_heads": kv * draw(st.integers(1, 2)),
        "num_key_value_heads": kv,
        "head_dim": 2 * draw(st.integers(1, 8)),
        "intermediate_size": tp * draw(st.integers(1, 40)),
        "num_hidden_layers": 1,
        "vocab_size": 32,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
    }
    dp = draw(st.one_of(st.integers(1, 5), st.integers(6, 256)))
    rank = draw(st.integers(0, dp * tp - 1))
    return config, (dp, tp), rank, draw(st.sampled_from(["bfloat16", "float32"])), draw(st.booleans())


@pytest.mark.slow
@settings(
    max_examples=max(1, settings.default.max_examples // 25),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(tp_layer_and_mesh())
# the spec's tiny layer on [2, 2], rank 1 (dp 0, tp 1)
@example(
    (
        {
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "intermediate_size": 128,
            "num_hidden_layers": 1,
            "vocab_size": 32,
            "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0,
            "tie_word_embeddings": False,
        },
        (2, 2),
        1,
        "float32",
        True,
    )
)
def test_tp_calculator_matches_fake_backend(case):
    """FSDP over TP, with sequence parallelism or not: local shapes, placements, mesh dims, FSDP's
    collectives within dp and TP's within tp, per phase, as the calculator derives them."""
    config, mesh, rank, dtype, sequence_parallel = case
    setup = RunSetup.from_mapping(
        {
            "model": {"config": config, "body": "decoder_layers", "dtype": dtype},
            "mesh": {"shape": list(mesh), "dim_names": ["dp", "tp"]},
            "tensor_parallel": {"sequence_parallel": sequence_parallel},
            "batch_per_rank": 1,
            "seq_len": 4,
            "observe_ranks": [rank],
        }
    )
    obs = run_setup(setup, backend="fake", timeout_s=120)
    tables = calc.tp_layer_tables(
        config, mesh, batch_per_rank=1, seq_len=4, storage_dtype=dtype, sequence_parallel=sequence_parallel
    )
    doc = obs["ranks"][0]
    dp_rank = rank // mesh[1]
    params = {p["fqn"].removeprefix("layers.0."): p for p in doc["params"]}
    for p in tables.fsdp.params:
        got = params[p.name]
        assert tuple(got["local_shape"]) == p.local_shapes[dp_rank], p.name
        assert tuple(got["placements"]) == tables.placements[p.name], p.name
        assert tuple(got["mesh_dim_names"]) == tables.mesh_dims[p.name], p.name

    fsdp = [c for c in doc["collectives"] if c["mesh_dim"] == "dp"]
    assert [(c["phase"], c["op"], c["numel_in"], c["numel_out"]) for c in fsdp] == [
        (c.phase, c.op, c.numel_in, c.numel_out) for c in tables.fsdp.collectives
    ]
    tp = sorted((c["phase"], c["op"], c["numel_in"], c["dtype"]) for c in doc["collectives"] if c["mesh_dim"] == "tp")
    assert tp == sorted((c.phase, c.op, c.numel_in, c.dtype) for c in tables.tp_collectives)
