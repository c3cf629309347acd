"""The check-kind registry is the one definition: the shipped schema and docs/check-kinds.md agree with it,
every value type refuses values that can never be right, and every selector refuses what a run
of the setup can never produce, each as a ``file:line: key.path: expected`` load error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.language.kinds import REGISTRY
from harness.load.docs import CHECK_KINDS_PAGE, SCHEMA_PATH, check_kinds_page, dump_schema, generated_schema
from harness.load.spec import SpecError, load_spec
from tests.support import REPO


def test_shipped_schema_matches_the_registry():
    shipped = SCHEMA_PATH.read_text(encoding="utf-8")
    assert shipped == dump_schema(generated_schema(json.loads(shipped))), (
        "spec.schema.json is out of date: run python -m harness.load.docs"
    )


def test_check_kinds_page_matches_the_registry():
    page = CHECK_KINDS_PAGE.read_text(encoding="utf-8")
    assert page == check_kinds_page(page), "docs/check-kinds.md's table is out of date: run python -m harness.load.docs"


def test_a_stale_check_kinds_table_is_caught():
    """The check above can fail: a kind's row edited by hand is rewritten; lost markers are named."""
    page = CHECK_KINDS_PAGE.read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| `memory` |"))
    stale = page.replace(row, row.replace("`sharded_param`, ", ""))
    assert stale != page and check_kinds_page(stale) == page
    with pytest.raises(ValueError, match="docs/check-kinds.md lacks the markers"):
        check_kinds_page(stale.replace("<!-- /check-kinds -->", ""))


def test_every_key_is_documented_once():
    for kind in REGISTRY.values():
        keys = [s.name for s in kind.selectors] + [f.name for f in kind.fields]
        assert len(keys) == len(set(keys)), kind.name
        assert kind.doc and all(s.doc for s in kind.selectors) and all(f.doc for f in kind.fields)


BASE = """\
spec: vocab
title: value types and selectors
document: a document
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 2}}
  mesh: {shape: [2, 2], dim_names: [dp_replicate, dp_shard]}
tables:
  - section: "S"
    check: CHECK
    entries:
      - ENTRY
"""


def load_entry(tmp_path: Path, check: str, entry: str):
    path = tmp_path / "spec.yaml"
    path.write_text(BASE.replace("CHECK", check).replace("ENTRY", entry), encoding="utf-8")
    return load_spec(path)


