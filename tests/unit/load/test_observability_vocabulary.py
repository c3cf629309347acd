"""Loading the observability vocabulary of issue 23: param_state's points and selectors, the FSDP
label chain, pinned and finite fields, the buffer kind, numerics' non-finite counts, and
``setup.init: {device, repair}``. Each bad entry gives one line ``file:line: key.path: expected``."""

from __future__ import annotations

import pytest

from harness.load.setup import RunSetup, SetupError
from harness.load.spec import SpecError, load_spec

BASE = """\
spec: vocab
title: observability vocabulary
document: a document
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 2}}
  mesh: {shape: [2], dim_names: [dp]}
  schedule: {steps: [{microbatches: 2}, {}]}
tables:
  - section: "S"
    check: CHECK
    entries:
      - ENTRY
"""
ENTRY_LINE = 12


def load_entry(tmp_path, check: str, entry: str):
    path = tmp_path / "spec.yaml"
    path.write_text(BASE.replace("CHECK", check).replace("ENTRY", entry), encoding="utf-8")
    return load_spec(path)


# (check kind, entry, key path blamed, words of the message)
BAD = [
    (
        "param_state",
        "{layer: 0, point: after_fully_shard, count: 11}",
        "tables[0].entries[0].point",
        "after_fully_shard names the 'call' it follows",
    ),
    (
        "param_state",
        "{layer: 0, point: pre_forward, call: layers.0, count: 11}",
        "tables[0].entries[0].call",
        "'call' goes with point: after_fully_shard only, not 'pre_forward'",
    ),
    (
        "param_state",
        "{layer: 0, point: after_fully_shard, call: layers.7, count: 11}",
        "tables[0].entries[0].call",
        "no FSDP unit named 'layers.7' in this setup",
    ),
    (
        "param_state",
        "{layer: 0, point: after_fully_shard, call: 0, count: 11}",
        "tables[0].entries[0].call",
        "expected the unit whose fully_shard call it follows",
    ),
    (
        "param_state",
        "{layer: 0, point: after_fully_shard, call: root, step_index: 0, count: 11}",
        "tables[0].entries[0].step_index",
        "after_fully_shard is before the first step",
    ),
    (
        "param_state",
        "{layer: 0, point: after_zero_grad, step_index: 1, microbatch: 0, with_grad: 0}",
        "tables[0].entries[0].microbatch",
        "after_zero_grad is taken once per step, outside its microbatches",
    ),
    (
        "param_state",
        "{layer: 0, point: post_backward, step_index: 2, count: 11}",
        "tables[0].entries[0].step_index",
        "step(s) [2] do not exist: the schedule runs 2 steps",
    ),
    (
        "param_state",
        "{layer: 0, point: pre_backward, microbatch: 2, count: 11}",
        "tables[0].entries[0].microbatch",
        "microbatch(es) [2] do not exist",
    ),
    (
        "param_state",
        "{layer: 0, point: mid_backward, count: 11}",
        "tables[0].entries[0].point",
        "'after_fully_shard'], got 'mid_backward'",
    ),
    (
        "param_state",
        "{layer: 0, point: pre_forward, with_grad: -1}",
        "tables[0].entries[0]",
        "with_grad: expected a count",
    ),
    (
        "param_state",
        "{layer: 0, point: pre_forward, placements: Shard(0)}",
        "tables[0].entries[0]",
        "placements: expected a list",
    ),
    (
        "collectives",
        "{select: {op: all_gather}, fsdp_labels: 'FSDP::all_gather (layers.0)'}",
        "tables[0].entries[0]",
        "fsdp_labels: expected a list of strings",
    ),
    (
        "collectives",
        "{select: {op: all_gather}, label_chains: [[FSDP::pre_forward, FSDP::all_gather]]}",
        "tables[0].entries[0]",
        "label_chains: expected a list of strings",
    ),
    (
        "param",
        "{param: self_attn.q_proj.weight, layer: 0, pinned: pinned}",
        "tables[0].entries[0]",
        "pinned: expected true, false or null",
    ),
    (
        "param",
        "{param: self_attn.q_proj.weight, layer: 0, finite: 1}",
        "tables[0].entries[0]",
        "finite: expected true, false or null",
    ),
    ("buffer", "{shape: [32]}", "tables[0].entries[0]", "names the buffer's 'fqn'"),
    ("buffer", "{fqn: '', shape: [32]}", "tables[0].entries[0].fqn", "expected a buffer's fully qualified name"),
    (
        "buffer",
        "{fqn: rotary_emb.inv_freq, finite: nan}",
        "tables[0].entries[0]",
        "finite: expected true, false or null",
    ),
    ("numerics", "{forward_nonfinite: -1}", "tables[0].entries[0]", "forward_nonfinite: expected a count"),
    ("numerics", "{grads_nonfinite: all}", "tables[0].entries[0]", "grads_nonfinite: expected a count"),
]


