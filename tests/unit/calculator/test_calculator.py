"""Tests of harness/calculator.py: the document's figures, torch.chunk agreement, padding."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import calculator as calc
from harness.calculator import MB, WALKTHROUGH, Dims, layer_tables
from tests.support import REPO

# A Qwen3-32B-sized layer (the released Qwen3-32B config.json's dimensions, as model.KNOWN_CONFIGS).
QWEN3_32B = Dims(
    hidden_size=5120,
    num_attention_heads=64,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=25600,
    num_hidden_layers=64,
    vocab_size=151936,
)

# The document's tables, in its row order: (name, full shape, numel, shard on 4, shard numel).
DOC_ROWS = [
    ("input_layernorm.weight", (512,), 512, (128,), 128),
    ("self_attn.q_proj.weight", (512, 512), 262_144, (128, 512), 65_536),
    ("self_attn.k_proj.weight", (256, 512), 131_072, (64, 512), 32_768),
    ("self_attn.v_proj.weight", (256, 512), 131_072, (64, 512), 32_768),
    ("self_attn.q_norm.weight", (64,), 64, (16,), 16),
    ("self_attn.k_norm.weight", (64,), 64, (16,), 16),
    ("self_attn.o_proj.weight", (512, 512), 262_144, (128, 512), 65_536),
    ("post_attention_layernorm.weight", (512,), 512, (128,), 128),
    ("mlp.gate_proj.weight", (1024, 512), 524_288, (256, 512), 131_072),
    ("mlp.up_proj.weight", (1024, 512), 524_288, (256, 512), 131_072),
    ("mlp.down_proj.weight", (512, 1024), 524_288, (128, 1024), 131_072),
]


# --- parameters ---------------------------------------------------------------------------


def test_layer_params_document_order_matches_document_table():
    params = calc.layer_params(WALKTHROUGH, order="document")
    assert [(p.name, p.shape, p.numel) for p in params] == [r[:3] for r in DOC_ROWS]
    assert sum(p.numel for p in params) == 2_360_448  # the document's layer total, ≈ 2.36M


def test_layer_params_registration_order():
    names = [p.name for p in calc.layer_params(WALKTHROUGH)]
    assert names == list(calc.LAYER_PARAM_NAMES_REGISTRATION)
    assert sorted(names) == sorted(calc.LAYER_PARAM_NAMES_DOCUMENT)
    with pytest.raises(ValueError):
        calc.layer_params(WALKTHROUGH, order="alphabetical")


def test_registration_order_and_shapes_match_transformers():
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3ForCausalLM

    cfg = transformers.Qwen3Config(
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=24,
        intermediate_size=96,
        num_hidden_layers=1,
        vocab_size=50,
        tie_word_embeddings=False,
    )
    real = [(n, tuple(p.shape)) for n, p in Qwen3DecoderLayer(cfg, 0).named_parameters()]
    assert real == [(p.name, p.shape) for p in calc.layer_params(cfg)]
    for tie in (False, True):
        cfg.tie_word_embeddings = tie
        lm = Qwen3ForCausalLM(cfg)
        real_root = [(n, tuple(p.shape)) for n, p in lm.named_parameters() if ".layers." not in n]
        assert real_root == [(p.name, p.shape) for p in calc.root_params(cfg)]


def test_to_dims_accepts_mapping_object_and_default_head_dim():
    mapping = {
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 64,
        "intermediate_size": 1024,
    }
    assert calc.to_dims(mapping) == Dims(512, 8, 4, 64, 1024)

    class Cfg:
        hidden_size, num_attention_heads, num_key_value_heads = 512, 8, 4
        head_dim = None  # transformers: hidden_size // num_attention_heads
        intermediate_size, num_hidden_layers, vocab_size, tie_word_embeddings = 1024, 3, 10, True

    d = calc.to_dims(Cfg())
    assert (d.head_dim, d.num_hidden_layers, d.vocab_size, d.tie_word_embeddings) == (64, 3, 10, True)
    with pytest.raises(KeyError):
        calc.to_dims({"hidden_size": 512})
    with pytest.raises(ValueError):
        calc.to_dims({**mapping, "intermediate_size": 0})


def test_root_params():
    d = Dims(512, 8, 4, 64, 1024, vocab_size=1000)
    assert [(p.name, p.shape) for p in calc.root_params(d)] == [
        ("model.embed_tokens.weight", (1000, 512)),
        ("model.norm.weight", (512,)),
        ("lm_head.weight", (1000, 512)),
    ]
    tied = Dims(512, 8, 4, 64, 1024, vocab_size=1000, tie_word_embeddings=True)
    assert [p.name for p in calc.root_params(tied)] == ["model.embed_tokens.weight", "model.norm.weight"]
    with pytest.raises(ValueError):
        calc.root_params(Dims(512, 8, 4, 64, 1024))  # no vocab_size


# --- the walkthrough on 4 ranks -------------------------------------------------------------


def test_walkthrough_shard_table():
    t = layer_tables(WALKTHROUGH, 4, order="document")
    for (name, full, numel, shard, shard_numel), p in zip(DOC_ROWS, t.params):
        assert (p.name, p.full_shape, p.numel) == (name, full, numel)
        assert p.local_shapes == (shard,) * 4
        assert p.local_numels == (shard_numel,) * 4
        assert p.padded_shard_shape == shard and p.padding_numel == 0
    assert t.local_numels == (590_112,) * 4  # the document's per-GPU total, ≈ 590K


def test_walkthrough_figures():
    t = layer_tables(WALKTHROUGH, 4)
    assert t.numel == t.padded_numel == 2_360_448
    assert t.padding_numel == 0
    assert t.unsharded_bytes == 4_720_896  # the document: 4.72 MB per layer in fp16
    assert round(t.unsharded_bytes / MB, 2) == 4.72
    assert t.padded_shard_numel == 590_112
    assert t.local_bytes == (1_180_224,) * 4  # the document: ≈ 1.18 MB per rank in fp16, exactly 1/4 of the layer
    assert t.padded_sharded_bytes == 1_180_224
    assert round(t.local_bytes[0] / MB, 2) == 1.18

    assert [(c.op, c.phase) for c in t.collectives] == [
        ("all_gather", "forward"),
        ("all_gather", "backward"),
        ("reduce_scatter", "backward"),
    ]
    for c in t.collectives:
        assert (c.mesh_dim, c.group_size, c.dtype) == ("dp", 4, "float16")
        assert c.buffer_bytes == 4_720_896
        assert c.ring_bytes == 3_540_672  # "(N-1)/N × 4.72MB = 3.54 MB"
        assert round(c.ring_bytes / MB, 2) == 3.54
        assert c.busbw_factor == 0.75
    ag = t.collective("all_gather", "forward")
    assert (ag.numel_in, ag.numel_out) == (590_112, 2_360_448)  # notes: one _allgather_base_
    rs = t.collective("reduce_scatter")
    assert (rs.numel_in, rs.numel_out) == (2_360_448, 590_112)
    assert t.total_ring_bytes == 10_622_016  # the document: ~10.6 MB per rank for one layer and step
    assert round(t.total_ring_bytes / MB, 1) == 10.6


def test_walkthrough_n_layers_and_offsets():
    m = calc.model_tables(Dims(512, 8, 4, 64, 1024, num_hidden_layers=28), 4)
    assert m.root is None
    assert m.total_ring_bytes == 28 * 10_622_016  # "≈ N_L × 10.6 MB/rank"
    assert m.local_bytes == (28 * 1_180_224,) * 4
    t = layer_tables(WALKTHROUGH, 4)
    offsets = [p.input_offset for p in t.params]
    sizes = [p.padded_shard_numel for p in t.params]
    assert offsets == [sum(sizes[:i]) for i in range(len(sizes))]
    assert t.params[0].name == "self_attn.q_proj.weight" and offsets[1] == 65_536


def test_bandwidth_helpers():
    t = layer_tables(WALKTHROUGH, 4)
    ag = t.collective("all_gather", "forward")
    assert ag.algbw(1e-3) == pytest.approx(4_720_896e3)
    assert ag.busbw(1e-3) == pytest.approx(4_720_896e3 * 3 / 4)
    assert calc.busbw("all_reduce", 1000, 4, 1.0) == pytest.approx(1500.0)
    assert calc.ring_bytes("all_reduce", 1000, 4) == 1500
    assert calc.ring_bytes("all_reduce", 10, 3) == pytest.approx(40 / 3)
    assert calc.busbw_factor("all_gather", 1) == 0.0


# --- dtypes ---------------------------------------------------------------------------------


def test_document_code_as_written_is_fp32():
    # The document's fully_shard has no MixedPrecisionPolicy: fp32 parameters gather 9.44 MB.
    t = layer_tables(WALKTHROUGH, 4, storage_dtype="float32")
    assert t.collective("all_gather", "forward").buffer_bytes == 9_441_792
    assert t.local_bytes == (2_360_448,) * 4


def test_mixed_precision_dtypes():
    # MixedPrecisionPolicy(param_dtype=float16) over fp32 storage: gathers match the document,
    # storage stays fp32 (notes: "2.36 MB per rank per layer, not 1.18"), reduce follows fp16.
    t = layer_tables(WALKTHROUGH, 4, storage_dtype="float32", gather_dtype="float16")
    assert (t.storage_dtype, t.gather_dtype, t.reduce_dtype) == ("float32", "float16", "float16")
    assert t.local_bytes == (2_360_448,) * 4
    assert t.unsharded_bytes == 4_720_896
    assert t.total_ring_bytes == 10_622_016
    # reduce_dtype=float32: the reduce-scatter doubles, the all-gathers do not.
    t = layer_tables(WALKTHROUGH, 4, storage_dtype="float32", gather_dtype="bfloat16", reduce_dtype="float32")
    assert t.collective("reduce_scatter").buffer_bytes == 9_441_792
    assert t.collective("all_gather", "backward").buffer_bytes == 4_720_896
    assert t.total_ring_bytes == 2 * 3_540_672 + 7_081_344


def test_dtype_names():
    assert calc.dtype_bytes("bf16") == 2 and calc.dtype_bytes("torch.float32") == 4
    with pytest.raises(ValueError):
        calc.dtype_name("float64")


# --- uneven sharding ------------------------------------------------------------------------


def test_walkthrough_on_3_ranks():
    # Worked by hand. W=3, c = ceil(rows/3); rank rows [c, c, rows-2c]; padded shard c x rest.
    #   param             rows  c    ranks          padded shard      padding (3c-rows) x rest
    #   q_proj [512,512]  512   171  171,171,170    171x512 = 87,552   1 x 512 = 512
    #   k_proj [256,512]  256   86   86,86,84       86x512  = 44,032   2 x 512 = 1,024
    #   v_proj            same as k_proj            44,032             1,024
    #   o_proj            same as q_proj            87,552             512
    #   q_norm [64]       64    22   22,22,20       22                 2
    #   k_norm [64]       same                      22                 2
    #   gate [1024,512]   1024  342  342,342,340    342x512 = 175,104  2 x 512 = 1,024
    #   up                same as gate              175,104            1,024
    #   down [512,1024]   512   171  171,171,170    171x1024 = 175,104 1 x 1024 = 1,024
    #   input_ln, post_ln [512]  171 171,171,170    171 each           1 each
    # per-rank all-gather input = 2*87,552 + 2*44,032 + 2*22 + 3*175,104 + 2*171 = 788,866
    # output = 3 * 788,866 = 2,366,598 = 2,360,448 + 6,150 padding
    # local numels: ranks 0, 1 hold full chunks: 788,866; rank 2: 2,360,448 - 2*788,866 = 782,716
    # fp16: S = 4,733,196 bytes; ring bytes = S * 2/3 = 3,155,464; x3 = 9,466,392 per layer step
    t = layer_tables(WALKTHROUGH, 3)
    assert t.padded_shard_numel == 788_866
    assert t.padded_numel == 2_366_598
    assert t.padding_numel == 6_150
    assert t.local_numels == (788_866, 788_866, 782_716)
    assert t.local_bytes == (1_577_732, 1_577_732, 1_565_432)
    assert t.padded_sharded_bytes == 1_577_732  # rank 2 allocates the padded size too
    assert t.param("self_attn.k_proj.weight").local_shapes == ((86, 512), (86, 512), (84, 512))
    assert t.param("self_attn.k_proj.weight").row_ranges == ((0, 86), (86, 172), (172, 256))
    assert t.param("self_attn.q_norm.weight").local_shapes == ((22,), (22,), (20,))
    assert t.param("mlp.gate_proj.weight").padding_numel == 1_024
    for c in t.collectives:
        assert c.buffer_bytes == 4_733_196
        assert c.ring_bytes == 3_155_464
    assert t.total_ring_bytes == 9_466_392


def test_qwen3_32b_layer_at_1024_ranks():
    t = layer_tables(QWEN3_32B, 1024)
    assert t.numel == 487_598_336
    ag = t.collective("all_gather", "forward")
    assert ag.numel_out == t.padded_numel == 487_600_128  # notes: padded all-gather output
    assert ag.numel_in == 487_600_128 // 1024 == 476_172
    assert t.padding_numel == 1_792  # q_norm and k_norm: 2 x (1024 - 128)
    q_norm = t.param("self_attn.q_norm.weight")
    assert q_norm.local_numels == (1,) * 128 + (0,) * 896  # ranks 0-127 one row, rest none
    assert q_norm.local_shapes[128] == (0,)
    assert q_norm.padded_shard_shape == (1,)
    k_proj = t.param("self_attn.k_proj.weight")
    assert k_proj.local_shapes == ((1, 5120),) * 1024 and k_proj.padding_numel == 0
    assert t.local_numels[0] == 476_172 and t.local_numels[1023] == 476_170


def test_torch_chunk_drops_trailing_ranks():
    # torch.chunk semantics: rows=6 on 4 ranks is 2, 2, 2, 0 (not 2, 2, 1, 1).
    assert calc.chunk_rows(6, 4) == [2, 2, 2, 0]
    assert calc.chunk_rows(9, 4) == [3, 3, 3, 0]
    assert calc.chunk_rows(10, 4) == [3, 3, 3, 1]
    assert calc.local_shape((6, 3), 4, 3) == (0, 3)
    assert calc.padded_shard_shape((6, 3), 4) == (2, 3)
    assert calc.row_range(6, 4, 3) == (6, 6)


@settings(max_examples=3 * settings.default.max_examples)  # cheap cases: 300 by default
@given(rows=st.integers(0, 300), rest=st.lists(st.integers(1, 3), max_size=2), world=st.integers(1, 40))
def test_chunk_agrees_with_torch(rows, rest, world):
    torch = pytest.importorskip("torch")
    t = torch.empty(rows, *rest)
    chunks = list(torch.chunk(t, world, dim=0))
    # FSDP2's _chunk_with_empty: pad the list with empty tensors up to world chunks.
    expected_rows = [c.size(0) for c in chunks] + [0] * (world - len(chunks))
    assert calc.chunk_rows(rows, world) == expected_rows
    for r in range(world):
        assert calc.local_shape(t.shape, world, r) == (expected_rows[r], *rest)
        start, stop = calc.row_range(rows, world, r)
        assert stop - start == expected_rows[r]
    # padded_sharded_param_size = chunks[0].size()
    assert calc.padded_shard_shape(t.shape, world) == tuple(chunks[0].shape)
    # reduce-scatter input per param: _get_dim0_padded_size = ceil(rows / W) * W rows
    assert calc.chunk_size(rows, world) * world == -(-rows // world) * world


# --- HSDP -----------------------------------------------------------------------------------


def test_hsdp_2x2():
    # mesh (replicate=2, shard=2): shard in halves, reduce-scatter in the shard pair, then
    # all-reduce the half-sized gradient across the replica pair.
    t = layer_tables(WALKTHROUGH, mesh_shape=(2, 2))
    assert (t.world_size, t.shard_size, t.replicate_size) == (4, 2, 2)
    assert t.local_numels == (1_180_224, 1_180_224)
    assert t.local_bytes == (2_360_448, 2_360_448)
    assert t.param("mlp.gate_proj.weight").local_shapes == ((512, 512), (512, 512))
    assert [(c.op, c.mesh_dim, c.group_size) for c in t.collectives] == [
        ("all_gather", "dp_shard", 2),
        ("all_gather", "dp_shard", 2),
        ("reduce_scatter", "dp_shard", 2),
        ("all_reduce", "dp_replicate", 2),
    ]
    named = layer_tables(WALKTHROUGH, mesh_shape=(2, 2), mesh_dim_names=("rep", "shard"))
    assert [c.mesh_dim for c in named.collectives] == ["shard", "shard", "shard", "rep"]
    with pytest.raises(ValueError, match="do not name the dims"):
        layer_tables(WALKTHROUGH, mesh_shape=(2, 2), mesh_dim_names=("dp",))
    ag, _, rs, ar = t.collectives
    assert (ag.numel_in, ag.numel_out, ag.buffer_bytes) == (1_180_224, 2_360_448, 4_720_896)
    assert ag.ring_bytes == 2_360_448  # 4,720,896 x 1/2
    assert (rs.numel_in, rs.numel_out, rs.buffer_bytes) == (2_360_448, 1_180_224, 4_720_896)
    assert rs.ring_bytes == 2_360_448
    assert (ar.numel_in, ar.numel_out, ar.buffer_bytes) == (1_180_224, 1_180_224, 2_360_448)
    assert ar.ring_bytes == 2_360_448  # 2 x 2,360,448 x 1/2
    assert ar.busbw_factor == 1.0
    assert t.total_ring_bytes == 4 * 2_360_448
    assert calc.mesh_coords(3, (2, 2)) == (1, 1) and calc.mesh_coords(2, (2, 2)) == (1, 0)
    with pytest.raises(ValueError):
        layer_tables(WALKTHROUGH, 8, mesh_shape=(2, 2))


def test_hsdp_uneven_shard_group():
    # (2, 3): shard group of 3 pads exactly as FSDP on 3 ranks; the all-reduce moves the
    # padded shard.
    t = layer_tables(WALKTHROUGH, mesh_shape=(2, 3))
    assert t.padded_shard_numel == 788_866
    assert t.collective("all_reduce").buffer_bytes == 2 * 788_866


# --- reshard_after_forward and the root -------------------------------------------------------


def test_reshard_after_forward_options():
    no = layer_tables(WALKTHROUGH, 4, reshard_after_forward=False)
    assert [(c.op, c.phase) for c in no.collectives] == [("all_gather", "forward"), ("reduce_scatter", "backward")]
    assert no.total_ring_bytes == 2 * 3_540_672
    assert layer_tables(WALKTHROUGH, 4, reshard_after_forward=1).collectives == no.collectives
    assert layer_tables(WALKTHROUGH, 4, reshard_after_forward=4).collectives == layer_tables(WALKTHROUGH, 4).collectives
    two = layer_tables(WALKTHROUGH, 4, reshard_after_forward=2)
    bwd = two.collective("all_gather", "backward")
    # the group of 2 is a new process group, no dim of the mesh: the observation's mesh_dim is None
    assert (bwd.mesh_dim, bwd.group_size, bwd.numel_in, bwd.numel_out) == (None, 2, 1_180_224, 2_360_448)
    assert "mesh_dim" not in bwd.fields()
    assert bwd.ring_bytes == 2_360_448
    with pytest.raises(ValueError):
        layer_tables(WALKTHROUGH, 4, reshard_after_forward=3)


def test_causal_lm_root():
    d = Dims(1024, 16, 8, 128, 3072, num_hidden_layers=28, vocab_size=151_936, tie_word_embeddings=True)  # Qwen3-0.6B
    m = calc.model_tables(d, 8, body="causal_lm")
    root = m.root
    assert root.numel == 151_936 * 1024 + 1024
    assert root.padding_numel == 0  # every dimension a multiple of 128 (notes)
    assert [(c.op, c.phase) for c in root.collectives] == [("all_gather", "forward"), ("reduce_scatter", "backward")]
    assert m.total_ring_bytes == 28 * m.layer.total_ring_bytes + root.total_ring_bytes
    assert calc.root_tables(d, 8, reshard_after_forward=True).total_ring_bytes == (3 * root.numel * 2 * 7 // 8)
    with pytest.raises(ValueError):
        calc.model_tables(d, 8, body="encoder")


# --- step shapes and plumbing ---------------------------------------------------------------


def test_step_symbols_resolve_document_shapes():
    from model.steps import resolve_shape

    s = calc.step_symbols(WALKTHROUGH, batch_per_rank=2, seq_len=8)
    assert s == {"B": 2, "L": 8, "d": 512, "h_q": 8, "h_kv": 4, "d_h": 64, "d_ffn": 1024}
    assert resolve_shape("step2.k", s) == [2, 8, 256]
    assert resolve_shape("step2.q_heads", s) == [2, 8, 8, 64]
    assert resolve_shape("step5.k_repeated", s) == [2, 8, 8, 64]
    assert resolve_shape("step9.fused", s) == [2, 8, 1024]


def test_to_dict_is_plain():
    d = layer_tables(WALKTHROUGH, 3).to_dict()
    json.dumps(d)
    assert d["params"][0]["local_shapes"][2] == [170, 512]
    assert d["collectives"][0]["buffer_bytes"] == 4_733_196


def test_calculator_does_not_import_torch():
    code = (
        "import sys, harness.calculator as c; c.layer_tables(c.WALKTHROUGH, 4); "
        "print(any(m == 'torch' or m.startswith('torch.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"


def test_one_rank_shard_group_issues_no_collective():
    # torch FSDPParamGroup.unshard: "if world_size == 1" it copies the shard in place and
    # returns before any all-gather; the reduce-scatter is skipped the same way. Found by
    # tests/unit/calculator/test_calculator_vs_fake.py, which the first version of this calculator failed.
    t = calc.layer_tables(calc.WALKTHROUGH, 1)
    assert t.collectives == ()
    assert t.total_ring_bytes == 0
    assert t.local_numels == (t.numel,)


def test_rows_carry_the_specs_field_names():
    # one vocabulary: what the calculator hands out is keyed by the check kinds' own fields
    from harness.language.kinds import REGISTRY

    FIELDS = {name: set(kind.field_index) for name, kind in REGISTRY.items()}
    SELECTORS = {name: set(kind.selector_index) for name, kind in REGISTRY.items()}
    t = layer_tables(WALKTHROUGH, 4)
    for c in t.collectives:
        assert set(c.fields()) <= FIELDS["collectives"]
    assert set(t.step_total()) <= FIELDS["collectives"]
    assert set(t.params_total()) | set(t.params_total(0)) <= FIELDS["params_total"]
    for point in ("pre_forward", "post_forward"):
        assert set(t.param_state(point, 0)) <= FIELDS["param_state"]
    assert set(t.params[0].row(0)) <= FIELDS["param"] | SELECTORS["param"]
    assert t.collective("all_gather", "forward").fields() == {
        "op": "all_gather",
        "dtype": "float16",
        "numel_in": 590_112,
        "numel_out": 2_360_448,
        "buffer_bytes": 4_720_896,
        "ring_bytes": 3_540_672,
        "group_size": 4,
        "mesh_dim": "dp",
    }
    assert t.params_total() == {"count": 11, "numel": 2_360_448, "bytes": 4_720_896}
    assert t.params_total(3) == {"local_numel": 590_112, "local_bytes": 1_180_224}
    assert t.param_state("pre_forward", 0) == {"plain_tensors": 11, "full_shapes": True, "bytes": 4_720_896}
    assert t.param_state("post_forward", 0) == {"dtensors": 11, "local_shapes": True, "bytes": 1_180_224}
    assert (
        layer_tables(WALKTHROUGH, 4, reshard_after_forward=False).param_state("post_forward", 0)["plain_tensors"] == 11
    )
    assert t.step_total() == {"count": 3, "total_ring_bytes": 10_622_016}
    assert t.param("self_attn.k_proj.weight").row(1) == {
        "param": "self_attn.k_proj.weight",
        "full_shape": [256, 512],
        "numel": 131_072,
        "local_shape": [64, 512],
        "local_numel": 32_768,
    }


def test_walkthrough_is_defined_once():
    # the calculator's WALKTHROUGH and its step symbols come from model.config
    from model.config import KNOWN_CONFIGS

    config = KNOWN_CONFIGS["walkthrough"]
    assert WALKTHROUGH == calc.to_dims(config)
    assert WALKTHROUGH.num_hidden_layers == config.num_hidden_layers
    assert calc.step_symbols(WALKTHROUGH, 2, 8) == config.step_symbols(2, 8)


# --- FSDP over TP on (dp, tp) -------------------------------------------------------------

TINY_TP = {**calc.WALKTHROUGH.__dict__, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 16}  # fmt: skip


def test_tp_layer_tables_give_the_specs_figures():
    """specs/fsdp_tp_2d.yaml, worked by hand: TP halves each projection, FSDP halves dim 0 of that."""
    t = calc.tp_layer_tables(TINY_TP, (2, 2), batch_per_rank=2, seq_len=8, storage_dtype="float32")
    assert t.fsdp.param("self_attn.q_proj.weight").local_shapes == ((16, 64), (16, 64))
    assert t.fsdp.param("self_attn.o_proj.weight").local_shapes == ((32, 32), (32, 32))
    assert t.fsdp.param("self_attn.q_norm.weight").local_shapes == ((8,), (8,))
    assert t.placements["self_attn.q_proj.weight"] == ("_StridedShard(dim=0, sf=2)", "Shard(dim=0)")
    assert t.placements["mlp.down_proj.weight"] == ("Shard(dim=0)", "Shard(dim=1)")
    assert t.placements["self_attn.k_norm.weight"] == ("Shard(dim=0)", "Replicate()")
    assert t.mesh_dims["input_layernorm.weight"] == ("dp",)
    gather = t.fsdp.collective("all_gather", "forward")
    assert (gather.mesh_dim, gather.numel_in, gather.numel_out, gather.buffer_bytes) == ("dp", 9296, 18592, 74368)
    assert [c.phase for c in t.tp_collectives].count("forward") == 2
    assert [c.phase for c in t.tp_collectives].count("backward") == 7
    assert sorted({c.numel_in for c in t.tp_collectives}) == [16, 1024]


def test_tp_layer_tables_refuse_what_torch_cannot_cut():
    with pytest.raises(ValueError, match="does not divide dim 0"):
        calc.tp_layer_tables({**TINY_TP, "intermediate_size": 130}, (2, 4), batch_per_rank=1, seq_len=1)
    with pytest.raises(ValueError, match="names no module"):
        calc.tp_layer_tables(TINY_TP, (2, 2), batch_per_rank=1, seq_len=1, plan=[("self_attn.qkv", "colwise")])
