"""Tests of harness/load/spec.py on malformed specs, and of the torch-range and deviation gates of
harness/judge/evaluate.py.

A malformed spec gives one SpecError with a line ``file:line: key.path: what was expected``
per error, every error of the file at once, in file order. The command line printing those lines
(no traceback, exit 1): tests/cli/test_validate.py; under pytest one failing item, not a collection
crash: tests/cli/test_pytest_plugin.py.
"""

from __future__ import annotations

import pytest

from harness.judge.evaluate import FAILING, evaluate_spec
from harness.load.spec import SpecError, _cut, load_spec
from tests.support import SPECS
from tests.support.observations import walkthrough_observation
from tests.support.specs import SMALL as BASE
from tests.support.specs import edit, line_of
from tests.support.specs import write_spec as write


def test_a_spec_cites_its_public_sources(tmp_path):
    for source in ("https://github.com/pytorch/pytorch/issues/170648", "[https://a.example/1, https://a.example/2]"):
        text = BASE.replace("document: a document\n", f"document: a document\nsource: {source}\n")
        assert len(load_spec(write(tmp_path, text)).items) == 5


def test_the_base_spec_loads(tmp_path):
    spec = load_spec(write(tmp_path, BASE))
    assert [i.entry.id for i in spec.items] == [
        "x_norm",
        "k_heads",
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "layer_bytes",
    ]
    assert [i.entry.line for i in spec.items] == [13, 14, 21, 22, 26]
    assert spec.items[-1].entry.table == "Totals"  # no title: the section
    assert spec.setup.world_size == 4 and spec.backend == "auto" and spec.timeout_s == 300
    assert all(r.status == "pass" for r in evaluate_spec(spec, walkthrough_observation()))


