"""Reading a transformers ``config.json`` as a model config (model/config.py ``read_config_file``).

The files are written by transformers' own ``Qwen3Config(...).to_json_file`` (this release's
format: ``rope_parameters``, ``dtype``, ``layer_types``) or copied from the format the released
Qwen3 checkpoints ship (transformers 4.51: top-level ``rope_theta``, ``rope_scaling: null``,
``torch_dtype``). Nothing is downloaded.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from model.config import (
    HUB_IDS,
    IGNORED_FIELDS,
    KNOWN_CONFIGS,
    KNOWN_MOE_CONFIGS,
    MOE_HUB_IDS,
    from_transformers,
    get_config,
    read_config_file,
)
from tests.support import REPO
from tests.support.configs import QWEN3_0_6B_PUBLISHED

# the released dense configs (the MoE ones, also KNOWN_CONFIGS names, are read in tests/unit/model/test_model_moe.py)
RELEASED = [name for name in KNOWN_CONFIGS if name.startswith("Qwen3-") and name not in KNOWN_MOE_CONFIGS]


@pytest.fixture(scope="module")
def hf():
    return pytest.importorskip("transformers")


def write_json(path: Path, fields: dict) -> Path:
    path.write_text(json.dumps(fields, indent=2))
    return path


@pytest.mark.parametrize("name", RELEASED)
def test_config_json_written_by_transformers_loads_equal_to_known_config(hf, tmp_path, name):
    known = KNOWN_CONFIGS[name]
    path = tmp_path / "config.json"
    hf.Qwen3Config(**known.to_transformers_kwargs(), dtype="bfloat16").to_json_file(str(path))
    written = json.loads(path.read_text())
    assert "rope_parameters" in written and "layer_types" in written  # this release's format
    read = read_config_file(path)
    assert read.config == known
    assert read.dtype == "bfloat16"
    assert read.path == str(path)
    assert set(read.ignored) <= set(IGNORED_FIELDS)


def test_config_json_in_the_published_4x_format(tmp_path):
    read = read_config_file(write_json(tmp_path / "config.json", QWEN3_0_6B_PUBLISHED))
    assert read.config == KNOWN_CONFIGS["Qwen3-0.6B"]
    assert isinstance(read.config.rope_theta, float)  # the file's int 1000000
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


def test_the_issues_small_config_written_by_transformers(hf, tmp_path):
    # the config a new user tried: hidden 256, 4 heads, 2 KV heads, head_dim 64, 4 layers, vocab 1000, tied
    path = tmp_path / "config.json"
    hf.Qwen3Config(
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=768,
        num_hidden_layers=4,
        vocab_size=1000,
        tie_word_embeddings=True,
    ).to_json_file(str(path))
    read = read_config_file(path)
    c = read.config
    assert (
        c.hidden_size,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.intermediate_size,
        c.num_hidden_layers,
        c.vocab_size,
        c.tie_word_embeddings,
    ) == (256, 4, 2, 64, 768, 4, 1000, True)
    # what the file leaves to transformers' defaults is transformers' value, not the released models'
    assert (c.rope_theta, c.max_position_embeddings) == (10_000.0, 32768)
    assert read.dtype is None


def test_a_full_dump_with_every_generic_field_loads(hf, tmp_path):
    known = KNOWN_CONFIGS["Qwen3-8B"]
    text = hf.Qwen3Config(**known.to_transformers_kwargs(), dtype="float16").to_json_string(use_diff=False)
    read = read_config_file(write_json(tmp_path / "config.json", json.loads(text)))
    assert read.config == known and read.dtype == "float16"


def test_a_checkpoint_folder_reads_its_config_json(tmp_path):
    write_json(tmp_path / "config.json", QWEN3_0_6B_PUBLISHED)
    assert read_config_file(tmp_path).config == KNOWN_CONFIGS["Qwen3-0.6B"]


def test_hub_ids_are_aliases_of_known_configs():
    assert HUB_IDS["Qwen/Qwen3-8B"] == "Qwen3-8B"
    for hub_id, name in HUB_IDS.items():
        assert get_config(hub_id) == KNOWN_CONFIGS[name]
    # dense and MoE: one namespace (Qwen/Qwen3-30B-A3B is a hub id as Qwen/Qwen3-8B is)
    assert sorted(HUB_IDS.values()) == sorted(RELEASED + list(MOE_HUB_IDS.values()))
    assert HUB_IDS["Qwen/Qwen3-30B-A3B"] == "Qwen3-30B-A3B"
    with pytest.raises(ValueError, match=r"unknown config name 'Qwen/Qwen3-15B'.*Qwen/Qwen3-14B"):
        get_config("Qwen/Qwen3-15B")


# ---- refusals: one line naming what was found --------------------------------------------------


def published(**changes) -> dict:
    fields = dict(QWEN3_0_6B_PUBLISHED)
    for key, value in changes.items():
        if value is ...:
            del fields[key]
        else:
            fields[key] = value
    return fields


@pytest.mark.parametrize(
    "fields, message",
    [
        # a qwen3_moe file is read as MoE (tests/test_model_moe.py); a dense file relabelled so lacks its fields
        pytest.param(
            published(model_type="qwen3_moe"),
            "missing field(s): num_experts, num_experts_per_tok, moe_intermediate_size",
            id="model-type-qwen3-moe-without-experts",
        ),
        pytest.param(
            published(model_type="llama"),
            "model_type 'llama' is not modelled: model/qwen3.py and model/qwen3_moe.py implement the Qwen3 "
            "dense and MoE decoders (model_type 'qwen3' and 'qwen3_moe') only",
            id="model-type-llama",
        ),
        pytest.param(
            published(use_sliding_window=True, sliding_window=4096),
            "use_sliding_window: True: sliding-window attention is not modelled",
            id="sliding-window-on",
        ),
        pytest.param(
            published(layer_types=["full_attention", "sliding_attention"]),
            "layer_types[1] is 'sliding_attention': only 'full_attention' is modelled",
            id="sliding-layer-type",
        ),
        pytest.param(
            published(rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
            "rope_scaling: RoPE type 'yarn' is not modelled: model/qwen3.py computes the default RoPE only",
            id="rope-scaling-yarn-4x",
        ),
        pytest.param(
            published(rope_scaling={"rope_type": "linear", "factor": 2.0}),
            "rope_scaling: RoPE type 'linear' is not modelled",
            id="rope-scaling-linear",
        ),
        pytest.param(
            published(
                rope_theta=...,
                rope_scaling=...,
                rope_parameters={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0},
            ),
            "rope_parameters: RoPE type 'yarn' is not modelled",
            id="rope-parameters-yarn-5x",
        ),
        pytest.param(
            published(rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
            "rope_parameters.rope_theta 500000.0 and rope_theta 1000000 disagree",
            id="two-rope-thetas",
        ),
        pytest.param(
            published(attention_bias=True),
            "Qwen3Config.attention_bias=True is not supported: Qwen3 and the walkthrough have no q/k/v/o biases",
            id="attention-bias",
        ),
        pytest.param(
            published(quantization_config={"quant_method": "fp8"}),
            "unknown field(s) 'quantization_config': neither a Qwen3Config field nor one known to leave the "
            "numbers unchanged (model.config.IGNORED_FIELDS)",
            id="unknown-field",
        ),
        pytest.param(published(head_dim=...), "missing field(s): head_dim", id="missing-field"),
        pytest.param(
            published(torch_dtype="bfloat16", dtype="float16"),
            "torch_dtype 'bfloat16' and dtype 'float16' disagree",
            id="two-dtypes",
        ),
    ],
)
def test_refusals_name_what_was_found(tmp_path, fields, message):
    path = write_json(tmp_path / "config.json", fields)
    with pytest.raises(ValueError) as info:
        read_config_file(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and message in text, text
    assert "\n" not in text


def test_the_dense_only_reader_refuses_qwen3_moe(tmp_path):
    """``moe=False`` keeps the dense-only reading: a qwen3_moe file is refused by its model_type."""
    path = write_json(tmp_path / "config.json", published(model_type="qwen3_moe"))
    with pytest.raises(ValueError) as info:
        read_config_file(path, moe=False)
    assert str(info.value) == (
        f"{path}: model_type 'qwen3_moe' is not modelled: model/qwen3.py implements the dense "
        "Qwen3 decoder (model_type 'qwen3') only, and another architecture has other "
        "parameters and numbers"
    )


def test_a_refused_file_written_by_transformers(hf, tmp_path):
    path = tmp_path / "config.json"
    hf.Qwen3Config(
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=96,
        num_hidden_layers=4,
        vocab_size=100,
        use_sliding_window=True,
        sliding_window=8,
        max_window_layers=2,
    ).to_json_file(str(path))
    with pytest.raises(
        ValueError, match=re.escape("use_sliding_window: True: sliding-window attention is not modelled")
    ):
        read_config_file(path)


def test_unreadable_and_invalid_files(tmp_path):
    with pytest.raises(ValueError, match=r"missing\.json: cannot read: No such file or directory"):
        read_config_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"hidden_size": 64,')
    with pytest.raises(ValueError, match=r"bad\.json: not valid JSON: .*\(line 1, column 20\)"):
        read_config_file(bad)
    listed = write_json(tmp_path / "list.json", [1, 2])
    with pytest.raises(ValueError, match=r"list\.json: expected a JSON object of config fields, got list"):
        read_config_file(listed)


def test_a_yaml_mapping_of_fields_still_reads(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(
        "hidden_size: 96\nnum_attention_heads: 6\nnum_key_value_heads: 2\nhead_dim: 16\n"
        "intermediate_size: 200\nnum_hidden_layers: 4\nvocab_size: 64\n"
    )
    c = read_config_file(path).config
    assert (c.hidden_size, c.rope_theta) == (96, 1_000_000.0)  # no model_type: this Qwen3Config's defaults


def test_every_ignored_field_is_documented():
    page = (REPO / "docs" / "specs.md").read_text(encoding="utf-8")
    for name, why in IGNORED_FIELDS.items():
        assert why, name
        assert f"`{name}`" in page, f"docs/specs.md does not list the ignored field {name!r}"
    assert (
        from_transformers({**QWEN3_0_6B_PUBLISHED, **{k: None for k in IGNORED_FIELDS}}).config
        == KNOWN_CONFIGS["Qwen3-0.6B"]
    )


def test_reading_a_config_does_not_import_torch(tmp_path):
    path = write_json(tmp_path / "config.json", QWEN3_0_6B_PUBLISHED)
    code = (
        f"import sys; from model.config import read_config_file; read_config_file({str(path)!r}); "
        "print(any(m == 'torch' or m.startswith('torch.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"


# ---- setup.model.config: path/to/config.json in a spec -----------------------------------------

SPEC = """\
spec: from_file
title: a spec on a model's config.json
document: a document
setup:
  model: {config: CONFIG, overrides: {num_hidden_layers: 1}}
  mesh: {shape: [4], dim_names: [dp]}
