"""A spec drafted for a config that is not shipped runs green with no hand edits."""

from __future__ import annotations

import re
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


# --- what the doc author wanted to say: a policy, a unit's own reshard, memory (issue 41) ------


def _entries(data: dict, section: str | None = None) -> dict[str, dict]:
    """Entries by id (those with one: a parameter row is named by its 'param')."""
    return {e["id"]: e for t in data["tables"] if section in (None, t["section"]) for e in t["entries"] if "id" in e}


def test_defaults_are_a_specs_defaults():
    """It drafted batch 1, sequence 16 where a spec's defaults are 2 and 8."""
    from harness.author.draft import draft
    from harness.load.setup import RunSetup

    _, data = draft("walkthrough", 4)
    assert (data["setup"]["batch_per_rank"], data["setup"]["seq_len"]) == (2, 8)
    assert (RunSetup().batch_per_rank, RunSetup().seq_len) == (2, 8)


def test_section_names_are_english():
    import re

    from harness.author.draft import draft_spec

    text = draft_spec("walkthrough", 4, reshard_after_forward={"layers.1": False})
    chinese = [ln for ln in text.splitlines() if re.search(r"[\u4e00-\u9fff]", ln)]
    assert chinese == []


def test_a_mixed_precision_policy_sets_the_gather_and_reduce_dtypes():
    """The author's run reduces in fp32; the draft once reduce-scattered in bf16 whatever it was told."""
    from harness.author.draft import draft

    header, data = draft("walkthrough", 4, dtype="float32", param_dtype="bfloat16", reduce_dtype="float32")
    assert data["setup"]["fsdp"]["mixed_precision"] == {"param_dtype": "bfloat16", "reduce_dtype": "float32"}
    entries = _entries(data)
    assert entries["forward_all_gather"]["dtype"] == "bfloat16"
    assert entries["forward_all_gather"]["buffer_bytes"] == 2_360_448 * 2  # gathered in bf16
    assert entries["backward_reduce_scatter"]["dtype"] == "float32"
    assert entries["backward_reduce_scatter"]["ring_bytes"] == 2_360_448 * 4 * 3 // 4
    assert entries["layer_bytes"]["bytes"] == 2_360_448 * 4  # stored in fp32
    forward = next(t for t in data["tables"] if t["check"] == "step")
    assert forward["with"]["dtype"] == "bfloat16"  # computed in bf16
    assert "--param-dtype bfloat16 --reduce-dtype float32" in header[0]


def test_a_units_own_reshard_after_forward():
    """layers.1 kept unsharded after forward: no backward all-gather, so it sends 2 × 3.54 MB
    where layers.0 sends 3 ×, and the step total adds the two."""
    from harness.author.draft import draft

    header, data = draft("walkthrough", 4, dtype="float16", reshard_after_forward={"layers.1": False})
    assert data["setup"]["fsdp"]["units"] == ["layers.0", {"modules": "layers.1", "reshard_after_forward": False}]
    entries = _entries(data)
    assert entries["layer_step_total"] == {
        "id": "layer_step_total",
        "select": {"layer": 0},
        "count": 3,
        "total_ring_bytes": 10_622_016,
        "drafted": True,
    }
    assert entries["layer1_layer_step_total"]["total_ring_bytes"] == 7_081_344
    assert entries["layer1_no_backward_all_gather"]["count"] == 0
    assert entries["model_step_total"]["total_ring_bytes"] == 10_622_016 + 7_081_344
    assert entries["layer1_after_step11_rank0"]["bytes"] == 4_720_896  # still the whole layer
    assert "--reshard-after-forward layers.1=false" in header[0]