# (text, marker of the line reported, key path ('' for none), what the message says was expected)
MALFORMED = [
    pytest.param(
        edit("shape: [2, 8, 4, 64]}", "shape: [2, 8, 4, 64}"),
        "{id: k_heads",
        "",
        "expected ',' or ']'",
        id="yaml-syntax",
    ),
    pytest.param(
        edit("document: a document\n", ""),
        "spec: tiny",
        "",
        "'document' is a required property",
        id="missing-top-level-key",
    ),
    pytest.param(
        edit("  mesh: {shape: [4]", "  seeed: 1\n  mesh: {shape: [4]"),
        "seeed",
        "setup.seeed",
        "('seeed' was unexpected); did you mean 'seed'? allowed keys: ['seed', 'bandwidth', 'batch_per_rank', ",
        id="unknown-setup-key",
    ),
    pytest.param(
        edit("dim_names: [dp]}", "dimnames: [dp]}"),
        "dimnames",
        "setup.mesh.dimnames",
        "allowed keys: ['dim_names', 'shape']",
        id="unknown-nested-setup-key",
    ),
    pytest.param(
        edit("{num_hidden_layers: 2}}", "{num_hidden_layers: 2}, dtype: fp16}"),
        "dtype: fp16",
        "setup.model.dtype",
        "expected one of ['float16', 'bfloat16', 'float32'], got 'fp16'",
        id="wrong-dtype",
    ),
    pytest.param(
        edit("check: param\n", "check: parm\n"),
        "check: parm",
        "tables[1].check",
        "expected one of ['param', 'params_total', 'input', 'forward_input', 'step',",
        id="wrong-check-enum",
    ),
    pytest.param(
        edit("setup:\n", "backend: mpi\nsetup:\n"),
        "backend: mpi",
        "backend",
        "expected one of ['auto', 'gloo', 'nccl', 'fake'], got 'mpi'",
        id="unknown-backend",  # refused by the schema, not passed on to the entry checks (it crashed them)
    ),
    pytest.param(
        edit("  seed: 0\n", "  seed: 0\n  numerics: false\n  fsdp: {ignored_params: [layers.0.q_proj.weight]}\n"),
        "ignored_params",
        "setup.fsdp.ignored_params",
        "'layers.0.q_proj.weight' matches no parameter",
        id="ignored-param-not-in-model",
    ),
    pytest.param(
        edit("  seed: 0\n", "  seed: 0\n  fsdp: {ignored_params: [layers.0.self_attn.q_proj.weight]}\n"),
        "ignored_params",
        "setup.fsdp.ignored_params",
        "an ignored parameter's gradient is each rank's own (never reduced), not the replica's global-batch mean: "
        "set setup.numerics: false",
        id="ignored-param-with-numerics",
    ),
    pytest.param(
        edit(
            "{num_hidden_layers: 2}}",
            "{num_hidden_layers: 2}, param_dtypes: {layers.*.norm.weight: float32}}\n  numerics: false",
        ),
        "param_dtypes",
        "setup.model.param_dtypes.layers.*.norm.weight",
        "'layers.*.norm.weight' matches no parameter",
        id="param-dtype-pattern-not-in-model",
    ),
    pytest.param(
        edit("{num_hidden_layers: 2}}", "{num_hidden_layers: 2}, param_dtypes: {layers.*.q_norm.weight: fp32}}"),
        "param_dtypes",
        "setup.model.param_dtypes.layers.*.q_norm.weight",
        "expected one of ['float16', 'bfloat16', 'float32'], got 'fp32'",
        id="param-dtype-unknown",
    ),
    pytest.param(
        edit(
            "{num_hidden_layers: 2}}",
            "{num_hidden_layers: 2}, param_dtypes: {layers.*.self_attn.q_norm.weight: float32}}",
        ),
        "param_dtypes",
        "setup.model.param_dtypes",
        "the numerics replica computes and reduces in one dtype, not per parameter: set setup.numerics: false",
        id="param-dtypes-with-numerics",
    ),
    pytest.param(
        edit("[self_attn.k_proj.weight, [64, 512], 32768]", "[self_attn.k_proj.weight, [64, 512]]"),
        "[self_attn.k_proj.weight",
        "tables[1].rows[1]",
        "expected 3 values for columns ['param', 'local_shape', 'local_numel'], got 2",
        id="row-columns",
    ),
    pytest.param(
        edit("step: step1.x_norm, shape:", "step: step1.x_norm, shap:"),
        "{id: x_norm",
        "tables[0].entries[0].shap",
        "'shap' is not a selector or field of check kind 'step'; did you mean 'shape'? selectors: "
        "['layer', 'microbatch', 'ranks', 'step', 'step_index']; fields: ['dim0', 'dtype', 'layers', 'shape']",
        id="unknown-field",
    ),
    pytest.param(
        edit("step: step2.k_heads", "step: step2.kv_heads"),
        "{id: k_heads",
        "tables[0].entries[1].step",
        "unknown step 'step2.kv_heads'; did you mean 'step2.v_heads' or 'step2.k_heads'",
        id="unknown-step",
    ),
    pytest.param(
        edit("{id: x_norm,", '{id: x_norm, torch: "2.6",'),
        "{id: x_norm",
        "tables[0].entries[0].torch",
        "expected a PEP 440 range like '>=2.6,<2.15', got '2.6'",
        id="bad-entry-torch-range",
    ),
    pytest.param(
        edit("    title: shapes\n", '    title: shapes\n    torch: ">=2.x"\n'),
        ">=2.x",
        "tables[0].torch",
        "expected a PEP 440 range like '>=2.6,<2.15', got '>=2.x'",
        id="bad-table-torch-range",
    ),
    pytest.param(
        edit("document: a document\n", 'document: a document\ntorch: "2.6+"\n'),
        "2.6+",
        "torch",
        "expected a PEP 440 range",
        id="bad-spec-torch-range",
    ),
    pytest.param(
        edit("{id: k_heads", "{id: x_norm"),
        "step2.k_heads",
        "tables[0].entries[1]",
        "duplicate entry id 'x_norm' in table 'shapes' (first at line 13); give one an 'id'",
        id="duplicate-id",
    ),
    pytest.param(
        edit("[self_attn.k_proj.weight,", "[self_attn.q_proj.weight,"),
        "[64, 512]",
        "tables[1].rows[1]",
        "duplicate entry id 'self_attn.q_proj.weight' in table 'shard per rank' (first at line 21)",
        id="duplicate-default-id",
    ),
    pytest.param(
        edit('"4.72 MB"', '"4.7.2 MB"'),
        "id: layer_bytes",
        "tables[2].entries[0]",
        "cannot read '4.7.2 MB' as a figure: expected e.g. '4.72 MB'",
        id="unreadable-figure",
    ),
    pytest.param(
        edit('"4.72 MB"', '"≈ MB"'),
        "id: layer_bytes",
        "tables[2].entries[0]",
        "cannot read '≈ MB' as a figure",
        id="unreadable-approx-figure",
    ),
    pytest.param(
        edit("    check: params_total\n", "    check: params_total\n    columns: [layer, bytes]\n"),
        '- section: "Totals"',
        "tables[2]",
        "a table holds either 'columns' with 'rows', or 'entries'",
        id="columns-and-entries",
    ),
    pytest.param(
        edit("{id: x_norm, step: step1.x_norm,", "{id: x_norm, step: step1.x_norm, step: step2.q,"),
        "{id: x_norm",
        "tables[0].entries[0].step",
        "duplicate key 'step' (first at line 13)",
        id="duplicate-yaml-key",
    ),
    pytest.param(
        edit('        bytes: "4.72 MB"\n', '        bytes: "4.72 MB"\n        bytes: "4.73 MB"\n'),
        "4.73 MB",
        "tables[2].entries[0].bytes",
        "duplicate key 'bytes' (first at line 28)",
        id="duplicate-yaml-key-drops-a-check",
    ),
    pytest.param(
        edit("{id: k_heads,", '{id: "k heads",'), "k heads", "tables[0].entries[1].id", "does not match", id="bad-id"
    ),
    pytest.param(
        edit("{id: k_heads,", "{deviation: {link: x}, id: k_heads,"),
        "deviation",
        "tables[0].entries[1].deviation",
        "'reason' is a required property",
        id="deviation-without-reason",
    ),
    pytest.param(
        edit("{id: k_heads,", "{deviation: {reason: x, why: x}, id: k_heads,"),
        "deviation",
        "tables[0].entries[1].deviation.why",
        "('why' was unexpected); allowed keys: ['link', 'reason']",
        id="deviation-unknown-key",
    ),
    pytest.param(
        edit("mesh: {shape: [4], dim_names: [dp]}", "mesh: {shape: [2, 2], dim_names: [dp]}"),
        "mesh: {shape",
        "setup.mesh.dim_names",
        "expected 2 names for shape [2, 2], got ['dp']",
        id="mesh-names",
    ),
    pytest.param(
        edit("mesh: {shape: [4], dim_names: [dp]}", "mesh: {shape: [4], dim_names: [a, b]}"),
        "mesh: {shape",
        "setup.mesh.dim_names",
        "expected 1 name for shape [4], got ['a', 'b']",
        id="mesh-names-singular",
    ),
    pytest.param(
        edit("config: walkthrough,", "config: Qwen3-1.8B,"),
        "Qwen3-1.8B",
        "setup.model.config",
        "unknown config name 'Qwen3-1.8B'; known names: walkthrough, Qwen3-0.6B",
        id="unknown-config-name",
    ),
    pytest.param(
        edit("  model: {config: walkthrough, overrides: {num_hidden_layers: 2}}", "  model: Qwen3-1.7B"),
        "model: Qwen3-1.7B",
        "setup.model",
        "expected a mapping with keys config, overrides, body, dtype, param_dtypes, attention_kernel, got 'Qwen3-1.7B'",
        id="model-not-a-mapping",
    ),
    pytest.param(
        edit("    check: step\n", "    check: step\n    with: wrong\n"),
        "with: wrong",
        "tables[0].with",
        "expected a mapping, got 'wrong'",
        id="with-not-a-mapping",
    ),
    pytest.param(
        edit("[param, local_shape, local_numel]", "[param, local_shap, local_numel]"),
        "columns:",
        "tables[1].columns[1]",
        "'local_shap' is not a selector or field of check kind 'param'",
        id="unknown-column",
    ),
    pytest.param(
        edit("with: {layer: 0}", "with: {layr: 0}"),
        "with: {layr",
        "tables[1].with.layr",
        "'layr' is not a selector or field of check kind 'param'",
        id="unknown-with-key",
    ),
    pytest.param(
        edit("[self_attn.k_proj.weight,", "[self_attn.k_prj.weight,"),
        "k_prj",
        "tables[1].rows[1][0]",
        "'self_attn.k_prj.weight' is not the name of a parameter inside a decoder layer; "
        "did you mean 'self_attn.k_proj.weight'",
        id="unknown-param-name",
    ),
    pytest.param(
        edit("{id: k_heads,", "{id: k_heads, ranks: [0, 4],"),
        "{id: k_heads",
        "tables[0].entries[1].ranks",
        "rank(s) [4] outside the world; expected a rank 0-3 (world size 4), a list of them, or 'all'",
        id="rank-outside-world",
    ),
    pytest.param(
        edit("        layer: 0\n", "        layer: 0\n        ranks: -1\n"),
        "ranks: -1",
        "tables[2].entries[0].ranks",
        "rank(s) [-1] outside the world; expected a rank 0-3",
        id="negative-rank",
    ),
    pytest.param(
        edit("{id: k_heads,", "{id: k_heads, ranks: first,"),
        "{id: k_heads",
        "tables[0].entries[1].ranks",
        "expected a rank 0-3 (world size 4), a list of them, or 'all', got 'first'",
        id="rank-not-a-number",
    ),
    pytest.param(
        edit("  mesh: {shape: [4]", "  observe_ranks: [0, 3, 4]\n  mesh: {shape: [4]"),
        "observe_ranks",
        "setup.observe_ranks",
        "rank(s) [4] outside the world: world size 4 (mesh shape [4]), ranks 0-3",
        id="observe-rank-outside-world",
    ),
    pytest.param(
        edit(
            "  mesh: {shape: [4]",
            "  numerics_reference: rank_0\n  schedule: {steps: [{repeat: 2}]}\n  mesh: {shape: [4]",
        ),
        "numerics_reference",
        "setup.numerics_reference",
        "rank_0 computes the reference of the default step only; with setup.schedule expected each_rank",
        id="one-replica-with-a-schedule",
    ),
    pytest.param(
        edit("  mesh: {shape: [4]", "  numerics_reference: rank0\n  mesh: {shape: [4]"),
        "numerics_reference",
        "setup.numerics_reference",
        "did you mean 'rank_0'? expected one of ['rank_0', 'each_rank'], got 'rank0'",
        id="one-replica-misspelt",
    ),
    pytest.param(
        edit("document: a document\n", "document: a document\nsource: 170648\n"),
        "source:",
        "source",
        "170648 is not of type 'string'",
        id="source-not-an-address",
    ),
    pytest.param(
        edit("  mesh: {shape: [4]", '  grad_dtype: {"layers.*.mlp.*.weight": float64}\n  mesh: {shape: [4]'),
        "grad_dtype",
        "setup.grad_dtype.layers.*.mlp.*.weight",
        "expected one of ['float16', 'bfloat16', 'float32'], got 'float64'",
        id="grad-dtype-not-a-dtype",
    ),
    pytest.param(
        edit("  mesh: {shape: [4]", '  grad_dtype: {"layers.*.mlp.*.bias": float32}\n  mesh: {shape: [4]'),
        "grad_dtype",
        "setup.grad_dtype.layers.*.mlp.*.bias",
        "'layers.*.mlp.*.bias' matches no parameter; parameters look like",
        id="grad-dtype-pattern-names-nothing",
    ),
    pytest.param(
        edit("  mesh: {shape: [4]", "  grad_dtype: {}\n  mesh: {shape: [4]"),
        "grad_dtype",
        "setup.grad_dtype",
        "should be non-empty",
        id="grad-dtype-empty",
    ),
    pytest.param(
        edit("- {id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}", "- x_norm"),
        "- x_norm",
        "tables[0].entries[0]",
        "expected a mapping of the table's check kind's selectors and fields (and optionally id, says, torch, "
        "deviation, drafted), got 'x_norm'",
        id="entry-not-a-mapping",
    ),
]


