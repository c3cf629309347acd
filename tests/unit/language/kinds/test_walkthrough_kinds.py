"""Tests of harness/judge/checks.py (and evaluate/report) on a synthetic observation: no ranks launched.

Every check kind gets a passing entry, a failing one (status, expected and observed text, the
failing ranks, one rank made to differ to show per-rank reporting) and an unmeasurable one
(status 'error', naming what exists). Then the walkthrough spec is evaluated whole against the
synthetic observation (every item passes), and single values of the spec's YAML are mutated
(exactly that item fails, and says why).
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from rich.console import Console

from harness.judge.checks import CheckResult, check
from harness.judge.evaluate import counts, evaluate_spec
from harness.language.entry import make_entry
from harness.language.observed import ring_bytes, select_collectives
from harness.load.spec import load_spec
from harness.report.terminal import print_report, result_to_json, summary_line
from tests.support import REPO
from tests.support.observations import (
    DOC_LAYER_NUMEL,
    DOC_LOCAL_NUMEL,
    DOC_PARAM_ROWS,
    LAYER_BYTES,
    LAYER_LOCAL_BYTES,
    LAYER_LOCAL_NUMEL,
    LAYER_NUMEL,
    find,
    layer_param_shapes,
    shard_shape,
    walkthrough_observation,
    with_rank,
)

SPEC = REPO / "specs" / "qwen3_walkthrough.yaml"
OBSERVATION_SCHEMA = json.loads((REPO / "harness" / "contract" / "observation.schema.json").read_text())


@pytest.fixture(scope="module")
def obs():
    return walkthrough_observation()


def run(kind: str, obs, /, **values) -> CheckResult:
    """Check one entry of ``kind`` built from ``values`` (selectors and fields) on ``obs``."""
    entry = make_entry(
        kind,
        values,
        id=f"test-{kind}",
        says="the document says so",
        section="Some section",
        table="some table",
        spec="specs/x.yaml",
        line=7,
    )
    return check(entry, obs)


def field(result: CheckResult, name: str):
    return next(f for f in result.fields if f.field == name)


def assert_fails(result: CheckResult, name: str, expected: str, observed: str, ranks: list[int]) -> None:
    """``name`` failed on exactly ``ranks``; explain() shows expected, observed and those ranks."""
    assert result.status == "fail", result.explain()
    f = field(result, name)
    assert f.failed_ranks == ranks
    assert expected in f.expected
    text = result.explain()
    assert f"FAIL {name}: expected {f.expected}; observed " in text
    assert observed in text, text
    ranks_text = "0-3" if ranks == [0, 1, 2, 3] else ", ".join(map(str, ranks))
    assert f"failing ranks: {ranks_text}" in text
    assert "specs/x.yaml:7: [some table] test-" in text
    assert "the document claims: the document says so (section: Some section)" in text


def assert_error(result: CheckResult, *names: str) -> None:
    assert result.status == "error", result.explain()
    assert not result.ok
    for name in names:
        assert name in result.message, result.message
    assert f"error: {result.message}" in result.explain()


# --- the synthetic observation itself -----------------------------------------------------


def test_synthetic_observation_is_schema_valid(obs):
    jsonschema.Draft202012Validator(OBSERVATION_SCHEMA).validate(obs)


def test_synthetic_observation_matches_the_documents_tables():
    shapes = dict(layer_param_shapes())
    assert list(shapes) == list(DOC_PARAM_ROWS)
    for name, (full, numel, shard, shard_numel) in DOC_PARAM_ROWS.items():
        assert shapes[name] == full and shard_shape(full) == shard
        assert (numel, shard_numel) == (full[0] * (full[1] if len(full) > 1 else 1), numel // 4)
    assert (LAYER_NUMEL, LAYER_LOCAL_NUMEL) == (DOC_LAYER_NUMEL, DOC_LOCAL_NUMEL)
    assert (LAYER_BYTES, LAYER_LOCAL_BYTES) == (4_720_896, 1_180_224)


def test_synthetic_observation_is_fresh_each_call(obs):
    other = walkthrough_observation()
    other["ranks"][0]["params"].clear()
    assert obs["ranks"][0]["params"] and walkthrough_observation() == obs


# --- param --------------------------------------------------------------------------------


def test_param_pass(obs):
    r = run(
        "param",
        obs,
        param="self_attn.q_proj.weight",
        layer=0,
        full_shape=[512, 512],
        local_shape=[128, 512],
        numel=262144,
        local_numel="65,536",
        dtype="float16",
        element_size=2,
        bytes="524 KB",
        local_bytes=131072,
        is_dtensor=True,
        placements=["Shard(dim=0)"],
        mesh_dim_names=["dp"],
    )
    assert r.status == "pass" and r.ok, r.explain()
    assert all(f.observed.keys() == {0, 1, 2, 3} for f in r.fields)
    assert field(r, "local_shape").observed_text() == "[128, 512] (ranks 0-3)"
    assert run("param", obs, fqn="layers.1.mlp.down_proj.weight", local_shape=[128, 1024]).status == "pass"
    assert run("param", obs, param="mlp.down_proj.weight", layer=1, ranks=[2], local_numel=131072).status == "pass"


def test_param_fail(obs):
    r = run("param", obs, param="self_attn.k_proj.weight", layer=0, full_shape=[256, 512], local_shape=[65, 512])
    assert_fails(r, "local_shape", "[65, 512]", "[64, 512] (ranks 0-3)", [0, 1, 2, 3])
    assert field(r, "full_shape").ok


def test_param_fail_on_one_rank(obs):
    def edit(doc):
        find(doc["params"], fqn="layers.0.self_attn.k_proj.weight")["local_shape"] = [63, 512]

    odd = with_rank(obs, 2, edit)
    r = run("param", odd, param="self_attn.k_proj.weight", layer=0, local_shape=[64, 512])
    assert_fails(r, "local_shape", "[64, 512]", "[63, 512] (rank 2)", [2])
    assert "observed [64, 512] (ranks 0, 1, 3); [63, 512] (rank 2)" in r.explain()
    assert run("param", odd, param="self_attn.k_proj.weight", layer=0, ranks=[0, 1, 3], local_shape=[64, 512]).ok


def test_param_unknown(obs):
    assert_error(
        run("param", obs, param="self_attn.qkv_proj.weight", layer=0, numel=1),
        "'layers.0.self_attn.qkv_proj.weight'",
        "parameters:",
        "'layers.0.self_attn.q_proj.weight'",
    )
    assert_error(
        run("param", obs, param="self_attn.q_proj.weight", layer=5, numel=1), "decoder layer 5", "layers: [0, 1]"
    )
    assert_error(
        run("param", obs, param="self_attn.q_proj.weight", ranks=[4], numel=1),
        "rank(s) [4] not observed",
        "observed ranks: 0-3",
    )


# --- params_total -------------------------------------------------------------------------


def test_params_total_pass(obs):
    r = run(
        "params_total",
        obs,
        layer=0,
        count=11,
        numel="≈2.36M",
        bytes="4.72 MB",
        local_numel="≈590K",
        local_bytes="1.18 MB",
    )
    assert r.status == "pass", r.explain()
    assert run("params_total", obs, layer="all", count=22, numel="2 × 2.36M").ok
    assert run("params_total", obs, unit="layers.1", count=11, numel=LAYER_NUMEL).ok
    assert run("params_total", obs, layer=[0, 1], unit="layers.1", count=11).ok  # layer ∩ unit
    assert run("params_total", obs, role="layer", count=22).ok
    assert run("params_total", obs, count=22, local_bytes=2 * LAYER_LOCAL_BYTES).ok  # no selector: all


def test_params_total_fail(obs):
    r = run("params_total", obs, layer=0, bytes="4.73 MB")
    assert_fails(r, "bytes", "4.73 MB (= 4.73 MB ± 0.005 MB)", "4,720,896 B = 4.721 MB (ranks 0-3)", [0, 1, 2, 3])


def test_params_total_fail_on_one_rank(obs):
    odd = with_rank(obs, 3, lambda doc: doc["params"].pop())
    r = run("params_total", odd, layer="all", count=22)
    assert_fails(r, "count", "22", "21 (rank 3)", [3])


def test_params_total_unknown(obs):
    assert_error(
        run("params_total", obs, unit="layers.7", count=11), "'layers.7'", "units: ['layers.0', 'layers.1', '']"
    )
    assert_error(run("params_total", obs, layer=2, count=11), "decoder layer 2", "layers: [0, 1]")


def test_params_total_of_a_root_without_parameters_is_zero(obs):
    # The walkthrough's root holds no parameter: a selection of zero parameters, checked, not an error.
    assert run("params_total", obs, role="root", count=0).status == "pass"
    assert run("params_total", obs, unit="root", count=0, numel=0, local_bytes=0).status == "pass"
    assert_fails(run("params_total", obs, unit="root", count=1), "count", "1", "0 (ranks 0-3)", [0, 1, 2, 3])


# --- input --------------------------------------------------------------------------------


def test_input_pass(obs):
    for rank in range(4):
        r = run(
            "input",
            obs,
            rank=rank,
            name="hidden_states",
            shape=[2, 8, 512],
            dtype="float16",
            samples=[2 * rank, 2 * rank + 1],
        )
        assert r.status == "pass", r.explain()
        assert list(field(r, "samples").observed) == [rank]
    assert run("input", obs, shape=[2, 8, 512]).ok  # no rank: every rank


def test_input_fail(obs):
    r = run("input", obs, rank=1, samples=[0, 1])
    assert_fails(r, "samples", "[0, 1]", "[2, 3]", [1])


def test_input_fail_on_one_rank(obs):
    odd = with_rank(obs, 0, lambda doc: doc["input"].update(shape=[1, 8, 512]))
    assert_fails(run("input", odd, shape=[2, 8, 512]), "shape", "[2, 8, 512]", "[1, 8, 512] (rank 0)", [0])


def test_input_unknown(obs):
    assert_error(run("input", obs, rank=9, shape=[2, 8, 512]), "rank(s) [9] not observed", "0-3")


# --- step ---------------------------------------------------------------------------------


def test_step_pass(obs):
    r = run("step", obs, step="step2.k_heads", layer="all", shape=[2, 8, 4, 64], dtype="float16", dim0=2, layers=2)
    assert r.status == "pass", r.explain()
    assert run("step", obs, step="step9.gate", layer=1, shape=[2, 8, 1024], layers=1).ok
    assert run("step", obs, step="step5.k_repeated", layer=[0, 1], shape=[2, 8, 8, 64]).ok
    assert run("step", obs, step="step10.output", shape=[2, 8, 512], layers=2).ok  # layer defaults to all


def test_step_fail(obs):
    r = run("step", obs, step="step2.k_heads", shape=[2, 8, 8, 64])
    assert_fails(r, "shape", "[2, 8, 8, 64]", "[2, 8, 4, 64] (ranks 0-3)", [0, 1, 2, 3])


def test_step_fail_on_one_rank_and_one_layer(obs):
    def edit(doc):
        find(doc["steps"], name="step2.k_heads", layer=1)["shape"] = [2, 8, 8, 64]

    odd = with_rank(obs, 1, edit)
    r = run("step", odd, step="step2.k_heads", layer="all", shape=[2, 8, 4, 64])
    assert_fails(r, "shape", "[2, 8, 4, 64]", "[[2, 8, 4, 64], [2, 8, 8, 64]] (rank 1)", [1])
    assert run("step", odd, step="step2.k_heads", layer=0, shape=[2, 8, 4, 64]).ok


def test_step_unknown(obs):
    assert_error(
        run("step", obs, step="step2.kv_heads", shape=[1]),
        "'step2.kv_heads'",
        "observed steps:",
        "'step2.k_heads'",
        "'step10.output'",
    )
    assert_error(run("step", obs, step="step1.x_norm", layer=3, shape=[1]), "(layer 3) not observed")


# --- param_state --------------------------------------------------------------------------


def test_param_state_pass(obs):
    pre = run(
        "param_state",
        obs,
        layer=0,
        point="pre_forward",
        count=11,
        plain_tensors=11,
        dtensors=0,
        full_shapes=True,
        local_shapes=False,
        bytes="4.72 MB",
    )
    post = run(
        "param_state",
        obs,
        unit="layers.1",
        point="post_forward",
        count=11,
        dtensors=11,
        local_shapes=True,
        bytes="1.18 MB",
    )
    assert pre.status == "pass", pre.explain()
    assert post.status == "pass", post.explain()
    assert run("param_state", obs, layer="all", point="post_forward", dtensors=11, bytes=LAYER_LOCAL_BYTES).ok


def test_param_state_fail(obs):
    r = run("param_state", obs, layer=0, point="post_forward", bytes="4.72 MB", dtensors=11)
    assert_fails(r, "bytes", "4.72 MB", "1,180,224 B = 1.18 MB (ranks 0-3)", [0, 1, 2, 3])
    assert field(r, "dtensors").ok


def test_param_state_fail_on_one_rank(obs):
    def edit(doc):
        state = find(doc["param_states"], unit="layers.0", point="post_forward")
        state["params"][1].update(is_dtensor=False, shape=[512, 512])

    odd = with_rank(obs, 2, edit)
    r = run("param_state", odd, layer=0, point="post_forward", dtensors=11, local_shapes=True)
    assert_fails(r, "dtensors", "11", "10 (rank 2)", [2])
    assert field(r, "local_shapes").failed_ranks == [2]
    # layer: all, units disagreeing on rank 2: the per-unit values are shown
    r = run("param_state", odd, layer="all", point="post_forward", dtensors=11)
    assert_fails(r, "dtensors", "11", "[10, 11] (rank 2)", [2])


def test_param_state_unknown(obs):
    assert_error(run("param_state", obs, unit="layers.9", point="pre_forward", count=11), "'layers.9'", "units:")
    no_states = with_rank(obs, 0, lambda doc: doc["param_states"].clear())
    assert_error(
        run("param_state", no_states, layer=0, point="pre_forward", count=11),
        "rank 0",
        "no param state at 'pre_forward'",
        "layers.0",
    )


# --- collectives --------------------------------------------------------------------------

FORWARD_GATHER = dict(
    count=1,
    op="all_gather",
    dtype="float16",
    element_size=2,
    numel_in=590112,
    numel_out=2360448,
    buffer_bytes="4.72 MB",
    group_size=4,
    mesh_dim="dp",
    fsdp_label="FSDP::all_gather",
    unit="layers.0",
    phase="forward",
    ring_bytes="3.54 MB",
    total_buffer_bytes=LAYER_BYTES,
    total_ring_bytes="≈3.54 MB",
    sequence=["all_gather layers.0"],
)


def test_collectives_pass(obs):
    r = run("collectives", obs, select={"phase": "forward", "op": "all_gather", "layer": 0}, **FORWARD_GATHER)
    assert r.status == "pass", r.explain()


@pytest.mark.parametrize(
    "select, count, sequence",
    [
        ({}, 6, None),
        ({"phase": "backward", "not": {"op": "all_gather"}}, 2, ["reduce_scatter layers.1", "reduce_scatter layers.0"]),
        ({"not": {"op": ["all_gather", "reduce_scatter"]}}, 0, []),
        ({"op": "reduce_scatter", "layer": [0, 1]}, 2, ["reduce_scatter layers.1", "reduce_scatter layers.0"]),
        ({"layer": "all"}, 6, None),
        ({"role": "layer"}, 6, None),
        ({"role": "root"}, 0, []),
        ({"not": {"role": "layer"}}, 0, []),
        ({"not": {"layer": 1}}, 3, ["all_gather layers.0", "all_gather layers.0", "reduce_scatter layers.0"]),
        ({"unit": ["layers.0", "layers.1"], "phase": "forward"}, 2, ["all_gather layers.0", "all_gather layers.1"]),
        ({"unit": "root"}, 0, []),
        ({"unit": "layers.1", "layer": 0}, 0, []),  # layer ∩ unit
        ({"group_size": [2, 4], "mesh_dim": "dp", "dtype": "float16"}, 6, None),
        ({"fsdp_label": "FSDP::post_forward"}, 0, []),
        ({"phase": "optimizer"}, 0, []),
        (
            {"phase": "backward"},
            4,
            ["all_gather layers.1", "all_gather layers.0", "reduce_scatter layers.1", "reduce_scatter layers.0"],
        ),
    ],
)
def test_collectives_select(obs, select, count, sequence):
    values = {"count": count} if sequence is None else {"count": count, "sequence": sequence}
    r = run("collectives", obs, select=select, **values)
    assert r.status == "pass", r.explain()


def test_collectives_reduce_scatter_fields(obs):
    r = run(
        "collectives",
        obs,
        select={"phase": "backward", "op": "reduce_scatter", "layer": 0},
        count=1,
        numel_in=2360448,
        numel_out=590112,
        buffer_bytes=LAYER_BYTES,
        ring_bytes="3.54 MB",
        fsdp_label="FSDP::post_backward_reduce",
    )
    assert r.status == "pass", r.explain()
    r = run("collectives", obs, select={"layer": 0}, count=3, total_ring_bytes="~10.6 MB", total_buffer_bytes="14.2 MB")
    assert r.status == "pass", r.explain()
    assert run("collectives", obs, select={}, total_ring_bytes="2 × 10.6 MB").ok


@pytest.mark.parametrize(
    "select, name, value, expected, observed",
    [
        ({"phase": "forward"}, "count", 3, "3", "2 (ranks 0-3)"),
        ({"phase": "forward", "layer": 0}, "op", "reduce_scatter", "reduce_scatter", "all_gather (ranks 0-3)"),
        ({"phase": "forward"}, "unit", "layers.0", "layers.0", "[layers.0, layers.1] (ranks 0-3)"),
        (
            {"phase": "forward"},
            "sequence",
            ["all_gather layers.1", "all_gather layers.0"],
            "[all_gather layers.1, all_gather layers.0]",
            "[all_gather layers.0, all_gather layers.1] (ranks 0-3)",
        ),
        (
            {"phase": "backward"},
            "sequence",
            ["all_gather layers.1", "reduce_scatter layers.1"],
            "[all_gather layers.1, reduce_scatter layers.1]",
            "reduce_scatter layers.0] (ranks 0-3)",
        ),
        (
            {"layer": 0, "op": "all_gather"},
            "ring_bytes",
            "3.55 MB",
            "3.55 MB (= 3.55 MB ± 0.005 MB)",
            "3,540,672 B = 3.541 MB (ranks 0-3)",
        ),
        ({"layer": 0}, "total_ring_bytes", "~10.7 MB", "~10.7 MB", "10,622,016 B = 10.62 MB (ranks 0-3)"),
        ({}, "total_ring_bytes", "2 × 10.7 MB", "2 × 10.7 MB", "21,244,032 B = 21.24 MB (ranks 0-3)"),
        ({"phase": "optimizer"}, "op", "all_gather", "all_gather", "null (ranks 0-3)"),
    ],
)
def test_collectives_fail(obs, select, name, value, expected, observed):
    r = run("collectives", obs, select=select, **{name: value})
    assert_fails(r, name, expected, observed, [0, 1, 2, 3])


def test_collectives_fail_on_one_rank(obs):
    def edit(doc):
        extra = dict(
            doc["collectives"][-1],
            index=6,
            op="all_reduce",
            c10d_op="c10d.allreduce_.default",
            unit=None,
            fsdp_label=None,
            fsdp_labels=[],
            phase="optimizer",
        )
        doc["collectives"].append(extra)

    odd = with_rank(obs, 3, edit)
    assert_fails(
        run("collectives", odd, select={"not": {"op": ["all_gather", "reduce_scatter"]}}, count=0),
        "count",
        "0",
        "1 (rank 3)",
        [3],
    )
    assert_fails(run("collectives", odd, select={"not": {"role": "layer"}}, count=0), "count", "0", "1 (rank 3)", [3])
    assert_fails(run("collectives", odd, select={"phase": "optimizer"}, count=0), "count", "0", "1 (rank 3)", [3])
    r = run("collectives", odd, select={}, sequence=[f"{c['op']} {c['unit']}" for c in obs["ranks"][0]["collectives"]])
    assert_fails(r, "sequence", "[all_gather layers.0", "reduce_scatter layers.0, all_reduce -] (rank 3)", [3])
    assert "all_reduce -]" in r.explain()  # a collective without an FSDP unit shows as '-'


def test_collectives_unknown(obs):
    assert_error(run("collectives", obs, select={"layer": 5}, count=1), "decoder layer 5", "layers: [0, 1]")
    assert_error(run("collectives", obs, select={"unit": "layers.5"}, count=1), "'layers.5'", "units:")
    assert_error(run("collectives", obs, select={"not": {"layer": 5}}, count=1), "decoder layer 5")


def test_ring_bytes_follow_nccl_tests():
    c = {"buffer_bytes": 4_720_896, "group_size": 4}
    assert ring_bytes({**c, "op": "all_gather"}) == 3_540_672
    assert ring_bytes({**c, "op": "reduce_scatter"}) == 3_540_672
    assert ring_bytes({**c, "op": "all_reduce"}) == 2 * 3_540_672
    assert ring_bytes({**c, "op": "broadcast"}) == 4_720_896
    assert ring_bytes({**c, "op": "all_gather", "group_size": 1}) == 0


def test_select_collectives_in_issue_order(obs):
    doc = obs["ranks"][0]
    chosen = select_collectives(obs, doc, {"op": "all_gather"})
    assert [(c["phase"], c["unit"]) for c in chosen] == [
        ("forward", "layers.0"),
        ("forward", "layers.1"),
        ("backward", "layers.1"),
        ("backward", "layers.0"),
    ]


# --- memory -------------------------------------------------------------------------------


def test_memory_pass(obs):
    r = run("memory", obs, layer=0, state="After Pre-Forward", sharded_param="2 × 1.18 MB", unsharded_param="4.72 MB")
    assert r.status == "pass", r.explain()
    assert run("memory", obs, module="layers.0", state="After Post-Forward", unsharded_param=0).ok
    assert run(
        "memory", obs, unit="layers.1", state="After Post-Backward", sharded_grad="2 × 1.18 MB", unsharded_param=0
    ).ok


def test_memory_fail(obs):
    r = run("memory", obs, layer=0, state="After Post-Forward", unsharded_param="4.72 MB")
    assert_fails(r, "unsharded_param", "4.72 MB", "0 B = 0 MB (ranks 0-3)", [0, 1, 2, 3])


def test_memory_fail_on_one_rank(obs):
    def edit(doc):
        find(doc["memory"], module="layers.0", state="After Post-Forward")["bytes"]["unsharded_param"] = LAYER_BYTES

    odd = with_rank(obs, 1, edit)
    r = run("memory", odd, layer=0, state="After Post-Forward", unsharded_param=0)
    assert_fails(r, "unsharded_param", "0", "4,720,896 (rank 1)", [1])


def test_memory_unknown(obs):
    assert_error(
        run("memory", obs, layer=0, state="After Pre-Backward", sharded_param=0),
        "'After Pre-Backward'",
        "states: ['After Post-Backward', 'After Post-Forward', 'After Pre-Forward']",
    )
    assert_error(
        run("memory", obs, layer=0, state="After Pre-Forward", optstate=0),
        "field 'optstate' not observed",
        "'sharded_param'",
        "'unsharded_param'",
    )
    assert_error(
        run("memory", obs, module="layers.3", state="After Pre-Forward", sharded_param=0),
        "module 'layers.3'",
        "states: []",
    )


# --- numerics -----------------------------------------------------------------------------


def test_numerics_pass(obs):
    r = run(
        "numerics",
        obs,
        grads_rel_diff="<= 1e-2",
        grads_count=22,
        forward_rel_diff="<= 1e-2",
        grads_max_abs_diff="< 1e-4",
        forward_max_abs_diff="<= 2e-3",
        loss_max_abs_diff="<= 1e-3",
        replica_dtype="float16",
    )
    assert r.status == "pass", r.explain()


def test_numerics_fail(obs):
    r = run("numerics", obs, grads_max_abs_diff="<= 1e-6", grads_count=22)
    assert_fails(r, "grads_max_abs_diff", "<= 1.000e-06", "3.000e-05 (ranks 0-3)", [0, 1, 2, 3])
    assert field(r, "grads_count").ok


def test_numerics_fail_on_one_rank(obs):
    def edit(doc):
        doc["numerics"]["grads"][5]["max_abs_diff"] = 0.5

    odd = with_rank(obs, 1, edit)
    r = run("numerics", odd, grads_rel_diff="<= 1e-2")
    assert_fails(r, "grads_rel_diff", "<= 0.01", "45.4545 (rank 1)", [1])


def test_numerics_of_one_parameter(obs):
    """param/layer narrow the grads_* fields: the one bad gradient fails its own entry only."""

    def edit(doc):
        doc["numerics"]["grads"][5]["max_abs_diff"] = 0.5  # layers.0.self_attn.k_norm.weight

    odd = with_rank(obs, 1, edit)
    bad = run("numerics", odd, layer=0, param="self_attn.k_norm.weight", grads_rel_diff="<= 1e-2", grads_count=1)
    assert_fails(bad, "grads_rel_diff", "<= 0.01", "45.4545 (rank 1)", [1])
    assert field(bad, "grads_count").ok
    good = run("numerics", odd, layer=0, param="self_attn.q_norm.weight", grads_rel_diff="<= 1e-2", grads_count=1)
    assert good.status == "pass", good.explain()


def test_numerics_unknown(obs):
    simulated = with_rank(obs, 0, lambda doc: doc.update(numerics=None))
    assert_error(run("numerics", simulated, grads_count=22), "rank 0", "no numerics recorded")


# --- make_entry ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, values, message",
    [
        ("parm", {"numel": 1}, "unknown check kind 'parm'; expected one of ['param', 'params_total', 'input'"),
        ("param", {"param": "x", "shap": [1]}, "'shap' is not a selector or field of check kind 'param'"),
        ("step", {"step": "step1.x_norm"}, "no expected field; fields of 'step': ['dim0', 'dtype', 'layers', 'shape']"),
        ("params_total", {"layer": 0, "bytes": "4.7.2 MB"}, "cannot read '4.7.2 MB'"),
    ],
)
def test_make_entry_rejects(kind, values, message):
    with pytest.raises(ValueError) as info:
        make_entry(kind, values, id="x")
    assert message in str(info.value)


def test_make_entry_splits_selectors_and_fields():
    e = make_entry("memory", {"layer": 0, "state": "After Pre-Forward", "all_gather": "4.72 MB"}, id="m")
    assert dict(e.selectors) == {"layer": 0, "state": "After Pre-Forward"}
    assert list(e.expect) == ["all_gather"] and e.expect["all_gather"].form == "rounded"


# --- the walkthrough spec against the synthetic observation --------------------------------


@pytest.fixture(scope="module")
def spec():
    return load_spec(SPEC)


def test_walkthrough_spec_passes_on_the_synthetic_observation(spec, obs):
    results = evaluate_spec(spec, obs)
    failing = [r.explain() for r in results if r.status != "pass"]
    assert not failing, "\n\n".join(failing)
    assert counts(results)["pass"] == len(spec.items) >= 100
    assert summary_line(results) == f"{len(results)} passed, 0 failed"


def test_report_of_a_failing_and_passing_run(spec, obs):
    odd = with_rank(obs, 2, lambda doc: doc["collectives"].pop())  # rank 2 lost layers.0's reduce-scatter
    results = evaluate_spec(spec, odd)
    failing = [r for r in results if not r.ok]
    assert failing and all(2 in f.failed_ranks for r in failing if r.status == "fail" for f in r.fields if not f.ok)
    console = Console(record=True, width=200)
    print_report(results, console, title="walkthrough", only_failures=True)
    text = console.export_text()
    assert "Backward 简述" in text and "reduce_scatter_input_is_full_gradient" in text
    assert "hidden_size_batch_seq" not in text  # a passing entry, left out
    record = result_to_json(failing[0])
    json.dumps(record)
    assert record["status"] in ("fail", "error") and record["spec"] == str(SPEC)
    assert re.match(r"\d+ passed, \d+ failed", summary_line(results))


# --- mutation: one value changed in the YAML -> exactly that item fails -------------------

MUTATIONS = [
    # (line marker, old, new, section, expected text, observed text)
    pytest.param(
        "- [self_attn.k_proj.weight, [256, 512], [64, 512], 32768]",
        "[64, 512]",
        "[65, 512]",
        "每个 rank 上的参数分片",
        "expected [65, 512]",
        "observed [64, 512] (ranks 0-3)",
        id="shard-shape",
    ),
    pytest.param(
        "id: layer_bytes_fp16",
        'bytes: "4.72 MB"',
        'bytes: "4.73 MB"',
        "参数列表（单层）",
        "expected 4.73 MB (= 4.73 MB ± 0.005 MB)",
        "observed 4,720,896 B = 4.721 MB",
        id="byte-figure",
    ),
    pytest.param(
        "- [step2.k, [2, 8, 256]",
        "[step2.k, [2, 8, 256]",
        "[step2.k, [2, 8, 255]",
        "Forward 逐算子 Walkthrough",
        "expected [2, 8, 255]",
        "observed [2, 8, 256] (ranks 0-3)",
        id="step-shape",
    ),
    pytest.param(
        "id: all_params_full",
        "plain_tensors: 11",
        "plain_tensors: 10",
        "Step 0：Pre-Forward Hook → All-Gather 层参数",
        "expected 10",
        "observed 11 (ranks 0-3)",
        id="invariant-count",
    ),
    pytest.param(
        "grads_count: 22", "22", "20", "Backward 简述", "expected 20", "observed 22 (ranks 0-3)", id="grads-count"
    ),
    pytest.param(
        "- [layer_step_total,",
        '"~10.6 MB"',
        '"~10.8 MB"',
        "单层单步通信量汇总",
        "expected ~10.8 MB",
        "observed 10,622,016 B = 10.62 MB",
        id="rounded-total",
    ),
]


def mutate(text: str, marker: str, old: str, new: str) -> tuple[str, int]:
    """``text`` with ``old`` replaced by ``new`` on the one line holding ``marker``; that line (1-based)."""
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if marker in line]
    assert len(hits) == 1, f"marker {marker!r} on lines {[i + 1 for i in hits]}"
    line = lines[hits[0]]
    assert line.count(old) == 1, f"{old!r} occurs {line.count(old)} times in {line!r}"
    lines[hits[0]] = line.replace(old, new)
    return "".join(lines), hits[0] + 1


@pytest.mark.parametrize("marker, old, new, section, expected, observed", MUTATIONS)
def test_mutating_one_value_fails_exactly_that_item(tmp_path, obs, marker, old, new, section, expected, observed):
    text, line = mutate(SPEC.read_text(encoding="utf-8"), marker, old, new)
    path = tmp_path / "mutated.yaml"
    path.write_text(text, encoding="utf-8")
    results = evaluate_spec(load_spec(path), obs)
    failing = [r for r in results if r.status != "pass"]
    assert len(failing) == 1, "\n\n".join(r.explain() for r in failing)
    (r,) = failing
    assert r.status == "fail"
    # the item's own line, or the first line of a multi-line entry holding the marker
    assert r.entry.line == line or (r.entry.line < line and "grads_count" in marker)
    text = r.explain()
    assert text.startswith(f"{path}:{line}: ")  # the mutated field's line, where a multi-line entry has it
    assert f"(section: {section})" in text or f"document section: {section}" in text
    assert expected in text and observed in text, text
    assert "failing ranks: 0-3" in text