def test_memory_entries_count_the_whole_rank():
    from harness.author.draft import SECTION_MEMORY, draft

    _, data = draft("walkthrough", 4, dtype="float16", reshard_after_forward={"layers.0": False})
    memory = _entries(data, SECTION_MEMORY)
    assert memory["after_fully_shard"]["sharded_param"] == 2 * 1_180_224  # both layers' shards
    assert memory["unsharded_after_step11"]["unsharded_param"] == 4_720_896  # layers.0 kept
    # layers.1's hooks still see layers.0 unsharded: 2 layers at its Step 0, layers.0 after its Step 11
    assert memory["layer1_unsharded_after_step0"]["unsharded_param"] == 2 * 4_720_896
    assert memory["layer1_unsharded_after_step11"]["unsharded_param"] == 4_720_896


def test_memory_counts_the_padding():
    """Qwen3-1.7B on 6 ranks pads dims that 6 does not divide: FSDPMemTracker counts the padded
    all-gather output, not the layer's elements."""
    from harness.author.draft import SECTION_MEMORY, draft
    from harness.calculator import layer_tables
    from model.config import KNOWN_CONFIGS

    layer = layer_tables(KNOWN_CONFIGS["Qwen3-1.7B"], 6, storage_dtype="bfloat16")
    assert layer.padding_numel > 0
    _, data = draft("Qwen3-1.7B", 6, dtype="bfloat16")
    assert _entries(data, SECTION_MEMORY)["unsharded_after_step0"]["unsharded_param"] == layer.padded_numel * 2


@pytest.mark.parametrize(
    "reshard, says",
    [
        ({"model.layers.1": False}, "no FSDP unit 'model.layers.1' in the draft; did you mean 'layers.1'?"),
        ({"layers.1": 3}, "must divide the shard size 4, got 3"),
    ],
)
def test_a_reshard_the_draft_cannot_make_is_refused(reshard, says):
    from harness.author.draft import DraftError, draft

    with pytest.raises(DraftError, match=re.escape(says)):
        draft("walkthrough", 4, reshard_after_forward=reshard)


def test_a_tp_draft_lays_the_mesh_out_dp_then_tp_and_pins_each_ranks_placements():
    from harness.author.draft import draft

    _, spec = draft("walkthrough", 8, tp=2, dtype="float32")
    assert spec["setup"]["mesh"] == {"shape": [4, 2], "dim_names": ["dp", "tp"]}
    shards = {e["param"]: e for e in spec["tables"][0]["entries"]}
    assert shards["self_attn.q_proj.weight"]["local_shape"] == [64, 512]  # 512 rows / tp 2 / dp 4
    assert shards["self_attn.q_proj.weight"]["placements"] == ["_StridedShard(dim=0, sf=2)", "Shard(dim=0)"]
    assert shards["input_layernorm.weight"]["mesh_dim_names"] == ["dp"]
    tp = {e["id"]: e for e in spec["tables"][2]["entries"]}
    assert (tp["tp_all_reduces_in_forward"]["count"], tp["tp_all_reduces_in_backward"]["count"]) == (4, 14)
    _, sp = draft("walkthrough", 8, tp=2, dtype="float32", sequence_parallel=True)
    assert sp["setup"]["tensor_parallel"] == {"sequence_parallel": True}
    ops = {e["id"]: e["count"] for e in sp["tables"][2]["entries"]}
    assert ops == {
        "tp_all_gathers_in_forward": 4,
        "tp_reduce_scatters_in_forward": 4,
        "tp_all_gathers_in_backward": 4,
        "tp_reduce_scatters_in_backward": 4,
        "tp_all_reduces_in_backward": 8,
    }


@pytest.mark.parametrize(
    "config, world, tp, says",
    [
        ("walkthrough", 6, 4, "--tp 4: does not divide --world-size 6"),
        ("walkthrough", 12, 3, "--tp 3: TP size 3 does not divide the config's num_attention_heads 8"),
        ("Qwen3-30B-A3B", 8, 2, "is MoE"),
    ],
)
def test_a_tp_the_draft_cannot_make_is_refused(config, world, tp, says):
    from harness.author.draft import DraftError, draft

    with pytest.raises(DraftError, match=re.escape(says)):
        draft(config, world, tp=tp)