@pytest.mark.parametrize("text, marker, key_path, expected", MALFORMED)
def test_malformed_spec_gives_one_spec_error(tmp_path, text, marker, key_path, expected):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    err = info.value
    line = line_of(text, marker)
    where = f"{path}:{line}: " + (f"{key_path}: " if key_path else "")  # no key path: a syntax error, the top
    assert str(err).startswith(where), str(err)
    assert expected in str(err), str(err)
    assert (err.path, err.line, err.key_path) == (str(path), line, key_path)
    assert "\n" not in str(err)


def test_every_error_at_once_in_file_order(tmp_path):
    """Schema errors (at any depth) and entry-level errors together, one line each, sorted by line."""
    text = (
        BASE.replace("  mesh: {shape: [4]", "  seeed: 1\n  batch_per_rnk: 2\n  mesh: {shape: [4]")
        .replace("    check: step\n", "    check: stepp\n")
        .replace("[param, local_shape, local_numel]", "[param, local_shap, local_numel]")
        .replace('"4.72 MB"', '"4.7.2 MB"')
    )
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    err = info.value
    expected = [
        (line_of(text, "seeed"), "setup.seeed", "Additional properties are not allowed ('seeed' was unexpected)"),
        (
            line_of(text, "batch_per_rnk"),
            "setup.batch_per_rnk",
            "('batch_per_rnk' was unexpected); did you mean 'batch_per_rank'? allowed keys:",
        ),
        (line_of(text, "check: stepp"), "tables[0].check", "did you mean 'step'? expected one of ['step',"),
        (
            line_of(text, "columns:"),
            "tables[1].columns[1]",
            "'local_shap' is not a selector or field of check kind 'param'",
        ),
        (line_of(text, "id: layer_bytes"), "tables[2].entries[0]", "cannot read '4.7.2 MB' as a figure"),
    ]
    assert [(line, key) for line, key, _ in err.errors] == [(line, key) for line, key, _ in expected]
    assert all(want in message for (_, _, message), (_, _, want) in zip(err.errors, expected)), err.errors
    assert (err.line, err.key_path, err.message) == err.errors[0]
    shown = str(err).splitlines()
    assert len(shown) == len(expected)
    for text_line, (line, key, message) in zip(shown, err.errors):
        assert text_line == _cut(f"{path}:{line}: {key}: {message}")  # long lines cut to MAX_LINE