@pytest.mark.parametrize("check, entry, key_path, words", BAD, ids=[f"{c}-{e[:50]}" for c, e, _, _ in BAD])
def test_a_bad_entry_is_one_line_naming_file_line_and_key(tmp_path, check, entry, key_path, words):
    with pytest.raises(SpecError) as info:
        load_entry(tmp_path, check, entry)
    assert len(info.value.errors) == 1, str(info.value)
    line, key, message = info.value.errors[0]
    assert (line, key) == (ENTRY_LINE, key_path), str(info.value)
    assert words in message, message
    assert str(info.value).startswith(f"{tmp_path / 'spec.yaml'}:{ENTRY_LINE}: {key_path}: ")


GOOD = [
    ("param_state", "{layer: 0, point: after_fully_shard, call: layers.0, dtensors: 11, placements: ['Shard(dim=0)']}"),
    ("param_state", "{unit: root, point: after_fully_shard, call: root, count: 0, device: cpu}"),
    ("param_state", "{layer: all, point: pre_backward, step_index: [0, 1], microbatch: 1, plain_tensors: 11}"),
    ("param_state", "{layer: 1, point: post_backward, with_grad: 11}"),
    ("param_state", "{layer: 0, point: after_backward, step_index: 0, microbatch: 0, with_grad: 11}"),
    ("param_state", "{layer: 0, point: after_optimizer_step, step_index: 1, with_grad: '>= 1'}"),
    ("param_state", "{layer: 0, point: after_zero_grad, step_index: 1, with_grad: 0}"),
    ("collectives", "{select: {op: all_gather, layer: 0}, fsdp_labels: ['FSDP::pre_forward (layers.0)']}"),
    ("collectives", "{select: {phase: optimizer}, label_chains: []}"),
    ("param", "{param: self_attn.q_proj.weight, layer: 0, pinned: false, grad_pinned: null, finite: true}"),
    ("buffer", "{fqn: rotary_emb.inv_freq, shape: [32], dtype: float32, device: cpu, finite: true}"),
    ("numerics", "{forward_nonfinite: 0, loss_nonfinite: 0, grads_nonfinite: 0}"),
]


@pytest.mark.parametrize("check, entry", GOOD, ids=[f"{c}-{e[:50]}" for c, e in GOOD])
def test_the_new_keys_load(tmp_path, check, entry):
    spec = load_entry(tmp_path, check, entry)
    assert len(spec.items) == 1


@pytest.mark.parametrize(
    "init, key_path, words",
    [
        (
            {"device": "full", "repair": False},
            "setup.init.repair",
            "nothing to repair; repair: false goes with device: meta",
        ),
        ({"device": "metal"}, "setup.init.device", "did you mean 'meta'? expected one of ['meta', 'full']"),
        ({"repair": False}, "setup.init", "'device' is a required property"),
        ({"device": "meta", "repair": "no"}, "setup.init.repair", "'no' is not of type 'boolean'"),
        (
            {"device": "meta", "repairs": False},
            "setup.init.repairs",
            "did you mean 'repair'? allowed keys: ['repair', 'device']",
        ),
        ("metal", "setup.init", "did you mean 'meta'? expected one of ['meta', 'full']"),
    ],
)
def test_init_mapping_errors_name_the_key(tmp_path, init, key_path, words):
    import yaml

    text = BASE.replace("CHECK", "step").replace("ENTRY", "{step: step1.x_norm, shape: [2, 8, 512]}")
    written = init if isinstance(init, str) else yaml.safe_dump(init, default_flow_style=True).strip()
    text = text.replace("  mesh:", f"  init: {written}\n  mesh:")
    path = tmp_path / "spec.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert f"spec.yaml:6: {key_path}: " in str(info.value), str(info.value)
    assert words in str(info.value), str(info.value)


def test_init_forms_load_to_a_device_and_a_repair_flag():
    assert (RunSetup.from_mapping({"init": "meta"}).init, RunSetup.from_mapping({"init": "meta"}).init_repair) == (
        "meta",
        True,
    )
    unrepaired = RunSetup.from_mapping({"init": {"device": "meta", "repair": False}})
    assert (unrepaired.init, unrepaired.init_repair) == ("meta", False)
    assert RunSetup.from_mapping({"init": {"device": "meta"}}) == RunSetup.from_mapping({"init": "meta"})
    assert unrepaired.cache_key() != RunSetup.from_mapping({"init": "meta"}).cache_key()  # a run of its own
    with pytest.raises(SetupError) as info:
        RunSetup.from_mapping({"init": {"device": "full", "repair": False}})
    assert info.value.key_path == "setup.init.repair"