# (check kind, entry, key path blamed, words of the message)
BAD = [
    # field values that can never be right (issue: invalid expectations pass validation)
    ("step", "{step: step1.x_norm, shape: [2, eight, 512]}", "tables[0].entries[0]", "shape: expected a shape"),
    ("step", "{step: step1.x_norm, shape: [2, -8, 512]}", "tables[0].entries[0]", "shape: expected a shape"),
    ("step", "{step: step1.x_norm, dtype: float17}", "tables[0].entries[0]", "dtype: expected a dtype name"),
    (
        "param",
        "{param: self_attn.q_proj.weight, layer: 0, dtype: fp16}",
        "tables[0].entries[0]",
        "dtype: expected a dtype",
    ),
    (
        "param",
        "{param: self_attn.q_proj.weight, layer: 0, local_numel: -1}",
        "tables[0].entries[0]",
        "local_numel: expected a count",
    ),
    (
        "param",
        "{param: self_attn.q_proj.weight, layer: 0, local_numel: '4.72 MB'}",
        "tables[0].entries[0]",
        "local_numel: expected a count",
    ),
    (
        "param",
        "{param: self_attn.q_proj.weight, layer: 0, bytes: '≈590K'}",
        "tables[0].entries[0]",
        "bytes: expected a size in bytes",
    ),
    (
        "param",
        "{param: self_attn.q_proj.weight, layer: 0, is_dtensor: yes please}",
        "tables[0].entries[0]",
        "is_dtensor: expected true or false",
    ),
    ("collectives", "{select: {op: all_gather}, op: allgather}", "tables[0].entries[0]", "op: expected one of"),
    (
        "collectives",
        "{select: {op: all_gather}, mesh_dim: tp}",
        "tables[0].entries[0]",
        "mesh_dim: mesh dim 'tp' cannot occur",
    ),
    ("input", "{rank: 0, samples: [0, one]}", "tables[0].entries[0]", "samples: expected a list of integers"),
    # selectors naming what the setup can never produce
    (
        "step",
        "{step: step1.x_norm, layer: 2, shape: [2, 8, 512]}",
        "tables[0].entries[0].layer",
        "the model has 2 decoder layers",
    ),
    (
        "step",
        "{step: step2.kv_heads, shape: [2, 8, 512]}",
        "tables[0].entries[0].step",
        "unknown step 'step2.kv_heads'",
    ),
    ("params_total", "{unit: layers.9, count: 0}", "tables[0].entries[0].unit", "no FSDP unit named 'layers.9'"),
    (
        "params_total",
        "{role: leaf, count: 0}",
        "tables[0].entries[0].role",
        "expected one of ['layer', 'root', 'module']",
    ),
    (
        "collectives",
        "{select: {phase: forwad}, count: 0}",
        "tables[0].entries[0].select",
        "phase 'forwad' cannot occur",
    ),
    (
        "collectives",
        "{select: {op: allgather}, count: 0}",
        "tables[0].entries[0].select",
        "op 'allgather' cannot occur",
    ),
    ("collectives", "{select: {mesh_dim: dp}, count: 0}", "tables[0].entries[0].select", "mesh dim 'dp' cannot occur"),
    (
        "collectives",
        "{select: {unit: layers.2}, count: 0}",
        "tables[0].entries[0].select",
        "unit: no FSDP unit named 'layers.2'",
    ),
    (
        "collectives",
        "{select: {not: {layer: 5}}, count: 0}",
        "tables[0].entries[0].select",
        "not.layer: layer(s) [5] do not exist",
    ),
    ("collectives", "{select: {group_size: 8}, count: 0}", "tables[0].entries[0].select", "exceeds the world size 4"),
    (
        "collectives",
        "{select: {stage: forward}, count: 0}",
        "tables[0].entries[0].select",
        "'stage' is not a key of 'select'",
    ),
    (
        "memory",
        "{layer: 0, state: After Pre-Forwrd, total: 0}",
        "tables[0].entries[0].state",
        "not an FSDPMemTracker state",
    ),
    (
        "memory",
        "{module: layers.7, state: After Pre-Forward, total: 0}",
        "tables[0].entries[0].module",
        "no FSDP unit with module",
    ),
    (
        "param_state",
        "{layer: 0, point: mid_forward, count: 11}",
        "tables[0].entries[0].point",
        "expected one of ['pre_forward'",
    ),
    (
        "param",
        "{fqn: layers.0.mlp.gate.weight, numel: 1}",
        "tables[0].entries[0].fqn",
        "has no parameter 'layers.0.mlp.gate.weight'",
    ),
    (
        "param",
        "{param: mlp.gate.weight, layer: 0, numel: 1}",
        "tables[0].entries[0].param",
        "not the name of a parameter",
    ),
    ("input", "{rank: 4, shape: [2, 8, 512]}", "tables[0].entries[0].rank", "rank(s) [4] outside the world"),
    # issue 10 (units): reduce_op and expect_error
    (
        "reduce_op",
        "{layer: 0, op: all_gather, count: 1}",
        "tables[0].entries[0].op",
        "expected one of ['reduce_scatter', 'all_reduce']",
    ),
    ("reduce_op", "{layer: 0, reduce_op: MEAN}", "tables[0].entries[0]", "reduce_op: expected one of ['SUM', 'AVG'"),
    ("reduce_op", "{layer: 0, phase: forwad, count: 1}", "tables[0].entries[0].phase", "phase 'forwad' cannot occur"),
    ("expect_error", "{phase: forwad}", "tables[0].entries[0]", "phase: expected one of ['setup'"),
    ("expect_error", "{message: {matches: '(unclosed'}}", "tables[0].entries[0]", "as a regular expression"),
    ("expect_error", "{raised: maybe}", "tables[0].entries[0]", "raised: expected true or false"),
]


@pytest.mark.parametrize("check, entry, key_path, words", BAD, ids=[f"{c}-{e[:40]}" for c, e, _, _ in BAD])
def test_load_refuses_what_can_never_hold(tmp_path, check, entry, key_path, words):
    with pytest.raises(SpecError) as info:
        load_entry(tmp_path, check, entry)
    assert len(info.value.errors) == 1, str(info.value)
    line, key, message = info.value.errors[0]
    assert (line, key) == (11, key_path), str(info.value)
    assert words in message, message
    assert str(info.value).startswith(f"{tmp_path / 'spec.yaml'}:11: {key_path}: ")


GOOD = [
    ("step", "{step: step1.x_norm, layer: [0, 1], shape: [2, 8, 512], dtype: float16}"),
    (
        "collectives",
        "{select: {phase: backward, op: [all_gather, reduce_scatter], mesh_dim: dp_shard, role: layer,"
        " not: {unit: root}}, count: '>= 1', total_ring_bytes: '≈3.54 MB'}",
    ),
    ("memory", "{unit: root, state: Peak, unsharded_param: '<= 1e9'}"),
    ("param", "{fqn: layers.1.mlp.down_proj.weight, numel: '≈524K', bytes: '1.05 MB', placements: ['Shard(dim=0)']}"),
]


@pytest.mark.parametrize("check, entry", GOOD)
def test_load_accepts_what_can_hold(tmp_path, check, entry):
    assert len(load_entry(tmp_path, check, entry).items) == 1


def test_loading_every_shipped_spec_imports_no_torch():
    code = (
        "import sys, glob; from harness.load.spec import load_spec; "
        "[load_spec(p) for p in sorted(glob.glob('specs/*.yaml'))]; "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr or "torch was imported while loading specs"