def test_a_mapping_with_a_missing_and_an_unexpected_key_reports_both(tmp_path):
    text = edit("{id: k_heads,", "{deviation: {why: x}, id: k_heads,")
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    assert sorted((key, message.split(";")[0]) for _, key, message in info.value.errors) == [
        ("tables[0].entries[1].deviation", "'reason' is a required property"),
        ("tables[0].entries[1].deviation.why", "Additional properties are not allowed ('why' was unexpected)"),
    ]


def test_a_schema_error_skips_only_its_entry(tmp_path):
    """A rejected entry is not checked further; its table's other entries and other tables are."""
    text = edit("{id: k_heads,", '{id: "k heads",').replace("step: step1.x_norm", "step: step1.x_nrm")
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    assert [(line, key) for line, key, _ in info.value.errors] == [
        (line_of(text, "step1.x_nrm"), "tables[0].entries[0].step"),
        (line_of(text, "k heads"), "tables[0].entries[1].id"),
    ]


def test_overrides_are_blamed_only_when_they_fail(tmp_path):
    text = edit(
        "config: walkthrough, overrides: {num_hidden_layers: 2}",
        "config: Qwen3-1.8B, overrides: {num_hidden_layers: 2, num_key_value_heads: 3}",
    )
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    assert [key for _, key, _ in info.value.errors] == [
        "setup.model.config"
    ]  # the overrides are not judged on no config