tables:
  - section: "Forward"
    check: step
    entries:
      - {id: x_norm, step: step1.x_norm, shape: [2, 8, 1024]}
"""


def spec_file(folder: Path, config: str, dtype: str = "") -> Path:
    path = folder / "specs" / "spec.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = SPEC.replace("CONFIG", config)
    if dtype:
        text = text.replace(
            "overrides: {num_hidden_layers: 1}}", f"overrides: {{num_hidden_layers: 1}}, dtype: {dtype}}}"
        )
    path.write_text(text)
    return path


def load_error(path: Path):
    from harness.load.spec import SpecError, load_spec

    with pytest.raises(SpecError) as info:
        load_spec(path)
    return info.value


def test_a_spec_names_a_config_json_relative_to_itself(tmp_path):
    from harness.load.spec import load_spec

    (tmp_path / "models" / "qwen3-0.6b").mkdir(parents=True)
    write_json(tmp_path / "models" / "qwen3-0.6b" / "config.json", QWEN3_0_6B_PUBLISHED)
    spec = load_spec(spec_file(tmp_path, "../models/qwen3-0.6b/config.json"))
    # the run gets the file's values, validated at load (a rank never reads the file)
    assert get_config(spec.setup.model.config) == KNOWN_CONFIGS["Qwen3-0.6B"]
    assert dict(spec.setup.model.overrides) == {"num_hidden_layers": 1}
    assert spec.setup.model.dtype == "bfloat16"  # the file's torch_dtype: the spec sets none
    assert spec.raw["setup"]["model"]["config"] == "../models/qwen3-0.6b/config.json"
    # a checkpoint folder works too; a model dtype in the spec wins over the file's
    spec = load_spec(spec_file(tmp_path, "../models/qwen3-0.6b", dtype="float32"))
    assert spec.setup.model.dtype == "float32"


def test_a_spec_names_a_released_config_by_its_hub_id(tmp_path):
    from harness.load.spec import load_spec

    spec = load_spec(spec_file(tmp_path, "Qwen/Qwen3-0.6B"))
    assert get_config(spec.setup.model.config) == KNOWN_CONFIGS["Qwen3-0.6B"]
    assert spec.setup.model.dtype == "float16"  # a name carries no dtype: the harness's default


@pytest.mark.parametrize(
    "config, setup_line, message",
    [
        pytest.param(
            "missing.json", "", "config file {dir}/missing.json: cannot read: No such file or directory", id="missing"
        ),
        pytest.param(
            "bad.json",
            "",
            "config file {dir}/bad.json: not valid JSON: Expecting value (line 1, column 1)",
            id="invalid-json",
        ),
        pytest.param(
            "llama.json", "", "config file {dir}/llama.json: model_type 'llama' is not modelled", id="refused"
        ),
        pytest.param(
            "f64.json",
            "",
            "config file {dir}/f64.json: dtype 'float64' is not one the harness runs "
            "(float16, bfloat16, float32); set setup.model.dtype",
            id="dtype-not-run",
        ),
        pytest.param("Qwen/Qwen3-15B", "", "config file {dir}/Qwen/Qwen3-15B: cannot read", id="unknown-hub-id"),
        pytest.param("Qwen3-15B", "", "unknown config name 'Qwen3-15B'; known names: walkthrough,", id="unknown-name"),
    ],
)
def test_a_bad_config_file_is_a_load_error_at_setup_model_config(tmp_path, config, setup_line, message):
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "bad.json").write_text("not json")
    write_json(folder / "llama.json", published(model_type="llama"))
    write_json(folder / "f64.json", published(torch_dtype="float64"))
    path = spec_file(tmp_path, config)
    err = load_error(path)
    text = str(err)
    assert len(err.errors) == 1 and "\n" not in text, text  # blamed once, on the config alone
    assert text.startswith(f"{path}:5: setup.model.config: "), text
    assert message.format(dir=folder) in text, text


def test_a_float64_file_loads_when_the_spec_sets_its_dtype(tmp_path):
    from harness.load.spec import load_spec

    folder = tmp_path / "specs"
    folder.mkdir()
    write_json(folder / "f64.json", published(torch_dtype="float64"))
    assert load_spec(spec_file(tmp_path, "f64.json", dtype="bfloat16")).setup.model.dtype == "bfloat16"


def test_validating_a_spec_on_a_config_file_does_not_import_torch(tmp_path):
    write_json(tmp_path / "config.json", QWEN3_0_6B_PUBLISHED)
    path = spec_file(tmp_path, "../config.json")
    code = (
        f"import sys; from harness.load.spec import load_spec; load_spec({str(path)!r}); "
        "print(any(m == 'torch' or m.startswith('torch.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"
