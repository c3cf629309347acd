"""A spec drafted for a config that is not shipped runs green with no hand edits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.load.spec import load_spec
from tests.support import REPO
from tests.support.specs import write_spec


def test_drafted_text_is_yaml_data_under_a_comment_header(tmp_path):
    from harness.author.draft import draft, draft_spec

    text = draft_spec("Qwen/Qwen3-8B", 3, dtype="float32")
    header = text.split("\nspec:")[0].splitlines()
    assert header and all(line.startswith("# ") for line in header)
    assert "&id" not in text and "*id" not in text  # no YAML anchors or aliases
    data = yaml.safe_load(text)
    _, built = draft("Qwen3-8B", 3, dtype="float32")
    assert data == built  # the text is the data, dumped
    assert data["setup"]["model"]["config"] == "Qwen3-8B"  # the hub id names the known config
    assert data["setup"]["model"]["dtype"] == "float32"
    entries = [e for t in data["tables"] for e in t["entries"]]
    assert entries and all(e["drafted"] is True for e in entries)
    ag = next(e for e in entries if e.get("id") == "forward_all_gather")
    assert {k: ag[k] for k in ("numel_in", "numel_out", "buffer_bytes", "ring_bytes", "group_size", "mesh_dim")} == {
        "numel_in": 64_334_594,
        "numel_out": 193_003_782,
        "buffer_bytes": 772_015_128,
        "ring_bytes": 514_676_752,
        "group_size": 3,
        "mesh_dim": "dp",
    }
    spec = load_spec(_write(tmp_path, text))
    assert len(spec.items) == len(entries) and all(item.drafted for item in spec.items)


def test_drafted_dtype_says_where_it_came_from(tmp_path):
    from harness.author.draft import draft_spec

    assert "# model dtype bfloat16: the draft's default" in draft_spec("Qwen3-8B", 4)
    assert "model dtype" not in draft_spec("Qwen3-8B", 4, dtype="float16").split("\nspec:")[0]


@pytest.mark.parametrize("field", ["torch_dtype", "dtype"])
def test_drafted_dtype_names_the_field_the_file_gave(tmp_path, field):
    """transformers 4.x writes torch_dtype, 5.x dtype: the header names the one this file has."""
    import json

    from harness.author.draft import draft_spec
    from tests.support.configs import QWEN3_0_6B_PUBLISHED

    fields = {k: v for k, v in QWEN3_0_6B_PUBLISHED.items() if k != "torch_dtype"}
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**fields, field: "float16"}))
    header = draft_spec(str(config), 4, output=str(tmp_path / "drafted.yaml")).split("\nspec:")[0]
    assert f"# model dtype float16: the config file's {field}." in header, header


def _write(tmp_path: Path, text: str) -> Path:
    return write_spec(tmp_path, text, "drafted.yaml")


def test_draft_refuses_an_incomplete_moe_config_in_one_line(tmp_path):
    """A qwen3_moe file is read as MoE (tests/integration/test_moe_harness.py drafts one); one lacking its
    fields is refused in one line naming them."""
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "qwen3_moe", "hidden_size": 2048, "num_experts": 128}')
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "draft", "--config", str(config), "--world-size", "8"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 1 and proc.stdout == ""  # README: draft exits 1 on a bad config
    assert proc.stderr == (
        f"✗ --config {config}: missing field(s): vocab_size, intermediate_size, num_hidden_layers, "
        "num_attention_heads, head_dim, num_experts_per_tok, moe_intermediate_size\n"
    )


def test_draft_refuses_another_model_type_in_one_line(tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "mixtral", "hidden_size": 2048, "num_local_experts": 8}')
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "draft", "--config", str(config), "--world-size", "8"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (
        f"✗ --config {config}: model_type 'mixtral' is not modelled: model/qwen3.py and "
        "model/qwen3_moe.py implement the Qwen3 dense and MoE decoders (model_type 'qwen3' and "
        "'qwen3_moe') only, and another architecture has other parameters and numbers\n"
    )


def test_draft_rejects_an_unknown_config(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "draft", "--config", "Qwen3-15B", "--world-size", "8"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "Qwen3-15B" in proc.stderr and "Qwen3-14B" in proc.stderr and "Traceback" not in proc.stderr