def test_run_setup_raises_setup_error_with_every_problem():
    from harness.load.setup import RunSetup, SetupError

    with pytest.raises(SetupError) as info:
        RunSetup.from_mapping({"mesh": {"shape": [2, 2], "dim_names": ["dp"]}, "observe_ranks": [0, 3, 4, 7]})
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.key_path, err.message) == ("setup.mesh.dim_names", "expected 2 names for shape [2, 2], got ['dp']")
    assert err.errors[1] == (
        "setup.observe_ranks",
        "rank(s) [4, 7] outside the world: world size 4 (mesh shape [2, 2]), ranks 0-3",
    )
    assert RunSetup.from_mapping({"mesh": {"shape": [8]}, "observe_ranks": [0, 7]}).observe_ranks == (0, 7)


MEMORY = (
    BASE
    + """\
  - section: "Memory"
    check: memory
    entries:
      - {id: m, SELECTOR, state: STATE, unsharded_param: 0}
"""
)


@pytest.mark.parametrize(
    "selector, state",
    [
        ("layer: 0", "After Pre-Forward"),
        ("layer: 1", "Peak Backward"),
        ("module: layers.0", "Before Post-Backward"),
        ("unit: root", "After Optimizer Step"),
        ("unit: root", "Peak"),
        ('module: ""', "Peak"),
        ("unit: root", "After Post-Backward"),
    ],
)
def test_memory_states_that_load(tmp_path, selector, state):
    load_spec(write(tmp_path, MEMORY.replace("SELECTOR", selector).replace("STATE", f'"{state}"')))


@pytest.mark.parametrize(
    "selector, state, says",
    [
        (
            "layer: 0",
            "After Pre-Forwrd",
            "'After Pre-Forwrd' is not an FSDPMemTracker state of a decoder layer's unit; "
            "did you mean 'After Pre-Forward'",
        ),
        (
            "layer: 0",
            "Pre-Forward",
            "not an FSDPMemTracker state",
        ),  # mem_tracker._ModState's name, not FSDPMemTracker's
        ("layer: 0", "After Optimizer Step", "is a whole-rank snapshot recorded under the root unit: unit: root"),
        ("module: layers.0", "Peak", "not an FSDPMemTracker state of module 'layers.0'"),
        (
            "unit: root",
            "Peak Optimizer",
            "did you mean 'After Optimizer Step'? states: ['After Optimizer Step',",
        ),
    ],
)
def test_unknown_memory_state_fails_at_load(tmp_path, selector, state, says):
    text = MEMORY.replace("SELECTOR", selector).replace("STATE", f'"{state}"')
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    assert (info.value.line, info.value.key_path) == (line_of(text, "{id: m,"), "tables[3].entries[0].state")
    assert says in info.value.message and "\n" not in str(info.value)


def test_memory_state_of_a_with_is_reported_once(tmp_path):
    text = (
        BASE
        + """\
  - section: "Memory"
    check: memory
    with: {layer: 0, state: "After Forward"}
    entries:
      - {id: a, unsharded_param: 0}
      - {id: b, sharded_param: 0}
"""
    )
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    assert [(line, key) for line, key, _ in info.value.errors] == [
        (line_of(text, "After Forward"), "tables[3].with.state")
    ]


def test_ranks_inside_the_world_load(tmp_path):
    text = (
        BASE
        + """\
  - section: "Inputs"
    check: input
    columns: [rank, shape]
    rows:
      - [0, [2, 8, 512]]
      - [3, [2, 8, 512]]
  - section: "More"
    check: step
    entries:
      - {id: all_ranks, ranks: all, step: step1.x_norm, shape: [2, 8, 512]}
      - {id: two_ranks, ranks: [0, 3], step: step1.x_norm, shape: [2, 8, 512]}
      - {id: one_rank, ranks: 2, step: step1.x_norm, shape: [2, 8, 512]}
"""
    )
    assert len(load_spec(write(tmp_path, text)).items) == 10


def test_input_rank_outside_the_world(tmp_path):
    text = (
        BASE
        + """\
  - section: "Inputs"
    check: input
    columns: [rank, shape]
    rows:
      - [0, [2, 8, 512]]
      - [4, [2, 8, 512]]
"""
    )
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    assert (info.value.line, info.value.key_path) == (line_of(text, "[4, [2"), "tables[3].rows[1][0]")
    assert (
        info.value.message
        == "rank(s) [4] outside the world; expected a rank 0-3 (world size 4), a list of them, or 'all'"
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "expected a mapping with keys spec, title, document, setup, tables"),
        ("- a\n- b\n", "expected a mapping"),
        ("spec: a\n---\nspec: b\n", "not valid YAML"),
    ],
)
def test_not_a_spec_at_all(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(SpecError, match=message) as info:
        load_spec(path)
    assert str(info.value).startswith(str(path))


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="cannot read file") as info:
        load_spec(tmp_path / "nope.yaml")
    assert str(info.value).startswith(f"{tmp_path / 'nope.yaml'}: cannot read file: ")


# --- the command line --------------------------------------------------------------------


# --- under pytest: one failing item, not a collection crash ------------------------------


# --- gates: torch range, deviation -------------------------------------------------------

GATES = """\
spec: gates
title: torch ranges and deviations
document: a document
setup: {model: {config: walkthrough, overrides: {num_hidden_layers: 8}}}  # 8: layer 7 loads; the observation has 2
tables:
  - section: "Forward"
    title: gated
    check: step
    entries:
      - {id: ancient, torch: "<1.0", step: step1.x_norm, shape: [2, 8, 512]}
      - {id: current, torch: ">=2.6", step: step1.x_norm, shape: [2, 8, 512]}
      - {id: deviation_seen, deviation: {reason: "the kernel pads heads", link: "https://example.org/1"},
         step: step2.q_heads, shape: [2, 8, 16, 64]}
      - {id: deviation_gone, deviation: {reason: "fixed upstream"}, step: step2.q_heads, shape: [2, 8, 8, 64]}
      - {id: deviation_error, deviation: {reason: "x"}, step: step1.x_norm, layer: 7, shape: [2, 8, 512]}
  - section: "Table range"
    title: table gated
    check: step
    torch: ">=2.6"
    entries:
      - {id: narrowed, torch: "<2.10", step: step1.x_norm, shape: [2, 8, 512]}
"""


@pytest.fixture
def gated(tmp_path):
    spec = load_spec(write(tmp_path, GATES))
    return {r.entry.id: r for r in evaluate_spec(spec, walkthrough_observation())}, spec


def test_torch_range_outside_is_skip_with_the_range(gated):
    results, _ = gated
    assert results["ancient"].status == "skip" and results["ancient"].ok
    assert results["ancient"].message == "requires torch <1.0; running 2.13.0+cpu"
    assert results["current"].status == "pass"
    # table and entry ranges both apply
    assert results["narrowed"].status == "skip"
    assert results["narrowed"].message == "requires torch >=2.6,<2.10; running 2.13.0+cpu"


ROW_GATES = (
    GATES.split("tables:")[0]
    + """tables:
  - section: "Forward"
    title: per-row ranges
    check: step
    columns: [id, step, shape, torch]
    rows:
      - [before, step1.x_norm, [2, 8, 512], "<2.13"]
      - [any, step1.x_norm, [2, 8, 512], ""]
      - [since, step1.x_norm, [2, 8, 512], ">=2.13"]
      - [since_wrong, step1.x_norm, [2, 8, 64], ">=2.13"]
"""
)


def test_a_torch_column_gates_each_row(tmp_path):
    """One table, a row per release ('' = any; specs/unfreeze_after_frozen_first_forward.yaml)."""
    spec = load_spec(write(tmp_path, ROW_GATES))
    results = {r.entry.id: r for r in evaluate_spec(spec, walkthrough_observation())}
    assert results["before"].status == "skip"
    assert results["before"].message == "requires torch <2.13; running 2.13.0+cpu"
    assert results["any"].status == "pass" and results["since"].status == "pass"
    assert results["since_wrong"].status == "fail"  # a row in range is checked


def test_a_bad_range_in_a_torch_column_names_its_cell(tmp_path):
    bad = ROW_GATES.replace('">=2.13"]\n      - [since_wrong', '"2.13+"]\n      - [since_wrong')
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, bad))
    assert "tables[0].rows[2][3]" in str(info.value)
    assert "expected a PEP 440 range like '>=2.6,<2.15', got '2.13+'" in str(info.value)


def test_deviation_still_observed_is_xfail(gated):
    r = gated[0]["deviation_seen"]
    assert r.status == "xfail" and r.ok and r.status not in FAILING
    assert r.message == "known deviation: the kernel pads heads (https://example.org/1)"
    assert r.fields and not r.fields[0].ok  # the observed values stay in the report


def test_deviation_no_longer_observed_is_xpass_and_fails(gated):
    r = gated[0]["deviation_gone"]
    assert r.status == "xpass" and not r.ok and r.status in FAILING
    assert r.message == "declared deviation no longer observed, update the spec: fixed upstream"
    assert "xpass: declared deviation no longer observed" in r.explain()


def test_deviation_does_not_hide_an_error(gated):
    r = gated[0]["deviation_error"]
    assert r.status == "error" and "(layer 7) not observed" in r.message


@pytest.mark.parametrize(
    "version, skipped",
    [
        ("2.13.0", False),
        ("2.13.0+cu128", False),
        ("2.14.0.dev20260101+cpu", False),
        ("2.14.0a0+git1234", False),
        ("2.5.1", True),
        ("1.13.1", True),
    ],
)
def test_torch_range_on_releases_and_nightlies(gated, version, skipped):
    """A nightly of a newer torch is inside '>=2.6' (pre-releases count)."""
    _, spec = gated
    (item,) = [i for i in spec.items if i.entry.id == "current"]
    assert item.torch_range == ">=2.6"
    assert (item.skip_reason(version) is not None) == skipped


def test_numerics_skip_on_a_simulated_run(tmp_path):
    text = (
        GATES.split("tables:")[0]
        + """tables:
  - section: "Backward"
    check: numerics
    entries:
      - {id: grads, grads_count: 22}
"""
    )
    obs = walkthrough_observation()
    obs["environment"]["simulated"] = True
    (r,) = evaluate_spec(load_spec(write(tmp_path, text)), obs)
    assert r.status == "skip" and "simulated" in r.message


def test_unsimulated_ranks_skip_and_observed_ones_are_checked(tmp_path):
    text = (
        GATES.split("tables:")[0]
        + """tables:
  - section: "Inputs"
    check: input
    columns: [rank, shape]
    rows:
      - [0, [2, 8, 512]]
      - [2, [2, 8, 512]]
"""
    )
    obs = walkthrough_observation()
    obs["environment"].update(simulated=True, observed_ranks=[0])
    obs["ranks"] = obs["ranks"][:1]
    r0, r2 = evaluate_spec(load_spec(write(tmp_path, text)), obs)
    assert r0.status == "pass"
    assert r2.status == "skip" and "[2] not simulated" in r2.message


def test_impossible_model_config_fails_at_load_naming_the_field(tmp_path):
    text = edit("overrides: {num_hidden_layers: 2}", "overrides: {num_hidden_layers: 2, num_key_value_heads: 3}")
    with pytest.raises(SpecError) as exc:
        load_spec(write(tmp_path, text))
    assert exc.value.line == line_of(text, "num_key_value_heads: 3")
    assert exc.value.key_path == "setup.model.overrides"
    assert "num_key_value_heads" in exc.value.message


def test_same_title_tables_cannot_repeat_an_id(tmp_path):
    text = (
        BASE
        + """\
  - section: "Forward again"
    title: shapes
    check: step
    entries:
      - {id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}
"""
    )
    with pytest.raises(SpecError, match="duplicate entry id 'x_norm' in table 'shapes'"):
        load_spec(write(tmp_path, text))


@pytest.mark.parametrize(
    "old, new, needs",
    [
        ("    with: {layer: 0}\n", "", "'layer'"),
    ],
)
def test_param_entry_must_name_its_layer(tmp_path, old, new, needs):
    with pytest.raises(SpecError, match=needs):
        load_spec(write(tmp_path, edit(old, new)))


@pytest.mark.parametrize(
    "build, running, skipped",
    [("cpu", "cpu", False), ("cpu", "cuda", True), ("cuda", "cpu", True), ("cpu", None, False), ("", "cuda", False)],
)
def test_torch_build_gates_every_item(tmp_path, build, running, skipped):
    """A spec's torch_build (cpu: torch.version.cuda is None) skips its items on the other build,
    and not on an observation that predates the field (running None)."""
    text = BASE if not build else BASE.replace("tables:", f"torch_build: {build}\ntables:")
    spec = load_spec(write(tmp_path, text))
    reason = spec.items[0].skip_reason("2.13.0", running)
    assert (reason is not None) == skipped
    if skipped:
        assert reason == f"describes a {build} build of torch; running 2.13.0, a {running} build"


def test_an_unknown_torch_build_is_refused_at_its_line(tmp_path):
    path = write(tmp_path, BASE.replace("tables:", "torch_build: rocm\ntables:"))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "torch_build" in str(info.value) and "cpu" in str(info.value)


def test_the_observed_build_is_read_from_torch_cuda_version(tmp_path):
    from harness.judge.evaluate import evaluate_item

    (item, *_) = load_spec(write(tmp_path, BASE.replace("tables:", "torch_build: cpu\ntables:"))).items
    on_cuda = {"environment": {"torch_version": "2.14.1+cu130", "torch_cuda_version": "13.0"}}
    result = evaluate_item(item, on_cuda)
    assert result.status == "skip" and "a cuda build" in result.message


@pytest.mark.parametrize(
    "header, running, reason",
    [
        (
            "torch_build: cuda\n",
            ("2.13.0+cpu", "cpu"),
            "describes a cuda build of torch; running 2.13.0+cpu, a cpu build",
        ),
        (
            "torch_build: cpu\n",
            ("2.14.1+cu130", "cuda"),
            "describes a cpu build of torch; running 2.14.1+cu130, a cuda build",
        ),
        ('torch: "<2.0"\n', ("2.13.0+cpu", "cpu"), "requires torch <2.0; running 2.13.0+cpu"),
        ("torch_build: cpu\n", ("2.13.0+cpu", "cpu"), None),
        ('torch: ">=2.6"\n', ("2.13.0+cpu", "cpu"), None),
        ("", ("2.14.1+cu130", "cuda"), None),
    ],
)
def test_a_spec_gated_out_whole_says_why_before_any_run(tmp_path, header, running, reason):
    """Spec.skip_reason (what run and the plugin ask before anything runs): the spec's build or
    range excludes the running torch for every entry."""
    spec = load_spec(write(tmp_path, BASE.replace("tables:", header + "tables:")))
    assert spec.skip_reason(*running) == reason


def test_a_spec_with_one_entry_in_range_is_not_skipped_whole(tmp_path):
    spec = load_spec(write(tmp_path, GATES))
    assert spec.skip_reason("2.13.0+cpu", "cpu") is None  # 'current' applies; 'ancient' skips alone
    both = BASE.replace("tables:", 'torch: "<1.0"\ntorch_build: cpu\ntables:')
    spec = load_spec(write(tmp_path, both))
    assert spec.skip_reason("2.13.0+cpu", "cpu") == "requires torch <1.0; running 2.13.0+cpu"
    assert spec.skip_reason("2.14.1+cu130", "cuda").startswith("describes a cpu build of torch")


def test_a_folder_is_refused_naming_it(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path)
    assert str(info.value) == f"{tmp_path}: a folder with no spec file (.yaml or .yml) below it"


def test_an_empty_file_says_so_at_line_1(tmp_path):
    path = write(tmp_path, "")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == (
        f"{path}:1: expected a mapping with keys spec, title, document, setup, tables, got an empty file"
    )


def test_a_replica_comparison_with_a_units_own_mp_policy_is_refused(tmp_path):
    """The replica computes in one dtype (the setup's policy): a numerics entry on a spec whose
    unit has its own mp_policy would compare that unit's parameters in the wrong dtype (issue 44)."""
    text = (SPECS / "per_unit_mixed_precision.yaml").read_text(encoding="utf-8")
    text = text.replace("  numerics: false\n", "") + (
        "  - section: Numerics\n    check: numerics\n    entries:\n      - {id: loss, forward_max_abs_diff: 0.0}\n"
    )
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.key_path == "setup.fsdp.units[1].mp_policy"
    assert info.value.line == line_of(text, "{id: loss,")
    assert "numerics entry 'loss': compares with a replica that computes in one dtype" in info.value.message


def test_a_mesh_of_the_wrong_type_is_one_error(tmp_path):
    """`mesh: {shape: 6}` once also printed "rank(s) [4] outside the world ... (world size 4)" for
    right entries: the default mesh stood in for the refused one."""
    text = BASE.replace("  mesh: {shape: [4], dim_names: [dp]}\n", "") + (
        "  - section: More\n"
        "    check: step\n"
        "    entries:\n"
        "      - {id: rank4, ranks: [4, 5], step: step1.x_norm, shape: [2, 8, 512]}\n"
    )
    text = text.replace("setup:\n", "setup:\n  mesh: {shape: 6}\n  observe_ranks: [0, 5]\n", 1)
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    assert [key for _, key, _ in info.value.errors] == ["setup.mesh.shape"], str(info.value)


def test_an_unknown_selector_hint_names_the_one_meant_first(tmp_path):
    text = BASE.replace("{id: k_heads, ", "{id: k_heads, rank: 2, ")
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    assert "'rank' is not a selector or field of check kind 'step'; did you mean 'ranks'?" in str(info.value)


@pytest.mark.parametrize(
    "old, new, key_path, says",
    [
        (
            "  seed: 0\n",
            "  seed: 0\n  fsdp: {reshard_after_foward: false}\n",
            "setup.fsdp.reshard_after_foward",
            "did you mean 'reshard_after_forward'",
        ),
        (
            '  - section: "Totals"\n    check: params_total',
            '  - section: "Totals"\n    check: param_total',
            "tables[2].check",
            "did you mean 'params_total'",
        ),
    ],
)
def test_a_hint_cut_to_one_line_keeps_the_value_meant(tmp_path, old, new, key_path, says):
    """A long list of valid keys was cut ('... (116 more characters)') before the one meant."""
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, edit(old, new)))
    (line,) = [ln for ln in str(info.value).splitlines() if f": {key_path}: " in ln]
    assert says in line, line
